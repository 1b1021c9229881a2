//! Helpers for the metering and reconciler-worker tests: fixtures on top of
//! the `common`/`gce`/`worker` harness, usage and event paging, a worker
//! process handle, and an independent audit of every usage record and grant
//! event (contract 5.2, 6).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::common::{ROOT_TOKEN, Server};
use crate::gce::{FLAVOR, Platform};

/// One second, minute and hour in milliseconds.
pub const SEC: i64 = 1_000;
/// One minute.
pub const MIN: i64 = 60 * SEC;
/// One hour (a metering bucket).
pub const HOUR: i64 = 60 * MIN;
/// 2030-01-01T00:00:00Z: an hour boundary far from anything real.
pub const T0: i64 = 1_893_456_000_000;

/// Micros (millionths of a unit) of `weighted_ms` slot- or instance-ms,
/// rounded half-up, computed here independently of the server.
pub fn round_micros(weighted_ms: i128) -> i64 {
    // ms / 3_600_000 hours = ms / 3.6 micros; half-up.
    i64::try_from((weighted_ms * 10 + 18).div_euclid(36)).expect("micros fit i64")
}

/// Parses a quantity (`"1.500000"`) into micros, asserting its shape.
#[track_caller]
pub fn micros(q: &str) -> i64 {
    let (int, frac) = q.split_once('.').expect("quantity has a decimal point");
    assert!(
        !int.is_empty() && int.bytes().all(|b| b.is_ascii_digit()),
        "quantity {q:?}"
    );
    assert!(
        frac.len() == 6 && frac.bytes().all(|b| b.is_ascii_digit()),
        "quantity {q:?} must have exactly 6 decimals"
    );
    int.parse::<i64>().expect("int") * 1_000_000 + frac.parse::<i64>().expect("frac")
}

/// Formats micros as the API does (for readable expectations).
pub fn fmt_micros(m: i64) -> String {
    format!("{}.{:06}", m / 1_000_000, m % 1_000_000)
}

/// Asserts the shape every usage record must have (contract 3.8, 5.2).
#[track_caller]
pub fn check_shape(r: &Value) {
    let ps = r["periodStart"].as_i64().expect("periodStart");
    let pe = r["periodEnd"].as_i64().expect("periodEnd");
    assert_eq!(ps.rem_euclid(HOUR), 0, "periodStart on an hour: {r}");
    assert_eq!(pe - ps, HOUR, "period is one hour bucket: {r}");
    micros(r["quantity"].as_str().expect("quantity is a string"));
    assert!(r["recordedAt"].as_i64().expect("recordedAt") >= pe, "{r}");
    assert!(
        r["usageId"].as_str().expect("usageId").starts_with("use_"),
        "{r}"
    );
    let meter = r["meter"].as_str().expect("meter");
    let unit = r["unit"].as_str().expect("unit");
    let tags = &r["tags"];
    for t in ["region", "poolId", "provider"] {
        assert!(tags[t].is_string(), "tag {t} missing: {r}");
    }
    match meter {
        "vm.grant.slot.hours" => {
            assert_eq!(unit, "slot-hours", "{r}");
            assert!(r["grantId"].is_string(), "{r}");
            assert!(r.get("instanceId").is_none(), "{r}");
            assert!(tags["reservationId"].is_string(), "{r}");
        }
        "vm.grant.usage.hours" => {
            assert_eq!(unit, "instance-hours", "{r}");
            assert!(r["grantId"].is_string(), "{r}");
            assert_eq!(tags["grantId"], r["grantId"], "{r}");
            assert!(r["instanceId"].is_string(), "{r}");
            assert_eq!(tags["flavor"], FLAVOR, "{r}");
            assert!(tags["reservationId"].is_string(), "{r}");
        }
        "vm.reserved.hours" => {
            assert_eq!(unit, "instance-hours", "{r}");
            assert!(r.get("grantId").is_none(), "{r}");
            assert!(tags.get("grantId").is_none(), "{r}");
            assert!(r["instanceId"].is_string(), "{r}");
            assert_eq!(tags["flavor"], FLAVOR, "{r}");
            assert!(tags["reservationId"].is_string(), "{r}");
        }
        "vm.ondemand.hours" => {
            assert_eq!(unit, "instance-hours", "{r}");
            assert!(r.get("grantId").is_none(), "{r}");
            assert!(r["instanceId"].is_string(), "{r}");
            assert_eq!(tags["flavor"], FLAVOR, "{r}");
            assert!(tags.get("reservationId").is_none(), "{r}");
        }
        other => panic!("unknown meter {other}: {r}"),
    }
}

