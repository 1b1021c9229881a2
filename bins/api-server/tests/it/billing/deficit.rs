//! Deficit credits (contract 5.4), end to end with fake-gce, the manual
//! clock and the real worker: a reservation shrunk at the provider below
//! what its grants commit credits each live grant its exact share of the
//! shortfall, hour by hour, next to the slot-hours it keeps paying.

use serde_json::{Value, json};

use crate::support::builders::GrantBuilder;
use crate::support::clock::{HOUR, MIN, T0};
use crate::support::fixtures::Platform;
use crate::support::fixtures::{end_grant, get_grant, platform_at_t0};
use crate::support::meter::{at, of_meter, q, usage_all};
use crate::support::server::Server;
use crate::support::worker;

pub(crate) const SCAN: &str = "vps.reservations";
pub(crate) const GRANTS: &str = "vps.grants";
pub(crate) const DEFICIT: &str = "vm.grant.deficit.hours";
const SLOTS: &str = "vm.grant.slot.hours";

/// The provider reports `total` for res-a and a scan sees it at `t`.
pub(crate) async fn total_at(s: &Server, p: &Platform, total: i64, t: i64) {
    s.set_clock(t).await;
    p.gce.put("res-a", total, 0, "READY").await;
    worker::once(s, &[SCAN]).await;
}

/// A grant of two slots of the platform's reservation for its tenant, from
/// T0 for ten hours.
fn two_slots_for_ten_hours(p: &Platform) -> GrantBuilder {
    GrantBuilder::new(p).slots(2).term(T0, T0 + 10 * HOUR)
}

/// The grant's records of `meter`, as its grantee lists them.
async fn records(s: &Server, p: &Platform, grant: &str, meter: &str) -> Vec<Value> {
    let all = usage_all(s, &p.tenant_token, "acme", json!({ "grantId": grant })).await;
    of_meter(&all, meter)
}

/// `reservationGrants.usage` rows of a grant as root reads them.
async fn hours(s: &Server, grant: &str, to: i64) -> Vec<Value> {
    let body = json!({ "grantId": grant, "from": T0, "to": to });
    let answer = s.root("reservationGrants/usage", body).await.ok();
    answer["items"].as_array().expect("items").clone()
}

