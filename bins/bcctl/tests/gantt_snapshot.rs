//! Snapshot tests of `bcctl::gantt::render`, and its width bound over many
//! widths and scenarios.

#![expect(
    clippy::expect_used,
    clippy::indexing_slicing,
    reason = "tests index answers and expect them; a panic fails the test"
)]

use bcctl::gantt::render;
use serde_json::{Value, json};

/// 2030-01-01T00:00:00Z.
const FROM: i64 = 1_893_456_000_000;
const HOUR: i64 = 3_600_000;

/// Two days of a 6-slot reservation: an active grant begun before the range,
/// its scheduled renewal running past it, a cancelled grant, one ended early,
/// another tenant's (anonymous) grant, and a capacity shortfall.
fn scenario() -> Value {
    let at = |h: i64| FROM + h * HOUR;
    json!({
        "reservationId": "res_01J8ZJ0000000000000000WXYZ",
        "total": 6,
        "from": at(0),
        "to": at(48),
        "grants": [
            {
                "grantId": "rgrant_01J8ZK3QW7XY4M2ABCD", "tenantId": "acme", "slots": 2,
                "startsAt": at(-12), "endsAt": at(30), "state": "active",
                "accountId": "acct_1", "reservationId": "res_01J8ZJ0000000000000000WXYZ",
            },
            {
                "grantId": "rgrant_01J8ZK9RENEWAL0EFGH", "tenantId": "acme", "slots": 2,
                "startsAt": at(30), "endsAt": at(72), "state": "scheduled",
            },
            {
                "grantId": "rgrant_01J8ZKCANCEL00IJKL", "tenantId": "globex-industries-europe",
                "slots": 3, "startsAt": at(36), "endsAt": at(44), "state": "cancelled",
                "endedAt": at(10), "reason": "tenant asked",
            },
            {
                "grantId": "rgrant_01J8ZKENDED000MNOP", "tenantId": "initech", "slots": 1,
                "startsAt": at(2), "endsAt": at(24), "state": "ended", "endedAt": at(14),
            },
            { "slots": 4, "startsAt": at(6), "endsAt": at(20) },
        ],
        "committed": [
            { "from": at(0), "to": at(2), "slots": 2 },
            { "from": at(2), "to": at(6), "slots": 3 },
            { "from": at(6), "to": at(14), "slots": 7 },
            { "from": at(14), "to": at(20), "slots": 6 },
            { "from": at(20), "to": at(48), "slots": 2 },
        ],
        "inUse": [
            { "from": at(0), "to": at(6), "inGrants": 2, "ordinary": 1 },
            { "from": at(6), "to": at(14), "inGrants": 5, "ordinary": 1 },
            { "from": at(14), "to": at(26), "inGrants": 3, "ordinary": 0 },
        ],
        "events": [
            { "at": at(1), "type": "reservation-grant.created",
              "grantId": "rgrant_01J8ZK9RENEWAL0EFGH" },
            { "at": at(2), "type": "reservation-grant.active",
              "grantId": "rgrant_01J8ZKENDED000MNOP" },
            { "at": at(6), "type": "reservation-grant.active" },
            { "at": at(6), "type": "reservation-grant.capacity-short" },
            { "at": at(10), "type": "reservation-grant.cancelled",
              "grantId": "rgrant_01J8ZKCANCEL00IJKL" },
            { "at": at(14), "type": "reservation-grant.ended",
              "grantId": "rgrant_01J8ZKENDED000MNOP" },
        ],
    })
}

fn assert_fits(text: &str, width: usize) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= width,
            "over {width} columns: {line:?}\n{text}"
        );
    }
}

#[test]
fn two_days_at_width_100() {
    let text = render(&scenario(), 100, false);
    assert_fits(&text, 100);
    insta::assert_snapshot!(text);
}

#[test]
fn two_days_at_width_60() {
    let text = render(&scenario(), 60, false);
    assert_fits(&text, 60);
    insta::assert_snapshot!(text);
}

#[test]
fn two_days_at_width_24() {
    let text = render(&scenario(), 24, false);
    assert_fits(&text, 24);
    insta::assert_snapshot!(text);
}

#[test]
fn empty_timeline() {
    let timeline = json!({
        "reservationId": "res_empty", "total": 4, "from": FROM, "to": FROM + 7 * 24 * HOUR,
        "grants": [], "committed": [], "inUse": [], "events": [],
    });
    insta::assert_snapshot!(render(&timeline, 80, false));
}

#[test]
fn empty_range_and_missing_fields() {
    let mut timeline = scenario();
    timeline["to"] = json!(FROM);
    insta::assert_snapshot!("from_equals_to", render(&timeline, 60, false));
    insta::assert_snapshot!("nothing_at_all", render(&json!({}), 60, false));
}

