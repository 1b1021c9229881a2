//! Settlement of a reservation's grants (contract 5.3): the storage side of
//! `grants_core::settlement`. The caller holds the reservation's row lock; the
//! transitions due are computed by the pure crate and written here, each with
//! its event, in the caller's transaction. Because the state change and the
//! event commit together under the lock, each transition happens once, however
//! many servers and workers settle concurrently.

use std::collections::HashMap;

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::{ForcedEnd, GrantState, SettlementGrant, SettlementInstance, Transition};

use crate::error::{Result, StorageError};
use crate::locks;
use crate::model::event_data::EventData;
use crate::model::events::NewEvent;
use crate::model::grant::GrantRow;
use crate::model::instance::InstanceRow;
use crate::model::reservation::ReservationRow;
use crate::model::states::SettledState;
use crate::ops::instances;
use crate::schema::grants;

/// The live instances on the reservation, as settlement sees them (read as
/// stored: under the reservation's lock for settlement, unlocked for the
/// previews of the views and `reservationGrants.preview`).
pub(crate) async fn seated_instances(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
) -> Result<Vec<SettlementInstance>> {
    Ok(InstanceRow::seated(conn, res)
        .await?
        .iter()
        .map(InstanceRow::to_settlement)
        .collect())
}

/// The open grants of the reservation as settlement sees them, read
/// unlocked (for previews; settlement itself locks them).
pub(crate) async fn open_grants_unlocked(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
) -> Result<Vec<SettlementGrant>> {
    Ok(
        GrantRow::open_on_account(conn, &res.account_id, Some(&res.reservation_id))
            .await?
            .iter()
            .map(GrantRow::to_settlement)
            .collect(),
    )
}

/// Those of `grants` (a settled reservation's open grants) live at `now`.
pub fn live_at(grants: Vec<GrantRow>, now: i64) -> Vec<GrantRow> {
    grants
        .into_iter()
        .filter(|g| g.state_at(now) == GrantState::Active)
        .collect()
}

/// Settles the locked reservation up to `now`, queuing events.
/// It reads (and locks) only the open grants started by `now`, and the
/// seated instances only when one of them is due: a settlement with nothing
/// due costs one indexed read, whatever the reservation's history.
pub async fn settle(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    let grants = locks::started_grants(conn, res, now).await?;
    settle_locked(conn, res, grants, now, events).await
}

