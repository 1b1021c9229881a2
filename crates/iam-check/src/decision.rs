//! Principals, access requests and the decision (contract section 2.4).

use std::fmt;

use crate::permission::{Permission, ScopeKind};
use crate::role::{Role, permits};

/// What an API key covers: its whole tenant, or one provider account of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum KeyScope {
    /// A tenant-wide key: covers the tenant scope, the fleet scope (only in
    /// the root tenant) and every provider account of its tenant.
    Tenant,
    /// An account-scoped key: covers only the named provider account, and
    /// nothing at tenant or fleet scope.
    Account(String),
}

/// The authenticated caller: one API key (contract section 2.1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Principal {
    /// The tenant the key belongs to.
    pub tenant_id: String,
    /// The key's role.
    pub role: Role,
    /// The key's scope.
    pub scope: KeyScope,
}

/// How a method's `tenantId` is checked against the principal (step 1 of
/// contract section 2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TenantRule {
    /// `tenantId` is the acting tenant: the principal must belong to it, and
    /// for a fleet permission it must be the root tenant. Most methods.
    Acting,
    /// As [`TenantRule::Acting`], and the acting tenant must also be the root
    /// tenant, whatever the permission's scope (methods the source calls
    /// "root only", such as `reservationGrants.create` and `.end`).
    RootOnly,
    /// `tenantId` names the *target* tenant, not the acting one
    /// (`quotas.set`): the pre-check is only that the principal belongs to the
    /// root tenant. The target may be any tenant, the root included.
    RootCaller,
}

/// One request to authorize.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AccessRequest<'a> {
    /// The request's `tenantId` (the acting tenant, or the target tenant under
    /// [`TenantRule::RootCaller`]).
    pub tenant_id: &'a str,
    /// The id of the root tenant (from configuration).
    pub root_tenant: &'a str,
    /// The permission the method declares in the registry.
    pub permission: Permission,
    /// How `tenant_id` is checked.
    pub tenant_rule: TenantRule,
    /// The provider account the request acts on, for a permission decided on
    /// [`ScopeKind::ProviderAccount`]; ignored for the other scopes.
    ///
    /// Whether the account belongs to the acting tenant is not decided here:
    /// storage answers `NOT_FOUND` for an account of another tenant.
    pub account_id: Option<&'a str>,
}

/// Why a request was denied. The server logs it (its [`Display`](fmt::Display)
/// is a human sentence) and answers `ACCESS_DENIED` without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// The principal does not belong to the request's acting tenant.
    NotMemberOfTenant,
    /// A fleet permission was asked outside the root tenant (the fleet scope
    /// resolves only there).
    FleetOutsideRoot,
    /// A root-only method was called with an acting tenant other than the
    /// root tenant.
    RootOnly,
    /// A method whose `tenantId` names a target tenant (`quotas.set`) was
    /// called by a principal outside the root tenant.
    CallerNotInRoot,
    /// The principal's role does not hold the permission.
    RoleLacksPermission {
        /// The principal's role.
        role: Role,
        /// The permission the method needs.
        permission: Permission,
    },
    /// The key's scope does not cover the permission's scope: an
    /// account-scoped key asked for a tenant or fleet permission, or for a
    /// provider account other than its own.
    AccountScopeNotCovered,
    /// A provider-account permission was asked without naming the account.
    AccountNotNamed,
    /// An input option reserved to the root tenant was used in another
    /// tenant.
    RootOption(RootOption),
}

impl DenyReason {
    /// The class of the denial, for metrics: `tenant` (not a member of the
    /// acting tenant, or a target tenant named from outside root), `role`
    /// (the role lacks the permission), `scope` (the key's or the
    /// permission's scope does not reach) or `root-only` (a root-only method
    /// or option).
    ///
    /// ```
    /// use iam_check::DenyReason;
    ///
    /// assert_eq!(DenyReason::RootOnly.class(), "root-only");
    /// assert_eq!(DenyReason::AccountNotNamed.class(), "scope");
    /// ```
    pub fn class(&self) -> &'static str {
        match self {
            DenyReason::NotMemberOfTenant | DenyReason::CallerNotInRoot => "tenant",
            DenyReason::RoleLacksPermission { .. } => "role",
            DenyReason::FleetOutsideRoot
            | DenyReason::AccountScopeNotCovered
            | DenyReason::AccountNotNamed => "scope",
            DenyReason::RootOnly | DenyReason::RootOption(_) => "root-only",
        }
    }
}

/// Input options that reach beyond the acting tenant's own data or bill,
/// and so are reserved to the root tenant whatever the permission says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RootOption {
    /// `all: true` on a list method: every tenant's items.
    AllTenants,
    /// `billing: "none"` on `instances.create`: an instance nobody pays for.
    Unbilled,
}

impl fmt::Display for RootOption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RootOption::AllTenants => "only the root tenant may list every tenant's items",
            RootOption::Unbilled => "billing \"none\" is reserved to the root tenant",
        })
    }
}

impl fmt::Display for DenyReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyReason::NotMemberOfTenant => {
                f.write_str("the key does not belong to the request's tenant")
            }
            DenyReason::FleetOutsideRoot => {
                f.write_str("a fleet permission resolves only in the root tenant")
            }
            DenyReason::RootOnly => f.write_str("the method is root only"),
            DenyReason::CallerNotInRoot => {
                f.write_str("the method may only be called by a key of the root tenant")
            }
            DenyReason::RoleLacksPermission { role, permission } => {
                write!(f, "role {role} does not hold {permission}")
            }
            DenyReason::AccountScopeNotCovered => {
                f.write_str("the key's provider-account scope does not cover the request")
            }
            DenyReason::AccountNotNamed => {
                f.write_str("a provider-account permission needs the account it acts on")
            }
            DenyReason::RootOption(option) => option.fmt(f),
        }
    }
}

