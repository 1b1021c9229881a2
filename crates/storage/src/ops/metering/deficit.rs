//! `vm.grant.deficit.hours` (contract 5.4): the credits of the grants a
//! `vps.grants` metering transaction holds, for the same hour buckets as
//! their slot-hours, so both meters advance together under one
//! `meteredThrough` and a credit is written exactly when its slot-hours are.
//! Each grant keeps its exact credit before the hour it resumes at
//! (`deficit_exact`), so only the hours being written are computed.

use std::collections::BTreeMap;

use diesel_async::AsyncPgConnection;
use grants_core::deficit::{BigRational, deficit_records_after, exact_deficit_ms};
use grants_core::{Record, Term, bucket_start};

use crate::error::Result;
use crate::model::grant::GrantRow;
use crate::ops::totals::{self, ReservationKey, Shortfalls};

/// A grant's new credits and the exact credit to keep with them.
pub(super) struct Credit {
    /// The records.
    pub records: Vec<Record>,
    /// The exact credit before the first hour not written.
    pub exact: String,
}

/// The exact credit a grant kept; `None` when it kept none yet.
pub(crate) fn kept(g: &GrantRow) -> Option<BigRational> {
    let text = g.deficit_exact.as_deref()?;
    text.parse().ok()
}

/// Where a grant's computation starts: the hour it resumes at when it kept
/// its exact credit, else its start.
pub(crate) fn resumes_at(g: &GrantRow) -> i64 {
    match kept(g) {
        Some(_) => bucket_start(g.metered_through).max(bucket_start(g.starts_at)),
        None => g.starts_at,
    }
}

/// The exact credit of `g` before the hour it resumes at: kept, or computed
/// from the history since its start.
pub(crate) fn before(g: &GrantRow, res: &Shortfalls, subject: usize) -> BigRational {
    kept(g).unwrap_or_else(|| {
        exact_deficit_ms(
            subject,
            &res.grants,
            &res.history,
            bucket_start(g.metered_through),
        )
    })
}

/// The credits due for each grant of `batch` (locked, on claimed
/// reservations) up to `now`, by grant id; grants owed nothing are left out.
/// Only reservations whose history has a short row are read further, so a
/// reservation that never fell short costs one indexed lookup per batch.
pub(super) async fn credits(
    conn: &mut AsyncPgConnection,
    batch: &[GrantRow],
    now: i64,
) -> Result<BTreeMap<String, Credit>> {
    let cutoff = bucket_start(now);
    let mut starts: BTreeMap<ReservationKey, i64> = BTreeMap::new();
    for g in batch {
        let key = (g.account_id.clone(), g.reservation_id.clone());
        let start = starts.entry(key).or_insert(resumes_at(g));
        *start = (*start).min(resumes_at(g));
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
            let before = before(g, &res, subject);
            let (records, exact) = deficit_records_after(
                subject,
                &res.grants,
                &res.history,
                &before,
                g.metered_through,
                now,
            );
            if !records.is_empty() {
                let exact = exact.to_string();
                out.insert(g.grant_id.clone(), Credit { records, exact });
            }
        }
    }
    Ok(out)
}
