//! The claims of webhook deliveries (contract 3.13 r4): round-robin across
//! tenants whatever the webhooks' ages, at most a tenant's concurrency of
//! its webhooks held at once by every claim together, one claim per
//! webhook; and an attempt's start, which reads the webhook again.

use storage::crypto::Keyring;
use storage::ids::{TenantId, WebhookId};
use storage::ops::deliveries::{self, Batch, ClaimRules, Start, Stopped};
use storage::ops::webhooks::{self, NewWebhook, WebhookChange, WebhookState};

use crate::world::{Key, NOW, World, ok};

const SECRETS_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn keyring() -> Keyring {
    Keyring::from_config(Some(SECRETS_KEY), None).unwrap_or_else(|e| panic!("{e}"))
}

/// A webhook of `tenant`, with `events` `webhook.test` events due to it.
async fn webhook_with_events(w: &mut World, tenant: &TenantId, events: usize) -> WebhookId {
    let key = Key::new();
    let new = NewWebhook {
        tenant_id: tenant,
        url: "https://hooks.example.com/x",
        types: &[],
        description: None,
    };
    let keyed = key.of(tenant.as_str(), "webhooks.create");
    let created = ok(webhooks::create(&mut w.conn, &keyring(), new, keyed, NOW).await);
    let id = WebhookId::parse(&created.value.webhook.webhook_id).unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..events {
        ok(webhooks::test(&mut w.conn, tenant, &id, NOW).await);
    }
    id
}

fn rules(webhooks: i64) -> ClaimRules {
    ClaimRules {
        webhooks,
        per_webhook: 20,
        per_tenant: 4,
        lease_ms: 60_000,
    }
}

fn owners(batches: &[Batch]) -> Vec<String> {
    batches.iter().map(|b| b.tenant_id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn claims_go_round_robin_across_tenants_and_cap_each_tenant() {
    let mut w = World::new(4).await;
    let (root, acme, globex) = (w.root.clone(), w.acme.clone(), w.globex.clone());
    // acme's ten webhooks are the oldest; the others' come after them.
    let mut noisy = Vec::new();
    for _ in 0..10 {
        noisy.push(webhook_with_events(&mut w, &acme, 30).await);
    }
    let calm = webhook_with_events(&mut w, &globex, 1).await;
    let own = webhook_with_events(&mut w, &root, 1).await;
    assert_eq!(ok(deliveries::record_new(&mut w.conn, NOW).await), 302);
    // Three places: one webhook of each tenant, however old acme's are.
    let first = ok(deliveries::claim(&mut w.conn, NOW, rules(3)).await);
    let mut tenants = owners(&first);
    tenants.sort();
    assert_eq!(tenants, ["acme", "globex", "root"]);
    let ids: Vec<&str> = first.iter().map(|b| b.webhook_id.as_str()).collect();
    assert!(ids.contains(&calm.as_str()) && ids.contains(&own.as_str()));
    let acme_first = first
        .iter()
        .find(|b| b.tenant_id == "acme")
        .unwrap_or_else(|| panic!("an acme batch"));
    assert_eq!(acme_first.deliveries.len(), 20, "a batch per webhook");
    let seqs: Vec<i64> = acme_first.deliveries.iter().map(|d| d.seq).collect();
    assert!(seqs.is_sorted(), "log order: {seqs:?}");
    // Many places: acme gets three more webhooks (four held), no more; a
    // second replica's claim finds nothing while they are held.
    let second = ok(deliveries::claim(&mut w.conn, NOW, rules(100)).await);
    assert_eq!(owners(&second), ["acme", "acme", "acme"]);
    assert!(ok(deliveries::claim(&mut w.conn, NOW, rules(100)).await).is_empty());
    // One of acme's batches put back: one more of its webhooks, never one
    // already held.
    ok(deliveries::release(&mut w.conn, acme_first).await);
    let third = ok(deliveries::claim(&mut w.conn, NOW, rules(100)).await);
    assert_eq!(owners(&third), ["acme"]);
    let held: Vec<&str> = second.iter().map(|b| b.webhook_id.as_str()).collect();
    assert!(!held.contains(&third[0].webhook_id.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attempt_reads_its_webhook_again() {
    let mut w = World::new(4).await;
    let acme = w.acme.clone();
    let id = webhook_with_events(&mut w, &acme, 3).await;
    ok(deliveries::record_new(&mut w.conn, NOW).await);
    let batch = ok(deliveries::claim(&mut w.conn, NOW, rules(1)).await).remove(0);
    let keys = keyring();
    let [a, b, c] = &batch.deliveries[..] else {
        panic!("three deliveries: {batch:?}");
    };
    // A new url takes the next attempt.
    let change = WebhookChange {
        url: Some("https://elsewhere.example.com/y"),
        ..WebhookChange::default()
    };
    ok(webhooks::update(&mut w.conn, &acme, &id, change, NOW).await);
    match ok(deliveries::start_attempt(&mut w.conn, &keys, a, 60_000, NOW).await) {
        Start::Send(s) => {
            assert_eq!(s.url, "https://elsewhere.example.com/y");
            assert_eq!(s.number, 1);
            assert_eq!(s.secrets.len(), 1);
        }
        Start::Stop(why) => panic!("stopped: {why:?}"),
    }
    // Disabled: nothing more, and its open deliveries ended.
    let off = WebhookChange {
        state: Some(WebhookState::Disabled),
        ..WebhookChange::default()
    };
    ok(webhooks::update(&mut w.conn, &acme, &id, off, NOW).await);
    assert!(matches!(
        ok(deliveries::start_attempt(&mut w.conn, &keys, b, 60_000, NOW).await),
        Start::Stop(Stopped::Disabled)
    ));
    // Deleted: nothing more either.
    ok(webhooks::delete(&mut w.conn, &acme, &id, NOW).await);
    assert!(matches!(
        ok(deliveries::start_attempt(&mut w.conn, &keys, c, 60_000, NOW).await),
        Start::Stop(Stopped::Deleted)
    ));
}
