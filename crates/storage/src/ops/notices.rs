//! Grant notices (contract 9, r2), written by the `vps.grants` pass:
//! `reservation-grant.expiring` when the clock passes `endsAt - notice` for
//! each configured notice, and `reservation-grant.underused` when a grant's
//! last 24 whole hours held less than a share of what it committed. Both go
//! to the grantee's log and the root tenant's.
//!
//! Exactly once with any number of replicas: each reservation's notices are
//! decided under its row lock (taken `SKIP LOCKED`: a replica holding it
//! does the work), after settling it, so the grants' states are those at
//! now; each notice's row (`grant_expiry_notices`, `grant_underuse_checks`)
//! commits with its events, under a key a second writer cannot insert
//! again. The arithmetic is `grants_core::notices`.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::notices::{self, ExpiryNotice, UNDERUSE_WINDOW_MS, UsageSummary};
use grants_core::views::preview::Stint;
use grants_core::{GrantState, Term};

use crate::error::{Result, StorageError};
use crate::ids::TenantId;
use crate::locks;
use crate::model::event_data::{EventData, GrantExpiring, GrantUnderused, Utilisation, Window};
use crate::model::events::{self, NewEvent};
use crate::model::grant::GrantRow;
use crate::model::reservation::ReservationRow;
use crate::model::segment::{self, SegmentRow};
use crate::ops::settlement;
use crate::schema::grant_expiry_notices;

/// The default of `BC_EXPIRY_NOTICES`.
pub const DEFAULT_EXPIRY_NOTICES: &str = "7d,1d,1h";

/// The default of `BC_UNDERUSE_RATIO`.
pub const DEFAULT_UNDERUSE_RATIO: &str = "0.2";

/// What the notices are: `BC_EXPIRY_NOTICES` and `BC_UNDERUSE_RATIO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoticeRules {
    /// The expiry notices, longest first.
    pub expiry: Vec<ExpiryNotice>,
    /// A grant is underused below this many millionths of its committed
    /// slot-hours (0 turns the notice off).
    pub underuse_ratio_micros: i64,
}

impl Default for NoticeRules {
    #[expect(
        clippy::expect_used,
        reason = "the defaults are constants, parsed by the unit tests"
    )]
    fn default() -> Self {
        NoticeRules::parse(DEFAULT_EXPIRY_NOTICES, DEFAULT_UNDERUSE_RATIO)
            .expect("the defaults parse")
    }
}

impl NoticeRules {
    /// Parses `expiry` (comma-separated durations, `7d,1d,1h`, or `none`)
    /// and `ratio` (a decimal from 0 to 1). Every error names the variable
    /// and the value at fault.
    pub fn parse(expiry: &str, ratio: &str) -> std::result::Result<NoticeRules, String> {
        let mut notices: Vec<ExpiryNotice> = Vec::new();
        if expiry.trim() != "none" {
            for label in expiry.split(',').map(str::trim) {
                let d = humantime::parse_duration(label).map_err(|e| {
                    format!("BC_EXPIRY_NOTICES: {label:?} is not a duration (7d, 12h, 30m): {e}")
                })?;
                let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                if ms <= 0 {
                    return Err(format!("BC_EXPIRY_NOTICES: {label:?} must be positive"));
                }
                if let Some(same) = notices.iter().find(|n| n.before_ms == ms) {
                    return Err(format!(
                        "BC_EXPIRY_NOTICES: {label:?} and {:?} are the same notice",
                        same.label
                    ));
                }
                notices.push(ExpiryNotice::new(label, ms));
            }
        }
        notices.sort_by_key(|n| std::cmp::Reverse(n.before_ms));
        let value: f64 = ratio
            .trim()
            .parse()
            .map_err(|_| format!("BC_UNDERUSE_RATIO: {ratio:?} is not a number"))?;
        if !(0.0..=1.0).contains(&value) {
            return Err(format!(
                "BC_UNDERUSE_RATIO: {ratio:?} must be between 0 and 1"
            ));
        }
        Ok(NoticeRules {
            expiry: notices,
            underuse_ratio_micros: (value * 1e6).round() as i64,
        })
    }

