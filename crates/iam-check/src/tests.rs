//! Unit tests: the tables of contract sections 2.2 and 2.3, and the decision's
//! named cases.

use crate::*;

use Permission as P;

fn key(tenant: &str, role: Role, scope: KeyScope) -> Principal {
    Principal {
        tenant_id: tenant.to_string(),
        role,
        scope,
    }
}

fn req<'a>(tenant: &'a str, permission: Permission, rule: TenantRule) -> AccessRequest<'a> {
    AccessRequest {
        tenant_id: tenant,
        root_tenant: "root",
        permission,
        tenant_rule: rule,
        account_id: None,
    }
}

fn sorted(mut v: Vec<Permission>) -> Vec<Permission> {
    v.sort();
    v
}

#[test]
fn admin_table_is_every_permission() {
    assert_eq!(
        sorted(Role::Admin.permissions().to_vec()),
        sorted(P::ALL.to_vec())
    );
    for p in P::ALL {
        assert!(permits(Role::Admin, p), "{p}");
    }
}

#[test]
fn provider_admin_table() {
    assert_eq!(
        sorted(Role::ProviderAdmin.permissions().to_vec()),
        sorted(vec![P::ProvidersManage, P::ProvidersRead])
    );
}

#[test]
fn member_table() {
    assert_eq!(
        sorted(Role::Member.permissions().to_vec()),
        sorted(vec![
            P::InstancesManage,
            P::QuotasRead,
            P::UsageRead,
            P::EventsRead,
            P::ProvidersRead
        ])
    );
}

#[test]
fn viewer_table() {
    assert_eq!(
        sorted(Role::Viewer.permissions().to_vec()),
        sorted(vec![
            P::QuotasRead,
            P::UsageRead,
            P::EventsRead,
            P::ProvidersRead
        ])
    );
    for p in [
        P::InstancesManage,
        P::ProvidersManage,
        P::IamManage,
        P::QuotasManage,
    ] {
        assert!(!permits(Role::Viewer, p), "{p}");
    }
}

#[test]
fn permission_sets_have_no_duplicates() {
    for role in Role::ALL {
        let mut v = role.permissions().to_vec();
        v.sort();
        v.dedup();
        assert_eq!(v.len(), role.permissions().len(), "{role}");
    }
}

