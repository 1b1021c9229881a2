//! Provider reservations: what scans left, with their slot accounts, and
//! binding to pools (contract 3.5). The scans themselves are
//! [`crate::ops::scans`].

use std::collections::{BTreeSet, HashMap};

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use grants_core::views::slots::SlotAccounts;
use grants_core::{SettlementGrant, SettlementInstance};

use crate::error::{Detail, Field, Reason, Result, StorageError};
use crate::ids::{AccountId, PoolId, ReservationId, TenantId};
use crate::locks;
use crate::model::instance::InstanceRow;
use crate::model::states::{ReservationStatus, SettledState};
use crate::model::{grant::GrantRow, reservation::ReservationRow};
use crate::ops::accounts;
use crate::schema::{grants, pools, reservations};

/// A reservation as the API shows it: the row and its slot accounts at the
/// server's now (contract 3.10).
#[derive(Debug, Clone)]
pub struct Reservation {
    /// The stored row.
    pub row: ReservationRow,
    /// `grantedSlots`, `heldInGrants`, `ordinaryInUse`, `ordinaryFree`,
    /// `physicalInUse` at now.
    pub accounts: SlotAccounts,
}

/// The reservations with their slot accounts at `now`, read without
/// settling anything: the open grants and the seated instances of each
/// account are read in one statement each (whatever the number of
/// reservations), and the transitions due since the last settlement are
/// applied in memory (`grants_core::views::slot_accounts`), so the figures
/// are those a settlement at `now` would leave.
pub async fn with_accounts(
    conn: &mut AsyncPgConnection,
    rows: Vec<ReservationRow>,
    now: i64,
) -> Result<Vec<Reservation>> {
    // One reservation (bind, unbind) reads only its own grants and instances.
    let only = match rows.as_slice() {
        [one] => Some(one.reservation_id.clone()),
        _ => None,
    };
    let accounts: BTreeSet<String> = rows.iter().map(|r| r.account_id.clone()).collect();
    type Key = (String, String);
    let mut grants_of: HashMap<Key, Vec<SettlementGrant>> = HashMap::new();
    let mut instances_of: HashMap<Key, Vec<SettlementInstance>> = HashMap::new();
    for account in &accounts {
        for g in GrantRow::open_on_account(conn, account, only.as_deref()).await? {
            let key = (g.account_id.clone(), g.reservation_id.clone());
            grants_of.entry(key).or_default().push(g.to_settlement());
        }
        for i in InstanceRow::seated_on_account(conn, account, only.as_deref()).await? {
            let (Some(a), Some(r)) = (i.account_id.clone(), i.reservation_id.clone()) else {
                continue;
            };
            instances_of
                .entry((a, r))
                .or_default()
                .push(i.to_settlement());
        }
    }
    Ok(rows
        .into_iter()
        .map(|row| {
            let key = (row.account_id.clone(), row.reservation_id.clone());
            let accounts = grants_core::views::slots::slot_accounts(
                u64::try_from(row.total).unwrap_or(0),
                u64::try_from(row.provider_in_use).unwrap_or(0),
                grants_of.get(&key).map_or(&[], Vec::as_slice),
                instances_of.get(&key).map_or(&[], Vec::as_slice),
                now,
            );
            Reservation { row, accounts }
        })
        .collect())
}

/// `providerAccounts.listReservations`: the account's reservations with
/// their slot accounts at `now`.
pub async fn list(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    account_id: &AccountId,
    now: i64,
) -> Result<Vec<Reservation>> {
    let tenant = tenant.as_str();
    let account_id = account_id.as_str();
    accounts::find(conn, tenant, account_id).await?;
    let rows = ReservationRow::of_account(conn, account_id).await?;
    with_accounts(conn, rows, now).await
}

