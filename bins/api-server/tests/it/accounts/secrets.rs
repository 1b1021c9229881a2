//! The secret store (contract 3.9): every rule of `secrets.put/list/delete`,
//! what is stored (never the value), rows moved between tenants, key
//! rotation, and that a tenant cannot reach another tenant's secret.

use diesel::QueryableByName;
use diesel::sql_types::{Bytea, Text};
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::accounts::google_auth::{
    SECRETS_KEY, SECRETS_KEY_2, account_body_on, account_on, server_with_key, service_account,
};
use crate::support::calls::{
    delete_secret, delete_tenant, list_accounts, list_secrets, put_secret, scan_as,
};
use crate::support::db::db;
use crate::support::gce::Gce;
use crate::support::server::{Options, Server};
use storage::test_db::TestDatabase;

const TOKEN: &str = "ya29.a-token-value-for-tests";

#[derive(QueryableByName)]
struct Stored {
    #[diesel(sql_type = Text)]
    kind: String,
    #[diesel(sql_type = Text)]
    fingerprint: String,
    #[diesel(sql_type = Text)]
    key_id: String,
    #[diesel(sql_type = Bytea)]
    nonce: Vec<u8>,
    #[diesel(sql_type = Bytea)]
    ciphertext: Vec<u8>,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    created_at: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    updated_at: i64,
}

async fn stored(s: &Server, tenant: &str, name: &str) -> Stored {
    stored_in(s.db.url(), tenant, name).await
}

async fn stored_in(url: &str, tenant: &str, name: &str) -> Stored {
    let mut rows = stored_rows(url, tenant, name).await;
    assert_eq!(rows.len(), 1, "{tenant}/{name}: one row");
    rows.remove(0)
}

/// Every stored row of `tenant`'s secret `name`, read directly.
async fn stored_rows(url: &str, tenant: &str, name: &str) -> Vec<Stored> {
    let mut conn = storage::db::establish(url).await.expect("connect");
    diesel::sql_query(
        "SELECT kind, fingerprint, key_id, nonce, ciphertext, created_at, updated_at \
         FROM secrets WHERE tenant_id = $1 AND name = $2",
    )
    .bind::<Text, _>(tenant)
    .bind::<Text, _>(name)
    .load(&mut conn)
    .await
    .expect("secret rows")
}

fn put_body(tenant: &str, name: &str, value: &str) -> serde_json::Value {
    json!({ "tenantId": tenant, "name": name, "value": value })
}