    /// From `BC_EXPIRY_NOTICES` and `BC_UNDERUSE_RATIO` (defaults when unset
    /// or empty).
    pub fn from_env() -> std::result::Result<NoticeRules, String> {
        let var = |k: &str, default: &str| {
            std::env::var(k)
                .ok()
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| default.to_owned())
        };
        NoticeRules::parse(
            &var("BC_EXPIRY_NOTICES", DEFAULT_EXPIRY_NOTICES),
            &var("BC_UNDERUSE_RATIO", DEFAULT_UNDERUSE_RATIO),
        )
    }

    fn longest_ms(&self) -> i64 {
        self.expiry.iter().map(|n| n.before_ms).max().unwrap_or(0)
    }
}

/// What one notice round did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct NoticeOutcome {
    /// `reservation-grant.expiring` notices sent (per grant, not per log).
    pub expiring: u64,
    /// `reservation-grant.underused` notices sent.
    pub underused: u64,
    /// Underuse windows judged.
    pub windows_judged: u64,
    /// Reservations another transaction held (it, or a later pass, does
    /// their notices).
    pub skipped: u64,
}

#[derive(Debug, QueryableByName)]
struct Key {
    #[diesel(sql_type = Text)]
    account_id: String,
    #[diesel(sql_type = Text)]
    reservation_id: String,
}

/// The reservations with a notice due at `now`: an open grant live at now
/// with an unsent expiry notice whose instant has come (and is not before
/// its start), or with a last-24-hours window not judged yet.
async fn due(conn: &mut AsyncPgConnection, rules: &NoticeRules, now: i64) -> Result<Vec<Key>> {
    let befores: Vec<i64> = rules.expiry.iter().map(|n| n.before_ms).collect();
    let window_to = grants_core::bucket_start(now);
    Ok(diesel::sql_query(include_str!("sql/notices_due.sql"))
        .bind::<BigInt, _>(now)
        .bind::<Array<BigInt>, _>(befores)
        .bind::<BigInt, _>(rules.longest_ms())
        .bind::<Bool, _>(rules.underuse_ratio_micros > 0)
        .bind::<BigInt, _>(window_to)
        .bind::<BigInt, _>(UNDERUSE_WINDOW_MS)
        .load(conn)
        .await?)
}

/// Sends every notice due at `now`, one reservation per transaction.
pub async fn send_due(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    rules: &NoticeRules,
    now: i64,
) -> Result<NoticeOutcome> {
    let root = root.as_str();
    let mut outcome = NoticeOutcome::default();
    let keys = crate::db::read_only(conn, async |conn| due(conn, rules, now).await).await?;
    for key in keys {
        let done = conn
            .transaction::<_, StorageError, _>(async |conn| {
                let Some(res) =
                    locks::reservation_unless_held(conn, &key.account_id, &key.reservation_id)
                        .await?
                else {
                    return Ok(None);
                };
                on_reservation(conn, root, rules, &res, now).await.map(Some)
            })
            .await?;
        match done {
            Some(o) => {
                outcome.expiring += o.expiring;
                outcome.underused += o.underused;
                outcome.windows_judged += o.windows_judged;
            }
            None => outcome.skipped += 1,
        }
    }
    Ok(outcome)
}

