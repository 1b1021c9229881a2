//! tenants, projects and apiKeys (contract 3.1, 3.2 and 2.1).

use serde_json::{Value, json};

use crate::support::bodies::{KeyBody, QuotaBody};
use crate::support::calls::{
    create_project, delete_tenant, get_quotas, list_accounts, list_keys, list_projects, revoke_key,
};
use crate::support::fixtures::{account_in, create_pool, is_typeid, offer, root_account};
use crate::support::server::{ROOT, Server};

#[tokio::test(flavor = "multi_thread")]
async fn tenants_create_returns_a_working_first_admin_key() {
    let s = Server::start().await;
    let now = s.now().await;
    let v = s
        .root(
            "tenants/create",
            json!({ "name": "acme", "displayName": "Acme Corp." }),
        )
        .await
        .ok();
    assert_eq!(
        v["tenant"],
        json!({
            "tenantId": "acme",
            "displayName": "Acme Corp.",
            "state": "active",
            "createdAt": now,
        })
    );
    let key = &v["adminKey"]["apiKey"];
    assert!(is_typeid(&key["keyId"], "key"), "{key}");
    assert_eq!(key["tenantId"], "acme");
    assert_eq!(key["name"], "admin");
    assert_eq!(key["role"], "admin");
    assert_eq!(key["createdAt"], now);
    assert!(key.get("accountId").is_none());
    let secret = v["adminKey"]["secret"].as_str().expect("secret");
    assert!(
        secret.starts_with("bck_") && secret.len() >= 4 + 43,
        "{secret}"
    );

    // The key works in its tenant, as an admin...
    let keys = list_keys(&s, secret, "acme").await.ok();
    assert_eq!(keys["items"].as_array().expect("items").len(), 1);
    assert_eq!(keys["items"][0]["keyId"], key["keyId"]);
    create_project(&s, secret, "acme", "web").await.ok();
    // ...but not as root, and not in another tenant.
    s.call(secret, "tenants/list", json!({ "tenantId": "acme" }))
        .await
        .err(403, "ACCESS_DENIED");
    list_keys(&s, secret, ROOT).await.err(403, "ACCESS_DENIED");

    // displayName defaults to the name.
    let v = s
        .root("tenants/create", json!({ "name": "beta" }))
        .await
        .ok();
    assert_eq!(v["tenant"]["displayName"], "beta");
}

