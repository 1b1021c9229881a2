//! Metering: quantities in micros, usage paging with shape checks, and an
//! independent audit of every usage record and grant event (contract 5.2,
//! 6) after a simulated fleet ran.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Bool, Nullable, Text};
use diesel_async::RunQueryDsl;
use serde_json::{Value, json};

use super::builders::InstanceBuilder;
use super::clock::{HOUR, MIN, SEC, T0};
use super::db::db;
use super::fixtures::{Platform, create_grant, end_grant, grant_body_for, items};
use super::fixtures::{instance_op, list_grants};
use super::gce::FLAVOR;
use super::rng::Rng;
use super::server::{ROOT, ROOT_TOKEN, Server, rand_suffix};

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
        "vm.grant.slot.hours" | "vm.grant.deficit.hours" | "vm.grant.lent.hours" => {
            assert_eq!(unit, "slot-hours", "{r}");
            assert!(r["grantId"].is_string(), "{r}");
            assert!(r.get("instanceId").is_none(), "{r}");
            assert!(tags["reservationId"].is_string(), "{r}");
        }
        // A borrower's hours carry the lending grant (contract 5.5).
        "vm.grant.usage.hours" | "vm.interruptible.hours" => {
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
pub async fn usage_all(s: &Server, token: &str, tenant: &str, mut filter: Value) -> Vec<Value> {
    filter["tenantId"] = json!(tenant);
    let records = s.list_all(token, "usage/list", filter).await;
    for r in &records {
        check_shape(r);
    }
    records
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
    usage_all(s, ROOT_TOKEN, ROOT, json!({ "all": true })).await
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
    #[expect(dead_code, reason = "reported with the summary, not checked")]
    pub grants: usize,
    /// Grant events.
    pub grant_events: usize,
    /// Expiry and underuse notices among them.
    pub notices: usize,
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
///   final state implies, and no other `reservation-grant.*` event but its
///   notices: each `.expiring` (per notice) and `.underused` (per window)
///   at most once, in the grantee's log, inside the grant's final term.
pub async fn audit(s: &Server, tenants: &[(&str, &str)], log: &RunLog) -> AuditSummary {
    let cutoff = s.now().await.div_euclid(HOUR) * HOUR;
    let records = usage_everyone(s).await;
    let grants = items(&list_grants(s, ROOT_TOKEN, ROOT, Some(true)).await.ok());
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
    let mut conn = db(s).await;
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
    let mut notices: std::collections::HashSet<(String, String, String)> = Default::default();
    for (tenant, token) in tenants {
        for e in s.events(token, tenant).await {
            let ty = e["type"].as_str().expect("type").to_owned();
            if !ty.starts_with("reservation-grant.") || ty == "reservation-grant.capacity-short" {
                continue;
            }
            summary.grant_events += 1;
            let gid = e["data"]["grantId"].as_str().expect("grantId").to_owned();
            assert_eq!(e["tenantId"], json!(tenant), "{e}");
            // Notices: once per grant and notice (or window), in its
            // grantee's log, while the grant was active.
            let notice = match ty.as_str() {
                "reservation-grant.expiring" => e["data"]["notice"].to_string(),
                "reservation-grant.underused" => e["data"]["window"].to_string(),
                _ => {
                    seen.entry((gid, ty)).or_default().push(e);
                    continue;
                }
            };
            let g = grants
                .iter()
                .find(|g| g["grantId"] == gid.as_str())
                .unwrap_or_else(|| panic!("a notice of an unknown grant: {e}"));
            assert_eq!(g["tenantId"], json!(tenant), "{e}");
            let at = e["occurredAt"].as_i64().expect("occurredAt");
            // A root end at the very instant of a notice may commit just
            // after it (the reservation's lock orders them), so a forced end
            // may share its notice's millisecond; a term never does.
            let ends = g["endsAt"].as_i64().expect("endsAt");
            let forced = g["reason"] != "term-over";
            assert!(
                g["startsAt"].as_i64() <= Some(at) && (at < ends || (forced && at == ends)),
                "a notice outside the grant's term {g}: {e}"
            );
            summary.notices += 1;
            assert!(
                notices.insert((gid, ty, notice)),
                "a notice published twice: {e}"
            );
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
            let slots = rng.range(1, 3);
            let key = format!("g-{}", rand_suffix());
            let body = grant_body_for(p, &tenant, slots, starts, ends, &key);
            let a = create_grant(s, body).await;
            if a.status == 200 {
                self.grants
                    .push(a.body["grant"]["grantId"].as_str().expect("id").to_owned());
                self.ops += 1;
            } else {
                a.err(409, "CAPACITY_UNAVAILABLE");
            }
        } else if roll < 52 {
            let key = format!("i-{}", rand_suffix());
            let a = InstanceBuilder::new(p)
                .by(&tenant, &token)
                .key(&key)
                .send(s)
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
            let a = instance_op(s, &token, &tenant, op, &id).await;
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
            end_grant(s, &p.account, &g).await.ok();
            self.ops += 1;
        }
    }
}
