//! `bcctl instances`.

use clap::Subcommand;
use serde_json::json;

use super::{Ctx, opt, set};
use crate::exit::Failure;
use crate::output::{Col, text, time};

/// `bcctl instances`.
#[derive(Debug, Subcommand)]
pub enum Instances {
    /// List instances.
    #[command(after_help = "Example:\n  bcctl --tenant acme instances list --state running")]
    List {
        /// Every tenant's (root).
        #[arg(long)]
        all: bool,
        /// In one pool.
        #[arg(long)]
        pool: Option<String>,
        /// On one reservation.
        #[arg(long)]
        reservation: Option<String>,
        /// In one grant.
        #[arg(long)]
        grant: Option<String>,
        /// Of one project.
        #[arg(long)]
        project: Option<String>,
        /// In these states.
        #[arg(long = "state", value_delimiter = ',')]
        states: Vec<String>,
    },
    /// Show one instance.
    #[command(after_help = "Example:\n  bcctl --tenant acme instances get inst_01...")]
    Get {
        /// The instance.
        instance_id: String,
    },
    /// Create an instance.
    #[command(
        after_help = "Example:\n  bcctl --tenant acme instances create --pool pool_01... \
            --flavor n2-standard-4"
    )]
    Create {
        /// The pool.
        #[arg(long)]
        pool: String,
        /// The flavor.
        #[arg(long)]
        flavor: String,
        /// Its name.
        #[arg(long)]
        name: Option<String>,
        /// Its project.
        #[arg(long)]
        project: Option<String>,
        /// `standard` or `none`.
        #[arg(long)]
        billing: Option<String>,
        /// The idempotency key (default: a new UUIDv7).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Start an instance.
    #[command(after_help = "Example:\n  bcctl --tenant acme instances start inst_01...")]
    Start {
        /// The instance.
        instance_id: String,
    },
    /// Stop an instance.
    #[command(after_help = "Example:\n  bcctl --tenant acme instances stop inst_01...")]
    Stop {
        /// The instance.
        instance_id: String,
    },
    /// Delete an instance.
    #[command(after_help = "Example:\n  bcctl --tenant acme instances delete inst_01...")]
    Delete {
        /// The instance.
        instance_id: String,
    },
}

const INSTANCE_COLS: &[Col] = &[
    text("INSTANCE", "instanceId"),
    text("NAME", "name"),
    text("STATE", "state"),
    text("FLAVOR", "flavor"),
    text("POOL", "poolId"),
    text("PLACEMENT", "placement.kind"),
    text("GRANT", "placement.grantId"),
    time("CREATED", "createdAt"),
];

pub(super) async fn instances(ctx: &Ctx, i: Instances) -> Result<(), Failure> {
    use Instances as I;
    let op = |m: &'static str, id: String| (m, json!({ "instanceId": id }));
    let (method, body) = match i {
        I::List {
            all,
            pool,
            reservation,
            grant,
            project,
            states,
        } => {
            let mut body = json!({});
            if all {
                set(&mut body, "all", json!(true));
            }
            opt(&mut body, "poolId", pool);
            opt(&mut body, "reservationId", reservation);
            opt(&mut body, "grantId", grant);
            opt(&mut body, "projectId", project);
            if !states.is_empty() {
                set(&mut body, "states", json!(states));
            }
            let a = ctx.call("instances.list", body).await?;
            ctx.list(&a, INSTANCE_COLS);
            return Ok(());
        }
        I::Get { instance_id } => {
            let a = ctx
                .call("instances.get", json!({ "instanceId": instance_id }))
                .await?;
            ctx.one(&a, "instance");
            return Ok(());
        }
        I::Create {
            pool,
            flavor,
            name,
            project,
            billing,
            idempotency_key,
        } => {
            let mut body = json!({ "poolId": pool, "flavor": flavor,
                "idempotencyKey": ctx.key(idempotency_key) });
            opt(&mut body, "name", name);
            opt(&mut body, "projectId", project);
            opt(&mut body, "billing", billing);
            let a = ctx.call("instances.create", body).await?;
            ctx.id(&a, "instance.instanceId");
            return Ok(());
        }
        I::Start { instance_id } => op("instances.start", instance_id),
        I::Stop { instance_id } => op("instances.stop", instance_id),
        I::Delete { instance_id } => op("instances.delete", instance_id),
    };
    ctx.call_quiet(method, body).await?;
    Ok(())
}
