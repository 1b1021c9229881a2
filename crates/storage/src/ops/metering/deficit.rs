//! `vm.grant.deficit.hours` (contract 5.4): the credits of the grants a
//! `vps.grants` metering transaction holds, for the same hour buckets as
//! their slot-hours, so both meters advance together under one
//! `meteredThrough` and a credit is written exactly when its slot-hours are.

use std::collections::BTreeMap;

use diesel_async::AsyncPgConnection;
use grants_core::{Record, Term, bucket_start};

use crate::error::Result;
use crate::model::grant::GrantRow;
use crate::ops::totals::{self, ReservationKey, Shortfalls};

/// The credit records due for each grant of `batch` (locked, on claimed
/// reservations) up to `now`, by grant id; grants owed nothing are left out.
/// Only reservations whose history has a short row are read further, so a
/// reservation that never fell short costs one indexed lookup per batch.
pub(super) async fn credits(
    conn: &mut AsyncPgConnection,
    batch: &[GrantRow],
    now: i64,
) -> Result<BTreeMap<String, Vec<Record>>> {
    let cutoff = bucket_start(now);
    let mut starts: BTreeMap<ReservationKey, i64> = BTreeMap::new();
    for g in batch {
        let key = (g.account_id.clone(), g.reservation_id.clone());
        let start = starts.entry(key).or_insert(g.starts_at);
        *start = (*start).min(g.starts_at);
    }
    let keys: Vec<ReservationKey> = starts.keys().cloned().collect();
    let short = totals::short_among(conn, &keys).await?;
    let mut out = BTreeMap::new();
    for (key, start) in starts.iter().filter(|(k, _)| short.contains(*k)) {
        let window = Term::new(*start, cutoff);
        if window.is_empty() {
            continue;
        }
        let res = Shortfalls::load(conn, &key.0, &key.1, window).await?;
        for g in batch
            .iter()
            .filter(|g| g.account_id == key.0 && g.reservation_id == key.1)
        {
            let Some(subject) = res.position(&g.grant_id) else {
                continue;
            };
            let records = grants_core::deficit::deficit_records(
                subject,
                &res.grants,
                &res.history,
                g.metered_through,
                now,
            );
            if !records.is_empty() {
                out.insert(g.grant_id.clone(), records);
            }
        }
    }
    Ok(out)
}
