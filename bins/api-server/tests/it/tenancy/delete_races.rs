//! `tenants.delete` raced against every write that names the tenant
//! (contract 3.6 r2): a grant for it, an instance, a quota, a key, a project,
//! a provider account, an offer. Each write either commits first, and the
//! deletion then undoes it (grants ended or cancelled, instances deleted,
//! keys revoked), or it waits for the deletion and is refused. Nothing is
//! ever live for a deleted tenant.

use diesel::QueryableByName;
use diesel::sql_types::{BigInt, Text};
use diesel_async::RunQueryDsl;
use serde_json::json;

use crate::support::bodies::{GrantBody, KeyBody, QuotaBody};
use crate::support::builders::InstanceBuilder;
use crate::support::calls::{create_project, delete_tenant};
use crate::support::clock::{HOUR, T0};
use crate::support::db::db;
use crate::support::fixtures::{Platform, default_quotas, offer, platform_at_t0};
use crate::support::server::{Answer, Server, rand_suffix};

/// Rounds of the race; each round a fresh tenant.
const ROUNDS: usize = 20;

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Leak {
    #[diesel(sql_type = Text)]
    what: String,
    #[diesel(sql_type = Text)]
    id: String,
}

/// What each racing write answered, by name.
type Answers = Vec<(&'static str, Answer)>;

async fn race_once(s: &Server, p: &Platform, round: usize) -> (String, Answers) {
    let name = format!("t{round}-{}", rand_suffix().to_lowercase());
    let token = s.tenant(&name).await;
    offer(s, &p.pool, &name, default_quotas()).await;
    let grant = GrantBody::on(p, 1)
        .term(T0, T0 + 10 * HOUR)
        .key(&format!("g-{name}"))
        .grantee(&name)
        .json();
    let future_grant = GrantBody::on(p, 1)
        .term(T0 + 20 * HOUR, T0 + 30 * HOUR)
        .key(&format!("f-{name}"))
        .grantee(&name)
        .json();
    let t = name.as_str();
    let tok = token.as_str();
    let (deleted, writes) = tokio::join!(delete_tenant(s, t), async {
        let (g, f, i, q, k, pr, a, o) = tokio::join!(
            s.root("reservationGrants/create", grant.clone()),
            s.root("reservationGrants/create", future_grant.clone()),
            InstanceBuilder::new(p).by(t, tok).key("i1").send(s),
            s.root(
                "quotas/set",
                QuotaBody::new(&p.pool, "gpus", 3).tenant(t).json(),
            ),
            s.call(
                tok,
                "apiKeys/create",
                KeyBody::new(t, "late", "member").json(),
            ),
            create_project(s, tok, t, "late"),
            s.call(
                tok,
                "providerAccounts/create",
                json!({
                    "tenantId": t, "name": "late", "provider": "gce",
                    "config": { "project": "tenant-proj", "credentials": "none" },
                    "idempotencyKey": "late",
                }),
            ),
            s.root(
                "pools/offer",
                json!({ "poolId": p.pool, "offerTenantId": t, "quotas": { "instances": 11 } }),
            ),
        );
        vec![
            ("grant", g),
            ("futureGrant", f),
            ("instance", i),
            ("quota", q),
            ("key", k),
            ("project", pr),
            ("account", a),
            ("offer", o),
        ]
    });
    assert_eq!(deleted.ok()["tenant"]["state"], "deleted");
    (name, writes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_racing_a_tenant_deletion_leave_nothing_live_for_it() {
    let (s, p) = platform_at_t0(100).await;
    let mut rounds = Vec::new();
    let mut outcomes: std::collections::BTreeMap<(&str, u16), usize> = Default::default();
    for round in 0..ROUNDS {
        let (name, answers) = race_once(&s, &p, round).await;
        for (what, a) in &answers {
            // Each write either succeeded before the deletion or is refused
            // the way the contract says: NOT_FOUND for a named tenant,
            // UNAUTHENTICATED for the acting one (its keys stopped working).
            let allowed: &[u16] = match *what {
                "grant" | "futureGrant" | "quota" | "offer" => &[200, 404],
                _ => &[200, 401],
            };
            assert!(
                allowed.contains(&a.status),
                "{what} in round {round} answered {} {}",
                a.status,
                a.body
            );
            *outcomes.entry((what, a.status)).or_default() += 1;
        }
        rounds.push((name, answers));
    }
    eprintln!("race outcomes over {ROUNDS} rounds: {outcomes:?}");

    let mut conn = db(&s).await;
    let leaks: Vec<Leak> = diesel::sql_query(
        "SELECT 'grant' AS what, grant_id AS id FROM grants g \
            JOIN tenants t USING (tenant_id) \
          WHERE t.state = 'deleted' AND g.settled_state IN ('scheduled', 'active') \
         UNION ALL \
         SELECT 'instance', instance_id FROM instances i JOIN tenants t USING (tenant_id) \
          WHERE t.state = 'deleted' AND i.state <> 'deleted' \
         UNION ALL \
         SELECT 'key', key_id FROM api_keys k JOIN tenants t USING (tenant_id) \
          WHERE t.state = 'deleted' AND k.revoked_at IS NULL \
         UNION ALL \
         SELECT 'quota', q.pool_id || '/' || q.resource FROM quotas q \
            JOIN tenants t USING (tenant_id) \
          WHERE t.state = 'deleted' AND q.used <> 0",
    )
    .load(&mut conn)
    .await
    .expect("leaks");
    let leaks: Vec<String> = leaks
        .iter()
        .map(|l| format!("{} {}", l.what, l.id))
        .collect();
    assert!(leaks.is_empty(), "live rows of deleted tenants: {leaks:?}");

    // Nothing bills for them from now on: no grant is committed any more.
    let committed: Vec<Count> = diesel::sql_query(
        "SELECT count(*) AS n FROM grants WHERE settled_state IN ('scheduled', 'active')",
    )
    .load(&mut conn)
    .await
    .expect("count");
    assert_eq!(committed[0].n, 0);
    // A refused write wrote nothing, an accepted one is there: the rows of
    // each tenant are exactly those its racing writes were answered 200 for.
    for (name, answers) in &rounds {
        let ok = |what: &[&str]| -> i64 {
            let n = answers
                .iter()
                .filter(|(w, a)| what.contains(w) && a.status == 200)
                .count();
            i64::try_from(n).expect("count")
        };
        for (what, table, extra) in [
            (&["grant", "futureGrant"][..], "grants", ""),
            (&["instance"], "instances", ""),
            (&["key"], "api_keys", " AND name = 'late'"),
            (&["project"], "projects", ""),
        ] {
            let rows: Vec<Count> = diesel::sql_query(format!(
                "SELECT count(*) AS n FROM {table} WHERE tenant_id = $1{extra}"
            ))
            .bind::<Text, _>(name)
            .load(&mut conn)
            .await
            .expect("rows");
            assert_eq!(rows[0].n, ok(what), "{name}: {table}");
        }
        // Accounts go with the tenant (contract 3.1, r3): one created just
        // before the deletion is deleted by it, none created after remains.
        let accounts: Vec<Count> =
            diesel::sql_query("SELECT count(*) AS n FROM provider_accounts WHERE tenant_id = $1")
                .bind::<Text, _>(name)
                .load(&mut conn)
                .await
                .expect("rows");
        assert_eq!(accounts[0].n, 0, "{name}: provider_accounts");
    }
}
