//! Property tests of `decide` (contract section 2.4).

use iam_check::{
    AccessRequest, Decision, DenyReason, KeyScope, Permission, Principal, Role, RootOption,
    ScopeKind, TenantRule, decide, decide_option, permits,
};
use proptest::prelude::*;

const TENANTS: [&str; 3] = ["root", "acme", "beta"];
const ROOT: &str = "root";
const ACCOUNTS: [&str; 3] = ["acct_1", "acct_2", "acct_3"];

fn role() -> impl Strategy<Value = Role> {
    proptest::sample::select(Role::ALL.to_vec())
}

fn permission() -> impl Strategy<Value = Permission> {
    proptest::sample::select(Permission::ALL.to_vec())
}

fn tenant() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(TENANTS.to_vec())
}

fn account() -> impl Strategy<Value = &'static str> {
    proptest::sample::select(ACCOUNTS.to_vec())
}

fn tenant_rule() -> impl Strategy<Value = TenantRule> {
    prop_oneof![
        Just(TenantRule::Acting),
        Just(TenantRule::RootOnly),
        Just(TenantRule::RootCaller),
    ]
}

fn key_scope() -> impl Strategy<Value = KeyScope> {
    prop_oneof![
        Just(KeyScope::Tenant),
        account().prop_map(|a| KeyScope::Account(a.to_string())),
    ]
}

fn principal() -> impl Strategy<Value = Principal> {
    (tenant(), role(), key_scope()).prop_map(|(t, role, scope)| Principal {
        tenant_id: t.to_string(),
        role,
        scope,
    })
}

/// The request's parts, owned so the strategy can produce them; the
/// `AccessRequest` borrows from it.
#[derive(Debug, Clone)]
struct Req {
    tenant: &'static str,
    permission: Permission,
    rule: TenantRule,
    account: Option<&'static str>,
}

impl Req {
    fn as_request(&self) -> AccessRequest<'_> {
        AccessRequest {
            tenant_id: self.tenant,
            root_tenant: ROOT,
            permission: self.permission,
            tenant_rule: self.rule,
            account_id: self.account,
        }
    }
}

fn request() -> impl Strategy<Value = Req> {
    (
        tenant(),
        permission(),
        tenant_rule(),
        proptest::option::of(account()),
    )
        .prop_map(|(tenant, permission, rule, account)| Req {
            tenant,
            permission,
            rule,
            account,
        })
}

// ---- The reference model: the contract's tables as strings. ----

/// Contract table 2.2, written out by wire name.
const ROLE_TABLE: &[(&str, &[&str])] = &[
    (
        "admin",
        &[
            "compute:quotas:read",
            "compute:quotas:manage",
            "compute:providers:manage",
            "compute:providers:read",
            "compute:pools:manage",
            "compute:tenants:manage",
            "compute:instances:manage",
            "compute:grants:lend",
            "compute:usage:read",
            "compute:events:read",
            "compute:iam:manage",
            "compute:fleet:admin",
        ],
    ),
    (
        "provider-admin",
        &["compute:providers:manage", "compute:providers:read"],
    ),
    (
        "member",
        &[
            "compute:instances:manage",
            "compute:quotas:read",
            "compute:usage:read",
            "compute:events:read",
            "compute:providers:read",
        ],
    ),
    (
        "viewer",
        &[
            "compute:quotas:read",
            "compute:usage:read",
            "compute:events:read",
            "compute:providers:read",
        ],
    ),
];

/// Contract table 2.3, written out by wire name.
const SCOPE_TABLE: &[(&str, &str)] = &[
    ("compute:quotas:read", "compute-tenant"),
    ("compute:quotas:manage", "compute-fleet"),
    ("compute:providers:manage", "compute-provider-account"),
    ("compute:providers:read", "compute-tenant"),
    ("compute:pools:manage", "compute-fleet"),
    ("compute:tenants:manage", "compute-fleet"),
    ("compute:instances:manage", "compute-tenant"),
    ("compute:grants:lend", "compute-tenant"),
    ("compute:usage:read", "compute-tenant"),
    ("compute:events:read", "compute-tenant"),
    ("compute:iam:manage", "compute-tenant"),
    ("compute:fleet:admin", "compute-fleet"),
];

fn model_role_has(role: &str, permission: &str) -> bool {
    ROLE_TABLE
        .iter()
        .any(|(r, ps)| *r == role && ps.contains(&permission))
}

fn model_scope(permission: &str) -> &'static str {
    SCOPE_TABLE
        .iter()
        .find(|(p, _)| *p == permission)
        .map(|(_, s)| *s)
        .unwrap_or("unknown")
}

/// Which step of the decision answers first.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    Allowed,
    Tenant,
    Role,
    Scope,
}