#[tokio::test(flavor = "multi_thread")]
async fn put_list_replace_and_delete_never_show_the_value() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    let v = put_secret(&s, &acme, "acme", "gce-token", TOKEN).await.ok();
    let secret = &v["secret"];
    assert_eq!(secret["name"], "gce-token");
    assert_eq!(secret["tenantId"], "acme");
    assert_eq!(secret["kind"], "token");
    let fp = secret["fingerprint"]
        .as_str()
        .expect("fingerprint")
        .to_owned();
    assert_eq!(fp.len(), 16);
    assert_eq!(secret["createdAt"], secret["updatedAt"]);
    assert!(!v.to_string().contains(TOKEN));

    // What is stored is not the value.
    let row = stored(&s, "acme", "gce-token").await;
    assert_eq!(
        (row.kind.as_str(), row.fingerprint.as_str()),
        ("token", fp.as_str())
    );
    assert_eq!(row.key_id.len(), 8);
    assert_eq!(row.nonce.len(), 12);
    assert!(
        !row.ciphertext
            .windows(TOKEN.len())
            .any(|w| w == TOKEN.as_bytes())
    );
    assert_eq!(
        row.ciphertext.len(),
        TOKEN.len() + 16,
        "the value and its tag"
    );

    // Replacing keeps createdAt, moves updatedAt, changes the fingerprint.
    s.set_clock(crate::support::clock::T0 + 1000).await;
    let v = put_secret(&s, &acme, "acme", "gce-token", "another-token")
        .await
        .ok();
    assert_eq!(v["secret"]["createdAt"], secret["createdAt"]);
    assert_ne!(v["secret"]["updatedAt"], secret["updatedAt"]);
    assert_ne!(v["secret"]["fingerprint"], fp.as_str());
    assert_ne!(stored(&s, "acme", "gce-token").await.nonce, row.nonce);

    let list = list_secrets(&s, &acme, "acme").await.ok();
    assert_eq!(list["items"].as_array().expect("items").len(), 1);
    assert!(!list.to_string().contains("another-token"));
    let events = s.events(&acme, "acme").await;
    assert!(!json!(events).to_string().contains("another-token"));

    let del = delete_secret(&s, &acme, "acme", "gce-token").await.ok();
    assert_eq!(del, json!({ "name": "gce-token", "deleted": true }));
    let again = delete_secret(&s, &acme, "acme", "gce-token").await;
    again.err(404, "NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_values_and_names_are_refused_without_echoing_them() {
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    let cases = [
        ("gce", "two words", "token-invalid"),
        (
            "gce",
            "{\"type\": \"service_account\", \"client_email\": \"x@y\"}",
            "service-account-invalid",
        ),
        (
            "gce",
            "{\"type\": \"authorized_user\"}",
            "service-account-invalid",
        ),
        ("gce", "{not json", "service-account-invalid"),
    ];
    for (name, value, reason) in cases {
        let a = s
            .call(&acme, "secrets/put", put_body("acme", name, value))
            .await;
        let details = a.err(400, "INVALID_INPUT");
        assert_eq!(
            (&details["field"], &details["reason"]),
            (&json!("value"), &json!(reason))
        );
        assert!(!a.body.to_string().contains(value), "{}", a.body);
    }
    let long = "x".repeat(16 * 1024 + 1);
    let a = s
        .call(&acme, "secrets/put", put_body("acme", "gce", &long))
        .await;
    assert_eq!(a.err(400, "INVALID_INPUT")["reason"], "length");
    for name in ["Gce", "1gce", "gce_key", &"a".repeat(64)] {
        let a = s
            .call(&acme, "secrets/put", put_body("acme", name, TOKEN))
            .await;
        assert_eq!(a.err(400, "INVALID_INPUT")["field"], "name", "{name}");
    }
    let list = list_secrets(&s, &acme, "acme").await.ok();
    assert_eq!(list["items"], json!([]), "nothing was stored");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_secrets_key_put_is_invalid_state() {
    let s = Server::start().await;
    let acme = s.tenant("acme").await;
    let a = s
        .call(&acme, "secrets/put", put_body("acme", "gce", TOKEN))
        .await;
    assert_eq!(a.err(409, "INVALID_STATE")["reason"], "no-secrets-key");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_referenced_secret_cannot_be_deleted_and_other_tenants_cannot_use_it() {
    let s = server_with_key().await;
    let gce = Gce::start().await;
    let acme = s.tenant("acme").await;
    let evil = s.tenant("evil").await;
    put_secret(&s, &acme, "acme", "gce-token", TOKEN).await.ok();
    let account = account_on(&s, &acme, "acme", &gce, "secret:gce-token").await;

    let a = delete_secret(&s, &acme, "acme", "gce-token").await;
    assert_eq!(a.err(409, "INVALID_STATE")["accountIds"], json!([account]));

    // Another tenant naming it gets the same answer as for a name it does
    // not have: its own tenant has no such secret.
    let body = account_body_on("evil", &gce, "secret:gce-token");
    let a = s.call(&evil, "providerAccounts/create", body).await;
    let details = a.err(400, "INVALID_INPUT");
    assert_eq!(details["field"], "config.credentials");
    assert_eq!(details["reason"], "credential-not-allowed");
    // Nor can it list or delete it.
    let list = list_secrets(&s, &evil, "evil").await.ok();
    assert_eq!(list["items"], json!([]));
    let a = delete_secret(&s, &evil, "evil", "gce-token").await;
    a.err(404, "NOT_FOUND");
    let a = list_secrets(&s, &evil, "acme").await;
    a.err(403, "ACCESS_DENIED");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ciphertext_copied_to_another_tenants_row_does_not_decrypt() {
    let s = server_with_key().await;
    let gce = Gce::start_with(fake_gce::FakeGceConfig {
        require_auth: true,
        ..Default::default()
    })
    .await;
    gce.put("res-a", 2, 0, "READY").await;
    let acme = s.tenant("acme").await;
    let evil = s.tenant("evil").await;
    let key = service_account(&gce, "reader@acme.iam.gserviceaccount.com").await;
    put_secret(&s, &acme, "acme", "gce-key", &key).await.ok();
    // evil makes a secret of its own, then its row is overwritten with
    // acme's sealed key (as someone with database access might).
    put_secret(&s, &evil, "evil", "gce-key", TOKEN).await.ok();
    let account = account_on(&s, &evil, "evil", &gce, "secret:gce-key").await;
    let mut conn = db(&s).await;
    diesel::sql_query(
        "UPDATE secrets e SET kind = a.kind, fingerprint = a.fingerprint, key_id = a.key_id, \
         nonce = a.nonce, ciphertext = a.ciphertext FROM secrets a \
         WHERE e.tenant_id = 'evil' AND a.tenant_id = 'acme' AND e.name = a.name",
    )
    .execute(&mut conn)
    .await
    .expect("copy the row");
    let a = scan_as(&s, &evil, "evil", &account).await;
    assert_eq!(a.err(503, "UNAVAILABLE")["reason"], "provider-error");
    assert_eq!(gce.tokens().await, (0, 0), "acme's key was never used");
    assert_eq!(gce.listings().await, 0);
}

/// A server on `real` (whatever database the harness gives it) with the
/// secret store's keys `env`.
async fn server_on(real: &TestDatabase, env: &[(&str, &str)]) -> Server {
    let mut all = vec![("DATABASE_URL".to_owned(), real.url().to_owned())];
    all.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    Server::start_on(
        TestDatabase::new().await,
        Options {
            env: all,
            ..Options::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn rotation_reads_old_keys_and_writes_under_the_current_one() {
    let real = TestDatabase::new().await;
    let gce = Gce::start().await;
    gce.put("res-a", 2, 0, "READY").await;
    let s = server_on(&real, &[("BC_SECRETS_KEY", SECRETS_KEY)]).await;
    let acme = s.tenant("acme").await;
    put_secret(&s, &acme, "acme", "gce-token", TOKEN).await.ok();
    put_secret(&s, &acme, "acme", "old-token", TOKEN).await.ok();
    let account = account_on(&s, &acme, "acme", &gce, "secret:gce-token").await;
    let old_id = stored_in(real.url(), "acme", "gce-token").await.key_id;
    s.stop().await;

    // The new key is current, the old one still read.
    let rotated = server_on(
        &real,
        &[
            ("BC_SECRETS_KEY", SECRETS_KEY_2),
            ("BC_SECRETS_OLD_KEYS", SECRETS_KEY),
        ],
    )
    .await;
    assert_eq!(
        scan_as(&rotated, &acme, "acme", &account).await.ok()["items"][0]["total"],
        2
    );
    put_secret(&rotated, &acme, "acme", "gce-token", TOKEN)
        .await
        .ok();
    let new_id = stored_in(real.url(), "acme", "gce-token").await.key_id;
    assert_ne!(new_id, old_id);
    assert_eq!(
        stored_in(real.url(), "acme", "old-token").await.key_id,
        old_id
    );
    rotated.stop().await;

    // With the new key only, the rewritten secret still works and one left
    // under the old key cannot be read: its scan is a provider error that
    // names no value.
    let s = server_on(&real, &[("BC_SECRETS_KEY", SECRETS_KEY_2)]).await;
    assert_eq!(
        scan_as(&s, &acme, "acme", &account).await.ok()["items"][0]["total"],
        2
    );
    let stale = account_on(&s, &acme, "acme", &gce, "secret:old-token").await;
    let a = scan_as(&s, &acme, "acme", &stale).await;
    assert_eq!(a.err(503, "UNAVAILABLE")["reason"], "provider-error");
    assert!(!a.body.to_string().contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_delete_racing_an_account_create_never_leaves_a_dangling_reference() {
    let s = server_with_key().await;
    let gce = Gce::start().await;
    let acme = s.tenant("acme").await;
    for round in 0..8 {
        let name = format!("race-{round}");
        put_secret(&s, &acme, "acme", &name, TOKEN).await.ok();
        let body = account_body_on("acme", &gce, &format!("secret:{name}"));
        let delete = json!({ "tenantId": "acme", "name": name });
        let (created, deleted) = tokio::join!(
            s.call(&acme, "providerAccounts/create", body),
            s.call(&acme, "secrets/delete", delete),
        );
        let list = list_secrets(&s, &acme, "acme").await.ok();
        let exists = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .any(|i| i["name"] == name.as_str());
        match (created.status, deleted.status) {
            // The create won: the delete saw the account and refused.
            (200, 409) => assert!(exists, "round {round}"),
            // The delete won: the create found no secret.
            (400, 200) => {
                assert!(!exists, "round {round}");
                assert_eq!(
                    created.body["error"]["details"]["reason"],
                    "credential-not-allowed"
                );
            }
            other => panic!("round {round}: {other:?} {created:?} {deleted:?}"),
        }
    }
    // No account references a secret that is gone.
    let accounts = list_accounts(&s, &acme, "acme").await.ok();
    let names: Vec<String> = list_secrets(&s, &acme, "acme").await.ok()["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| format!("secret:{}", i["name"].as_str().expect("name")))
        .collect();
    for a in accounts["items"].as_array().expect("items") {
        let reference = a["config"]["credentials"].as_str().expect("credentials");
        assert!(names.iter().any(|n| n == reference), "{reference} dangles");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_tenants_secrets_are_deleted_with_it() {
    let s = server_with_key().await;
    let gce = Gce::start().await;
    let acme = s.tenant("acme").await;
    put_secret(&s, &acme, "acme", "gce-token", TOKEN).await.ok();
    put_secret(&s, &acme, "acme", "spare", TOKEN).await.ok();
    account_on(&s, &acme, "acme", &gce, "secret:gce-token").await;
    delete_tenant(&s, "acme").await.ok();
    let mut conn = db(&s).await;
    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let left: Count =
        diesel::sql_query("SELECT count(*) AS n FROM secrets WHERE tenant_id = 'acme'")
            .get_result(&mut conn)
            .await
            .expect("count");
    assert_eq!(left.n, 0);
}

/// Many `secrets.put` of one name at once, each with its own value: for
/// each of four names, a wave that creates the row, then a wave that
/// replaces it. Every answer is 200 (or `UNAVAILABLE`, a retryable contract
/// error), exactly one row per name remains, it decrypts to one of the
/// values of the last wave and its fingerprint is that value's, its
/// `createdAt` is the first wave's instant and `updatedAt` the last's.
#[tokio::test(flavor = "multi_thread")]
async fn concurrent_puts_of_one_name_leave_one_row_holding_one_of_the_values() {
    const PUTS: usize = 32;
    const NAMES: [&str; 4] = ["gce-a", "gce-b", "gce-c", "gce-d"];
    let s = server_with_key().await;
    let acme = s.tenant("acme").await;
    let keyring =
        storage::crypto::Keyring::from_config(Some(SECRETS_KEY), None).expect("the test key");
    let mut now = crate::support::clock::T0;
    for name in NAMES {
        let first_at = now;
        for wave in 0..2 {
            s.set_clock(now).await;
            let values: Vec<String> = (0..PUTS)
                .map(|i| format!("ya29.{name}-wave-{wave}-value-{i}"))
                .collect();
            let answers = futures::future::join_all(
                values
                    .iter()
                    .map(|v| s.call(&acme, "secrets/put", put_body("acme", name, v))),
            )
            .await;
            let mut fingerprints = Vec::new();
            for a in &answers {
                match a.status {
                    200 => {
                        let secret = &a.body["secret"];
                        assert_eq!(secret["createdAt"], first_at, "{name} {wave}: {}", a.body);
                        assert_eq!(secret["updatedAt"], now, "{name} {wave}: {}", a.body);
                        fingerprints.push(secret["fingerprint"].as_str().expect("fp").to_owned());
                    }
                    _ => assert_eq!(a.code(), "UNAVAILABLE", "{name} {wave}: {}", a.body),
                }
            }
            assert!(!fingerprints.is_empty(), "{name} {wave}: no put succeeded");

            let rows = stored_rows(s.db.url(), "acme", name).await;
            assert_eq!(rows.len(), 1, "{name} {wave}: one row per name");
            let row = &rows[0];
            assert_eq!((row.created_at, row.updated_at), (first_at, now));
            let sealed = storage::crypto::Sealed {
                key_id: row.key_id.clone(),
                nonce: row.nonce.clone(),
                ciphertext: row.ciphertext.clone(),
            };
            let value = keyring
                .open("acme", name, &sealed)
                .expect("the row decrypts");
            assert!(
                values.contains(&value),
                "{name} {wave}: a value of this wave"
            );
            assert_eq!(row.fingerprint, providers::auth::fingerprint(&value));
            assert!(fingerprints.contains(&row.fingerprint), "{name} {wave}");
            now += 60_000;
        }
    }
    let listed = list_secrets(&s, &acme, "acme").await.ok();
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(NAMES.len()),
        "{listed}"
    );
}
