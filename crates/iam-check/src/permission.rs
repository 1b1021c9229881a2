//! Permissions and the scope each one is decided on (contract section 2.3).

use std::fmt;
use std::str::FromStr;

/// The kind of scope a permission is decided on (contract section 2.3).
///
/// Every [`Permission`] has exactly one fixed scope kind, see
/// [`Permission::scope`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeKind {
    /// `compute-tenant`: the acting tenant as a whole.
    Tenant,
    /// `compute-fleet`: the whole fleet; resolves only in the root tenant.
    Fleet,
    /// `compute-provider-account`: one provider account of the acting tenant.
    ProviderAccount,
}

impl ScopeKind {
    /// Every scope kind, in the order of the contract.
    pub const ALL: [ScopeKind; 3] = [
        ScopeKind::Tenant,
        ScopeKind::Fleet,
        ScopeKind::ProviderAccount,
    ];

    /// The wire name: `"compute-tenant"`, `"compute-fleet"` or
    /// `"compute-provider-account"`.
    pub fn as_str(self) -> &'static str {
        match self {
            ScopeKind::Tenant => "compute-tenant",
            ScopeKind::Fleet => "compute-fleet",
            ScopeKind::ProviderAccount => "compute-provider-account",
        }
    }

    /// Parses a wire name; `None` for anything else (exact, case-sensitive).
    pub fn parse(s: &str) -> Option<ScopeKind> {
        ScopeKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for ScopeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One permission of the contract (section 2.3).
///
/// The wire names are `compute:<area>:<verb>`, for example
/// `compute:quotas:read`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Permission {
    /// `compute:quotas:read` @ `compute-tenant`.
    QuotasRead,
    /// `compute:quotas:manage` @ `compute-fleet`.
    QuotasManage,
    /// `compute:providers:manage` @ `compute-provider-account`.
    ProvidersManage,
    /// `compute:providers:read` @ `compute-tenant`.
    ProvidersRead,
    /// `compute:pools:manage` @ `compute-fleet`.
    PoolsManage,
    /// `compute:tenants:manage` @ `compute-fleet`.
    TenantsManage,
    /// `compute:instances:manage` @ `compute-tenant`.
    InstancesManage,
    /// `compute:grants:lend` @ `compute-tenant` (r4): setting a grant's
    /// lending, held by the `admin` role only.
    GrantsLend,
    /// `compute:usage:read` @ `compute-tenant`.
    UsageRead,
    /// `compute:events:read` @ `compute-tenant`.
    EventsRead,
    /// `compute:iam:manage` @ `compute-tenant`.
    IamManage,
    /// `compute:fleet:admin` @ `compute-fleet`.
    FleetAdmin,
}

impl Permission {
    /// Every permission, in the order of contract table 2.3.
    pub const ALL: [Permission; 12] = [
        Permission::QuotasRead,
        Permission::QuotasManage,
        Permission::ProvidersManage,
        Permission::ProvidersRead,
        Permission::PoolsManage,
        Permission::TenantsManage,
        Permission::InstancesManage,
        Permission::GrantsLend,
        Permission::UsageRead,
        Permission::EventsRead,
        Permission::IamManage,
        Permission::FleetAdmin,
    ];

    /// The wire name, for example `"compute:quotas:read"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::QuotasRead => "compute:quotas:read",
            Permission::QuotasManage => "compute:quotas:manage",
            Permission::ProvidersManage => "compute:providers:manage",
            Permission::ProvidersRead => "compute:providers:read",
            Permission::PoolsManage => "compute:pools:manage",
            Permission::TenantsManage => "compute:tenants:manage",
            Permission::InstancesManage => "compute:instances:manage",
            Permission::GrantsLend => "compute:grants:lend",
            Permission::UsageRead => "compute:usage:read",
            Permission::EventsRead => "compute:events:read",
            Permission::IamManage => "compute:iam:manage",
            Permission::FleetAdmin => "compute:fleet:admin",
        }
    }

    /// Parses a wire name; `None` for anything else (exact, case-sensitive).
    pub fn parse(s: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.as_str() == s)
    }

    /// The fixed scope this permission is decided on (contract table 2.3).
    pub fn scope(self) -> ScopeKind {
        match self {
            Permission::QuotasRead
            | Permission::ProvidersRead
            | Permission::InstancesManage
            | Permission::GrantsLend
            | Permission::UsageRead
            | Permission::EventsRead
            | Permission::IamManage => ScopeKind::Tenant,
            Permission::QuotasManage
            | Permission::PoolsManage
            | Permission::TenantsManage
            | Permission::FleetAdmin => ScopeKind::Fleet,
            Permission::ProvidersManage => ScopeKind::ProviderAccount,
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a [`Permission`], [`Role`](crate::Role) or
/// [`ScopeKind`] from a string that is none of the wire names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What was being parsed: `"permission"`, `"role"` or `"scope"`.
    pub kind: &'static str,
    /// The rejected input.
    pub value: String,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown {} {:?}", self.kind, self.value)
    }
}

impl std::error::Error for UnknownName {}

impl FromStr for Permission {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Permission::parse(s).ok_or_else(|| UnknownName {
            kind: "permission",
            value: s.to_owned(),
        })
    }
}

impl FromStr for ScopeKind {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ScopeKind::parse(s).ok_or_else(|| UnknownName {
            kind: "scope",
            value: s.to_owned(),
        })
    }
}