fn deficit_hours(rows: &[Value]) -> Vec<&str> {
    rows.iter()
        .map(|r| r["deficitHours"].as_str().expect("deficitHours"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_grants_are_credited_half_a_slot_hour_in_each_short_bucket() {
    let (s, p) = platform_at_t0(4).await;
    let g1 = two_slots_for_ten_hours(&p).create(&s).await;
    let g2 = two_slots_for_ten_hours(&p).create(&s).await;
    total_at(&s, &p, 2, T0 + 30 * MIN).await;
    total_at(&s, &p, 4, T0 + 90 * MIN).await;

    // Before any metering, the grant's hours already show what the
    // shortfall comes to so far.
    let rows = hours(&s, &g1, T0 + 3 * HOUR).await;
    assert_eq!(deficit_hours(&rows), ["0.500000", "0.500000", "0.000000"]);
    assert_eq!(get_grant(&s, &g1).await["deficitSlotHours"], "0.000000");

    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &[GRANTS]).await;
    worker::once(&s, &[GRANTS]).await;
    for g in [&g1, &g2] {
        let credits = records(&s, &p, g, DEFICIT).await;
        assert_eq!(
            q(&credits),
            at(&[(0, "0.500000"), (1, "0.500000")]),
            "{credits:?}"
        );
        // The grant keeps paying for every committed slot-hour.
        let slots = records(&s, &p, g, SLOTS).await;
        assert_eq!(q(&slots), at(&[(0, "2.000000"), (1, "2.000000")]));
        for (c, b) in credits.iter().zip(&slots) {
            assert_eq!(c["unit"], "slot-hours");
            assert_eq!(c["grantId"], g.as_str());
            assert_eq!(c["tags"], b["tags"], "the tags of the slot-hours");
        }
        let got = get_grant(&s, g).await;
        assert_eq!(got["deficitSlotHours"], "1.000000", "{got}");
    }
    let rows = hours(&s, &g1, T0 + 3 * HOUR).await;
    assert_eq!(deficit_hours(&rows), ["0.500000", "0.500000", "0.000000"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn unequal_grants_share_by_their_slots_with_cumulative_rounding() {
    let (s, p) = platform_at_t0(4).await;
    let big = GrantBuilder::new(&p)
        .slots(3)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    let small = GrantBuilder::new(&p)
        .term(T0, T0 + 10 * HOUR)
        .create(&s)
        .await;
    // Short by 1 from 00:10 to 02:50: 3/4 and 1/4 of a slot.
    total_at(&s, &p, 3, T0 + 10 * MIN).await;
    total_at(&s, &p, 4, T0 + 170 * MIN).await;
    s.set_clock(T0 + 4 * HOUR).await;
    worker::once(&s, &[GRANTS]).await;

    let credits = records(&s, &p, &big, DEFICIT).await;
    assert_eq!(
        q(&credits),
        at(&[(0, "0.625000"), (1, "0.750000"), (2, "0.625000")])
    );
    // 50 min / 4, 60 min / 4, 50 min / 4 = 0.208333.., 0.25, 0.208333..: the
    // cumulative rounding puts the rounding where it is reached, and the
    // records add up to 2/3 rounded once.
    let credits = records(&s, &p, &small, DEFICIT).await;
    assert_eq!(
        q(&credits),
        at(&[(0, "0.208333"), (1, "0.250000"), (2, "0.208334")])
    );
    assert_eq!(get_grant(&s, &small).await["deficitSlotHours"], "0.666667");
    assert_eq!(get_grant(&s, &big).await["deficitSlotHours"], "2.000000");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_ended_during_the_shortfall_changes_the_others_shares_from_its_end() {
    let (s, p) = platform_at_t0(6).await;
    let g1 = two_slots_for_ten_hours(&p).create(&s).await;
    let g2 = two_slots_for_ten_hours(&p).create(&s).await;
    let g3 = two_slots_for_ten_hours(&p).create(&s).await;
    // Short by 4 of 6 from 00:30: 4/3 slot each.
    total_at(&s, &p, 2, T0 + 30 * MIN).await;
    // Root ends one grant at 00:45: short by 2 of 4, 1 slot each.
    s.set_clock(T0 + 45 * MIN).await;
    end_grant(&s, &p.account, &g3).await.ok();
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &[GRANTS]).await;

    // 4/3 × 15 min + 1 × 15 min = 7/12 slot-hour, then 1 slot-hour.
    for g in [&g1, &g2] {
        let credits = records(&s, &p, g, DEFICIT).await;
        assert_eq!(q(&credits), at(&[(0, "0.583333"), (1, "1.000000")]));
    }
    // The ended grant: 4/3 × 15 min, and nothing after its end.
    let credits = records(&s, &p, &g3, DEFICIT).await;
    assert_eq!(q(&credits), at(&[(0, "0.333333")]));
    assert_eq!(
        q(&records(&s, &p, &g3, SLOTS).await),
        at(&[(0, "1.500000")])
    );
    assert_eq!(get_grant(&s, &g3).await["deficitSlotHours"], "0.333333");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reservation_gone_credits_nothing_after_it_is_gone() {
    let (s, p) = platform_at_t0(4).await;
    let g1 = two_slots_for_ten_hours(&p).create(&s).await;
    let g2 = two_slots_for_ten_hours(&p).create(&s).await;
    // Short by 3 of 4 from 00:30 (1.5 slot each), gone at 00:45.
    total_at(&s, &p, 1, T0 + 30 * MIN).await;
    s.set_clock(T0 + 45 * MIN).await;
    p.gce.delete("res-a").await;
    worker::once(&s, &[SCAN]).await;
    s.set_clock(T0 + 4 * HOUR).await;
    worker::once(&s, &[GRANTS]).await;
    worker::once(&s, &[GRANTS]).await;

    for g in [&g1, &g2] {
        let got = get_grant(&s, g).await;
        assert_eq!(got["reason"], "reservation-gone", "{got}");
        assert_eq!(
            q(&records(&s, &p, g, DEFICIT).await),
            at(&[(0, "0.375000")])
        );
        assert_eq!(q(&records(&s, &p, g, SLOTS).await), at(&[(0, "1.500000")]));
        assert_eq!(got["deficitSlotHours"], "0.375000");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_is_credited_while_the_total_covers_the_grants() {
    let (s, p) = platform_at_t0(6).await;
    let g = two_slots_for_ten_hours(&p).create(&s).await;
    let other = two_slots_for_ten_hours(&p).create(&s).await;
    // Down to 4 and to 5: still every committed slot.
    total_at(&s, &p, 4, T0 + 30 * MIN).await;
    total_at(&s, &p, 5, T0 + 40 * MIN).await;
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[GRANTS]).await;
    for g in [&g, &other] {
        assert!(records(&s, &p, g, DEFICIT).await.is_empty());
        assert_eq!(records(&s, &p, g, SLOTS).await.len(), 3);
        assert_eq!(get_grant(&s, g).await["deficitSlotHours"], "0.000000");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workers_metrics_show_a_short_reservation_and_the_credits_per_pool() {
    use crate::system::metrics::{scrape_until, value};
    let (s, p) = platform_at_t0(4).await;
    two_slots_for_ten_hours(&p).create(&s).await;
    two_slots_for_ten_hours(&p).create(&s).await;
    // Short by 3 from 00:30, credited through 02:00, still short at 02:30.
    total_at(&s, &p, 1, T0 + 30 * MIN).await;
    s.set_clock(T0 + 2 * HOUR + 30 * MIN).await;
    worker::once(&s, &[GRANTS]).await;

    let port = worker::free_port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let mut cmd = worker::command(&s);
    cmd.env("BC_METRICS_LISTEN", format!("127.0.0.1:{port}"))
        .args(["--only", GRANTS]);
    let w = worker::Running::spawn(cmd);
    let r = [
        ("account", p.account.as_str()),
        ("reservation", p.reservation.as_str()),
    ];
    let pool = [("pool", p.pool.as_str())];
    let samples = scrape_until(&url, "the short reservation", |m| {
        value(m, "bc_reservation_short_seconds", &r).is_some()
    })
    .await;
    // Two hours since the scan that saw it short; 3 slots missing; 3 slots
    // × 1.5 hours credited to the pool's grants.
    assert_eq!(
        value(&samples, "bc_reservation_short_seconds", &r),
        Some(7200.0)
    );
    assert_eq!(value(&samples, "bc_reservation_short_slots", &r), Some(3.0));
    assert_eq!(
        value(&samples, "bc_deficit_credited_slot_hours", &pool),
        Some(4.5)
    );
    // Restored: the reservation is no longer short.
    total_at(&s, &p, 4, T0 + 3 * HOUR).await;
    scrape_until(&url, "the reservation restored", |m| {
        value(m, "bc_reservation_short_seconds", &r).is_none()
    })
    .await;
    w.kill().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hours_of_a_grant_begun_mid_hour_show_its_credit_before_metering() {
    let (s, p) = platform_at_t0(4).await;
    let g = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + 30 * MIN, T0 + 10 * HOUR)
        .create(&s)
        .await;
    GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + 30 * MIN, T0 + 10 * HOUR)
        .create(&s)
        .await;
    // Short by 2 of 4 from 00:40: 1 slot each, 10 minutes by 00:50.
    total_at(&s, &p, 2, T0 + 40 * MIN).await;
    s.set_clock(T0 + 50 * MIN).await;
    let rows = hours(&s, &g, T0 + 2 * HOUR).await;
    assert_eq!(deficit_hours(&rows), ["0.166667", "0.000000"]);
    // Once metered, the hour shows its record: 1 slot × 20 minutes.
    s.set_clock(T0 + HOUR).await;
    worker::once(&s, &[GRANTS]).await;
    let rows = hours(&s, &g, T0 + 2 * HOUR).await;
    assert_eq!(deficit_hours(&rows), ["0.333333", "0.000000"]);
    assert_eq!(
        q(&records(&s, &p, &g, DEFICIT).await),
        at(&[(0, "0.333333")])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_grant_started_before_a_rise_of_the_total_is_credited_for_the_minutes_before_it() {
    let (s, p) = platform_at_t0(4).await;
    let g1 = two_slots_for_ten_hours(&p).create(&s).await;
    // 2 covers g1 (not short); back to 4 at 00:58.
    total_at(&s, &p, 2, T0 + 50 * MIN).await;
    total_at(&s, &p, 4, T0 + 58 * MIN).await;
    // At 01:02 a grant starting at 00:57 fits the total of now, 4; but from
    // 00:57 to 00:58 the provider held 2 of the 4 slots committed.
    s.set_clock(T0 + HOUR + 2 * MIN).await;
    let late = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + 57 * MIN, T0 + 10 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 2 * HOUR).await;
    worker::once(&s, &[GRANTS]).await;
    // 1 slot each for a minute: 1/60 slot-hour.
    for g in [&g1, &late] {
        assert_eq!(
            q(&records(&s, &p, g, DEFICIT).await),
            at(&[(0, "0.016667")])
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_hour_already_credited_is_never_revised_by_a_later_grant() {
    let (s, p) = platform_at_t0(4).await;
    let g1 = two_slots_for_ten_hours(&p).create(&s).await;
    total_at(&s, &p, 2, T0 + 50 * MIN).await;
    total_at(&s, &p, 4, T0 + 58 * MIN).await;
    // g1's first hour is metered before the late grant exists: nothing was
    // short for it then, and that record set stays as written.
    s.set_clock(T0 + HOUR + MIN).await;
    worker::once(&s, &[GRANTS]).await;
    s.set_clock(T0 + HOUR + 2 * MIN).await;
    let late = GrantBuilder::new(&p)
        .slots(2)
        .term(T0 + 57 * MIN, T0 + 10 * HOUR)
        .create(&s)
        .await;
    s.set_clock(T0 + 3 * HOUR).await;
    worker::once(&s, &[GRANTS]).await;
    assert!(records(&s, &p, &g1, DEFICIT).await.is_empty());
    assert_eq!(get_grant(&s, &g1).await["deficitSlotHours"], "0.000000");
    assert_eq!(
        q(&records(&s, &p, &late, DEFICIT).await),
        at(&[(0, "0.016667")])
    );
}
