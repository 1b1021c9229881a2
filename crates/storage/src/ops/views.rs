//! Operator views (contract 3.10): a reservation's timeline and a grant's
//! usage hour by hour. Reads only: nothing is locked, settled or written.
//! The transitions due since the reservation was last settled are applied
//! in memory (`grants_core::views`), so an answer is the one a settlement at
//! now would give, whether or not a request or the reconciler has settled.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::views::hours::{HourRow, bucket_count, grant_hours_with};
use grants_core::views::preview::{SettlementPreview, Stint, preview_settlement, project_stints};
use grants_core::views::steps::{CommittedStep, InUseStep};
use grants_core::views::timeline::{
    AnonymousGrant, ListedGrant, ShownGrant, TimelineEvent, TimelineInput, Viewer,
    reservation_timeline, transition_events,
};
use grants_core::{GrantState, HOUR_MS, Term, bucket_start};

use crate::actor::Actor;
use crate::error::{Detail, Field, Reason, Result, StorageError};
use crate::ids::{AccountId, GrantId, ReservationId};
use crate::model::events;
use crate::model::grant::GrantRow;
use crate::model::reservation::ReservationRow;
use crate::model::segment::{self, SegmentRow};
use crate::ops::grants::Grant;
use crate::ops::{settlement, totals};
use crate::schema::provider_accounts;

/// The most hour buckets one `reservationGrants.usage` answer holds.
pub const MAX_USAGE_BUCKETS: u64 = 9_000;

/// The event type of a reservation's disappearance on its timeline (from
/// its `goneAt`; the scan publishes no event of its own for it, only its
/// grants' `.ended` / `.cancelled` with reason `reservation-gone`).
pub const GONE_EVENT: &str = "reservation.gone";

/// A grant on a timeline: in full, or another tenant's as a grantee sees
/// it.
#[derive(Debug, Clone)]
pub enum GrantOnTimeline {
    /// The grant.
    Full(Box<Grant>),
    /// Another tenant's grant: its slots and term only.
    Anonymous(AnonymousGrant),
}

/// `reservations.timeline`.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The reservation.
    pub reservation: ReservationRow,
    /// The range's start.
    pub from: i64,
    /// The range's end.
    pub to: i64,
    /// The grants whose term meets the range, by start.
    pub grants: Vec<GrantOnTimeline>,
    /// Live committed slots over the range.
    pub committed: Vec<CommittedStep>,
    /// Running instances over the range up to now.
    pub in_use: Vec<InUseStep>,
    /// Grant transitions and capacity changes in the range, oldest first.
    pub events: Vec<TimelineEvent>,
}

/// What settlement of `res` up to `now` would do, previewed in memory on
/// its open grants and seated instances, read unlocked (`None`: it has no
/// open grant, so nothing is due).
async fn preview(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    now: i64,
) -> Result<Option<SettlementPreview>> {
    let open = settlement::open_grants_unlocked(conn, res).await?;
    if open.is_empty() {
        return Ok(None);
    }
    let seated = settlement::seated_instances(conn, res).await?;
    Ok(Some(preview_settlement(&open, &seated, now)))
}

/// The open placement segments on `res`, with the `due` transitions
/// applied as settlement will write them (closing some at their instants
/// and opening the next).
async fn projected_open(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    due: Option<&SettlementPreview>,
    borrowers: bool,
) -> Result<Vec<Stint>> {
    let open: Vec<Stint> =
        SegmentRow::open_on_reservation(conn, &res.account_id, &res.reservation_id)
            .await?
            .into_iter()
            .filter(|s| borrowers || !s.is_lent())
            .map(SegmentRow::into_stint)
            .collect();
    Ok(match due {
        Some(due) => project_stints(&open, &due.transitions),
        None => open,
    })
}

/// What the in-use steps of `res` over `window` are computed from: its
/// running closed segments merged by the database, and its open segments
/// projected by the `due` transitions.
async fn running_stints(
    conn: &mut AsyncPgConnection,
    res: &ReservationRow,
    window: Term,
    due: Option<&SettlementPreview>,
) -> Result<Vec<Stint>> {
    if window.is_empty() {
        return Ok(Vec::new());
    }
    let mut stints =
        segment::running_spans(conn, &res.account_id, &res.reservation_id, window).await?;
    stints.extend(projected_open(conn, res, due, true).await?);
    Ok(stints)
}