/// `(periodStart, quantity)` of records, in list order.
pub fn q(records: &[Value]) -> Vec<(i64, String)> {
    records
        .iter()
        .map(|r| {
            (
                r["periodStart"].as_i64().expect("periodStart"),
                r["quantity"].as_str().expect("quantity").to_owned(),
            )
        })
        .collect()
}

/// Expected `(periodStart, quantity)` pairs, from `(hour index, "x.xxxxxx")`.
pub fn at(rows: &[(i64, &str)]) -> Vec<(i64, String)> {
    rows.iter()
        .map(|(h, v)| (T0 + h * HOUR, (*v).to_owned()))
        .collect()
}

/// Sum of the records' quantities in micros.
pub fn total(records: &[Value]) -> i64 {
    records
        .iter()
        .map(|r| micros(r["quantity"].as_str().expect("quantity")))
        .sum()
}

/// Records of `meter` only.
pub fn of_meter(records: &[Value], meter: &str) -> Vec<Value> {
    records
        .iter()
        .filter(|r| r["meter"] == meter)
        .cloned()
        .collect()
}

/// One `usage.list` page.
pub async fn usage_page(s: &Server, token: &str, body: Value) -> Value {
    s.call(token, "usage/list", body).await.ok()
}

/// Every usage record matching `filter` (extra `usage.list` fields) for
/// `tenant`, paging with the cursor; shapes are checked.
pub async fn usage_all(s: &Server, token: &str, tenant: &str, filter: Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut body = filter.clone();
        body["tenantId"] = json!(tenant);
        body["limit"] = json!(1000);
        if let Some(a) = &after {
            body["after"] = json!(a);
        }
        let page = usage_page(s, token, body).await;
        let items = page["items"].as_array().expect("items").clone();
        for r in &items {
            check_shape(r);
        }
        out.extend(items);
        after = Some(page["nextCursor"].as_str().expect("nextCursor").to_owned());
        if page["hasMore"] != json!(true) {
            return out;
        }
    }
}

/// Records of one meter for `tenant`.
pub async fn usage(s: &Server, token: &str, tenant: &str, meter: &str) -> Vec<Value> {
    usage_all(s, token, tenant, json!({ "meter": meter })).await
}

/// Records of one instance (every meter).
pub async fn usage_of_instance(s: &Server, token: &str, tenant: &str, id: &str) -> Vec<Value> {
    usage_all(s, token, tenant, json!({ "instanceId": id })).await
}

/// Every tenant's records (root, `all`).
pub async fn usage_everyone(s: &Server) -> Vec<Value> {
    usage_all(s, ROOT_TOKEN, "root", json!({ "all": true })).await
}

/// Every event of `tenant`, oldest first.
pub async fn events_all(s: &Server, token: &str, tenant: &str) -> Vec<Value> {
    s.all_events(token, tenant).await
}

/// The events of `tenant` of one type.
pub async fn events_of(s: &Server, token: &str, tenant: &str, ty: &str) -> Vec<Value> {
    events_all(s, token, tenant)
        .await
        .into_iter()
        .filter(|e| e["type"] == ty)
        .collect()
}

/// Creates a grant for `tenant` on the platform's reservation; returns its id.
pub async fn grant_for(
    s: &Server,
    p: &Platform,
    tenant: &str,
    slots: i64,
    starts_at: i64,
    ends_at: i64,
) -> String {
    grant_on(
        s,
        &p.account,
        &p.reservation,
        tenant,
        slots,
        starts_at,
        ends_at,
    )
    .await
}

/// Creates a grant on any account's reservation; returns its id.
pub async fn grant_on(
    s: &Server,
    account: &str,
    reservation: &str,
    tenant: &str,
    slots: i64,
    starts_at: i64,
    ends_at: i64,
) -> String {
    let g = s
        .root(
            "reservationGrants/create",
            json!({
                "accountId": account,
                "reservationId": reservation,
                "grantTenantId": tenant,
                "slots": slots,
                "startsAt": starts_at,
                "endsAt": ends_at,
                "idempotencyKey": format!("g-{}", crate::common::rand_suffix()),
            }),
        )
        .await
        .ok();
    g["grant"]["grantId"].as_str().expect("grantId").to_owned()
}

