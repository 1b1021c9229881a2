//! `instances`: an instance as stored, and how settlement sees it.

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Bool, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::{Billing, Power, Seat, SettlementInstance};

use crate::error::Result;
use crate::model::keyset::Position;
use crate::model::reservation::ReservationRow;
use crate::model::states::{DeletedReason, InstanceBilling, InstanceState, PlacementKind};
use crate::schema::instances;

/// What an instance listing keeps; every filter is optional and they
/// combine.
#[derive(Debug, Clone, Default)]
pub struct InstanceFilter {
    /// Only this tenant's instances (`None`: every tenant's, root's `all`).
    pub tenant_id: Option<String>,
    /// Only this project's.
    pub project_id: Option<String>,
    /// Only instances of this pool.
    pub pool_id: Option<String>,
    /// Only instances placed on this reservation now (in a grant on it or on
    /// an ordinary slot).
    pub reservation_id: Option<String>,
    /// Only instances held in this grant now.
    pub grant_id: Option<String>,
    /// Only instances in one of these states.
    pub states: Option<Vec<InstanceState>>,
}

/// Where a managed instance's VM is, fixed at its admission (a VM never
/// moves, contract 3.12).
#[derive(Debug, Clone, Copy)]
pub struct NewVm<'a> {
    /// `bc-` and the id's suffix.
    pub name: &'a str,
    /// Its zone.
    pub zone: &'a str,
    /// The reservation it consumes (account, id); `None` on-demand.
    pub reservation: Option<(&'a str, &'a str)>,
}

/// An instance to insert: running (a managed one provisioning), placed
/// nowhere yet, metered from its creation.
#[derive(Debug, Clone, Copy)]
pub struct NewInstanceRow<'a> {
    /// `inst_...`
    pub instance_id: &'a str,
    /// Owner.
    pub tenant_id: &'a str,
    /// Project.
    pub project_id: Option<&'a str>,
    /// Pool.
    pub pool_id: &'a str,
    /// Flavor.
    pub flavor: &'a str,
    /// Name.
    pub name: &'a str,
    /// Who pays for its hours.
    pub billing: InstanceBilling,
    /// Whether it takes only lent slots (contract 3.14).
    pub interruptible: bool,
    /// Creation instant.
    pub created_at: i64,
    /// Its VM, for an instance of a managed pool.
    pub vm: Option<NewVm<'a>>,
}

/// What a placement write reads of its instance ([`crate::ops::instances::place_with`]):
/// a stored row, or a row about to be inserted, so the insert and its first
/// placement can be sent together.
#[derive(Debug, Clone, Copy)]
pub struct Subject<'a> {
    /// `inst_...`
    pub instance_id: &'a str,
    /// Metered up to here: a placement never rewrites an earlier instant.
    pub usage_metered_through: i64,
    /// When it was deleted.
    pub deleted_at: Option<i64>,
    /// Who pays for its hours.
    pub billing: InstanceBilling,
    /// Whether it is a managed instance.
    pub managed: bool,
}

impl<'a> From<&'a InstanceRow> for Subject<'a> {
    fn from(r: &'a InstanceRow) -> Self {
        Subject {
            instance_id: &r.instance_id,
            usage_metered_through: r.usage_metered_through,
            deleted_at: r.deleted_at,
            billing: r.billing,
            managed: r.managed,
        }
    }
}

impl<'a> NewInstanceRow<'a> {
    /// The state it is inserted in: running, a managed one provisioning.
    pub fn state(&self) -> InstanceState {
        if self.vm.is_some() {
            InstanceState::Provisioning
        } else {
            InstanceState::Running
        }
    }

    /// The [`Subject`] of the row [`InstanceRow::insert`] writes: metered
    /// from its creation, not deleted.
    pub fn subject(&self) -> Subject<'a> {
        Subject {
            instance_id: self.instance_id,
            usage_metered_through: self.created_at,
            deleted_at: None,
            billing: self.billing,
            managed: self.vm.is_some(),
        }
    }
}