/// `reservations.timeline` of `tenant` over `window` at `now`. The owner of
/// the reservation's account (root, for every reservation that serves a
/// pool) reads every grant in full; a tenant holding a grant on it (in any
/// state) reads its own grants in full and other tenants' only as
/// anonymous slots and terms, and no other tenant's grant id; anyone else
/// gets `NOT_FOUND`, as for a reservation that does not exist.
pub async fn timeline(
    conn: &mut AsyncPgConnection,
    actor: &Actor,
    account_id: &AccountId,
    reservation_id: &ReservationId,
    window: Term,
    now: i64,
) -> Result<Timeline> {
    let (tenant, root) = (actor.tenant().as_str(), actor.root().as_str());
    let account_id = account_id.as_str();
    let reservation_id = reservation_id.as_str();
    let not_found = || StorageError::not_found("reservation", reservation_id);
    let res = ReservationRow::find(conn, account_id, reservation_id)
        .await?
        .ok_or_else(not_found)?;
    let owner: Option<String> = provider_accounts::table
        .find(account_id)
        .select(provider_accounts::tenant_id)
        .first(conn)
        .await
        .optional()?;
    let rows = GrantRow::of_reservation(conn, account_id, reservation_id).await?;
    let viewer = if owner.as_deref() == Some(tenant) {
        Viewer::Operator
    } else if rows.iter().any(|g| g.tenant_id == tenant) {
        Viewer::Grantee(tenant)
    } else {
        return Err(not_found());
    };
    let due = preview(conn, &res, now).await?;
    let in_use_window = Term::new(window.start, window.end.min(now));
    let stints = running_stints(conn, &res, in_use_window, due.as_ref()).await?;
    let mut grantees: Vec<String> = rows.iter().map(|g| g.tenant_id.clone()).collect();
    grantees.sort();
    grantees.dedup();
    let grant_ids: Vec<String> = rows.iter().map(|g| g.grant_id.clone()).collect();
    let mut timeline_events: Vec<TimelineEvent> = events::of_reservation(
        conn,
        &grantees,
        &grant_ids,
        root,
        account_id,
        reservation_id,
        window.start,
        window.end,
    )
    .await?
    .into_iter()
    .map(|e| TimelineEvent {
        at: e.occurred_at,
        event_type: e.event_type,
        grant_id: e.grant_id,
    })
    .collect();
    // Transitions due but not settled yet publish their events when they
    // are; the timeline shows them already (once, if a settlement commits
    // them meanwhile).
    if let Some(due) = &due {
        timeline_events.extend(transition_events(&due.transitions));
    }
    if let Some(gone_at) = res.gone_at {
        timeline_events.push(TimelineEvent {
            at: gone_at,
            event_type: GONE_EVENT.to_owned(),
            grant_id: None,
        });
    }
    let listed: Vec<ListedGrant> = rows
        .iter()
        .map(|g| ListedGrant {
            grant_id: g.grant_id.clone(),
            tenant_id: g.tenant_id.clone(),
            slots: u32::try_from(g.slots).unwrap_or(0),
            starts_at: g.starts_at,
            ends_at: g.ends_at,
            cancelled: g.state_at(now) == GrantState::Cancelled,
        })
        .collect();
    let view = reservation_timeline(&TimelineInput {
        window,
        now,
        grants: &listed,
        stints: &stints,
        events: &timeline_events,
        viewer,
    });
    let grants = view
        .grants
        .into_iter()
        .filter_map(|shown| match shown {
            ShownGrant::Full(k) => rows
                .get(k)
                .map(|row| GrantOnTimeline::Full(Box::new(Grant::at(row.clone(), now)))),
            ShownGrant::Anonymous(a) => Some(GrantOnTimeline::Anonymous(a)),
        })
        .collect();
    Ok(Timeline {
        reservation: res,
        from: window.start,
        to: window.end,
        grants,
        committed: view.committed,
        in_use: view.in_use,
        events: view.events,
    })
}

/// `reservationGrants.usage` of `tenant` at `now`: one row per hour bucket
/// of the grant's term that `[from, to)` overlaps (the whole term without
/// them), oldest first. The grantee and the root tenant read it; anyone else
/// gets `NOT_FOUND`. A cancelled grant committed nothing and has no rows.
/// More than [`MAX_USAGE_BUCKETS`] buckets is `INVALID_INPUT` on `to`
/// (reason `range`).
pub async fn grant_usage(
    conn: &mut AsyncPgConnection,
    actor: &Actor,
    grant_id: &GrantId,
    from: Option<i64>,
    to: Option<i64>,
    now: i64,
) -> Result<Vec<HourRow>> {
    let (tenant, root) = (actor.tenant().as_str(), actor.root().as_str());
    let grant_id = grant_id.as_str();
    let row = match GrantRow::find(conn, grant_id).await? {
        Some(row) if row.tenant_id == tenant || tenant == root => row,
        _ => return Err(StorageError::not_found("grant", grant_id)),
    };
    if row.state_at(now) == GrantState::Cancelled {
        return Ok(Vec::new());
    }
    let term = Term::new(row.starts_at, row.ends_at);
    let window = Term::new(from.unwrap_or(row.starts_at), to.unwrap_or(row.ends_at));
    let Some(range) = term.intersection(&window) else {
        return Ok(Vec::new());
    };
    let buckets = bucket_count(range);
    if buckets > MAX_USAGE_BUCKETS {
        return Err(StorageError::invalid(
            Field::To,
            Reason::Range,
            format!(
                "the range covers {buckets} hour buckets of the grant's term; at most \
                 {MAX_USAGE_BUCKETS} a call (narrow it with from and to)"
            ),
        )
        .with(Detail::Buckets {
            buckets,
            max: MAX_USAGE_BUCKETS,
        }));
    }
    // The whole hours the rows cover, up to now.
    let hours = Term::new(
        bucket_start(range.start),
        bucket_start(range.end - 1).saturating_add(HOUR_MS).min(now),
    );
    // Closed segments are summed per bucket by the database; the open ones
    // (which settlement may still move) are projected here.
    let (totals, stints) =
        match ReservationRow::find(conn, &row.account_id, &row.reservation_id).await? {
            Some(res) if !hours.is_empty() => {
                let totals = segment::grant_bucket_ms(
                    conn,
                    &res.account_id,
                    &res.reservation_id,
                    grant_id,
                    hours,
                )
                .await?;
                let due = preview(conn, &res, now).await?;
                // The grantee's use only: borrowers are its lent hours.
                (
                    totals,
                    projected_open(conn, &res, due.as_ref(), false).await?,
                )
            }
            _ => (Vec::new(), Vec::new()),
        };
    let slots = u32::try_from(row.slots).unwrap_or(0);
    let mut rows = grant_hours_with(grant_id, slots, term, window, &totals, &stints, now);
    totals::fill_credits(conn, &row, &mut rows, now).await?;
    crate::ops::metering::lent::fill(conn, &row, &mut rows, now).await?;
    Ok(rows)
}
