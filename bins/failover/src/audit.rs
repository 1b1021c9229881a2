//! The checks after the failover: every acknowledged mutation is there, and
//! the usage records are the chaos audit's (`bins/api-server/tests/it/
//! support/meter.rs`, `audit`): no record twice, and every grant's
//! slot-hours are every billed hour of its term up to the clock, each
//! bucket's quantity the exact cumulative rounding (contract 5.2).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{Context, bail, ensure};
use serde_json::{Value, json};

use crate::api::{Api, ROOT};
use crate::cluster::{DATABASE, Node, connect};
use crate::load::{HOUR, Load, lock};
use crate::procs::ROOT_TOKEN;

/// What the audit looked at.
#[derive(Debug, Default)]
pub struct Audited {
    /// Acknowledged grants found with their term.
    pub grants: usize,
    /// Acknowledged instances found in their last answered state.
    pub instances: usize,
    /// Usage records.
    pub records: usize,
    /// Of which slot-hour records.
    pub slot_records: usize,
    /// Grants whose slot-hours were checked (every non-cancelled grant).
    pub metered_grants: usize,
    /// The audit's cutoff (the clock's hour).
    pub cutoff: i64,
}

/// Micros of `weighted_ms` slot-ms, rounded half-up (independently of the
/// server).
fn round_micros(weighted_ms: i128) -> i64 {
    i64::try_from((weighted_ms * 10 + 18).div_euclid(36)).unwrap_or(i64::MAX)
}

/// A quantity ("1.500000") in micros.
fn micros(q: &str) -> anyhow::Result<i64> {
    let (int, frac) = q.split_once('.').context("quantity without a point")?;
    ensure!(frac.len() == 6, "quantity {q:?} must have 6 decimals");
    Ok(int.parse::<i64>()? * 1_000_000 + frac.parse::<i64>()?)
}

/// The expected micros per hour bucket of `slots` over `[from, to)` up to
/// `cutoff`: each bucket the difference of the rounded cumulative totals.
fn expected_series(from: i64, to: i64, slots: i64, cutoff: i64) -> BTreeMap<i64, i64> {
    let mut per: BTreeMap<i64, i128> = BTreeMap::new();
    let to = to.min(cutoff);
    let mut t = from;
    while t < to {
        let b = t.div_euclid(HOUR) * HOUR;
        let e = (b + HOUR).min(to);
        *per.entry(b).or_default() += i128::from(slots) * i128::from(e - t);
        t = e;
    }
    let mut cum: i128 = 0;
    let mut out = BTreeMap::new();
    for (b, used) in per {
        if b + HOUR > cutoff {
            break;
        }
        let before = round_micros(cum);
        cum += used;
        out.insert(b, round_micros(cum) - before);
    }
    out
}

fn text(v: &Value, field: &str) -> anyhow::Result<String> {
    Ok(v[field]
        .as_str()
        .with_context(|| format!("{field} in {v}"))?
        .to_owned())
}

fn int(v: &Value, field: &str) -> anyhow::Result<i64> {
    v[field].as_i64().with_context(|| format!("{field} in {v}"))
}

/// Every acknowledged grant and instance is there as answered.
pub async fn acknowledged(api: &Api, load: &Load, audited: &mut Audited) -> anyhow::Result<()> {
    let grants = lock(&load.ledger.grants)?.clone();
    for g in &grants {
        let answer = api
            .root("reservationGrants/get", json!({ "grantId": g.id }))
            .await?;
        ensure!(
            answer.status == 200,
            "grant {} was answered 200 but reservationGrants.get answers {} {}",
            g.id,
            answer.status,
            answer.body
        );
        let got = answer.body.get("grant").unwrap_or(&Value::Null);
        let term = (
            int(got, "slots")?,
            int(got, "startsAt")?,
            int(got, "endsAt")?,
        );
        ensure!(term == g.term, "grant {} changed its term: {got}", g.id);
        ensure!(
            got["state"] != "cancelled",
            "grant {} is cancelled: {got}",
            g.id
        );
        audited.grants += 1;
    }
    let instances = lock(&load.ledger.instances)?.clone();
    for (id, ack) in &instances {
        let (tenant, token) = &ack.tenant;
        let answer = api
            .call(
                token,
                "instances/get",
                json!({ "tenantId": tenant, "instanceId": id }),
            )
            .await?;
        ensure!(
            answer.status == 200,
            "instance {id} was answered 200 but instances.get answers {} {}",
            answer.status,
            answer.body
        );
        let state = text(answer.body.get("instance").unwrap_or(&Value::Null), "state")?;
        ensure!(
            state == ack.state,
            "instance {id} is {state}; its last mutation answered {}",
            ack.state
        );
        audited.instances += 1;
    }
    Ok(())
}