/// An instance row.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = instances)]
pub struct InstanceRow {
    /// `inst_...`
    pub instance_id: String,
    /// Owner.
    pub tenant_id: String,
    /// Project.
    pub project_id: Option<String>,
    /// Pool.
    pub pool_id: String,
    /// Flavor.
    pub flavor: String,
    /// Name.
    pub name: String,
    /// `standard` or `none`.
    pub billing: InstanceBilling,
    /// Power and lifecycle state.
    pub state: InstanceState,
    /// Where it sits.
    pub placement_kind: PlacementKind,
    /// The grant holding it.
    pub grant_id: Option<String>,
    /// Account of its reservation.
    pub account_id: Option<String>,
    /// Its reservation.
    pub reservation_id: Option<String>,
    /// Creation instant.
    pub created_at: i64,
    /// Deletion instant.
    pub deleted_at: Option<i64>,
    /// Instance meters are written up to here.
    pub usage_metered_through: i64,
    /// Whether it holds a running slot (contract 4, r3): a ledger instance
    /// when running, a managed one from its admission or start until the
    /// provider confirms its VM stopped or gone. The `powered` column.
    #[diesel(column_name = powered)]
    pub holds_slot: bool,
    /// Whether it is a VM of a managed pool.
    pub managed: bool,
    /// Its VM's name.
    pub vm_name: Option<String>,
    /// Its VM's zone.
    pub vm_zone: Option<String>,
    /// The account of the reservation its VM consumes.
    pub vm_account_id: Option<String>,
    /// The reservation its VM consumes (`None` on-demand).
    pub vm_reservation_id: Option<String>,
    /// The provider's last reported status of its VM.
    pub vm_status: Option<String>,
    /// When that status was seen (the product's clock).
    pub vm_observed_at: Option<i64>,
    /// The database's real time of the last change a step or an admission
    /// made (epoch ms).
    pub vm_changed_wall: Option<i64>,
    /// The listing that first missed its VM.
    pub vm_missing_seq: Option<i64>,
    /// The instant of that listing.
    pub vm_missing_at: Option<i64>,
    /// Why its create failed or it was lost.
    pub failure_code: Option<String>,
    /// Why it is deleted (managed instances).
    pub deleted_reason: Option<DeletedReason>,
    /// Whether it takes only lent slots (contract 3.14).
    pub interruptible: bool,
    /// When it took the lent slot it holds.
    pub lent_at: Option<i64>,
    /// While an interruption is pending: when its VM will be deleted.
    pub interrupt_at: Option<i64>,
}

impl InstanceRow {
    /// Who pays for its hours.
    pub fn billing(&self) -> Billing {
        self.billing.to_core()
    }

    /// Whether its time is billed now: a ledger instance whenever it holds
    /// a running slot, a managed one only while its VM was seen running.
    pub fn billed(&self) -> bool {
        !self.managed || self.state == InstanceState::Running
    }

    /// As settlement sees it.
    pub fn to_settlement(&self) -> SettlementInstance {
        SettlementInstance {
            instance_id: self.instance_id.clone(),
            tenant_id: self.tenant_id.clone(),
            project_id: self.project_id.clone(),
            billing: self.billing(),
            power: if self.holds_slot {
                Power::Running
            } else {
                Power::Stopped
            },
            created_at: self.created_at,
            seat: match (self.placement_kind, &self.grant_id) {
                (PlacementKind::Grant, Some(g)) => Some(Seat::Grant(g.clone())),
                (PlacementKind::Lent, Some(g)) => Some(Seat::Lent(g.clone())),
                (PlacementKind::Reservation, _) => Some(Seat::Ordinary),
                _ => None,
            },
        }
    }

    /// One instance, unlocked.
    pub async fn find(conn: &AsyncPgConnection, instance_id: &str) -> Result<Option<InstanceRow>> {
        let mut conn = conn;
        Ok(instances::table
            .find(instance_id)
            .select(InstanceRow::as_select())
            .first(&mut conn)
            .await
            .optional()?)
    }

