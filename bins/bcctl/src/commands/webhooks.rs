//! `bcctl webhooks`: a tenant's webhooks (contract 3.13). A signing secret
//! is printed once, when made (`create`, `rotate-secret`), with a warning on
//! standard error that it is shown only now; a replayed create (the same
//! idempotency key) answers without it, and bcctl says where it went.

use clap::Subcommand;
use serde_json::{Value, json};

use super::{Ctx, opt, set};
use crate::exit::Failure;
use crate::output::{Col, text, time};

/// `bcctl webhooks`.
#[derive(Debug, Subcommand)]
pub enum Webhooks {
    /// Create a webhook; prints its signing secret once.
    #[command(after_help = "Example:\n  bcctl --tenant acme webhooks create \
        --url https://hooks.acme.example/bc --type instance.created --type instance.deleted")]
    Create {
        /// The endpoint events are POSTed to.
        #[arg(long)]
        url: String,
        /// An event type to send (repeat it; default: every type).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
        /// What it is for.
        #[arg(long)]
        description: Option<String>,
        /// Reuse this idempotency key (a retry of an earlier create).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// List webhooks.
    #[command(after_help = "Example:\n  bcctl --tenant acme webhooks list")]
    List,
    /// A webhook's delivery attempts, oldest first.
    #[command(after_help = "Example:\n  bcctl --tenant acme webhooks deliveries whk_01...")]
    Deliveries {
        /// The webhook.
        webhook_id: String,
        /// Start after this cursor (a previous page's nextCursor).
        #[arg(long)]
        after: Option<String>,
        /// At most this many attempts (1 to 1000).
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Publish a `webhook.test` event only this webhook receives; prints
    /// its event id.
    #[command(after_help = "Example:\n  bcctl --tenant acme webhooks test whk_01...")]
    Test {
        /// The webhook.
        webhook_id: String,
    },
    /// Delete a webhook (it sends nothing more).
    #[command(after_help = "Example:\n  bcctl --tenant acme webhooks delete whk_01...")]
    Delete {
        /// The webhook.
        webhook_id: String,
    },
    /// Make a new signing secret and print it once; the old one also signs
    /// for 24 hours.
    #[command(after_help = "Example:\n  bcctl --tenant acme webhooks rotate-secret whk_01...")]
    RotateSecret {
        /// The webhook.
        webhook_id: String,
    },
    /// Enable a webhook: it sends the events committed from now on (not
    /// those committed while it was disabled).
    #[command(after_help = "Example:\n  bcctl --tenant acme webhooks enable whk_01...")]
    Enable {
        /// The webhook.
        webhook_id: String,
    },
    /// Disable a webhook: it sends nothing until enabled again.
    #[command(after_help = "Example:\n  bcctl --tenant acme webhooks disable whk_01...")]
    Disable {
        /// The webhook.
        webhook_id: String,
    },
}

/// The columns of `webhooks list`.
const LIST_COLS: &[Col] = &[
    text("WEBHOOK", "webhookId"),
    text("URL", "url"),
    text("TYPES", "types"),
    text("STATE", "state"),
    time("CREATED", "createdAt"),
];

/// The columns of `webhooks deliveries`.
const DELIVERY_COLS: &[Col] = &[
    text("DELIVERY", "deliveryId"),
    text("EVENT", "eventId"),
    text("TYPE", "type"),
    text("ATTEMPT", "attempt"),
    time("AT", "at"),
    text("OUTCOME", "outcome"),
    text("STATUS", "status"),
    text("DURATION_MS", "durationMs"),
    time("NEXT_ATTEMPT", "nextAttemptAt"),
];

/// The body of `webhooks.create` (no `types`: every type).
fn create_body(url: String, types: Vec<String>, description: Option<String>, key: String) -> Value {
    let mut body = json!({ "url": url, "idempotencyKey": key });
    if !types.is_empty() {
        set(&mut body, "types", json!(types));
    }
    opt(&mut body, "description", description);
    body
}

/// The body of `webhooks.deliveries`.
fn deliveries_body(webhook_id: String, after: Option<String>, limit: Option<u32>) -> Value {
    let mut body = json!({ "webhookId": webhook_id });
    opt(&mut body, "after", after);
    opt(&mut body, "limit", limit);
    body
}

/// The warning printed on standard error beside a new secret.
fn secret_warning(answer: &Value) -> String {
    let id = answer
        .pointer("/webhook/webhookId")
        .and_then(Value::as_str)
        .unwrap_or("the webhook");
    format!(
        "bcctl: {id}'s signing secret is shown only now and cannot be read again: store it \
         where the receiver verifies `bc-signature` (rotate-secret makes a new one)"
    )
}

/// What bcctl says when a create was a replay: its answer has no secret.
fn replay_notice(answer: &Value) -> String {
    let id = answer
        .pointer("/webhook/webhookId")
        .and_then(Value::as_str)
        .unwrap_or("the webhook");
    format!(
        "bcctl: {id} was made by an earlier call with this idempotency key; its signing \
         secret was shown then and only then (rotate-secret makes a new one)"
    )
}

/// Prints a new secret once: the secret alone on standard output (the whole
/// answer with `-o json|yaml`), the warning on standard error. An answer
/// without a secret (a replayed create) prints the webhook's id and says
/// why there is no secret.
fn show_secret(ctx: &Ctx, answer: &Value) {
    if answer.get("secret").and_then(Value::as_str).is_none() {
        eprintln!("{}", replay_notice(answer));
        ctx.id(answer, "webhook.webhookId");
        return;
    }
    eprintln!("{}", secret_warning(answer));
    ctx.id(answer, "secret");
}

pub(super) async fn webhooks(ctx: &Ctx, w: Webhooks) -> Result<(), Failure> {
    match w {
        Webhooks::Create {
            url,
            types,
            description,
            idempotency_key,
        } => {
            let key = ctx.key(idempotency_key);
            let a = ctx
                .call("webhooks.create", create_body(url, types, description, key))
                .await?;
            show_secret(ctx, &a);
        }
        Webhooks::List => {
            let a = ctx.call("webhooks.list", json!({})).await?;
            ctx.list(&a, LIST_COLS);
        }
        Webhooks::Deliveries {
            webhook_id,
            after,
            limit,
        } => {
            let a = ctx
                .call(
                    "webhooks.deliveries",
                    deliveries_body(webhook_id, after, limit),
                )
                .await?;
            ctx.list(&a, DELIVERY_COLS);
        }
        Webhooks::Test { webhook_id } => {
            let a = ctx
                .call("webhooks.test", json!({ "webhookId": webhook_id }))
                .await?;
            ctx.id(&a, "eventId");
        }
        Webhooks::Delete { webhook_id } => {
            ctx.call_quiet("webhooks.delete", json!({ "webhookId": webhook_id }))
                .await?;
        }
        Webhooks::RotateSecret { webhook_id } => {
            let a = ctx
                .call("webhooks.rotateSecret", json!({ "webhookId": webhook_id }))
                .await?;
            show_secret(ctx, &a);
        }
        Webhooks::Enable { webhook_id } => {
            ctx.call_quiet("webhooks.update", state_body(webhook_id, "enabled"))
                .await?;
        }
        Webhooks::Disable { webhook_id } => {
            ctx.call_quiet("webhooks.update", state_body(webhook_id, "disabled"))
                .await?;
        }
    }
    Ok(())
}

/// The body of `webhooks.update` that sets the state only.
fn state_body(webhook_id: String, state: &str) -> Value {
    json!({ "webhookId": webhook_id, "state": state })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};
    use crate::output::{Format, Printer};

    fn parse(args: &[&str]) -> Webhooks {
        let cli = Cli::try_parse_from([&["bcctl", "webhooks"], args].concat()).unwrap();
        match cli.command {
            Command::Webhooks(w) => w,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn create_sends_the_repeated_types_and_a_key() {
        let Webhooks::Create {
            url,
            types,
            description,
            idempotency_key,
        } = parse(&[
            "create",
            "--url",
            "https://h.example/bc",
            "--type",
            "instance.created",
            "--type",
            "webhook.test",
            "--description",
            "ops",
        ])
        else {
            panic!("not a create");
        };
        assert_eq!(idempotency_key, None);
        let body = create_body(url, types, description, "k1".into());
        assert_eq!(
            body,
            json!({ "url": "https://h.example/bc", "idempotencyKey": "k1", "description": "ops",
                "types": ["instance.created", "webhook.test"] })
        );
        // Without --type: every type (no `types` sent).
        let Webhooks::Create { url, types, .. } = parse(&["create", "--url", "https://h/"]) else {
            panic!("not a create");
        };
        assert_eq!(
            create_body(url, types, None, "k2".into()),
            json!({ "url": "https://h/", "idempotencyKey": "k2" })
        );
    }

    #[test]
    fn enable_disable_and_deliveries_bodies() {
        let Webhooks::Disable { webhook_id } = parse(&["disable", "whk_1"]) else {
            panic!("not a disable");
        };
        assert_eq!(
            state_body(webhook_id, "disabled"),
            json!({ "webhookId": "whk_1", "state": "disabled" })
        );
        assert!(matches!(
            parse(&["enable", "whk_1"]),
            Webhooks::Enable { .. }
        ));
        assert!(matches!(
            parse(&["rotate-secret", "whk_1"]),
            Webhooks::RotateSecret { .. }
        ));
        let Webhooks::Deliveries {
            webhook_id,
            after,
            limit,
        } = parse(&["deliveries", "whk_1", "--limit", "50"])
        else {
            panic!("not deliveries");
        };
        assert_eq!(
            deliveries_body(webhook_id, after, limit),
            json!({ "webhookId": "whk_1", "limit": 50 })
        );
    }

    #[test]
    fn a_replay_notice_points_to_rotate_secret() {
        let answer = json!({ "webhook": { "webhookId": "whk_1" } });
        let n = replay_notice(&answer);
        assert!(n.contains("whk_1") && n.contains("rotate-secret"), "{n}");
    }

    #[test]
    fn the_secret_warning_names_the_webhook_and_never_the_secret() {
        let answer = json!({ "webhook": { "webhookId": "whk_1" }, "secret": "whsec_abc" });
        let w = secret_warning(&answer);
        assert!(w.contains("whk_1") && w.contains("shown only now"), "{w}");
        assert!(!w.contains("whsec_abc"), "{w}");
    }

    #[test]
    fn tables_show_webhooks_and_attempts() {
        let p = Printer {
            format: Format::Table,
            local: false,
        };
        let hooks = [
            json!({ "webhookId": "whk_1", "url": "https://h/", "state": "enabled",
            "types": ["instance.created", "instance.deleted"], "createdAt": 1_893_456_000_000i64 }),
        ];
        let t = p.table(&hooks, LIST_COLS);
        let row = t.lines().nth(1).unwrap();
        for want in [
            "whk_1",
            "https://h/",
            "instance.created,instance.deleted",
            "enabled",
            "2030-01-01T00:00:00Z",
        ] {
            assert!(row.contains(want), "{t}");
        }
        let attempts = [
            json!({ "deliveryId": "dlv_1", "eventId": "evt_1", "type": "webhook.test",
                "attempt": 2, "at": 1_893_456_000_000i64, "outcome": "retrying", "status": 503,
                "durationMs": 12, "nextAttemptAt": 1_893_456_120_000i64 }),
            json!({ "deliveryId": "dlv_2", "eventId": "evt_2", "type": "webhook.test",
                "attempt": 1, "at": 1_893_456_000_000i64, "outcome": "failed",
                "durationMs": 10_000 }),
        ];
        let t = p.table(&attempts, DELIVERY_COLS);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].starts_with("DELIVERY"), "{t}");
        for want in [
            "dlv_1",
            "evt_1",
            "retrying",
            "503",
            "12",
            "2030-01-01T00:02:00Z",
        ] {
            assert!(lines[1].contains(want), "{t}");
        }
        // No status, no next attempt: empty cells.
        assert!(
            lines[2].contains("failed") && lines[2].contains("10000"),
            "{t}"
        );
        assert!(!lines[2].contains("00:02:00"), "{t}");
    }
}