/// One reservation with its slot accounts at `now`.
async fn one_with_accounts(
    conn: &mut AsyncPgConnection,
    row: ReservationRow,
    now: i64,
) -> Result<Reservation> {
    with_accounts(conn, vec![row], now)
        .await?
        .pop()
        .ok_or_else(|| StorageError::internal("a reservation without its accounts"))
}

/// `providerAccounts.bindReservation`: root only, so `root` is both the
/// acting tenant and the owner the account must have. A managed pool binds
/// only reservations in its own account's project (contract 3.12 r4:
/// `INVALID_INPUT`, `reason: "other-project"`), as its VMs are made there;
/// a ledger pool binds any root account's.
pub async fn bind(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    account_id: &AccountId,
    reservation_id: &ReservationId,
    pool_id: &PoolId,
    now: i64,
) -> Result<Reservation> {
    let root = root.as_str();
    let account_id = account_id.as_str();
    let reservation_id = reservation_id.as_str();
    let pool_id = pool_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        accounts::find(conn, root, account_id).await?;
        let res = locks::reservation(conn, account_id, reservation_id)
            .await?
            .ok_or_else(|| StorageError::not_found("reservation", reservation_id))?;
        type PoolRow = (String, serde_json::Value, String, Option<serde_json::Value>);
        let pool: Option<PoolRow> = pools::table
            .find(pool_id)
            .select((pools::region, pools::flavors, pools::account_id, pools::vm))
            .first(conn)
            .await
            .optional()?;
        let Some((region, flavors, pool_account, vm)) = pool else {
            return Err(StorageError::not_found("pool", pool_id));
        };
        if res.status == ReservationStatus::Gone {
            return Err(StorageError::invalid_state("the reservation is gone")
                .with(Detail::ReservationStatus(ReservationStatus::Gone)));
        }
        if let Some(bound) = &res.pool_id {
            if bound == pool_id {
                return one_with_accounts(conn, res, now).await;
            }
            return Err(StorageError::invalid_state(format!(
                "the reservation is bound to pool {bound}; unbind it first"
            ))
            .with(Detail::PoolId(bound.clone())));
        }
        if vm.is_some() {
            same_project(conn, root, account_id, &res, pool_id, &pool_account).await?;
        }
        if region != res.region {
            return Err(StorageError::invalid(
                Field::PoolId,
                Reason::RegionMismatch,
                format!("the pool is in {region}, the reservation in {}", res.region),
            ));
        }
        let has_flavor = flavors.as_array().is_some_and(|fs| {
            fs.iter()
                .any(|f| f.get("name").and_then(|n| n.as_str()) == Some(res.flavor.as_str()))
        });
        if !has_flavor {
            return Err(StorageError::invalid(
                Field::PoolId,
                Reason::FlavorMismatch,
                format!("the pool has no flavor {}", res.flavor),
            ));
        }
        let row = diesel::update(reservations::table.find((account_id, reservation_id)))
            .set(reservations::pool_id.eq(pool_id))
            .returning(ReservationRow::as_returning())
            .get_result(conn)
            .await?;
        tracing::info!(reservation = %reservation_id, pool = %pool_id, "reservation bound");
        one_with_accounts(conn, row, now).await
    })
    .await
}

/// The project a provider account's stored config names (`config.project`).
fn project_of(config: &serde_json::Value) -> Option<&str> {
    config.get("project").and_then(serde_json::Value::as_str)
}

/// The project of a reservation id `projects/{p}/zones/{z}/reservations/{n}`.
fn project_in(reservation_id: &str) -> Option<&str> {
    let (project, _) = reservation_id.strip_prefix("projects/")?.split_once('/')?;
    Some(project).filter(|p| !p.is_empty())
}

