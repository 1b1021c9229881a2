//! A platform built with storage's operations alone, on a database of its
//! own: the root tenant, two tenants, a root provider account whose scan
//! answer holds one reservation (no provider is called), a pool the
//! reservation is bound to, offered to `acme`.

use std::collections::BTreeMap;
use std::fmt::Debug;

use diesel_async::AsyncPgConnection;
use grants_core::Billing;
use serde_json::json;
use storage::ids::{AccountId, GrantId, InstanceId, PoolId, ReservationId, TenantId};
use storage::model::idempotency::KeyedRequest;
use storage::model::instance::InstanceRow;
use storage::model::states::ReservationStatus;
use storage::ops::accounts::{self, NewAccount};
use storage::ops::grants::{self, Grant, NewGrant};
use storage::ops::instances::{self, NewInstance};
use storage::ops::pools::{self, Flavor, NewPool};
use storage::ops::scans::{self, ClaimRules, ListedReservation};
use storage::ops::{reservations, tenancy};
use storage::test_db::TestDatabase;
use storage::{Result, StorageError};

/// The instant the platform is built at (a whole hour, epoch milliseconds).
pub const NOW: i64 = 1_750_000_000_000 - 1_750_000_000_000 % HOUR;

/// One hour in milliseconds.
pub const HOUR: i64 = 3_600_000;

/// The one flavor of the pool and of the reservation.
pub const FLAVOR: &str = "n2-standard-4";

/// The vCPUs of [`FLAVOR`].
pub const FLAVOR_VCPUS: i64 = 4;

/// The region of the pool and the reservation.
pub const REGION: &str = "us-central1";

/// The reservation's provider id.
pub const RESERVATION: &str = "projects/acme-project-1/zones/us-central1-a/reservations/res-a";

/// The quotas `acme` is offered the pool with by default.
pub const QUOTAS: &[(&str, i64)] = &[("instances", 10), ("vcpus", 40), ("memoryGib", 1000)];

/// The platform, and the connection the tests act on it with.
pub struct World {
    /// The connection (dropped before the database).
    pub conn: AsyncPgConnection,
    /// The root tenant.
    pub root: TenantId,
    /// The tenant the pool is offered to.
    pub acme: TenantId,
    /// A tenant the pool is not offered to.
    pub globex: TenantId,
    /// The root provider account.
    pub account: AccountId,
    /// The scanned reservation, bound to [`World::pool`].
    pub reservation: ReservationId,
    /// The pool.
    pub pool: PoolId,
    _db: TestDatabase,
}

/// A tenant id the tests name.
pub fn tenant(name: &str) -> TenantId {
    TenantId::parse(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The error of an operation that must fail.
#[track_caller]
pub fn refused<T: Debug>(result: Result<T>) -> StorageError {
    match result {
        Ok(value) => panic!("the operation succeeded: {value:?}"),
        Err(e) => e,
    }
}

/// The value of an operation that must succeed.
#[track_caller]
pub fn ok<T>(result: Result<T>) -> T {
    match result {
        Ok(value) => value,
        Err(e) => panic!("the operation failed: {e} {:?}", e.details),
    }
}

/// A fresh idempotency key and request hash, for the creating operations.
pub struct Key {
    key: String,
    hash: Vec<u8>,
}

impl Key {
    /// A key no request has used.
    pub fn new() -> Key {
        let key = storage::ids::new_secret();
        let hash = storage::ids::request_hash(&json!({ "key": key }));
        Key { key, hash }
    }

    /// The key as `tenant`'s request to `method` (`module.method`).
    pub fn of<'a>(&'a self, tenant: &'a str, method: &'a str) -> KeyedRequest<'a> {
        KeyedRequest {
            tenant_id: tenant,
            method,
            key: &self.key,
            request_hash: &self.hash,
        }
    }
}

impl World {
    /// The platform with a reservation of `total` slots, offered to `acme`
    /// with [`QUOTAS`].
    pub async fn new(total: i64) -> World {
        World::with_quotas(total, QUOTAS).await
    }

    /// The platform with a reservation of `total` slots, offered to `acme`
    /// with `quotas`. Call it on a multi-threaded runtime: the first test
    /// database of a migration set migrates its template in a blocking call.
    pub async fn with_quotas(total: i64, quotas: &[(&str, i64)]) -> World {
        let db = TestDatabase::new().await;
        let mut conn = storage::db::establish(db.url())
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", db.name()));
        let c = &mut conn;
        let root = tenant("root");
        ok(tenancy::bootstrap(c, &root, None, NOW).await);
        let (acme, _) = ok(tenancy::create_tenant(c, &tenant("acme"), Some("Acme"), NOW).await);
        let (globex, _) = ok(tenancy::create_tenant(c, &tenant("globex"), None, NOW).await);
        let (acme, globex) = (tenant(&acme.tenant_id), tenant(&globex.tenant_id));
        let account = root_account(c, &root).await;
        let reservation = scan(c, &root, &account, total).await;
        let pool = root_pool(c, &root, &account).await;
        let bound = ok(reservations::bind(c, &root, &account, &reservation, &pool, NOW).await);
        assert_eq!(bound.row.pool_id.as_deref(), Some(pool.as_str()));
        let quotas: BTreeMap<String, i64> =
            quotas.iter().map(|(r, m)| ((*r).to_owned(), *m)).collect();
        let offered = ok(pools::offer(c, &root, &pool, &acme, &quotas, NOW).await);
        assert_eq!(offered.offered_to, vec![acme.as_str().to_owned()]);
        World {
            conn,
            root,
            acme,
            globex,
            account,
            reservation,
            pool,
            _db: db,
        }
    }

