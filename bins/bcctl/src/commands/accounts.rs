//! `bcctl accounts`: provider accounts and their reservations.

use clap::Subcommand;
use serde_json::json;

use super::{Ctx, opt};
use crate::exit::Failure;
use crate::output::{Col, text};

/// `bcctl accounts`.
#[derive(Debug, Subcommand)]
pub enum Accounts {
    /// List provider accounts.
    #[command(after_help = "Example:\n  bcctl accounts list")]
    List,
    /// Show one account.
    #[command(after_help = "Example:\n  bcctl accounts get pacct_01...")]
    Get {
        /// The account.
        account_id: String,
    },
    /// Create a gce account.
    #[command(
        after_help = "Example:\n  bcctl accounts create --name prod --project platform-prod \
            --credentials adc"
    )]
    Create {
        /// Its name.
        #[arg(long)]
        name: String,
        /// The Google Cloud project.
        #[arg(long)]
        project: String,
        /// The provider's endpoint (default: Google's).
        #[arg(long)]
        provider_endpoint: Option<String>,
        /// The credentials reference (`none`, `adc`, `secret:NAME`, ...).
        #[arg(long, default_value = "adc")]
        credentials: String,
        /// The idempotency key (default: a new UUIDv7).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Scan the account's reservations now.
    #[command(after_help = "Example:\n  bcctl accounts scan pacct_01...")]
    Scan {
        /// The account.
        account_id: String,
    },
    /// List the account's reservations with their slot accounts.
    #[command(after_help = "Example:\n  bcctl accounts reservations pacct_01... -o json")]
    Reservations {
        /// The account.
        account_id: String,
    },
    /// Bind a reservation to a pool (root).
    #[command(after_help = "Example:\n  bcctl accounts bind pacct_01... \
            projects/p/zones/z/reservations/r --pool pool_01...")]
    Bind {
        /// The account.
        account_id: String,
        /// The reservation.
        reservation_id: String,
        /// The pool.
        #[arg(long)]
        pool: String,
    },
    /// Unbind a reservation from its pool.
    #[command(after_help = "Example:\n  bcctl accounts unbind pacct_01... \
            projects/p/zones/z/reservations/r")]
    Unbind {
        /// The account.
        account_id: String,
        /// The reservation.
        reservation_id: String,
    },
    /// Delete the account.
    #[command(after_help = "Example:\n  bcctl accounts delete pacct_01...")]
    Delete {
        /// The account.
        account_id: String,
    },
}

const RESERVATION_COLS: &[Col] = &[
    text("RESERVATION", "reservationId"),
    text("ZONE", "zone"),
    text("FLAVOR", "flavor"),
    text("STATUS", "status"),
    text("TOTAL", "total"),
    text("GRANTED", "grantedSlots"),
    text("HELD", "heldInGrants"),
    text("ORDINARY", "ordinaryInUse"),
    text("FREE", "ordinaryFree"),
    text("POOL", "poolId"),
];

pub(super) async fn accounts(ctx: &Ctx, a: Accounts) -> Result<(), Failure> {
    use Accounts as A;
    match a {
        A::List => {
            let ans = ctx.call("providerAccounts.list", json!({})).await?;
            ctx.list(
                &ans,
                &[
                    text("ACCOUNT", "accountId"),
                    text("NAME", "name"),
                    text("PROVIDER", "provider"),
                    text("PROJECT", "config.project"),
                    text("ENDPOINT", "config.endpoint"),
                    text("CREDENTIALS", "config.credentials"),
                ],
            );
        }
        A::Get { account_id } => {
            let ans = ctx
                .call("providerAccounts.get", json!({ "accountId": account_id }))
                .await?;
            ctx.one(&ans, "account");
        }
        A::Create {
            name,
            project,
            provider_endpoint,
            credentials,
            idempotency_key,
        } => {
            let mut config = json!({ "project": project, "credentials": credentials });
            opt(&mut config, "endpoint", provider_endpoint);
            let body = json!({
                "name": name,
                "provider": "gce",
                "config": config,
                "idempotencyKey": ctx.key(idempotency_key),
            });
            let ans = ctx.call("providerAccounts.create", body).await?;
            ctx.id(&ans, "account.accountId");
        }
        A::Scan { account_id } => {
            let ans = ctx
                .call("providerAccounts.scan", json!({ "accountId": account_id }))
                .await?;
            ctx.list(&ans, RESERVATION_COLS);
        }
        A::Reservations { account_id } => {
            let ans = ctx
                .call(
                    "providerAccounts.listReservations",
                    json!({ "accountId": account_id }),
                )
                .await?;
            ctx.list(&ans, RESERVATION_COLS);
        }
        A::Bind {
            account_id,
            reservation_id,
            pool,
        } => {
            let body = json!({ "accountId": account_id, "reservationId": reservation_id,
                "poolId": pool });
            ctx.call_quiet("providerAccounts.bindReservation", body)
                .await?;
        }
        A::Unbind {
            account_id,
            reservation_id,
        } => {
            let body = json!({ "accountId": account_id, "reservationId": reservation_id });
            ctx.call_quiet("providerAccounts.unbindReservation", body)
                .await?;
        }
        A::Delete { account_id } => {
            ctx.call_quiet(
                "providerAccounts.delete",
                json!({ "accountId": account_id }),
            )
            .await?;
        }
    }
    Ok(())
}