/// Creates a grant for the platform's tenant.
pub async fn grant(s: &Server, p: &Platform, slots: i64, starts_at: i64, ends_at: i64) -> String {
    grant_for(s, p, &p.tenant.clone(), slots, starts_at, ends_at).await
}

/// A grant as root sees it.
pub async fn get_grant(s: &Server, grant_id: &str) -> Value {
    let v = s
        .root("reservationGrants/get", json!({ "grantId": grant_id }))
        .await
        .ok();
    v["grant"].clone()
}

/// Ends a grant as root.
pub async fn end_grant(s: &Server, p: &Platform, grant_id: &str) -> Value {
    let v = s
        .root(
            "reservationGrants/end",
            json!({ "accountId": p.account, "grantId": grant_id }),
        )
        .await
        .ok();
    v["grant"].clone()
}

/// Creates a running instance of `tenant` in `pool`; returns it.
pub async fn instance(s: &Server, token: &str, tenant: &str, pool: &str) -> Value {
    let v = s
        .call(
            token,
            "instances/create",
            json!({
                "tenantId": tenant,
                "poolId": pool,
                "flavor": FLAVOR,
                "idempotencyKey": format!("i-{}", crate::common::rand_suffix()),
            }),
        )
        .await
        .ok();
    v["instance"].clone()
}

/// Creates an instance and returns its id.
pub async fn instance_id(s: &Server, token: &str, tenant: &str, pool: &str) -> String {
    instance(s, token, tenant, pool).await["instanceId"]
        .as_str()
        .expect("instanceId")
        .to_owned()
}