#[tokio::test(flavor = "multi_thread")]
async fn tenant_names_are_never_reused() {
    let s = Server::start().await;
    s.tenant("acme").await;
    let a = s.root("tenants/create", json!({ "name": "acme" })).await;
    a.err(409, "CONFLICT");
    // The root tenant's name is taken from the first migration.
    s.root("tenants/create", json!({ "name": ROOT }))
        .await
        .err(409, "CONFLICT");
    // Even once deleted.
    delete_tenant(&s, "acme").await.ok();
    s.root(
        "tenants/create",
        json!({ "name": "acme", "displayName": "Acme again" }),
    )
    .await
    .err(409, "CONFLICT");
    let list = s.root("tenants/list", json!({})).await.ok();
    let acme: Vec<&Value> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|t| t["tenantId"] == "acme")
        .collect();
    assert_eq!(acme.len(), 1);
    assert_eq!(acme[0]["state"], "deleted");
    // Names follow the tenant id pattern.
    for bad in ["a b", "", "x/y", "ü"] {
        let a = s.root("tenants/create", json!({ "name": bad })).await;
        assert_eq!(a.err(400, "INVALID_INPUT")["field"], "name", "{bad}");
    }
    let a = s
        .root("tenants/create", json!({ "name": "a".repeat(129) }))
        .await;
    assert_eq!(a.err(400, "INVALID_INPUT")["reason"], "length");
    let a = s
        .root(
            "tenants/create",
            json!({ "name": "ok", "displayName": "no/slash" }),
        )
        .await;
    assert_eq!(a.err(400, "INVALID_INPUT")["field"], "displayName");
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_list_shows_every_tenant_newest_first() {
    let s = Server::start().await;
    let t0 = s.now().await;
    s.set_clock(t0 + 1_000).await;
    s.tenant("zeta").await;
    s.set_clock(t0 + 2_000).await;
    s.tenant("alpha").await;
    s.set_clock(t0 + 3_000).await;
    s.tenant("mid").await;
    delete_tenant(&s, "alpha").await.ok();
    let list = s.root("tenants/list", json!({})).await.ok();
    let items = list["items"].as_array().expect("items");
    let ids: Vec<&str> = items
        .iter()
        .map(|t| t["tenantId"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["mid", "alpha", "zeta", ROOT]);
    assert_eq!(items[1]["state"], "deleted");
    assert_eq!(items[1]["deletedAt"], t0 + 3_000);
    assert_eq!(items[0]["state"], "active");
    assert_eq!(items[0]["createdAt"], t0 + 3_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_delete_revokes_keys_at_once_and_is_idempotent() {
    let s = Server::start().await;
    let admin = s.tenant("acme").await;
    let viewer = s.key(&admin, "acme", "viewer", None).await;
    let root_account = root_account(&s).await;
    let pool = create_pool(&s, &root_account).await;
    offer(&s, &pool, "acme", json!({ "instances": 2 })).await;
    get_quotas(&s, &viewer, "acme", None).await.ok();

    let t0 = s.now().await;
    let v = delete_tenant(&s, "acme").await.ok();
    assert_eq!(v["tenant"]["tenantId"], "acme");
    assert_eq!(v["tenant"]["state"], "deleted");
    assert_eq!(v["tenant"]["deletedAt"], t0);
    // Every key of the tenant stops working now.
    for key in [&admin, &viewer] {
        get_quotas(&s, key, "acme", None)
            .await
            .err(401, "UNAUTHENTICATED");
    }
    // Deleting again returns it unchanged, even later.
    s.set_clock(t0 + 60_000).await;
    let again = delete_tenant(&s, "acme").await.ok();
    assert_eq!(again, v);
    // A deleted tenant is gone for the methods that name it.
    s.root(
        "quotas/set",
        QuotaBody::new(&pool, "vcpus", 1).tenant("acme").json(),
    )
    .await
    .err(404, "NOT_FOUND");
    s.root(
        "pools/offer",
        json!({ "poolId": pool, "offerTenantId": "acme", "quotas": {} }),
    )
    .await
    .err(404, "NOT_FOUND");
    // Other tenants are untouched.
    let list = s.root("tenants/list", json!({})).await.ok();
    assert!(
        list["items"]
            .as_array()
            .expect("items")
            .iter()
            .any(|t| t["tenantId"] == ROOT && t["state"] == "active")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_delete_refuses_root_and_unknown_tenants() {
    let s = Server::start().await;
    let d = delete_tenant(&s, ROOT).await;
    let d = d.err(400, "INVALID_INPUT");
    assert_eq!(d["field"], "targetTenantId");
    // Root is still there and its key still works.
    let list = s.root("tenants/list", json!({})).await.ok();
    assert_eq!(list["items"][0]["state"], "active");
    delete_tenant(&s, "nobody").await.err(404, "NOT_FOUND");
    let d = delete_tenant(&s, "bad name").await;
    assert_eq!(d.err(400, "INVALID_INPUT")["field"], "targetTenantId");
    s.root("tenants/delete", json!({}))
        .await
        .err(400, "INVALID_INPUT");
}

#[tokio::test(flavor = "multi_thread")]
async fn projects_are_created_and_listed_per_tenant() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let beta = s.tenant("beta").await;
    let member = s.key(&acme, "acme", "member", None).await;
    let t0 = s.now().await;
    let p1 = create_project(&s, &member, "acme", "web frontend")
        .await
        .ok()["project"]
        .clone();
    assert!(is_typeid(&p1["projectId"], "prj"), "{p1}");
    assert_eq!(p1["tenantId"], "acme");
    assert_eq!(p1["name"], "web frontend");
    assert_eq!(p1["createdAt"], t0);
    s.set_clock(t0 + 10).await;
    let p2 = create_project(&s, &acme, "acme", "batch").await.ok()["project"].clone();
    let list = list_projects(&s, &member, "acme").await.ok();
    assert_eq!(list["items"], json!([p2, p1]));
    // Another tenant sees none of them.
    let other = list_projects(&s, &beta, "beta").await.ok();
    assert_eq!(other["items"], json!([]));
    // Validation of the name.
    for (name, reason) in [
        (json!("a/b"), "pattern"),
        (json!(""), "length"),
        (json!("x".repeat(129)), "length"),
        (json!(5), "type"),
    ] {
        let body = json!({ "tenantId": "acme", "name": name });
        let a = s.call(&acme, "projects/create", body).await;
        let d = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (d["field"].as_str(), d["reason"].as_str()),
            (Some("name"), Some(reason))
        );
    }
    // A viewer may not create projects.
    let viewer = s.key(&acme, "acme", "viewer", None).await;
    create_project(&s, &viewer, "acme", "x")
        .await
        .err(403, "ACCESS_DENIED");
}

#[tokio::test(flavor = "multi_thread")]
async fn api_keys_list_never_returns_secrets_and_revoke_works_at_once() {
    let s = Server::start().await;
    let admin = s.tenant("acme").await;
    // A later instant for the second key, so that "newest first" is decided.
    let t0 = s.now().await;
    s.set_clock(t0 + 1_000).await;
    let v = s
        .call(
            &admin,
            "apiKeys/create",
            KeyBody::new("acme", "ci deployer", "member").json(),
        )
        .await
        .ok();
    let secret = v["secret"].as_str().expect("secret").to_owned();
    assert!(secret.starts_with("bck_"));
    let key = v["apiKey"].clone();
    assert!(is_typeid(&key["keyId"], "key"));
    assert_eq!(key["tenantId"], "acme");
    assert_eq!(key["name"], "ci deployer");
    assert_eq!(key["role"], "member");
    assert!(key["createdAt"].is_i64());
    assert!(key.get("secret").is_none());

    // The key works.
    create_project(&s, &secret, "acme", "p").await.ok();

    let list = list_keys(&s, &admin, "acme").await.ok();
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["keyId"], key["keyId"], "newest first");
    let text = list.to_string();
    assert!(!text.contains(&secret), "a secret leaked: {text}");
    assert!(!text.contains(&admin), "a secret leaked: {text}");
    for item in items {
        let fields: Vec<&String> = item.as_object().expect("object").keys().collect();
        for f in &fields {
            assert!(
                [
                    "keyId",
                    "tenantId",
                    "name",
                    "role",
                    "accountId",
                    "createdAt",
                    "revokedAt"
                ]
                .contains(&f.as_str()),
                "unexpected key field {f}: {item}"
            );
        }
    }

    // Revoke: returned with revokedAt, refused from the next request.
    let now = s.root("clock/get", json!({})).await.ok()["now"].clone();
    let r = s
        .call(
            &admin,
            "apiKeys/revoke",
            json!({ "tenantId": "acme", "keyId": key["keyId"] }),
        )
        .await
        .ok();
    assert_eq!(r["apiKey"]["keyId"], key["keyId"]);
    assert_eq!(r["apiKey"]["revokedAt"], now);
    list_projects(&s, &secret, "acme")
        .await
        .err(401, "UNAUTHENTICATED");
    // Revoking again returns it unchanged.
    let again = s
        .call(
            &admin,
            "apiKeys/revoke",
            json!({ "tenantId": "acme", "keyId": key["keyId"] }),
        )
        .await
        .ok();
    assert_eq!(again, r);
    let list = list_keys(&s, &admin, "acme").await.ok();
    assert_eq!(list["items"][0]["revokedAt"], now);

    // Unknown keys and keys of another tenant are NOT_FOUND.
    revoke_key(&s, &admin, "acme", "key_00000000000000000000000000")
        .await
        .err(404, "NOT_FOUND");
    let root_keys = s.root("apiKeys/list", json!({})).await.ok();
    let root_key = root_keys["items"][0]["keyId"].as_str().expect("keyId");
    revoke_key(&s, &admin, "acme", root_key)
        .await
        .err(404, "NOT_FOUND");
    s.root("tenants/list", json!({})).await.ok();
    // Roles are one of four.
    let a = s
        .call(
            &admin,
            "apiKeys/create",
            KeyBody::new("acme", "x", "owner").json(),
        )
        .await;
    assert_eq!(a.err(400, "INVALID_INPUT")["field"], "role");
    let a = revoke_key(&s, &admin, "acme", "prj_00000000000000000000000000").await;
    assert_eq!(a.err(400, "INVALID_INPUT")["field"], "keyId");
    // A viewer can neither create nor list keys.
    let viewer = s.key(&admin, "acme", "viewer", None).await;
    list_keys(&s, &viewer, "acme")
        .await
        .err(403, "ACCESS_DENIED");
    s.call(
        &viewer,
        "apiKeys/create",
        KeyBody::new("acme", "x", "admin").json(),
    )
    .await
    .err(403, "ACCESS_DENIED");
}

#[tokio::test(flavor = "multi_thread")]
async fn account_scoped_keys_name_an_account_of_their_own_tenant() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let beta = s.tenant("beta").await;
    let acme_account = account_in(&s, &acme, "acme").await;
    let beta_account = account_in(&s, &beta, "beta").await;
    let v = s
        .call(
            &acme,
            "apiKeys/create",
            KeyBody::new("acme", "ops", "provider-admin")
                .account(&acme_account)
                .json(),
        )
        .await
        .ok();
    assert_eq!(v["apiKey"]["accountId"], acme_account);
    assert_eq!(v["apiKey"]["role"], "provider-admin");
    let list = list_keys(&s, &acme, "acme").await.ok();
    let listed = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|k| k["keyId"] == v["apiKey"]["keyId"])
        .expect("the scoped key is listed");
    assert_eq!(listed["accountId"], acme_account);
    // The scoped key authenticates but grants nothing at tenant scope.
    let scoped = v["secret"].as_str().expect("secret");
    list_accounts(&s, scoped, "acme")
        .await
        .err(403, "ACCESS_DENIED");

    // Another tenant's account, or none at all, is NOT_FOUND; nothing is created.
    for account in [beta_account.as_str(), "pacct_00000000000000000000000000"] {
        s.call(
            &acme,
            "apiKeys/create",
            KeyBody::new("acme", "x", "admin").account(account).json(),
        )
        .await
        .err(404, "NOT_FOUND");
    }
    let after = list_keys(&s, &acme, "acme").await.ok();
    assert_eq!(after, list);
    let a = s
        .call(
            &acme,
            "apiKeys/create",
            KeyBody::new("acme", "x", "admin").account("acct-1").json(),
        )
        .await;
    assert_eq!(a.err(400, "INVALID_INPUT")["field"], "accountId");
}
