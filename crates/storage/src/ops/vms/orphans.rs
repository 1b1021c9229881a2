//! The orphan VMs a listing finds (contract 3.12): recorded per listing,
//! due for deletion when seen by two listings in a row, found (never
//! deleted) when newer than every instance this database has made, and
//! closed when a read of them answers 404.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};

use super::listings::{Numbered, SeenVm};
use crate::error::{Result, StorageError};
use crate::model::event_data::{EventData, OrphanDeleted, OrphanFound};
use crate::model::events::{self, NewEvent};
use crate::model::states::InstanceState;
use crate::ops::installation;
use crate::schema::{instances, vm_orphans};

/// An orphan VM to delete (contract 3.12): labelled with this installation,
/// its instance unknown, `deleted` or `failed`, seen by two consecutive
/// listings, and not one that was found (newer than every instance of ours);
/// or one that was due and has left the listings since, not yet known gone.
/// It counts as deleted once a read of it answers 404 ([`orphan_deleted`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    /// Its zone: where its delete is sent.
    pub zone: String,
    /// Its name.
    pub name: String,
    /// The request id its delete is sent with (the same on every try, a
    /// fresh one after a refused delete: [`orphan_delete_refused`]).
    pub request_id: String,
    /// Its `bc-instance` label as listed: the delete is sent only while the
    /// VM still carries it (and this installation's label).
    pub instance_id: Option<String>,
    /// Whether this listing saw it (its delete is sent, after a read). One
    /// not seen was due at an earlier listing and has left the listings
    /// since (its delete ended, or someone else's, or its labels changed):
    /// it is only read, to learn which.
    pub listed: bool,
}

/// Records the labelled VMs without a live instance; those seen by two
/// listings in a row (consecutive numbers) are returned to be deleted. One
/// whose instance is unknown and newer than every instance this database
/// has made is found instead: marked (`vm_orphans.found_at`), reported once
/// as `instance.orphan-found` in the root tenant, in this transaction, and
/// never returned, then or later. The orphans that were due and that this
/// listing no longer saw, not yet known gone nor released, are returned too
/// (not `listed`): a read tells whether they are gone.
pub(super) async fn orphans(
    conn: &mut AsyncPgConnection,
    root: &str,
    listing: &Numbered<'_>,
    seen: &[SeenVm],
    now: i64,
) -> Result<(Vec<Orphan>, u64)> {
    let labelled: Vec<&str> = seen
        .iter()
        .filter_map(|v| v.instance_id.as_deref())
        .collect();
    let known: Vec<(String, InstanceState, Option<String>, Option<String>)> = instances::table
        .filter(instances::instance_id.eq_any(&labelled))
        .select((
            instances::instance_id,
            instances::state,
            instances::vm_name,
            instances::vm_zone,
        ))
        .load(conn)
        .await?;
    // Read once, and only when an unknown instance is labelled.
    let mut newest: Option<Option<String>> = None;
    let (mut out, mut found) = (Vec::new(), 0);
    for vm in seen {
        let label = vm.instance_id.as_deref();
        let owned = known.iter().any(|(id, state, name, zone)| {
            Some(id.as_str()) == label
                && !matches!(state, InstanceState::Deleted | InstanceState::Failed)
                && name.as_deref() == Some(vm.name.as_str())
                && zone.as_deref() == Some(vm.zone.as_str())
        });
        if owned {
            continue;
        }
        let row = record_orphan(conn, listing, vm).await?;
        if row.found_at.is_some() {
            // Kept for the operator, and reported when it was found.
            continue;
        }
        let unknown = label.filter(|l| known.iter().all(|(id, ..)| id != l));
        if let Some(instance_id) = unknown {
            if newest.is_none() {
                newest = Some(installation::newest_instance_id(conn).await?);
            }
            let newest = newest.as_ref().and_then(Option::as_deref);
            if installation::made_after(instance_id, newest) {
                if orphan_found(conn, root, listing, vm, instance_id, now).await? {
                    found += 1;
                }
                continue;
            }
        }
        if row.last_seq > row.first_seq {
            out.push(Orphan {
                zone: vm.zone.clone(),
                name: vm.name.clone(),
                request_id: row.request_id,
                instance_id: vm.instance_id.clone(),
                listed: true,
            });
        }
    }
    let left: Vec<(String, String, Option<String>, String)> = vm_orphans::table
        .filter(vm_orphans::account_id.eq(&listing.claim.account_id))
        .filter(vm_orphans::deleted_at.is_null())
        .filter(vm_orphans::found_at.is_null())
        .filter(vm_orphans::last_seq.lt(listing.seq))
        .filter(vm_orphans::first_seq.lt(vm_orphans::last_seq))
        .select((
            vm_orphans::zone,
            vm_orphans::vm_name,
            vm_orphans::instance_id,
            vm_orphans::request_id,
        ))
        .load(conn)
        .await?;
    out.extend(
        left.into_iter()
            .map(|(zone, name, instance_id, request_id)| Orphan {
                zone,
                name,
                request_id,
                instance_id,
                listed: false,
            }),
    );
    Ok((out, found))
}