/// The notices of one locked reservation's live grants.
async fn on_reservation(
    conn: &mut AsyncPgConnection,
    root: &str,
    rules: &NoticeRules,
    res: &ReservationRow,
    now: i64,
) -> Result<NoticeOutcome> {
    let mut events = Vec::new();
    settlement::settle(conn, res, now, &mut events).await?;
    // All open grants, the scheduled ones too: a notice names the grant that
    // renews the expiring one.
    let open = locks::open_grants(conn, res).await?;
    // Read once, when a grant first needs them.
    let mut open_segments: Option<Vec<Stint>> = None;
    let mut outcome = NoticeOutcome::default();
    for g in open
        .iter()
        .filter(|g| g.state_at(now) == GrantState::Active)
    {
        let sent: Vec<i64> = grant_expiry_notices::table
            .filter(grant_expiry_notices::grant_id.eq(&g.grant_id))
            .select(grant_expiry_notices::before_ms)
            .load(conn)
            .await?;
        let expiring: Vec<&ExpiryNotice> =
            notices::due_notices(&rules.expiry, g.starts_at, g.ends_at, now)
                .into_iter()
                .filter(|n| !sent.contains(&n.before_ms))
                .collect();
        let window = (rules.underuse_ratio_micros > 0)
            .then(|| notices::underuse_window(g.starts_at, g.ends_at, now))
            .flatten();
        if expiring.is_empty() && window.is_none() {
            continue;
        }
        // Settled just now: the open segments are where they are. The
        // closed ones come merged into what the grant held.
        let mut stints = segment::held_spans(
            conn,
            &res.account_id,
            &res.reservation_id,
            &g.grant_id,
            Term::new(g.starts_at, now),
        )
        .await?;
        if open_segments.is_none() {
            let rows =
                SegmentRow::open_on_reservation(conn, &res.account_id, &res.reservation_id).await?;
            // The grantee's use: borrowers in lent slots left out (5.5).
            open_segments = Some(
                rows.into_iter()
                    .filter(|r| !r.is_lent())
                    .map(SegmentRow::into_stint)
                    .collect(),
            );
        }
        stints.extend(
            open_segments
                .iter()
                .flatten()
                .filter(|s| s.grant_id.as_deref() == Some(g.grant_id.as_str()))
                .cloned(),
        );
        let slots = u32::try_from(g.slots).unwrap_or(0);
        if !expiring.is_empty() {
            let term = Term::new(g.starts_at, g.ends_at);
            let summary = notices::summarise(&g.grant_id, slots, term, &stints, now);
            let renewal = open.iter().find(|o| {
                o.tenant_id == g.tenant_id
                    && o.grant_id != g.grant_id
                    && o.starts_at <= g.ends_at
                    && g.ends_at < o.ends_at
            });
            for n in expiring {
                if !record_expiry(conn, &g.grant_id, n, now).await? {
                    continue;
                }
                let data = EventData::GrantExpiring(GrantExpiring {
                    grant: g.change(None),
                    notice: n.label.clone(),
                    renewal: renewal.map(|r| r.grant_id.clone()),
                    usage: utilisation(&summary),
                });
                tracing::info!(
                    grant = %g.grant_id,
                    tenant = %g.tenant_id,
                    notice = %n.label,
                    utilisation = %summary.utilisation(),
                    suggested_slots = summary.suggested_slots,
                    "grant expiry notice"
                );
                notify(&mut events, root, g, data, now);
                outcome.expiring += 1;
            }
        }
        if let Some(window) = window {
            let summary = notices::summarise(&g.grant_id, slots, window, &stints, now);
            let below = summary.is_below(rules.underuse_ratio_micros);
            let Some(reported) = judge_window(conn, &g.grant_id, window.end, below).await? else {
                continue;
            };
            outcome.windows_judged += 1;
            if !(below && reported == Some(window.end)) {
                continue;
            }
            let data = EventData::GrantUnderused(GrantUnderused {
                grant_id: g.grant_id.clone(),
                pool_id: g.pool_id.clone(),
                slots: i64::from(g.slots),
                window: Window {
                    from: window.start,
                    to: window.end,
                },
                usage: utilisation(&summary),
            });
            tracing::info!(
                grant = %g.grant_id,
                tenant = %g.tenant_id,
                utilisation = %summary.utilisation(),
                suggested_slots = summary.suggested_slots,
                "grant underused over its last 24 hours"
            );
            notify(&mut events, root, g, data, now);
            outcome.underused += 1;
        }
    }
    events::publish(conn, now, events).await?;
    Ok(outcome)
}