/// The usage records: none twice, none lost.
pub async fn usage(api: &Api, load: &Load, audited: &mut Audited) -> anyhow::Result<()> {
    let now = int(
        &api.root("clock/get", json!({})).await?.ok("clock.get")?,
        "now",
    )?;
    let cutoff = now.div_euclid(HOUR) * HOUR;
    audited.cutoff = cutoff;
    let records = api
        .list_all(
            ROOT_TOKEN,
            "usage/list",
            json!({ "tenantId": ROOT, "all": true }),
        )
        .await?;
    let grants = api
        .list_all(
            ROOT_TOKEN,
            "reservationGrants/list",
            json!({ "tenantId": ROOT, "all": true }),
        )
        .await?;
    audited.records = records.len();

    // One record per (meter, subject, target, periodStart), the table's
    // unique key, and per usageId; none of an hour not ended.
    let mut keys = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for r in &records {
        let meter = text(r, "meter")?;
        let (subject, target) = match meter.as_str() {
            "vm.grant.slot.hours" | "vm.grant.deficit.hours" => {
                (r["grantId"].clone(), r["grantId"].clone())
            }
            "vm.grant.usage.hours" => (r["instanceId"].clone(), r["grantId"].clone()),
            "vm.reserved.hours" => (
                r["instanceId"].clone(),
                r.pointer("/tags/reservationId")
                    .cloned()
                    .unwrap_or(Value::Null),
            ),
            _ => (r["instanceId"].clone(), json!("ondemand")),
        };
        let key = (
            meter,
            subject.to_string(),
            target.to_string(),
            int(r, "periodStart")?,
        );
        ensure!(
            keys.insert(key.clone()),
            "usage record written twice: {key:?}"
        );
        ensure!(ids.insert(text(r, "usageId")?), "usageId listed twice: {r}");
        ensure!(
            int(r, "periodEnd")? <= cutoff,
            "record of an hour not ended: {r}"
        );
    }

    // Slot-hours: every billed hour of every grant, exactly.
    let mut slot_got: HashMap<String, BTreeMap<i64, i64>> = HashMap::new();
    for r in records
        .iter()
        .filter(|r| r["meter"] == "vm.grant.slot.hours")
    {
        audited.slot_records += 1;
        slot_got
            .entry(text(r, "grantId")?)
            .or_default()
            .insert(int(r, "periodStart")?, micros(&text(r, "quantity")?)?);
    }
    let listed: BTreeSet<String> = grants
        .iter()
        .map(|g| text(g, "grantId"))
        .collect::<anyhow::Result<_>>()?;
    for g in lock(&load.ledger.grants)?.iter() {
        ensure!(
            listed.contains(&g.id),
            "acknowledged grant {} is not listed",
            g.id
        );
    }
    for g in &grants {
        let id = text(g, "grantId")?;
        let (slots, starts, ends) = (int(g, "slots")?, int(g, "startsAt")?, int(g, "endsAt")?);
        let got = slot_got.remove(&id).unwrap_or_default();
        if g["state"] == "cancelled" {
            ensure!(got.is_empty(), "cancelled grant {id} billed: {got:?}");
            continue;
        }
        let expected = expected_series(starts, ends, slots, cutoff);
        if got != expected {
            let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(k)).collect();
            let extra: Vec<_> = got.keys().filter(|k| !expected.contains_key(k)).collect();
            bail!(
                "slot-hours of grant {id} ({g}): {} records, {} expected; hours missing \
                 {missing:?}, unexpected {extra:?}",
                got.len(),
                expected.len()
            );
        }
        let through = starts.max(ends.min(cutoff));
        ensure!(
            g["meteredThrough"].as_i64() == Some(through),
            "meteredThrough of {g} is not {through}"
        );
        audited.metered_grants += 1;
    }
    ensure!(
        slot_got.is_empty(),
        "slot-hours of grants not listed: {:?}",
        slot_got.keys().collect::<Vec<_>>()
    );

    // The same count straight from the table on the promoted server.
    let client = connect(Node::Standby, DATABASE).await?;
    let row = client
        .query_one(
            "SELECT count(*), count(DISTINCT (meter, subject, target, period_start)) \
             FROM usage_records",
            &[],
        )
        .await?;
    let (count, distinct): (i64, i64) = (row.get(0), row.get(1));
    ensure!(
        usize::try_from(count)? == records.len() && count == distinct,
        "usage_records holds {count} rows ({distinct} distinct keys); usage.list gave {}",
        records.len()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_bills_each_hour_it_touches_up_to_the_cutoff() {
        let t0 = 100 * HOUR;
        let series = expected_series(t0 + HOUR / 2, t0 + 2 * HOUR, 1, t0 + 10 * HOUR);
        assert_eq!(
            series.into_iter().collect::<Vec<_>>(),
            vec![(t0, 500_000), (t0 + HOUR, 1_000_000)]
        );
        assert!(expected_series(t0, t0 + 3 * HOUR, 2, t0 + HOUR / 2).is_empty());
        assert_eq!(micros("1.500000").ok(), Some(1_500_000));
    }
}
