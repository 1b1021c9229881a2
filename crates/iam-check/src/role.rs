//! Roles and their permission sets (contract section 2.2).

use std::fmt;
use std::str::FromStr;

use crate::permission::{Permission, UnknownName};

/// The role of an API key (contract section 2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// `admin`: every permission, on every scope of its tenant (the fleet
    /// scope only in the root tenant).
    Admin,
    /// `provider-admin`: `compute:providers:manage` and
    /// `compute:providers:read`.
    ProviderAdmin,
    /// `member`: instances, and reading quotas, usage, events and providers.
    Member,
    /// `viewer`: reading quotas, usage, events and providers.
    Viewer,
}

const ADMIN: [Permission; 12] = Permission::ALL;
const PROVIDER_ADMIN: [Permission; 2] = [Permission::ProvidersManage, Permission::ProvidersRead];
const MEMBER: [Permission; 5] = [
    Permission::InstancesManage,
    Permission::QuotasRead,
    Permission::UsageRead,
    Permission::EventsRead,
    Permission::ProvidersRead,
];
const VIEWER: [Permission; 4] = [
    Permission::QuotasRead,
    Permission::UsageRead,
    Permission::EventsRead,
    Permission::ProvidersRead,
];

impl Role {
    /// Every role, in the order of contract table 2.2.
    pub const ALL: [Role; 4] = [Role::Admin, Role::ProviderAdmin, Role::Member, Role::Viewer];

    /// The wire name: `"admin"`, `"provider-admin"`, `"member"` or `"viewer"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::ProviderAdmin => "provider-admin",
            Role::Member => "member",
            Role::Viewer => "viewer",
        }
    }

    /// Parses a wire name; `None` for anything else (exact, case-sensitive).
    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The permissions the role holds (contract table 2.2).
    ///
    /// Holding a permission is necessary but not sufficient: [`decide`](crate::decide)
    /// also runs the tenant pre-check and the scope coverage (an `admin` of a
    /// tenant other than the root holds the fleet permissions here, but they
    /// never resolve for it).
    pub fn permissions(self) -> &'static [Permission] {
        match self {
            Role::Admin => &ADMIN,
            Role::ProviderAdmin => &PROVIDER_ADMIN,
            Role::Member => &MEMBER,
            Role::Viewer => &VIEWER,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = UnknownName;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::parse(s).ok_or_else(|| UnknownName {
            kind: "role",
            value: s.to_owned(),
        })
    }
}

/// Whether `role` holds `permission` in its permission set (contract table
/// 2.2), before any tenant or scope consideration.
///
/// ```
/// use iam_check::{permits, Permission, Role};
///
/// assert!(permits(Role::Member, Permission::InstancesManage));
/// assert!(!permits(Role::Viewer, Permission::InstancesManage));
/// ```
pub fn permits(role: Role, permission: Permission) -> bool {
    role.permissions().contains(&permission)
}