#[test]
fn bars_line_up_with_the_axis() {
    let text = render(&scenario(), 100, false);
    let ruler = text.lines().find(|l| l.contains('├')).expect("a ruler");
    let start = ruler.chars().position(|c| c == '├').expect("its left end");
    let end = ruler.chars().position(|c| c == '┤').expect("its right end");
    assert_eq!(ruler.chars().count(), end + 1);
    for label in [
        "acme ×2 active",
        "(other tenant) ×4",
        "committed",
        "in use",
        "events",
    ] {
        let row = text.lines().find(|l| l.contains(label)).expect(label);
        let chars: Vec<char> = row.chars().collect();
        assert_eq!(chars.len(), end + 1, "{row}");
        assert!(matches!(chars[start], '│' | '<'), "{row}");
        assert!(matches!(chars[end], '│' | '>'), "{row}");
    }
    // The renewal runs past the range, the active grant began before it.
    let active = text
        .lines()
        .find(|l| l.contains("active"))
        .expect("the active grant");
    assert_eq!(active.chars().nth(start), Some('<'));
    let renewal = text
        .lines()
        .find(|l| l.contains("scheduled"))
        .expect("the renewal");
    assert_eq!(renewal.chars().nth(end), Some('>'));
    // The committed row is above the total (7 of 6) from 06:00 to 14:00 only.
    let committed = text
        .lines()
        .find(|l| l.starts_with("committed"))
        .expect("committed");
    let cells: String = committed
        .chars()
        .skip(start + 1)
        .take(end - start - 1)
        .collect();
    let columns = (end - start - 1) as i64;
    let expected: String = (0..columns)
        .map(|c| {
            let (c0, c1) = (48 * HOUR * c / columns, 48 * HOUR * (c + 1) / columns);
            if c0 < 14 * HOUR && c1 > 6 * HOUR {
                '!'
            } else {
                '?'
            }
        })
        .collect();
    let above: String = cells
        .chars()
        .map(|c| if c == '!' { '!' } else { '?' })
        .collect();
    assert_eq!(above, expected, "{committed}");
}

/// A small deterministic generator, for the scenarios below.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> i64 {
        i64::try_from(self.next() % n.max(1)).expect("small")
    }
}

fn random_scenario(seed: u64) -> Value {
    let mut r = Lcg(seed);
    let from = match r.below(4) {
        0 => 0,
        1 => -r.below(1 << 40),
        2 => i64::MAX - r.below(1 << 30),
        _ => FROM + r.below(1 << 36),
    };
    let span = match r.below(5) {
        0 => 0,
        1 => r.below(100),
        2 => r.below(7 * 24) * HOUR,
        3 => r.below(1 << 45),
        _ => r.below(400 * 24) * HOUR,
    };
    let to = from.saturating_add(span);
    let t = |r: &mut Lcg| from.saturating_add(r.below(span.unsigned_abs() * 2 + 2) - span / 2);
    let names = [
        "acme",
        "a-tenant-with-a-very-long-name-indeed",
        "ünïcødé☃",
        "",
    ];
    let states = ["active", "scheduled", "ended", "cancelled", "weird"];
    let grants: Vec<Value> = (0..r.below(8))
        .map(|i| {
            let (s, e) = (t(&mut r), t(&mut r));
            match r.below(4) {
                0 => json!({ "slots": r.below(50), "startsAt": s, "endsAt": e }),
                1 => json!({ "grantId": format!("rgrant_{i}") }),
                _ => json!({
                    "grantId": format!("rgrant_{}{i}", "X".repeat(usize::try_from(r.below(40))
                        .expect("small"))),
                    "tenantId": names[usize::try_from(r.below(4)).expect("small")],
                    "slots": r.below(1000) - 10,
                    "startsAt": s, "endsAt": e,
                    "state": states[usize::try_from(r.below(5)).expect("small")],
                    "endedAt": t(&mut r),
                }),
            }
        })
        .collect();
    let steps = |r: &mut Lcg| -> Vec<Value> {
        (0..r.below(6))
            .map(|_| {
                let (slots, from, to) = (r.below(30) - 2, t(r), t(r));
                json!({ "from": from, "to": to, "slots": slots, "inGrants": slots, "ordinary": 1 })
            })
            .collect()
    };
    let events: Vec<Value> = (0..r.below(5))
        .map(|_| json!({ "at": t(&mut r), "type": "reservation-grant.capacity-short" }))
        .collect();
    json!({
        "reservationId": "res_random", "total": r.below(20) - 1, "from": from, "to": to,
        "grants": grants, "committed": steps(&mut r), "inUse": steps(&mut r),
        "events": events,
    })
}

#[test]
fn every_line_fits_its_width() {
    let mut scenarios: Vec<Value> = (0..40).map(random_scenario).collect();
    scenarios.push(scenario());
    scenarios.push(json!({}));
    for (i, timeline) in scenarios.iter().enumerate() {
        for width in 0..=160 {
            let text = render(timeline, width, i % 2 == 0);
            assert_fits(&text, width);
            if width >= 20 {
                assert!(text.contains("reservation"), "no title at {width}:\n{text}");
            }
        }
    }
}
