//! `vms::claim_steps` (contract 3.12 r4): the steps a worker may send are
//! taken round-robin across tenants within the account's allowance, so a
//! tenant's one step is among the first an account sends even behind
//! another tenant's backlog; an account never seen limited before gets a
//! minute's budget, not every due step; steps that only look at their
//! operation are never held back.

use std::collections::BTreeSet;

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel_async::RunQueryDsl;
use storage::ops::vms::{self, StepClaim};

use crate::world::{NOW, World, ok};

/// The claiming worker's id.
const OWNER: &str = "worker-a";

/// A world with `acme_steps` create steps of `acme`'s instances, all due,
/// then one of `globex`'s (its instance moved to `globex` by hand, the pool
/// is offered to `acme` alone); the globex step's id.
async fn backlog(w: &mut World, acme_steps: usize) -> i64 {
    for k in 0..=acme_steps {
        let row = ok(w.instance(NOW + i64::try_from(k).unwrap_or(0)).await);
        if k == acme_steps {
            diesel::sql_query("UPDATE instances SET tenant_id = $1 WHERE instance_id = $2")
                .bind::<Text, _>(w.globex.as_str())
                .bind::<Text, _>(&row.instance_id)
                .execute(&mut w.conn)
                .await
                .unwrap_or_else(|e| panic!("move to globex: {e}"));
        }
        add_step(w, &row.instance_id, None).await;
    }
    last_step(w).await
}

/// Records a due create step of `instance`, with `operation` if given.
async fn add_step(w: &mut World, instance: &str, operation: Option<&str>) {
    diesel::sql_query(
        "INSERT INTO vm_steps (instance_id, kind, request_id, zone, operation, requested_at, \
         created_wall, deadline_wall, due_wall) \
         VALUES ($1, 'create', gen_random_uuid()::text, 'us-central1-a', $2, $3, \
         1, 9000000000000, 1 + (SELECT count(*) FROM vm_steps))",
    )
    .bind::<Text, _>(instance)
    .bind::<Nullable<Text>, _>(operation)
    .bind::<BigInt, _>(NOW)
    .execute(&mut w.conn)
    .await
    .unwrap_or_else(|e| panic!("add a step: {e}"));
}

#[derive(diesel::QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    step_id: i64,
}

async fn last_step(w: &mut World) -> i64 {
    let last: Id = diesel::sql_query("SELECT max(step_id) AS step_id FROM vm_steps")
        .get_result(&mut w.conn)
        .await
        .unwrap_or_else(|e| panic!("last step: {e}"));
    last.step_id
}

fn ids(claims: &[StepClaim]) -> BTreeSet<i64> {
    claims.iter().map(|c| c.step_id).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_accounts_first_sends_take_each_tenants_turn_not_the_backlogs_order() {
    let mut w = World::new(10).await;
    let globex = backlog(&mut w, 9).await;
    // No allowance is known for the account yet: a minute's budget of 3.
    let first = ok(vms::claim_steps(&mut w.conn, OWNER, 100, 60_000, &[], 3).await);
    assert_eq!(
        first.len(),
        3,
        "a fresh account sends a minute's budget at most"
    );
    assert!(
        ids(&first).contains(&globex),
        "globex's only step is among the account's first three sends: {:?}",
        ids(&first)
    );
    // A paused account gives nothing, whatever its default.
    let allowances = [(w.account.as_str().to_owned(), 0)];
    let paused = ok(vms::claim_steps(&mut w.conn, OWNER, 100, 60_000, &allowances, 3).await);
    assert!(
        paused.is_empty(),
        "claimed while paused: {:?}",
        ids(&paused)
    );
    // An allowance named for the account wins over the default.
    let allowances = [(w.account.as_str().to_owned(), 2)];
    let two = ok(vms::claim_steps(&mut w.conn, OWNER, 100, 60_000, &allowances, 3).await);
    assert_eq!(two.len(), 2);
    assert!(
        ids(&two).is_disjoint(&ids(&first)),
        "a leased step is not claimed twice"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_step_that_only_looks_at_its_operation_is_never_held_back() {
    let mut w = World::new(10).await;
    backlog(&mut w, 3).await;
    let row = ok(w.instance(NOW + 100).await);
    add_step(&mut w, &row.instance_id, Some("operation-1")).await;
    let polling = last_step(&mut w).await;
    let allowances = [(w.account.as_str().to_owned(), 0)];
    let claims = ok(vms::claim_steps(&mut w.conn, OWNER, 100, 60_000, &allowances, 3).await);
    assert_eq!(
        ids(&claims),
        BTreeSet::from([polling]),
        "a paused account still watches its operations"
    );
}
