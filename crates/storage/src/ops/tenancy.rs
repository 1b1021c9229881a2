//! Tenants, projects and API keys; authentication of a secret.

use diesel::prelude::*;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl};
use iam_check::{KeyScope, Principal, Role};
use subtle::ConstantTimeEq;

use crate::error::{Detail, ErrorKind, Result, StorageError};
use crate::ids;
use crate::ids::{AccountId, KeyId, TenantId};
use crate::locks;
use crate::model::states::TenantState;
use crate::ops::accounts;
use crate::schema::{api_keys, projects, tenants};

/// A tenant.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = tenants)]
pub struct Tenant {
    /// The tenant's chosen name.
    pub tenant_id: String,
    /// Display name.
    pub display_name: String,
    /// Lifecycle state.
    pub state: TenantState,
    /// Creation instant.
    pub created_at: i64,
    /// Deletion instant.
    pub deleted_at: Option<i64>,
}

/// A project of a tenant.
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = projects)]
pub struct Project {
    /// `prj_...`
    pub project_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name.
    pub name: String,
    /// Creation instant.
    pub created_at: i64,
}

/// An API key (never its secret).
#[derive(Debug, Clone, Queryable, Selectable)]
#[diesel(table_name = api_keys)]
pub struct ApiKey {
    /// `key_...`
    pub key_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name.
    pub name: String,
    /// `admin`, `provider-admin`, `member` or `viewer`.
    pub role: String,
    /// The one provider account the key is limited to, if any.
    pub account_id: Option<String>,
    /// Creation instant.
    pub created_at: i64,
    /// Revocation instant.
    pub revoked_at: Option<i64>,
}

/// A key with its secret, shown once.
#[derive(Debug, Clone)]
pub struct IssuedKey {
    /// The key.
    pub api_key: ApiKey,
    /// The secret (`bck_...`); stored only as a hash.
    pub secret: String,
}

/// The caller behind a secret.
#[derive(Debug, Clone)]
pub struct Authenticated {
    /// The key's id (for logs).
    pub key_id: String,
    /// What the decision needs.
    pub principal: Principal,
}

/// Looks up an active key of an active tenant by its secret.
///
/// It takes the connection shared (`&AsyncPgConnection`), so that a caller
/// can pipeline it with other reads on the same connection (the server sends
/// it with the manual clock's read in one round trip).
pub async fn authenticate(conn: &AsyncPgConnection, secret: &str) -> Result<Option<Authenticated>> {
    let mut conn = conn;
    let conn = &mut conn;
    let hash = ids::hash_secret(secret);
    type KeyRow = (String, String, String, Option<String>, Vec<u8>);
    let row: Option<KeyRow> = api_keys::table
        .inner_join(tenants::table)
        .filter(api_keys::secret_hash.eq(&hash))
        .filter(api_keys::revoked_at.is_null())
        .filter(tenants::state.eq(TenantState::Active))
        .select((
            api_keys::key_id,
            api_keys::tenant_id,
            api_keys::role,
            api_keys::account_id,
            api_keys::secret_hash,
        ))
        .first(conn)
        .await
        .optional()?;
    let Some((key_id, tenant_id, role, account_id, stored)) = row else {
        return Ok(None);
    };
    if !bool::from(stored.as_slice().ct_eq(hash.as_slice())) {
        return Ok(None);
    }
    let role = Role::parse(&role)
        .ok_or_else(|| StorageError::internal(format!("key {key_id} has unknown role")))?;
    let scope = match account_id {
        Some(a) => KeyScope::Account(a),
        None => KeyScope::Tenant,
    };
    Ok(Some(Authenticated {
        key_id,
        principal: Principal {
            tenant_id,
            role,
            scope,
        },
    }))
}