impl std::error::Error for DenyReason {}

/// The outcome of [`decide`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum Decision {
    /// The request may proceed.
    Allow,
    /// The request is denied (`ACCESS_DENIED`), for this reason.
    Deny(DenyReason),
}

impl Decision {
    /// `true` for [`Decision::Allow`].
    pub fn is_allowed(self) -> bool {
        matches!(self, Decision::Allow)
    }

    /// `Ok(())` for [`Decision::Allow`], `Err(reason)` for a denial, for use
    /// with `?`.
    pub fn into_result(self) -> Result<(), DenyReason> {
        match self {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => Err(reason),
        }
    }
}

/// Decides one request (contract section 2.4). Default deny.
///
/// The checks run in this order and the first that fails answers:
///
/// 1. the tenant pre-check of [`AccessRequest::tenant_rule`];
/// 2. the role must hold the permission ([`permits`]);
/// 3. the key's scope must cover the permission's scope: a tenant-wide key
///    covers the tenant scope, the fleet scope (only for a key of the root
///    tenant) and every provider account; an account-scoped key covers only a
///    provider-account permission on that very account. A provider-account
///    permission without [`AccessRequest::account_id`] is denied.
///
/// ```
/// use iam_check::{
///     decide, AccessRequest, Decision, DenyReason, KeyScope, Permission, Principal, Role,
///     TenantRule,
/// };
///
/// let admin = Principal { tenant_id: "acme".into(), role: Role::Admin, scope: KeyScope::Tenant };
/// let req = AccessRequest {
///     tenant_id: "acme",
///     root_tenant: "root",
///     permission: Permission::PoolsManage,
///     tenant_rule: TenantRule::Acting,
///     account_id: None,
/// };
/// // An admin of a tenant other than the root gets no fleet permission.
/// assert_eq!(decide(&admin, &req), Decision::Deny(DenyReason::FleetOutsideRoot));
/// ```
pub fn decide(principal: &Principal, req: &AccessRequest<'_>) -> Decision {
    match tenant_precheck(principal, req)
        .and_then(|()| role_check(principal, req))
        .and_then(|()| scope_check(principal, req))
    {
        Ok(()) => Decision::Allow,
        Err(reason) => Decision::Deny(reason),
    }
}

fn tenant_precheck(principal: &Principal, req: &AccessRequest<'_>) -> Result<(), DenyReason> {
    let caller_is_root = principal.tenant_id == req.root_tenant;
    match req.tenant_rule {
        TenantRule::Acting | TenantRule::RootOnly => {
            if principal.tenant_id != req.tenant_id {
                return Err(DenyReason::NotMemberOfTenant);
            }
            let acting_is_root = req.tenant_id == req.root_tenant;
            if req.permission.scope() == ScopeKind::Fleet && !acting_is_root {
                return Err(DenyReason::FleetOutsideRoot);
            }
            if req.tenant_rule == TenantRule::RootOnly && !acting_is_root {
                return Err(DenyReason::RootOnly);
            }
            Ok(())
        }
        TenantRule::RootCaller => {
            if caller_is_root {
                Ok(())
            } else {
                Err(DenyReason::CallerNotInRoot)
            }
        }
    }
}

fn role_check(principal: &Principal, req: &AccessRequest<'_>) -> Result<(), DenyReason> {
    if permits(principal.role, req.permission) {
        Ok(())
    } else {
        Err(DenyReason::RoleLacksPermission {
            role: principal.role,
            permission: req.permission,
        })
    }
}

fn scope_check(principal: &Principal, req: &AccessRequest<'_>) -> Result<(), DenyReason> {
    match (req.permission.scope(), &principal.scope) {
        (ScopeKind::Tenant, KeyScope::Tenant) => Ok(()),
        (ScopeKind::Fleet, KeyScope::Tenant) => {
            // The pre-check already guarantees this for every rule; kept so
            // that the fleet scope can never resolve outside the root tenant.
            if principal.tenant_id == req.root_tenant {
                Ok(())
            } else {
                Err(DenyReason::FleetOutsideRoot)
            }
        }
        (ScopeKind::Tenant | ScopeKind::Fleet, KeyScope::Account(_)) => {
            Err(DenyReason::AccountScopeNotCovered)
        }
        (ScopeKind::ProviderAccount, key) => match (req.account_id, key) {
            (None, _) => Err(DenyReason::AccountNotNamed),
            (Some(_), KeyScope::Tenant) => Ok(()),
            (Some(asked), KeyScope::Account(own)) if asked == own => Ok(()),
            (Some(_), KeyScope::Account(_)) => Err(DenyReason::AccountScopeNotCovered),
        },
    }
}

/// Decides an input option of an already allowed request: `option` is
/// allowed only when the acting tenant `tenant_id` is the root tenant.
///
/// ```
/// use iam_check::{decide_option, Decision, DenyReason, RootOption};
///
/// assert_eq!(decide_option("root", "root", RootOption::AllTenants), Decision::Allow);
/// assert_eq!(
///     decide_option("acme", "root", RootOption::Unbilled),
///     Decision::Deny(DenyReason::RootOption(RootOption::Unbilled)),
/// );
/// ```
pub fn decide_option(tenant_id: &str, root_tenant: &str, option: RootOption) -> Decision {
    if tenant_id == root_tenant {
        Decision::Allow
    } else {
        Decision::Deny(DenyReason::RootOption(option))
    }
}