    /// `reservationGrants.create` by root for `acme` on the reservation.
    pub async fn grant(&mut self, slots: i32, starts_at: i64, ends_at: i64) -> Result<Grant> {
        self.grant_in(slots, starts_at, ends_at, None, NOW).await
    }

    /// `reservationGrants.create` by root for `acme` at `now`, limited to
    /// `project` if given.
    pub async fn grant_in(
        &mut self,
        slots: i32,
        starts_at: i64,
        ends_at: i64,
        project: Option<&str>,
        now: i64,
    ) -> Result<Grant> {
        let key = Key::new();
        let new = NewGrant {
            account_id: self.account.as_str(),
            reservation_id: self.reservation.as_str(),
            grant_tenant_id: self.acme.as_str(),
            project_id: project,
            slots,
            starts_at,
            ends_at,
        };
        let keyed = key.of(self.root.as_str(), "reservationGrants.create");
        let created = grants::create(&mut self.conn, &self.root, new, keyed, now).await?;
        assert!(!created.replayed);
        Ok(created.value)
    }

    /// `instances.create` by `acme` in the pool, of [`FLAVOR`], at `now`.
    pub async fn instance(&mut self, now: i64) -> Result<InstanceRow> {
        let key = Key::new();
        let new = NewInstance {
            tenant_id: &self.acme,
            pool_id: &self.pool,
            flavor: FLAVOR,
            project_id: None,
            name: None,
            billing: Billing::Standard,
            interruptible: false,
        };
        let keyed = key.of(self.acme.as_str(), "instances.create");
        let created = instances::create(&mut self.conn, &self.root, new, keyed, now).await?;
        assert!(!created.replayed);
        Ok(created.value)
    }

    /// A grant's id as typed.
    pub fn grant_id(grant: &Grant) -> GrantId {
        GrantId::parse(&grant.row.grant_id).unwrap_or_else(|e| panic!("{e}"))
    }

    /// An instance's id as typed.
    pub fn instance_id(row: &InstanceRow) -> InstanceId {
        InstanceId::parse(&row.instance_id).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A root provider account (its config points nowhere: nothing calls it).
async fn root_account(conn: &mut AsyncPgConnection, root: &TenantId) -> AccountId {
    let key = Key::new();
    let config = json!({ "project": "acme-project-1", "credentials": "none" });
    let new = NewAccount {
        tenant_id: root.as_str(),
        name: "gce main",
        provider: "gce",
        config: &config,
        max_accounts: None,
    };
    let keyed = key.of(root.as_str(), "providerAccounts.create");
    let created = ok(accounts::create(conn, new, keyed, NOW).await);
    AccountId::parse(&created.value.account_id).unwrap_or_else(|e| panic!("{e}"))
}

/// Claims a scan of `account` and applies the answer a provider would have
/// given: one ready reservation of `total` slots. Returns its id.
async fn scan(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    account: &AccountId,
    total: i64,
) -> ReservationId {
    let claim =
        ok(scans::claim_scan(conn, root.as_str(), account.as_str(), ClaimRules::EXPLICIT).await)
            .unwrap_or_else(|| panic!("no scan claim of a fresh account"));
    let listed = ListedReservation {
        reservation_id: RESERVATION.to_owned(),
        zone: format!("{REGION}-a"),
        region: REGION.to_owned(),
        flavor: FLAVOR.to_owned(),
        total,
        in_use: 0,
        status: ReservationStatus::Ready,
    };
    let outcome = ok(scans::apply_scan(conn, root, &claim, &[listed], NOW).await);
    assert_eq!(
        (outcome.appeared, outcome.gone, outcome.stale),
        (1, 0, false)
    );
    ReservationId::parse(RESERVATION).unwrap_or_else(|e| panic!("{e}"))
}

/// A root pool in [`REGION`] with the one flavor [`FLAVOR`].
async fn root_pool(conn: &mut AsyncPgConnection, root: &TenantId, account: &AccountId) -> PoolId {
    let key = Key::new();
    let flavors = [Flavor {
        name: FLAVOR.to_owned(),
        vcpus: FLAVOR_VCPUS,
        memory_gib: 16,
        gpus: 0,
    }];
    let quotas = BTreeMap::from([("instances".to_owned(), 100), ("vcpus".to_owned(), 400)]);
    let new = NewPool {
        vm: None,
        lending: None,
        name: "gce us-central1",
        region: REGION,
        provider: "gce",
        account_id: account.as_str(),
        flavors: &flavors,
        quotas: &quotas,
    };
    let keyed = key.of(root.as_str(), "pools.create");
    let created = ok(pools::create(conn, root, new, keyed, NOW).await);
    PoolId::parse(&created.value.pool_id).unwrap_or_else(|e| panic!("{e}"))
}