/// Makes sure the root tenant exists and, with a bootstrap token, that an
/// `admin` key of the root tenant with that secret exists. Idempotent.
pub async fn bootstrap(
    conn: &mut AsyncPgConnection,
    root: &TenantId,
    token: Option<&str>,
    now: i64,
) -> Result<()> {
    let root = root.as_str();
    diesel::insert_into(tenants::table)
        .values((
            tenants::tenant_id.eq(root),
            tenants::display_name.eq(root),
            tenants::state.eq(TenantState::Active),
            tenants::created_at.eq(now),
        ))
        .on_conflict_do_nothing()
        .execute(conn)
        .await?;
    if let Some(token) = token {
        diesel::insert_into(api_keys::table)
            .values((
                api_keys::key_id.eq(ids::new_id("key", now)),
                api_keys::tenant_id.eq(root),
                api_keys::name.eq("bootstrap"),
                api_keys::role.eq("admin"),
                api_keys::secret_hash.eq(ids::hash_secret(token)),
                api_keys::created_at.eq(now),
            ))
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
    }
    Ok(())
}

/// Loads a tenant.
pub async fn get_tenant(conn: &AsyncPgConnection, tenant_id: &str) -> Result<Option<Tenant>> {
    let mut conn = conn;
    let conn = &mut conn;
    Ok(tenants::table
        .find(tenant_id)
        .select(Tenant::as_select())
        .first(conn)
        .await
        .optional()?)
}

/// Loads an active tenant or answers `NOT_FOUND`.
pub async fn active_tenant(conn: &mut AsyncPgConnection, tenant_id: &TenantId) -> Result<Tenant> {
    match get_tenant(conn, tenant_id.as_str()).await? {
        Some(t) if t.state == TenantState::Active => Ok(t),
        _ => Err(StorageError::not_found("tenant", tenant_id.as_str())),
    }
}

/// `tenants.create`: a new tenant and its first admin key.
pub async fn create_tenant(
    conn: &mut AsyncPgConnection,
    name: &TenantId,
    display_name: Option<&str>,
    now: i64,
) -> Result<(Tenant, IssuedKey)> {
    let display = display_name.unwrap_or(name.as_str()).to_owned();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        let inserted = diesel::insert_into(tenants::table)
            .values((
                tenants::tenant_id.eq(name.as_str()),
                tenants::display_name.eq(&display),
                tenants::state.eq(TenantState::Active),
                tenants::created_at.eq(now),
            ))
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
        if inserted == 0 {
            return Err(StorageError::new(
                ErrorKind::Conflict,
                format!("tenant name {name} is taken (names are never reused)"),
            )
            .with(Detail::TenantId(name.as_str().to_owned())));
        }
        let key = insert_key(conn, name.as_str(), "admin", Role::Admin, None, now).await?;
        let tenant = active_tenant(conn, name).await?;
        Ok((tenant, key))
    })
    .await
}