    /// Inserts a new instance.
    pub async fn insert(conn: &AsyncPgConnection, new: NewInstanceRow<'_>) -> Result<InstanceRow> {
        let mut conn = conn;
        // Two fixed texts (with and without the wall time): kept prepared
        // (`db::cached`).
        Ok(crate::db::cached(
            diesel::insert_into(instances::table)
                .values((
                    instances::instance_id.eq(new.instance_id),
                    instances::tenant_id.eq(new.tenant_id),
                    instances::project_id.eq(new.project_id),
                    instances::pool_id.eq(new.pool_id),
                    instances::flavor.eq(new.flavor),
                    instances::name.eq(new.name),
                    instances::billing.eq(new.billing),
                    instances::interruptible.eq(new.interruptible),
                    instances::state.eq(new.state()),
                    instances::placement_kind.eq(PlacementKind::None),
                    instances::created_at.eq(new.created_at),
                    instances::usage_metered_through.eq(new.created_at),
                    instances::powered.eq(true),
                    instances::managed.eq(new.vm.is_some()),
                    instances::vm_name.eq(new.vm.map(|v| v.name)),
                    instances::vm_zone.eq(new.vm.map(|v| v.zone)),
                    instances::vm_account_id.eq(new.vm.and_then(|v| v.reservation).map(|r| r.0)),
                    instances::vm_reservation_id
                        .eq(new.vm.and_then(|v| v.reservation).map(|r| r.1)),
                    // The database's real time of the admission (epoch ms), read
                    // by the insert itself.
                    instances::vm_changed_wall.eq(diesel::dsl::sql::<
                        diesel::sql_types::Nullable<diesel::sql_types::BigInt>,
                    >(if new.vm.is_some() {
                        crate::clock::DB_NOW_MS
                    } else {
                        "NULL"
                    })),
                ))
                .returning(InstanceRow::as_returning()),
        )
        .get_result(&mut conn)
        .await?)
    }

    /// One page of instances matching `filter`, newest first (`createdAt`,
    /// then instance id, both descending), strictly after position `after`,
    /// at most `limit`, unlocked; one statement, a keyset range.
    pub async fn page(
        conn: &mut AsyncPgConnection,
        filter: &InstanceFilter,
        after: Option<&Position>,
        limit: i64,
    ) -> Result<Vec<InstanceRow>> {
        let mut query = instances::table
            .order((instances::created_at.desc(), instances::instance_id.desc()))
            .limit(limit)
            .select(InstanceRow::as_select())
            .into_boxed();
        if let Some(tenant) = &filter.tenant_id {
            query = query.filter(instances::tenant_id.eq(tenant.clone()));
        }
        if let Some(project) = &filter.project_id {
            query = query.filter(instances::project_id.eq(project.clone()));
        }
        if let Some(pool) = &filter.pool_id {
            query = query.filter(instances::pool_id.eq(pool.clone()));
        }
        if let Some(reservation) = &filter.reservation_id {
            query = query.filter(instances::reservation_id.eq(reservation.clone()));
        }
        if let Some(grant) = &filter.grant_id {
            query = query.filter(instances::grant_id.eq(grant.clone()));
        }
        if let Some(states) = &filter.states {
            query = query.filter(instances::state.eq_any(states.clone()));
        }
        if let Some(p) = after {
            query = query.filter(
                diesel::dsl::sql::<Bool>("(instances.created_at, instances.instance_id) < (")
                    .bind::<BigInt, _>(p.created_at)
                    .sql(", ")
                    .bind::<Text, _>(p.id.clone())
                    .sql(")"),
            );
        }
        Ok(query.load(conn).await?)
    }

    /// The live instances holding a slot of a provider account's
    /// reservations (of one of them with `reservation_id`), unlocked: what
    /// the slot accounts of a listing are computed from, in one statement.
    pub async fn seated_on_account(
        conn: &mut AsyncPgConnection,
        account_id: &str,
        reservation_id: Option<&str>,
    ) -> Result<Vec<InstanceRow>> {
        let mut query = instances::table
            .filter(instances::account_id.eq(account_id))
            .filter(instances::reservation_id.is_not_null())
            .filter(instances::state.ne_all([InstanceState::Deleted, InstanceState::Failed]))
            .order((instances::created_at.asc(), instances::instance_id.asc()))
            .select(InstanceRow::as_select())
            .into_boxed();
        if let Some(r) = reservation_id {
            query = query.filter(instances::reservation_id.eq(r));
        }
        Ok(query.load(conn).await?)
    }

    /// The live instances holding a slot of a reservation, oldest first.
    pub async fn seated(
        conn: &mut AsyncPgConnection,
        res: &ReservationRow,
    ) -> Result<Vec<InstanceRow>> {
        Ok(instances::table
            .filter(instances::account_id.eq(&res.account_id))
            .filter(instances::reservation_id.eq(&res.reservation_id))
            .filter(instances::state.ne_all([InstanceState::Deleted, InstanceState::Failed]))
            .order((instances::created_at.asc(), instances::instance_id.asc()))
            .select(InstanceRow::as_select())
            .load(conn)
            .await?)
    }
}