/// Refuses to bind `res` (listed by `account_id`) to the managed pool
/// `pool_id` unless it is in the project of the pool's account
/// (`pool_account`): `other-project`. The reservation's project is the one
/// its id names, or else that of the account that listed it. A pool whose
/// account is gone makes no VMs: `INVALID_STATE`, `no-account`.
async fn same_project(
    conn: &mut AsyncPgConnection,
    root: &str,
    account_id: &str,
    res: &ReservationRow,
    pool_id: &str,
    pool_account: &str,
) -> Result<()> {
    let Some(owner) = accounts::find_optional(conn, root, pool_account).await? else {
        return Err(StorageError::invalid_state(format!(
            "the provider account of managed pool {pool_id} is gone"
        ))
        .with(Detail::Reason(Reason::NoAccount)));
    };
    let reservation_project = match project_in(&res.reservation_id) {
        Some(p) => Some(p.to_owned()),
        None => {
            let listed_by = accounts::find(conn, root, account_id).await?;
            project_of(&listed_by.config).map(str::to_owned)
        }
    };
    let pool_project = project_of(&owner.config);
    if reservation_project.is_some() && reservation_project.as_deref() == pool_project {
        return Ok(());
    }
    Err(StorageError::invalid(
        Field::PoolId,
        Reason::OtherProject,
        format!(
            "managed pool {pool_id} makes its vms in project {}; the reservation is in {}",
            pool_project.unwrap_or("(none)"),
            reservation_project.as_deref().unwrap_or("(none)"),
        ),
    ))
}

/// Grants of the given reservations that are scheduled or active at `now`.
pub(crate) async fn live_grant_ids(
    conn: &mut AsyncPgConnection,
    account_id: &str,
    reservation_id: Option<&str>,
    now: i64,
) -> Result<Vec<String>> {
    let mut query = grants::table
        .filter(grants::account_id.eq(account_id))
        .filter(grants::settled_state.ne(SettledState::Cancelled))
        .filter(grants::ends_at.gt(now))
        .order(grants::grant_id.asc())
        .select(grants::grant_id)
        .into_boxed();
    if let Some(r) = reservation_id {
        query = query.filter(grants::reservation_id.eq(r));
    }
    Ok(query.load(conn).await?)
}

/// `providerAccounts.unbindReservation`: refused while a grant on it is
/// scheduled or active.
pub async fn unbind(
    conn: &mut AsyncPgConnection,
    tenant: &TenantId,
    account_id: &AccountId,
    reservation_id: &ReservationId,
    now: i64,
) -> Result<Reservation> {
    let tenant = tenant.as_str();
    let account_id = account_id.as_str();
    let reservation_id = reservation_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        accounts::find(conn, tenant, account_id).await?;
        let res = locks::reservation(conn, account_id, reservation_id)
            .await?
            .ok_or_else(|| StorageError::not_found("reservation", reservation_id))?;
        let live = live_grant_ids(conn, account_id, Some(reservation_id), now).await?;
        if !live.is_empty() {
            return Err(StorageError::invalid_state(
                "grants on the reservation are scheduled or active; end them first",
            )
            .with(Detail::GrantIds(live)));
        }
        if res.pool_id.is_none() {
            return one_with_accounts(conn, res, now).await;
        }
        let row = diesel::update(reservations::table.find((account_id, reservation_id)))
            .set(reservations::pool_id.eq(None::<String>))
            .returning(ReservationRow::as_returning())
            .get_result(conn)
            .await?;
        tracing::info!(reservation = %reservation_id, "reservation unbound");
        one_with_accounts(conn, row, now).await
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_id_names_its_project() {
        let id = "projects/platform-prod/zones/us-central1-a/reservations/res-a";
        assert_eq!(project_in(id), Some("platform-prod"));
        for other in [
            "res-a",
            "projects//zones/z/reservations/r",
            "projects/p",
            "",
        ] {
            assert_eq!(project_in(other), None, "{other}");
        }
        let config = serde_json::json!({ "project": "platform-prod", "credentials": "none" });
        assert_eq!(project_of(&config), Some("platform-prod"));
        assert_eq!(project_of(&serde_json::json!({})), None);
    }
}
