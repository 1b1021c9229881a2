//! The event log: per-tenant sequences in commit order, and cursor paging.

use diesel::prelude::*;
use diesel::sql_types::{Array, BigInt, Jsonb, Nullable, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

use crate::error::{Result, StorageError};
use crate::ids;
use crate::schema::events;

pub use super::event_data::EventData;

/// An event to publish in a tenant.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The tenant whose log receives the event.
    pub tenant_id: String,
    /// Its type and payload.
    pub data: EventData,
    /// The instant the change happened (a transition's own instant, which can
    /// precede the transaction that settles it).
    pub occurred_at: i64,
}

impl NewEvent {
    /// An event in `tenant_id` at `occurred_at`.
    pub fn new(tenant_id: &str, data: EventData, occurred_at: i64) -> Self {
        NewEvent {
            tenant_id: tenant_id.to_owned(),
            data,
            occurred_at,
        }
    }
}

/// A published event as `events.list` returns it.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = events)]
pub struct Event {
    /// `evt_...`
    pub event_id: String,
    /// The tenant whose log holds it.
    pub tenant_id: String,
    /// The event type.
    pub event_type: String,
    /// The payload.
    pub data: Value,
    /// When the change happened.
    pub occurred_at: i64,
    /// Position in the tenant's log (not serialized; the cursor encodes it).
    pub seq: i64,
}

impl Event {
    /// Its type and payload, typed (the payload is copied; see
    /// [`Event::into_parts`] to take it).
    pub fn payload(&self) -> Result<EventData> {
        Ok(EventData::from_parts(&self.event_type, self.data.clone())?)
    }

    /// Its id, tenant, typed payload and instant, the payload taken
    /// without a copy (a page of `events.list` is answered this way).
    pub fn into_parts(self) -> Result<(String, String, EventData, i64)> {
        let payload = EventData::from_parts(&self.event_type, self.data)?;
        Ok((self.event_id, self.tenant_id, payload, self.occurred_at))
    }
}

/// Publishes events inside the caller's transaction. Call it as the last
/// write of the transaction: it takes each tenant's head row lock, held until
/// commit, so that sequence order is commit order within a tenant. Tenants
/// are locked in name order so two transactions never deadlock here.
pub async fn publish(conn: &AsyncPgConnection, now: i64, mut batch: Vec<NewEvent>) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    batch.sort_by(|a, b| a.tenant_id.cmp(&b.tenant_id));
    type Group = (
        String,
        i64,
        Vec<String>,
        Vec<&'static str>,
        Vec<Value>,
        Vec<i64>,
    );
    let mut groups: Vec<Group> = Vec::new();
    for group in batch.chunk_by(|a, b| a.tenant_id == b.tenant_id) {
        let Some(first) = group.first() else {
            continue;
        };
        let count = i64::try_from(group.len()).map_err(StorageError::internal)?;
        let data = group
            .iter()
            .map(|e| e.data.to_data())
            .collect::<serde_json::Result<Vec<Value>>>()?;
        groups.push((
            first.tenant_id.clone(),
            count,
            group.iter().map(|_| ids::new_id("evt", now)).collect(),
            group.iter().map(|e| e.data.event_type()).collect(),
            data,
            group.iter().map(|e| e.occurred_at).collect(),
        ));
    }
    // One statement per tenant (the head's advance and the events numbered
    // from it; the head row's lock is held until commit) and the
    // notification that wakes the webhook deliveries when the transaction
    // commits, all pipelined: one round trip.
    let statements = groups
        .iter()
        .map(|(tenant, count, ids, types, data, at)| async move {
            let mut conn = conn;
            crate::db::cached(
                diesel::sql_query(include_str!("sql/events_publish.sql"))
                    .bind::<Text, _>(tenant)
                    .bind::<BigInt, _>(count)
                    .bind::<Array<Text>, _>(ids)
                    .bind::<Array<Text>, _>(types)
                    .bind::<Array<Jsonb>, _>(data)
                    .bind::<Array<BigInt>, _>(at),
            )
            .execute(&mut conn)
            .await
        });
    let notify = async {
        let mut conn = conn;
        crate::db::cached(diesel::sql_query("SELECT pg_notify('bc_events', '')"))
            .execute(&mut conn)
            .await
    };
    futures::try_join!(futures::future::try_join_all(statements), notify)?;
    Ok(())
}