/// `tenants.delete` (the tenancy part: state and keys), for a tenant whose
/// row the caller holds with [`crate::locks::tenant_for_delete`] and found
/// active.
pub async fn mark_tenant_deleted(
    conn: &mut AsyncPgConnection,
    tenant_id: &TenantId,
    now: i64,
) -> Result<Tenant> {
    let tenant_id = tenant_id.as_str();
    diesel::update(
        api_keys::table
            .filter(api_keys::tenant_id.eq(tenant_id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::revoked_at.eq(now))
    .execute(conn)
    .await?;
    Ok(diesel::update(tenants::table.find(tenant_id))
        .set((
            tenants::state.eq(TenantState::Deleted),
            tenants::deleted_at.eq(now),
        ))
        .returning(Tenant::as_returning())
        .get_result(conn)
        .await?)
}

/// `tenants.list`: every tenant, newest first.
pub async fn list_tenants(conn: &mut AsyncPgConnection) -> Result<Vec<Tenant>> {
    Ok(tenants::table
        .order((tenants::created_at.desc(), tenants::tenant_id.desc()))
        .limit(crate::LIST_LIMIT)
        .select(Tenant::as_select())
        .load(conn)
        .await?)
}

/// `projects.create`.
pub async fn create_project(
    conn: &mut AsyncPgConnection,
    tenant_id: &TenantId,
    name: &str,
    now: i64,
) -> Result<Project> {
    let tenant_id = tenant_id.as_str();
    conn.transaction::<_, StorageError, _>(async move |conn| {
        locks::acting_tenant(conn, tenant_id).await?;
        Ok(diesel::insert_into(projects::table)
            .values((
                projects::project_id.eq(ids::new_id("prj", now)),
                projects::tenant_id.eq(tenant_id),
                projects::name.eq(name),
                projects::created_at.eq(now),
            ))
            .returning(Project::as_returning())
            .get_result(conn)
            .await?)
    })
    .await
}

/// `projects.list`: the tenant's projects, newest first.
pub async fn list_projects(
    conn: &mut AsyncPgConnection,
    tenant_id: &TenantId,
) -> Result<Vec<Project>> {
    let tenant_id = tenant_id.as_str();
    Ok(projects::table
        .filter(projects::tenant_id.eq(tenant_id))
        .order((projects::created_at.desc(), projects::project_id.desc()))
        .limit(crate::LIST_LIMIT)
        .select(Project::as_select())
        .load(conn)
        .await?)
}

/// Loads a project of a tenant, or `None` when it is not the tenant's.
pub async fn tenant_project(
    conn: &mut AsyncPgConnection,
    tenant_id: &str,
    project_id: &str,
) -> Result<Option<Project>> {
    Ok(projects::table
        .find(project_id)
        .filter(projects::tenant_id.eq(tenant_id))
        .select(Project::as_select())
        .first(conn)
        .await
        .optional()?)
}

async fn insert_key(
    conn: &mut AsyncPgConnection,
    tenant_id: &str,
    name: &str,
    role: Role,
    account_id: Option<&str>,
    now: i64,
) -> Result<IssuedKey> {
    let secret = ids::new_secret();
    let api_key = diesel::insert_into(api_keys::table)
        .values((
            api_keys::key_id.eq(ids::new_id("key", now)),
            api_keys::tenant_id.eq(tenant_id),
            api_keys::name.eq(name),
            api_keys::role.eq(role.as_str()),
            api_keys::account_id.eq(account_id),
            api_keys::secret_hash.eq(ids::hash_secret(&secret)),
            api_keys::created_at.eq(now),
        ))
        .returning(ApiKey::as_returning())
        .get_result(conn)
        .await?;
    Ok(IssuedKey { api_key, secret })
}

/// `apiKeys.create`: an account-scoped key names an account of the tenant.
pub async fn create_key(
    conn: &mut AsyncPgConnection,
    tenant_id: &TenantId,
    name: &str,
    role: Role,
    account_id: Option<&AccountId>,
    now: i64,
) -> Result<IssuedKey> {
    let tenant_id = tenant_id.as_str();
    let account_id = account_id.map(AccountId::as_str);
    conn.transaction::<_, StorageError, _>(async move |conn| {
        locks::acting_tenant(conn, tenant_id).await?;
        if let Some(account) = account_id {
            accounts::find(conn, tenant_id, account).await?;
        }
        insert_key(conn, tenant_id, name, role, account_id, now).await
    })
    .await
}

/// `apiKeys.list`: the tenant's keys, newest first, without secrets.
pub async fn list_keys(conn: &mut AsyncPgConnection, tenant_id: &TenantId) -> Result<Vec<ApiKey>> {
    let tenant_id = tenant_id.as_str();
    Ok(api_keys::table
        .filter(api_keys::tenant_id.eq(tenant_id))
        .order((api_keys::created_at.desc(), api_keys::key_id.desc()))
        .limit(crate::LIST_LIMIT)
        .select(ApiKey::as_select())
        .load(conn)
        .await?)
}

/// `apiKeys.revoke`: revoking a revoked key returns it unchanged.
pub async fn revoke_key(
    conn: &mut AsyncPgConnection,
    tenant_id: &TenantId,
    key_id: &KeyId,
    now: i64,
) -> Result<ApiKey> {
    let tenant_id = tenant_id.as_str();
    let key_id = key_id.as_str();
    let updated: Option<ApiKey> = diesel::update(
        api_keys::table
            .find(key_id)
            .filter(api_keys::tenant_id.eq(tenant_id))
            .filter(api_keys::revoked_at.is_null()),
    )
    .set(api_keys::revoked_at.eq(now))
    .returning(ApiKey::as_returning())
    .get_result(conn)
    .await
    .optional()?;
    if let Some(k) = updated {
        return Ok(k);
    }
    api_keys::table
        .find(key_id)
        .filter(api_keys::tenant_id.eq(tenant_id))
        .select(ApiKey::as_select())
        .first(conn)
        .await
        .optional()?
        .ok_or_else(|| StorageError::not_found("API key", key_id))
}