#[test]
fn permission_names_and_scopes_match_table_2_3() {
    let table = [
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
    assert_eq!(table.len(), P::ALL.len());
    for (p, (name, scope)) in P::ALL.into_iter().zip(table) {
        assert_eq!(p.as_str(), name);
        assert_eq!(P::parse(name), Some(p));
        assert_eq!(name.parse::<Permission>(), Ok(p));
        assert_eq!(p.scope().as_str(), scope);
        assert_eq!(ScopeKind::parse(scope), Some(p.scope()));
    }
    assert_eq!(P::parse("compute:quotas:READ"), None);
    assert!("compute:nope".parse::<Permission>().is_err());
}

#[test]
fn role_names_round_trip() {
    let names = ["admin", "provider-admin", "member", "viewer"];
    for (role, name) in Role::ALL.into_iter().zip(names) {
        assert_eq!(role.as_str(), name);
        assert_eq!(Role::parse(name), Some(role));
        assert_eq!(role.to_string(), name);
    }
    assert_eq!(Role::parse("Admin"), None);
    assert_eq!(Role::parse(""), None);
    let err = "owner".parse::<Role>().expect_err("unknown role");
    assert_eq!(err.to_string(), "unknown role \"owner\"");
}

#[test]
fn member_may_manage_instances_in_own_tenant_only() {
    let member = key("acme", Role::Member, KeyScope::Tenant);
    let own = req("acme", P::InstancesManage, TenantRule::Acting);
    assert_eq!(decide(&member, &own), Decision::Allow);
    let other = req("beta", P::InstancesManage, TenantRule::Acting);
    assert_eq!(
        decide(&member, &other),
        Decision::Deny(DenyReason::NotMemberOfTenant)
    );
}

#[test]
fn viewer_cannot_manage_instances() {
    let viewer = key("acme", Role::Viewer, KeyScope::Tenant);
    assert_eq!(
        decide(
            &viewer,
            &req("acme", P::InstancesManage, TenantRule::Acting)
        ),
        Decision::Deny(DenyReason::RoleLacksPermission {
            role: Role::Viewer,
            permission: P::InstancesManage
        })
    );
    assert!(decide(&viewer, &req("acme", P::QuotasRead, TenantRule::Acting)).is_allowed());
}

#[test]
fn fleet_permission_only_in_root() {
    let root_admin = key("root", Role::Admin, KeyScope::Tenant);
    assert!(
        decide(
            &root_admin,
            &req("root", P::PoolsManage, TenantRule::Acting)
        )
        .is_allowed()
    );
    let acme_admin = key("acme", Role::Admin, KeyScope::Tenant);
    assert_eq!(
        decide(
            &acme_admin,
            &req("acme", P::PoolsManage, TenantRule::Acting)
        ),
        Decision::Deny(DenyReason::FleetOutsideRoot)
    );
}

#[test]
fn tenant_precheck_comes_before_role() {
    // A viewer of another tenant asking for a fleet permission: the pre-check
    // answers first.
    let viewer = key("acme", Role::Viewer, KeyScope::Tenant);
    assert_eq!(
        decide(&viewer, &req("root", P::TenantsManage, TenantRule::Acting)),
        Decision::Deny(DenyReason::NotMemberOfTenant)
    );
}

#[test]
fn root_only_methods() {
    // reservationGrants.create: compute:providers:manage, root only.
    let acme_admin = key("acme", Role::Admin, KeyScope::Tenant);
    let mut create = req("acme", P::ProvidersManage, TenantRule::RootOnly);
    create.account_id = Some("acct_1");
    assert_eq!(
        decide(&acme_admin, &create),
        Decision::Deny(DenyReason::RootOnly)
    );

    let root_pa = key(
        "root",
        Role::ProviderAdmin,
        KeyScope::Account("acct_1".into()),
    );
    create.tenant_id = "root";
    assert_eq!(decide(&root_pa, &create), Decision::Allow);
    create.account_id = Some("acct_2");
    assert_eq!(
        decide(&root_pa, &create),
        Decision::Deny(DenyReason::AccountScopeNotCovered)
    );
}

#[test]
fn quotas_set_targets_another_tenant() {
    let root_admin = key("root", Role::Admin, KeyScope::Tenant);
    let set = req("acme", P::QuotasManage, TenantRule::RootCaller);
    assert_eq!(decide(&root_admin, &set), Decision::Allow);
    // Also on the root tenant itself.
    let set_root = req("root", P::QuotasManage, TenantRule::RootCaller);
    assert_eq!(decide(&root_admin, &set_root), Decision::Allow);

    // The target tenant's own admin may not set its quota.
    let acme_admin = key("acme", Role::Admin, KeyScope::Tenant);
    assert_eq!(
        decide(&acme_admin, &set),
        Decision::Deny(DenyReason::CallerNotInRoot)
    );

    // A root member lacks the permission.
    let root_member = key("root", Role::Member, KeyScope::Tenant);
    assert!(matches!(
        decide(&root_member, &set),
        Decision::Deny(DenyReason::RoleLacksPermission { .. })
    ));

    // A root admin key scoped to an account gets nothing at fleet scope.
    let root_acct = key("root", Role::Admin, KeyScope::Account("acct_1".into()));
    assert_eq!(
        decide(&root_acct, &set),
        Decision::Deny(DenyReason::AccountScopeNotCovered)
    );
}

#[test]
fn account_permission_needs_an_account() {
    let admin = key("acme", Role::Admin, KeyScope::Tenant);
    let mut r = req("acme", P::ProvidersManage, TenantRule::Acting);
    assert_eq!(
        decide(&admin, &r),
        Decision::Deny(DenyReason::AccountNotNamed)
    );
    r.account_id = Some("any-account");
    assert_eq!(decide(&admin, &r), Decision::Allow);
}

#[test]
fn account_key_gets_nothing_at_tenant_scope() {
    let k = key("acme", Role::Admin, KeyScope::Account("acct_1".into()));
    let mut r = req("acme", P::ProvidersRead, TenantRule::Acting);
    r.account_id = Some("acct_1");
    assert_eq!(
        decide(&k, &r),
        Decision::Deny(DenyReason::AccountScopeNotCovered)
    );
}

#[test]
fn decision_helpers_and_reasons_display() {
    assert_eq!(Decision::Allow.into_result(), Ok(()));
    let deny = Decision::Deny(DenyReason::RoleLacksPermission {
        role: Role::Viewer,
        permission: P::IamManage,
    });
    assert!(!deny.is_allowed());
    let reason = deny.into_result().expect_err("denied");
    assert_eq!(
        reason.to_string(),
        "role viewer does not hold compute:iam:manage"
    );
    for r in [
        DenyReason::NotMemberOfTenant,
        DenyReason::FleetOutsideRoot,
        DenyReason::RootOnly,
        DenyReason::CallerNotInRoot,
        DenyReason::AccountScopeNotCovered,
        DenyReason::AccountNotNamed,
    ] {
        assert!(!r.to_string().is_empty());
    }
}

#[test]
fn wire_names_round_trip() {
    for role in Role::ALL {
        assert_eq!(role.as_str().parse::<Role>(), Ok(role));
    }
    for p in P::ALL {
        assert_eq!(p.as_str().parse::<Permission>(), Ok(p));
    }
    for s in ScopeKind::ALL {
        assert_eq!(ScopeKind::parse(s.as_str()), Some(s));
    }
}