/// Records `vm` as an orphan seen by `listing`: a pair is kept (its first
/// listing stays) when the account's previous listing saw it too, else it
/// starts again here. Its instance label is the one listed last.
async fn record_orphan(
    conn: &mut AsyncPgConnection,
    listing: &Numbered<'_>,
    vm: &SeenVm,
) -> Result<OrphanRow> {
    let request_id = uuid::Uuid::now_v7().to_string();
    Ok(diesel::sql_query(
        "INSERT INTO vm_orphans (account_id, zone, vm_name, instance_id, first_seq, last_seq, \
           request_id) VALUES ($1, $2, $3, $4, $5, $5, $6) \
         ON CONFLICT (account_id, zone, vm_name) DO UPDATE SET \
           first_seq = CASE WHEN vm_orphans.last_seq = $5 - 1 \
             THEN vm_orphans.first_seq ELSE $5 END, \
           last_seq = $5, instance_id = $4 \
         RETURNING first_seq, last_seq, request_id, found_at",
    )
    .bind::<Text, _>(&listing.claim.account_id)
    .bind::<Text, _>(&vm.zone)
    .bind::<Text, _>(&vm.name)
    .bind::<Nullable<Text>, _>(vm.instance_id.as_deref())
    .bind::<BigInt, _>(listing.seq)
    .bind::<Text, _>(&request_id)
    .get_result(conn)
    .await?)
}

/// Marks a recorded orphan found and publishes `instance.orphan-found` in
/// the root tenant, once (`false` when it was found already).
async fn orphan_found(
    conn: &mut AsyncPgConnection,
    root: &str,
    listing: &Numbered<'_>,
    vm: &SeenVm,
    instance_id: &str,
    now: i64,
) -> Result<bool> {
    let account_id = listing.claim.account_id.as_str();
    let marked = diesel::update(
        vm_orphans::table
            .find((account_id, &vm.zone, &vm.name))
            .filter(vm_orphans::found_at.is_null()),
    )
    .set(vm_orphans::found_at.eq(now))
    .execute(conn)
    .await?;
    if marked == 0 {
        return Ok(false);
    }
    let data = EventData::OrphanFound(OrphanFound {
        vm_name: vm.name.clone(),
        zone: vm.zone.clone(),
        instance_id: instance_id.to_owned(),
    });
    events::publish(conn, now, vec![NewEvent::new(root, data, now)]).await?;
    tracing::error!(
        account = %account_id,
        zone = %vm.zone,
        vm = %vm.name,
        instance = instance_id,
        "a vm of this installation names an instance newer than any this database made \
         (restored from a backup?): kept, never deleted; adopt or delete it by hand"
    );
    Ok(true)
}

#[derive(QueryableByName)]
struct OrphanRow {
    #[diesel(sql_type = BigInt)]
    first_seq: i64,
    #[diesel(sql_type = BigInt)]
    last_seq: i64,
    #[diesel(sql_type = Text)]
    request_id: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    found_at: Option<i64>,
}

/// An orphan VM's delete was refused (its operation ended with an error):
/// the next is sent with a fresh request id, as the same one would answer
/// the same refused operation.
pub async fn orphan_delete_refused(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    zone: &str,
    vm_name: &str,
) -> Result<()> {
    crate::db::single_write(conn, async |conn| {
        diesel::update(vm_orphans::table.find((account_id, zone, vm_name)))
            .set(vm_orphans::request_id.eq(uuid::Uuid::now_v7().to_string()))
            .execute(conn)
            .await
    })
    .await?;
    Ok(())
}

/// Forgets an orphan VM a read found no longer ours (its labels changed
/// since it was listed): nothing is reported, and if it is listed as ours
/// again it is an orphan anew.
pub async fn orphan_released(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    zone: &str,
    vm_name: &str,
) -> Result<()> {
    crate::db::single_write(conn, async |conn| {
        diesel::delete(
            vm_orphans::table
                .find((account_id, zone, vm_name))
                .filter(vm_orphans::deleted_at.is_null())
                .filter(vm_orphans::found_at.is_null()),
        )
        .execute(conn)
        .await
    })
    .await?;
    Ok(())
}

/// Records that an orphan VM is gone (a read of it answered 404, after its
/// delete), and publishes `instance.orphan-deleted` in the root tenant,
/// once.
pub async fn orphan_deleted(
    conn: &mut AsyncPgConnection,
    root: &str,
    account_id: &str,
    zone: &str,
    vm_name: &str,
    now: i64,
) -> Result<bool> {
    conn.transaction::<_, StorageError, _>(async |conn| {
        let instance: Option<Option<String>> = diesel::update(
            vm_orphans::table
                .find((account_id, zone, vm_name))
                .filter(vm_orphans::deleted_at.is_null()),
        )
        .set(vm_orphans::deleted_at.eq(now))
        .returning(vm_orphans::instance_id)
        .get_result(conn)
        .await
        .optional()?;
        let Some(instance_id) = instance else {
            return Ok(false);
        };
        let data = EventData::OrphanDeleted(OrphanDeleted {
            vm_name: vm_name.to_owned(),
            zone: zone.to_owned(),
            instance_id,
        });
        events::publish(conn, now, vec![NewEvent::new(root, data, now)]).await?;
        tracing::warn!(account = %account_id, zone, vm = vm_name, "orphan vm deleted");
        Ok(true)
    })
    .await
}