fn model(p: &Principal, r: &Req) -> Step {
    let perm = r.permission.as_str();
    let scope = model_scope(perm);
    let caller = p.tenant_id.as_str();
    let tenant_ok = match r.rule {
        TenantRule::Acting => caller == r.tenant && (scope != "compute-fleet" || r.tenant == ROOT),
        TenantRule::RootOnly => caller == r.tenant && r.tenant == ROOT,
        TenantRule::RootCaller => caller == ROOT,
    };
    if !tenant_ok {
        return Step::Tenant;
    }
    if !model_role_has(p.role.as_str(), perm) {
        return Step::Role;
    }
    let scope_ok = match (scope, &p.scope) {
        ("compute-tenant", KeyScope::Tenant) => true,
        ("compute-fleet", KeyScope::Tenant) => caller == ROOT,
        ("compute-provider-account", KeyScope::Tenant) => r.account.is_some(),
        ("compute-provider-account", KeyScope::Account(a)) => r.account == Some(a.as_str()),
        _ => false,
    };
    if scope_ok { Step::Allowed } else { Step::Scope }
}

fn step_of(d: Decision) -> Step {
    match d {
        Decision::Allow => Step::Allowed,
        Decision::Deny(
            DenyReason::NotMemberOfTenant
            | DenyReason::FleetOutsideRoot
            | DenyReason::RootOnly
            | DenyReason::CallerNotInRoot,
        ) => Step::Tenant,
        Decision::Deny(DenyReason::RoleLacksPermission { .. }) => Step::Role,
        Decision::Deny(DenyReason::AccountScopeNotCovered | DenyReason::AccountNotNamed) => {
            Step::Scope
        }
        Decision::Deny(DenyReason::RootOption(o)) => {
            panic!("decide never answers an input option's denial, got {o:?}")
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Default deny: a role that does not hold the permission is never allowed.
    #[test]
    fn role_lacking_permission_is_never_allowed(p in principal(), r in request()) {
        if !permits(p.role, r.permission) {
            prop_assert_ne!(decide(&p, &r.as_request()), Decision::Allow);
        }
    }

    /// An account-scoped key never gets a tenant or fleet permission, whatever
    /// its role and tenant.
    #[test]
    fn account_key_never_gets_tenant_or_fleet(
        t in tenant(), role in role(), a in account(), r in request()
    ) {
        let p = Principal {
            tenant_id: t.to_string(),
            role,
            scope: KeyScope::Account(a.to_string()),
        };
        if r.permission.scope() != ScopeKind::ProviderAccount {
            prop_assert_ne!(decide(&p, &r.as_request()), Decision::Allow);
        }
    }

    /// Nobody outside the root tenant passes a fleet permission, a root-only
    /// method or a root-caller method.
    #[test]
    fn outside_root_no_fleet_or_root_rules(p in principal(), r in request()) {
        let guarded = r.permission.scope() == ScopeKind::Fleet
            || matches!(r.rule, TenantRule::RootOnly | TenantRule::RootCaller);
        if p.tenant_id != ROOT && guarded {
            prop_assert_ne!(decide(&p, &r.as_request()), Decision::Allow);
        }
    }

    /// A principal of tenant A is never allowed on tenantId B != A when
    /// tenantId is the acting tenant.
    #[test]
    fn no_cross_tenant_access(p in principal(), r in request()) {
        if matches!(r.rule, TenantRule::Acting | TenantRule::RootOnly) && p.tenant_id != r.tenant {
            prop_assert_eq!(
                decide(&p, &r.as_request()),
                Decision::Deny(DenyReason::NotMemberOfTenant)
            );
        }
    }

    /// The root admin with a tenant-wide key may do everything in the root
    /// tenant, under every rule, as long as an account is named when the
    /// permission needs one.
    #[test]
    fn root_admin_may_do_everything_in_root(
        permission in permission(), rule in tenant_rule(), a in account()
    ) {
        let p = Principal {
            tenant_id: ROOT.to_string(),
            role: Role::Admin,
            scope: KeyScope::Tenant,
        };
        let r = Req { tenant: ROOT, permission, rule, account: Some(a) };
        prop_assert_eq!(decide(&p, &r.as_request()), Decision::Allow);
        if permission.scope() != ScopeKind::ProviderAccount {
            let r = Req { account: None, ..r };
            prop_assert_eq!(decide(&p, &r.as_request()), Decision::Allow);
        }
    }

    /// `decide` agrees with the table-driven reference model, down to which
    /// step answers first.
    #[test]
    fn agrees_with_reference_model(p in principal(), r in request()) {
        prop_assert_eq!(step_of(decide(&p, &r.as_request())), model(&p, &r));
    }

    /// `permits` agrees with the contract's role table.
    #[test]
    fn permits_agrees_with_role_table(role in role(), permission in permission()) {
        prop_assert_eq!(
            permits(role, permission),
            model_role_has(role.as_str(), permission.as_str())
        );
        prop_assert_eq!(permission.scope().as_str(), model_scope(permission.as_str()));
    }
}

proptest! {
    /// An input option reserved to the root tenant is allowed exactly when
    /// the acting tenant is the root tenant, and its denial names it.
    #[test]
    fn a_root_option_is_allowed_only_in_the_root_tenant(
        tenant in "[a-z]{1,4}",
        root in "[a-z]{1,4}",
        all in any::<bool>(),
    ) {
        let option = if all { RootOption::AllTenants } else { RootOption::Unbilled };
        let d = decide_option(&tenant, &root, option);
        if tenant == root {
            prop_assert_eq!(d, Decision::Allow);
        } else {
            prop_assert_eq!(d, Decision::Deny(DenyReason::RootOption(option)));
        }
    }
}