/// Settles like [`settle`] and answers, with the number of transitions, the
/// open grants started by `now` as they stand after it (locked): read once
/// when nothing was due, again after the writes otherwise. The placement
/// view and the notices take the live grants from it.
pub async fn settle_with_grants(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<Vec<GrantRow>> {
    let grants = locks::started_grants(conn, res, now).await?;
    Ok(settle_locked_with_grants(conn, res, grants, now, events)
        .await?
        .1)
}

/// [`settle_with_grants`] of the open grants started by `now` already read and
/// locked ([`locks::started_grants_of`] under the reservation's lock), with
/// the number of transitions written (when there were any, the grants are
/// read again).
pub async fn settle_locked_with_grants(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    grants: Vec<GrantRow>,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<(usize, Vec<GrantRow>)> {
    match settle_if_due(conn, res, grants, now, events).await? {
        (n, Some(grants)) => Ok((n, grants)),
        (n, None) => Ok((n, locks::started_grants(conn, res, now).await?)),
    }
}

/// [`settle`] of the open grants started by `now` already read and locked
/// ([`locks::started_grants_of`] under the reservation's lock).
pub async fn settle_locked(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    grants: Vec<GrantRow>,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    Ok(settle_if_due(conn, res, grants, now, events).await?.0)
}

/// The transitions written, and the grants as read when nothing was due
/// (then they are as stored; otherwise `None`: they changed).
async fn settle_if_due(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    grants: Vec<GrantRow>,
    now: i64,
    events: &mut Vec<NewEvent>,
) -> Result<(usize, Option<Vec<GrantRow>>)> {
    let snapshot: Vec<SettlementGrant> = grants.iter().map(GrantRow::to_settlement).collect();
    if !grants_core::has_due(&snapshot, now) {
        return Ok((0, Some(grants)));
    }
    let n = run(conn, res, &grants, snapshot, events, |g, i| {
        grants_core::settle(g, i, now)
    })
    .await?;
    Ok((n, None))
}

/// Settles up to `at`, then refills the grants that an instance just left
/// (a delete) from the ordinary slots of the reservation (contract 5.3, r2).
/// Call it under the reservation's row lock once the instance's seat is
/// released.
pub async fn refill(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    let grants = locks::started_grants(conn, res, at).await?;
    if grants.is_empty() {
        return Ok(0);
    }
    let snapshot: Vec<SettlementGrant> = grants.iter().map(GrantRow::to_settlement).collect();
    run(conn, res, &grants, snapshot, events, |g, i| {
        grants_core::refill(g, i, at)
    })
    .await
}

/// Reads the locked reservation's seated instances, asks the engine
/// (`decide`, a settlement and maybe more) what happens to `grants` (the
/// locked open grants started by the instant it decides at: grants starting
/// later take no part, `grants_core::has_due`), and writes the answer.
async fn run(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    grants: &[GrantRow],
    snapshot: Vec<SettlementGrant>,
    events: &mut Vec<NewEvent>,
    decide: impl FnOnce(&[SettlementGrant], &[SettlementInstance]) -> Vec<Transition>,
) -> Result<usize> {
    let instances = seated_instances(conn, res).await?;
    let due = decide(&snapshot, &instances);
    write(conn, res, grants, &due, events).await?;
    Ok(due.len())
}

/// Settles up to `at`, then applies a forced end (root `end`, tenant
/// deletion, reservation loss) at `at`, queuing events.
pub async fn force_end(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    cause: &ForcedEnd,
    at: i64,
    events: &mut Vec<NewEvent>,
) -> Result<usize> {
    let grants = locks::open_grants(conn, res).await?;
    let instances = seated_instances(conn, res).await?;
    let snapshot: Vec<SettlementGrant> = grants.iter().map(GrantRow::to_settlement).collect();
    let due = grants_core::force_end(&snapshot, &instances, cause, at);
    write(conn, res, &grants, &due, events).await?;
    Ok(due.len())
}

async fn write(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    rows: &[GrantRow],
    due: &[Transition],
    events: &mut Vec<NewEvent>,
) -> Result<()> {
    let by_id: HashMap<&str, &GrantRow> = rows.iter().map(|g| (g.grant_id.as_str(), g)).collect();
    let row = |id: &str| {
        by_id
            .get(id)
            .copied()
            .ok_or_else(|| StorageError::internal(format!("transition names unknown grant {id}")))
    };
    for t in due {
        match t {
            Transition::Activate {
                grant_id,
                at,
                take_in,
            } => {
                let g = row(grant_id)?;
                instances::take_in(conn, res, grant_id, take_in, *at).await?;
                diesel::update(grants::table.find(grant_id))
                    .set(grants::settled_state.eq(SettledState::Active))
                    .execute(conn)
                    .await?;
                events.push(NewEvent::new(
                    &g.tenant_id,
                    EventData::GrantActive(g.change(None)),
                    *at,
                ));
            }
            Transition::Refill {
                grant_id,
                at,
                take_in,
            } => {
                row(grant_id)?;
                instances::take_in(conn, res, grant_id, take_in, *at).await?;
            }
            Transition::End {
                grant_id,
                at,
                reason,
                moves,
            } => {
                let g = row(grant_id)?;
                // Billed history is never rewritten: a forced end decided at an
                // instant whose hour was already metered takes effect at the
                // first unmetered instant instead.
                let at = &(*at).max(g.metered_through);
                for m in moves {
                    instances::apply_move(conn, res, &m.instance_id, &m.to, *at).await?;
                }
                diesel::update(grants::table.find(grant_id))
                    .set((
                        grants::settled_state.eq(SettledState::Ended),
                        grants::ends_at.eq(*at),
                        grants::ended_at.eq(*at),
                        grants::reason.eq(reason.as_str()),
                        grants::metered_through.eq(diesel::dsl::sql::<diesel::sql_types::BigInt>(
                            &format!("LEAST(metered_through, {at})"),
                        )),
                    ))
                    .execute(conn)
                    .await?;
                let ended = GrantRow {
                    ends_at: *at,
                    ..g.clone()
                };
                events.push(NewEvent::new(
                    &g.tenant_id,
                    EventData::GrantEnded(ended.change(Some(reason.as_str()))),
                    *at,
                ));
            }
            Transition::Cancel {
                grant_id,
                at,
                reason,
            } => {
                let g = row(grant_id)?;
                cancel(conn, g, *at, reason.as_str(), events).await?;
            }
            Transition::ReservationLost { at, moves } => {
                for m in moves {
                    instances::apply_move(conn, res, &m.instance_id, &m.to, *at).await?;
                }
            }
        }
    }
    // A take-in may need slots a grant lent, and an ended grant lends no
    // more: its borrowers are interrupted from the last transition's
    // instant (contract 3.14).
    if let Some(at) = due.iter().map(Transition::at).max() {
        crate::ops::lending::enforce(conn, res, at, events).await?;
    }
    Ok(())
}

/// Records `g` as cancelled at `at` and queues its `.cancelled` event.
async fn cancel(
    conn: &mut AsyncPgConnection,
    g: &GrantRow,
    at: i64,
    reason: &str,
    events: &mut Vec<NewEvent>,
) -> Result<()> {
    diesel::update(grants::table.find(&g.grant_id))
        .set((
            grants::settled_state.eq(SettledState::Cancelled),
            grants::ended_at.eq(at),
            grants::reason.eq(reason),
        ))
        .execute(conn)
        .await?;
    events.push(NewEvent::new(
        &g.tenant_id,
        EventData::GrantCancelled(g.change(Some(reason))),
        at,
    ));
    Ok(())
}