/// `instances.{op}` (stop, start, delete, get) on `id`; returns the instance.
pub async fn inst(s: &Server, token: &str, tenant: &str, op: &str, id: &str) -> Value {
    let v = s
        .call(
            token,
            &format!("instances/{op}"),
            json!({ "tenantId": tenant, "instanceId": id }),
        )
        .await
        .ok();
    v["instance"].clone()
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Runs `reconciler-worker --once` (optionally `--only` some passes) with
/// plain-text info logs, asserting it exits 0; returns its stderr.
pub async fn once_logged(s: &Server, only: &[&str]) -> String {
    let (status, err) = once_with(s, only, &[("RUST_LOG", "info"), ("NO_COLOR", "1")]).await;
    assert!(status.success(), "worker failed: {err}");
    err
}

/// Runs `reconciler-worker --once` with extra `--only` passes and env,
/// returning its exit status and stderr (it is not asserted to succeed).
pub async fn once_with(s: &Server, only: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String) {
    let mut cmd = crate::worker::command(s);
    cmd.arg("--once");
    for p in only {
        cmd.args(["--only", p]);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().await.expect("run reconciler-worker");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A long-running worker process whose stderr is collected.
pub struct Running {
    child: Child,
    stderr: JoinHandle<String>,
}

impl Running {
    /// Spawns `cmd` (from `worker::command`) with stderr captured.
    pub fn spawn(mut cmd: Command) -> Running {
        cmd.stderr(Stdio::piped()).stdout(Stdio::null());
        let mut child = cmd.spawn().expect("spawn reconciler-worker");
        let mut err = child.stderr.take().expect("stderr");
        let stderr = tokio::spawn(async move {
            let mut buf = Vec::new();
            let _ = err.read_to_end(&mut buf).await;
            String::from_utf8_lossy(&buf).into_owned()
        });
        Running { child, stderr }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("pid")
    }

    /// Stops it with SIGTERM; returns its exit status and stderr.
    pub async fn terminate(mut self) -> (ExitStatus, String) {
        let pid = self.pid();
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .status();
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .expect("worker stops within 30 s of SIGTERM")
            .expect("wait");
        let err = self.stderr.await.expect("stderr task");
        (status, err)
    }

    /// Kills it with SIGKILL; returns its stderr so far.
    pub async fn kill(mut self) -> String {
        self.child.start_kill().expect("SIGKILL");
        let _ = self.child.wait().await.expect("wait");
        self.stderr.await.expect("stderr task")
    }
}

/// Whether a log line names `pass` as its `pass` field (`pass=x` or `pass="x"`).
pub fn names_pass(line: &str, pass: &str) -> bool {
    line.contains(&format!("pass={pass} ")) || line.contains(&format!("pass=\"{pass}\""))
}

/// The `key=value` counts of the last "pass done" line of `pass` in a
/// worker's plain-text log (`NO_COLOR=1`, `RUST_LOG=info`).
pub fn pass_counts(stderr: &str, pass: &str) -> Option<BTreeMap<String, u64>> {
    let line = stderr
        .lines()
        .rfind(|l| l.contains("pass done") && names_pass(l, pass))?;
    // `... pass done pass=vps.grants elapsed_ms=3 report=transitions=0, records=2`
    let mut out = BTreeMap::new();
    for word in line.split([' ', ',']) {
        let parts: Vec<&str> = word.split('=').collect();
        if let [.., k, v] = parts.as_slice()
            && let Ok(n) = v.parse::<u64>()
        {
            out.insert((*k).to_owned(), n);
        }
    }
    Some(out)
}

/// Running intervals of instances as the test itself drove them
/// (create/start at the server's now, stop/delete at the server's now).
#[derive(Debug, Default, Clone)]
pub struct RunLog {
    runs: BTreeMap<String, Vec<(i64, Option<i64>)>>,
}

impl RunLog {
    /// The instance started running at `t`.
    pub fn started(&mut self, id: &str, t: i64) {
        let v = self.runs.entry(id.to_owned()).or_default();
        match v.last_mut() {
            Some(last) if last.1.is_none() => panic!("{id} already running"),
            // Stopped and started at the same instant: one run.
            Some(last) if last.1 == Some(t) => last.1 = None,
            _ => v.push((t, None)),
        }
    }

    /// The instance stopped running at `t` (stop or delete).
    pub fn stopped(&mut self, id: &str, t: i64) {
        let v = self.runs.get_mut(id).expect("known instance");
        let last = v.last_mut().expect("a run");
        assert!(last.1.is_none(), "{id} was not running");
        if last.0 == t {
            v.pop();
        } else {
            last.1 = Some(t);
        }
    }

    /// Whether it is running now.
    pub fn running(&self, id: &str) -> bool {
        self.runs
            .get(id)
            .and_then(|v| v.last())
            .is_some_and(|r| r.1.is_none())
    }

    /// Known instance ids.
    pub fn ids(&self) -> Vec<String> {
        self.runs.keys().cloned().collect()
    }
}

#[derive(Debug, Clone, QueryableByName)]
struct SegRow {
    #[diesel(sql_type = Text)]
    instance_id: String,
    #[diesel(sql_type = BigInt)]
    from_ms: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    to_ms: Option<i64>,
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Bool)]
    running: bool,
    #[diesel(sql_type = Nullable<Text>)]
    grant_id: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    reservation_id: Option<String>,
    #[diesel(sql_type = Text)]
    billing: String,
}

/// Expected records of one subject series: exact usage per bucket ended by
/// `cutoff`, each the difference of consecutive rounded cumulative values.
fn expected_series(stretches: &[(i64, i64, i64)], cutoff: i64) -> BTreeMap<i64, i64> {
    // (from, to, weight) -> exact weighted ms per bucket.
    let mut per: BTreeMap<i64, i128> = BTreeMap::new();
    for &(from, to, w) in stretches {
        let to = to.min(cutoff);
        let mut t = from;
        while t < to {
            let b = t.div_euclid(HOUR) * HOUR;
            let e = (b + HOUR).min(to);
            *per.entry(b).or_default() += i128::from(w) * i128::from(e - t);
            t = e;
        }
    }
    let mut cum: i128 = 0;
    let mut out = BTreeMap::new();
    for (b, used) in per {
        if b + HOUR > cutoff {
            break;
        }
        if used == 0 {
            continue;
        }
        let before = round_micros(cum);
        cum += used;
        out.insert(b, round_micros(cum) - before);
    }
    out
}

/// What an audit saw.
#[derive(Debug, Default, Clone)]
pub struct AuditSummary {
    /// Usage records.
    pub records: usize,
    /// Slot-hour records.
    pub slot_records: usize,
    /// Instance records.
    pub instance_records: usize,
    /// Grants.
    pub grants: usize,
    /// Grant events.
    pub grant_events: usize,
}

/// Checks, independently of the server's metering code, that after a final
/// settled pass every record and grant event exists exactly once:
/// - every record has the right shape and no (meter, subject, target,
///   periodStart) appears twice;
/// - each non-cancelled grant has exactly the `vm.grant.slot.hours` records
///   its term implies up to the last ended hour (cumulative rounding, so
///   they add up to slots x term hours rounded once), and `meteredThrough`
///   says so; cancelled grants have none;
/// - each instance's meters match its placement segments exactly, and its
///   running segments are exactly the runs the test drove (`log`);
/// - every grant has exactly one `created` and one event per transition its
///   final state implies, and no other `reservation-grant.*` event.
pub async fn audit(s: &Server, tenants: &[(&str, &str)], log: &RunLog) -> AuditSummary {
    let now = s.root("clock/get", json!({})).await.ok()["now"]
        .as_i64()
        .expect("now");
    let cutoff = now.div_euclid(HOUR) * HOUR;
    let records = usage_everyone(s).await;
    let grants: Vec<Value> = s
        .root("reservationGrants/list", json!({ "all": true }))
        .await
        .ok()["items"]
        .as_array()
        .expect("items")
        .clone();
    assert!(grants.len() < 1000, "the audit lists at most 999 grants");
    let mut summary = AuditSummary {
        records: records.len(),
        grants: grants.len(),
        ..AuditSummary::default()
    };

    // Uniqueness of (meter, subject, target, periodStart).
    let mut keys = BTreeSet::new();
    for r in &records {
        let meter = r["meter"].as_str().expect("meter");
        let (subject, target) = match meter {
            "vm.grant.slot.hours" => (r["grantId"].clone(), r["grantId"].clone()),
            "vm.grant.usage.hours" => (r["instanceId"].clone(), r["grantId"].clone()),
            "vm.reserved.hours" => (r["instanceId"].clone(), r["tags"]["reservationId"].clone()),
            _ => (r["instanceId"].clone(), json!("ondemand")),
        };
        let key = (
            meter.to_owned(),
            subject.to_string(),
            target.to_string(),
            r["periodStart"].as_i64().expect("periodStart"),
        );
        assert!(keys.insert(key.clone()), "record written twice: {key:?}");
        assert!(
            r["periodEnd"].as_i64().expect("periodEnd") <= cutoff,
            "record of an hour not ended: {r}"
        );
    }

    // Slot-hours per grant.
    let mut slot_got: HashMap<String, BTreeMap<i64, i64>> = HashMap::new();
    for r in records
        .iter()
        .filter(|r| r["meter"] == "vm.grant.slot.hours")
    {
        summary.slot_records += 1;
        slot_got
            .entry(r["grantId"].as_str().expect("grantId").to_owned())
            .or_default()
            .insert(
                r["periodStart"].as_i64().expect("periodStart"),
                micros(r["quantity"].as_str().expect("quantity")),
            );
    }
    for g in &grants {
        let id = g["grantId"].as_str().expect("grantId");
        let slots = g["slots"].as_i64().expect("slots");
        let (starts, ends) = (
            g["startsAt"].as_i64().expect("startsAt"),
            g["endsAt"].as_i64().expect("endsAt"),
        );
        let got = slot_got.remove(id).unwrap_or_default();
        if g["state"] == "cancelled" {
            assert!(got.is_empty(), "cancelled grant {id} billed: {got:?}");
            continue;
        }
        let expected = expected_series(&[(starts, ends, slots)], cutoff);
        assert_eq!(got, expected, "slot-hours of grant {id} ({g})");
        if ends <= cutoff {
            let sum: i64 = got.values().sum();
            assert_eq!(
                sum,
                round_micros(i128::from(slots) * i128::from(ends - starts)),
                "grant {id} slot-hours add up to slots x term, rounded once"
            );
        }
        let through = starts.max(ends.min(cutoff));
        assert_eq!(
            g["meteredThrough"].as_i64(),
            Some(through),
            "meteredThrough of {g}"
        );
    }
    assert!(
        slot_got.is_empty(),
        "slot-hours of unknown grants: {slot_got:?}"
    );

    // Instance meters against placement segments.
    let mut conn = AsyncPgConnection::establish(s.db.url())
        .await
        .expect("connect to the test database");
    let segs: Vec<SegRow> = diesel::sql_query(
        "SELECT s.instance_id, s.from_ms, s.to_ms, s.kind, s.running, s.grant_id, \
                s.reservation_id, i.billing \
         FROM placement_segments s JOIN instances i ON i.instance_id = s.instance_id \
         ORDER BY s.instance_id, s.from_ms, s.segment_id",
    )
    .load(&mut conn)
    .await
    .expect("read placement segments");
    type SeriesKey = (String, &'static str, String);
    let mut series: BTreeMap<SeriesKey, Vec<(i64, i64, i64)>> = BTreeMap::new();
    let mut runs_seen: BTreeMap<String, Vec<(i64, Option<i64>)>> = BTreeMap::new();
    let mut last_to: HashMap<String, i64> = HashMap::new();
    for sg in &segs {
        let prev = last_to.get(&sg.instance_id).copied().unwrap_or(i64::MIN);
        assert!(
            sg.from_ms >= prev,
            "overlapping segments of {}",
            sg.instance_id
        );
        last_to.insert(sg.instance_id.clone(), sg.to_ms.unwrap_or(i64::MAX));
        if !sg.running {
            continue;
        }
        if sg.billing == "standard" {
            assert!(
                matches!(sg.kind.as_str(), "grant" | "reservation" | "ondemand"),
                "a running standard instance must be billed somewhere: {sg:?}"
            );
            let v = runs_seen.entry(sg.instance_id.clone()).or_default();
            match v.last_mut() {
                Some(last) if last.1 == Some(sg.from_ms) => last.1 = sg.to_ms,
                _ => v.push((sg.from_ms, sg.to_ms)),
            }
        }
        let (meter, target) = match sg.kind.as_str() {
            "grant" => (
                "vm.grant.usage.hours",
                sg.grant_id.clone().expect("grant segment has a grant"),
            ),
            "reservation" => (
                "vm.reserved.hours",
                sg.reservation_id.clone().expect("reservation segment"),
            ),
            "ondemand" => ("vm.ondemand.hours", "ondemand".to_owned()),
            _ => continue,
        };
        assert_eq!(sg.billing, "standard", "a billing none instance is metered");
        series
            .entry((sg.instance_id.clone(), meter, target))
            .or_default()
            .push((sg.from_ms, sg.to_ms.unwrap_or(i64::MAX), 1));
    }
    for id in log.ids() {
        let mut want = log.runs.get(&id).cloned().unwrap_or_default();
        want.retain(|r| r.1 != Some(r.0));
        let got = runs_seen.remove(&id).unwrap_or_default();
        assert_eq!(got, want, "running segments of {id} vs what the test did");
    }
    let mut expected: BTreeMap<(String, String, String, i64), i64> = BTreeMap::new();
    for ((inst, meter, target), stretches) in &series {
        for (b, m) in expected_series(stretches, cutoff) {
            expected.insert((inst.clone(), (*meter).to_owned(), target.clone(), b), m);
        }
    }
    let mut got: BTreeMap<(String, String, String, i64), i64> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r["meter"] != "vm.grant.slot.hours")
    {
        summary.instance_records += 1;
        let meter = r["meter"].as_str().expect("meter");
        let target = match meter {
            "vm.grant.usage.hours" => r["grantId"].as_str().expect("grantId").to_owned(),
            "vm.reserved.hours" => r["tags"]["reservationId"]
                .as_str()
                .expect("reservationId")
                .to_owned(),
            _ => "ondemand".to_owned(),
        };
        got.insert(
            (
                r["instanceId"].as_str().expect("instanceId").to_owned(),
                meter.to_owned(),
                target,
                r["periodStart"].as_i64().expect("periodStart"),
            ),
            micros(r["quantity"].as_str().expect("quantity")),
        );
    }
    if got != expected {
        let missing: Vec<_> = expected
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .take(10)
            .collect();
        let extra: Vec<_> = got
            .iter()
            .filter(|(k, v)| expected.get(*k) != Some(v))
            .take(10)
            .collect();
        panic!(
            "instance records differ from the segments ({} expected, {} written)\n\
             missing or wrong: {missing:#?}\nunexpected: {extra:#?}",
            expected.len(),
            got.len()
        );
    }

    // Grant events: exactly one per grant and transition.
    let mut seen: HashMap<(String, String), Vec<Value>> = HashMap::new();
    for (tenant, token) in tenants {
        for e in events_all(s, token, tenant).await {
            let ty = e["type"].as_str().expect("type").to_owned();
            if !ty.starts_with("reservation-grant.") || ty == "reservation-grant.capacity-short" {
                continue;
            }
            summary.grant_events += 1;
            let gid = e["data"]["grantId"].as_str().expect("grantId").to_owned();
            assert_eq!(e["tenantId"], json!(tenant), "{e}");
            seen.entry((gid, ty)).or_default().push(e);
        }
    }
    for g in &grants {
        let id = g["grantId"].as_str().expect("grantId");
        let types: &[&str] = match g["state"].as_str().expect("state") {
            "scheduled" => &["created"],
            "active" => &["created", "active"],
            "ended" => &["created", "active", "ended"],
            "cancelled" => &["created", "cancelled"],
            other => panic!("state {other}"),
        };
        for t in types {
            let key = (id.to_owned(), format!("reservation-grant.{t}"));
            let evs = seen.remove(&key).unwrap_or_default();
            assert_eq!(evs.len(), 1, "{key:?} published {} times", evs.len());
            let data = &evs[0]["data"];
            assert_eq!(data["slots"], g["slots"], "{data}");
            assert_eq!(data["startsAt"], g["startsAt"], "{data}");
            if *t == "ended" {
                assert_eq!(data["endsAt"], g["endsAt"], "{data}");
                assert_eq!(data["reason"], g["reason"], "{data}");
                assert_eq!(evs[0]["occurredAt"], g["endsAt"], "{data}");
            }
            if *t == "active" {
                assert!(
                    evs[0]["occurredAt"].as_i64() >= g["startsAt"].as_i64(),
                    "{data}"
                );
            }
        }
    }
    assert!(seen.is_empty(), "unexpected grant events: {seen:?}");
    summary
}

/// A simulated fleet driven through the API, remembering what it did.
pub struct Sim {
    /// (tenant, admin token)
    pub tenants: Vec<(String, String)>,
    /// (tenant index, instance id, deleted)
    pub instances: Vec<(usize, String, bool)>,
    /// Grants created.
    pub grants: Vec<String>,
    /// Instance runs.
    pub log: RunLog,
    /// Successful operations.
    pub ops: usize,
}

impl Sim {
    /// A simulation over `tenants`.
    pub fn new(tenants: Vec<(String, String)>) -> Sim {
        Sim {
            tenants,
            instances: Vec::new(),
            grants: Vec::new(),
            log: RunLog::default(),
            ops: 0,
        }
    }

    /// The tenants as the audit wants them.
    pub fn tenant_refs(&self) -> Vec<(&str, &str)> {
        self.tenants
            .iter()
            .map(|(t, k)| (t.as_str(), k.as_str()))
            .collect()
    }

    /// One random operation at `now` (the server clock).
    pub async fn step(&mut self, s: &Server, p: &Platform, rng: &mut Rng, now: i64) {
        let roll = rng.range(0, 99);
        let ti = rng.pick(self.tenants.len());
        let (tenant, token) = self.tenants[ti].clone();
        if roll < 22 {
            let starts = now
                + if rng.chance(30) {
                    0
                } else {
                    rng.range(0, 8 * 60) * MIN
                };
            let ends = starts + rng.range(20, 12 * 60) * MIN + rng.range(0, 59) * SEC;
            let a = s
                .root(
                    "reservationGrants/create",
                    json!({
                        "accountId": p.account,
                        "reservationId": p.reservation,
                        "grantTenantId": tenant,
                        "slots": rng.range(1, 3), "startsAt": starts, "endsAt": ends,
                        "idempotencyKey": format!("g-{}", crate::common::rand_suffix()),
                    }),
                )
                .await;
            if a.status == 200 {
                self.grants
                    .push(a.body["grant"]["grantId"].as_str().expect("id").to_owned());
                self.ops += 1;
            } else {
                a.err(409, "CAPACITY_UNAVAILABLE");
            }
        } else if roll < 52 {
            let a = s
                .call(
                    &token,
                    "instances/create",
                    json!({
                        "tenantId": tenant,
                        "poolId": p.pool,
                        "flavor": FLAVOR,
                        "idempotencyKey": format!("i-{}", crate::common::rand_suffix()),
                    }),
                )
                .await;
            match a.status {
                200 => {
                    let id = a.body["instance"]["instanceId"]
                        .as_str()
                        .expect("id")
                        .to_owned();
                    self.log.started(&id, now);
                    self.instances.push((ti, id, false));
                    self.ops += 1;
                }
                409 => assert_eq!(a.code(), "CAPACITY_UNAVAILABLE", "{:?}", a.body),
                _ => assert_eq!(a.code(), "QUOTA_EXCEEDED", "{:?}", a.body),
            }
        } else if roll < 90 && !self.instances.is_empty() {
            let k = rng.pick(self.instances.len());
            let (ti, id, deleted) = self.instances[k].clone();
            if deleted {
                return;
            }
            let (tenant, token) = self.tenants[ti].clone();
            let running = self.log.running(&id);
            let op = if roll >= 84 {
                "delete"
            } else if running {
                "stop"
            } else {
                "start"
            };
            let a = s
                .call(
                    &token,
                    &format!("instances/{op}"),
                    json!({ "tenantId": tenant, "instanceId": id }),
                )
                .await;
            if a.status != 200 {
                assert_eq!(
                    (op, a.code()),
                    ("start", "CAPACITY_UNAVAILABLE"),
                    "{:?}",
                    a.body
                );
                return;
            }
            self.ops += 1;
            match op {
                "start" => self.log.started(&id, now),
                "stop" => self.log.stopped(&id, now),
                _ => {
                    if running {
                        self.log.stopped(&id, now);
                    }
                    self.instances[k].2 = true;
                }
            }
        } else if !self.grants.is_empty() {
            let g = self.grants[rng.pick(self.grants.len())].clone();
            s.root(
                "reservationGrants/end",
                json!({ "accountId": p.account, "grantId": g }),
            )
            .await
            .ok();
            self.ops += 1;
        }
    }
}

/// Offers `pool` to `tenant` with room for `instances` instances.
pub async fn offer(s: &Server, pool: &str, tenant: &str, instances: i64) {
    s.root(
        "pools/offer",
        json!({
            "poolId": pool,
            "offerTenantId": tenant,
            "quotas": {
                "instances": instances,
                "vcpus": instances * 4,
                "memoryGib": instances * 16,
            },
        }),
    )
    .await
    .ok();
}

/// A tiny deterministic PRNG (xorshift64*), seeded per run and printed so a
/// failure can be replayed with `TEST_SEED`.
pub struct Rng(u64);

impl Rng {
    /// Seeded from `TEST_SEED` or the OS clock.
    pub fn from_env(name: &str) -> Rng {
        let seed = std::env::var("TEST_SEED")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
        eprintln!("{name}: TEST_SEED={seed}");
        Rng(seed.max(1))
    }

    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = u64::try_from(hi - lo + 1).expect("range");
        lo + i64::try_from(self.next() % span).expect("fits")
    }

    /// True with probability `p` percent.
    pub fn chance(&mut self, p: u64) -> bool {
        self.next() % 100 < p
    }

    /// A random element index of a non-empty slice length.
    pub fn pick(&mut self, len: usize) -> usize {
        usize::try_from(self.next() % len as u64).expect("fits")
    }
}

/// Holds a reservation's row lock in a transaction of its own, as another
/// replica or request settling it would, until the returned connection runs
/// `ROLLBACK` (or is dropped).
pub async fn hold_reservation(s: &Server, account: &str, reservation: &str) -> AsyncPgConnection {
    let mut holder = AsyncPgConnection::establish(s.db.url()).await.expect("db");
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .expect("begin");
    diesel::sql_query(
        "SELECT 1 FROM reservations WHERE account_id = $1 AND reservation_id = $2 FOR UPDATE",
    )
    .bind::<Text, _>(account)
    .bind::<Text, _>(reservation)
    .execute(&mut holder)
    .await
    .expect("lock");
    holder
}