fn utilisation(summary: &UsageSummary) -> Utilisation {
    Utilisation {
        utilisation: summary.utilisation(),
        suggested_slots: summary.suggested_slots,
    }
}

/// Queues a notice for the grantee's log and the root tenant's (once when
/// the grantee is root).
fn notify(events: &mut Vec<NewEvent>, root: &str, g: &GrantRow, data: EventData, now: i64) {
    if g.tenant_id != root {
        events.push(NewEvent::new(&g.tenant_id, data.clone(), now));
    }
    events.push(NewEvent::new(root, data, now));
}

/// Records an expiry notice as sent; `false` if it was already.
async fn record_expiry(
    conn: &mut AsyncPgConnection,
    grant_id: &str,
    notice: &ExpiryNotice,
    now: i64,
) -> Result<bool> {
    let inserted = diesel::insert_into(grant_expiry_notices::table)
        .values((
            grant_expiry_notices::grant_id.eq(grant_id),
            grant_expiry_notices::before_ms.eq(notice.before_ms),
            grant_expiry_notices::notice.eq(&notice.label),
            grant_expiry_notices::sent_at.eq(now),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    Ok(inserted == 1)
}

#[derive(Debug, QueryableByName)]
struct Judged {
    #[diesel(sql_type = Nullable<BigInt>)]
    reported_to: Option<i64>,
}

/// Records that the window ending at `window_to` was judged (`below`: under
/// the ratio) and answers the grant's last reported window end afterwards,
/// or `None` when this window (or a later one) was judged already. A window
/// below the ratio is reported when none was within the 24 hours before.
async fn judge_window(
    conn: &mut AsyncPgConnection,
    grant_id: &str,
    window_to: i64,
    below: bool,
) -> Result<Option<Option<i64>>> {
    let judged: Option<Judged> = diesel::sql_query(include_str!("sql/notices_judge_window.sql"))
        .bind::<Text, _>(grant_id)
        .bind::<BigInt, _>(window_to)
        .bind::<Bool, _>(below)
        .bind::<BigInt, _>(UNDERUSE_WINDOW_MS)
        .get_result(conn)
        .await
        .optional()?;
    Ok(judged.map(|j| j.reported_to))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_the_contracts() {
        let rules = NoticeRules::default();
        let labels: Vec<&str> = rules.expiry.iter().map(|n| n.label.as_str()).collect();
        assert_eq!(labels, ["7d", "1d", "1h"]);
        assert_eq!(rules.expiry[0].before_ms, 7 * 24 * 3_600_000);
        assert_eq!(rules.underuse_ratio_micros, 200_000);
    }

    #[test]
    fn bad_settings_name_the_variable_and_value() {
        let e = NoticeRules::parse("7d,soon", "0.2").expect_err("bad duration");
        assert!(e.contains("BC_EXPIRY_NOTICES") && e.contains("soon"), "{e}");
        let e = NoticeRules::parse("1d,24h", "0.2").expect_err("same notice twice");
        assert!(e.contains("\"24h\" and \"1d\""), "{e}");
        let e = NoticeRules::parse("0s", "0.2").expect_err("zero");
        assert!(e.contains("positive"), "{e}");
        let e = NoticeRules::parse("1h", "1.5").expect_err("ratio");
        assert!(e.contains("BC_UNDERUSE_RATIO") && e.contains("1.5"), "{e}");
        let e = NoticeRules::parse("1h", "lots").expect_err("ratio");
        assert!(e.contains("not a number"), "{e}");
    }

    #[test]
    fn none_turns_expiry_notices_off() {
        let rules = NoticeRules::parse("none", "0").expect("parses");
        assert!(rules.expiry.is_empty());
        assert_eq!(rules.underuse_ratio_micros, 0);
        assert_eq!(rules.longest_ms(), 0);
    }
}