/// One page of a tenant's event log.
#[derive(Debug, Clone)]
pub struct EventPage {
    /// Events after the cursor, oldest first.
    pub items: Vec<Event>,
    /// The position after the last returned event, or the given position.
    pub next_seq: i64,
    /// True when more events follow.
    pub has_more: bool,
}

/// Lists events of `tenant` after position `after`, at most `limit`,
/// optionally only of some types.
pub async fn list(
    conn: &mut AsyncPgConnection,
    tenant: &str,
    after: i64,
    limit: i64,
    types: Option<&[String]>,
) -> Result<EventPage> {
    let mut query = events::table
        .filter(events::tenant_id.eq(tenant))
        .filter(events::seq.gt(after))
        .order(events::seq.asc())
        .limit(limit + 1)
        .select(Event::as_select())
        .into_boxed();
    if let Some(types) = types {
        query = query.filter(events::event_type.eq_any(types.to_vec()));
    }
    let mut items: Vec<Event> = query.load(conn).await?;
    let has_more = items.len() as i64 > limit;
    items.truncate(usize::try_from(limit).unwrap_or(0));
    let next_seq = items.last().map_or(after, |e| e.seq);
    Ok(EventPage {
        items,
        next_seq,
        has_more,
    })
}

/// A grant transition or capacity change of a reservation, as its timeline
/// shows it.
#[derive(Debug, Clone, QueryableByName)]
pub struct ReservationEvent {
    /// When it happened.
    #[diesel(sql_type = BigInt)]
    pub occurred_at: i64,
    /// Its type.
    #[diesel(sql_type = Text)]
    pub event_type: String,
    /// The grant it is about (none for a capacity change).
    #[diesel(sql_type = Nullable<Text>)]
    pub grant_id: Option<String>,
    /// The log it is in.
    #[diesel(sql_type = Text)]
    pub tenant_id: String,
    /// Its position there.
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
}

/// The events of a reservation in `[from, to)`, oldest first (then by log
/// and position, so events of one instant keep their commit order): the
/// transitions of its grants (`grant_ids`: `.created`, `.active`, `.ended`,
/// `.cancelled`; not their notices) in their grantees' logs (`grantees`),
/// and the `reservation-grant.capacity-short`
/// events of the reservation in the root tenant's log. One statement over
/// the two partial indexes of the operator views.
#[expect(clippy::too_many_arguments, reason = "one statement's parameters")]
pub async fn of_reservation(
    conn: &mut AsyncPgConnection,
    grantees: &[String],
    grant_ids: &[String],
    root: &str,
    account_id: &str,
    reservation_id: &str,
    from: i64,
    to: i64,
) -> Result<Vec<ReservationEvent>> {
    Ok(
        diesel::sql_query(include_str!("sql/events_of_reservation.sql"))
            .bind::<Array<Text>, _>(grantees)
            .bind::<Array<Text>, _>(grant_ids)
            .bind::<BigInt, _>(from)
            .bind::<BigInt, _>(to)
            .bind::<Text, _>(root)
            .bind::<Text, _>(reservation_id)
            .bind::<Text, _>(account_id)
            .load(conn)
            .await?,
    )
}

/// Encodes a log position as an opaque cursor.
pub fn encode_cursor(seq: i64) -> String {
    format!(
        "c{}",
        data_encoding::BASE32HEX_NOPAD
            .encode(&seq.to_be_bytes())
            .to_ascii_lowercase()
    )
}

/// Decodes a cursor made by [`encode_cursor`].
pub fn decode_cursor(cursor: &str) -> Option<i64> {
    let body = cursor.strip_prefix('c')?;
    let bytes = data_encoding::BASE32HEX_NOPAD
        .decode(body.to_ascii_uppercase().as_bytes())
        .ok()?;
    let arr: [u8; 8] = bytes.try_into().ok()?;
    let seq = i64::from_be_bytes(arr);
    (seq >= 0).then_some(seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        for seq in [0, 1, 42, i64::MAX] {
            assert_eq!(decode_cursor(&encode_cursor(seq)), Some(seq));
        }
        assert_eq!(decode_cursor("garbage"), None);
        assert_eq!(decode_cursor(""), None);
    }
}
