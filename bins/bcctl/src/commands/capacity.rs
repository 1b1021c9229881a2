//! `bcctl pools` and `quotas` (the capacity methods).

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::{Ctx, opt, set};
use crate::exit::{Failure, usage};
use crate::output::{Col, text};

/// `bcctl pools`.
#[derive(Debug, Subcommand)]
pub enum Pools {
    /// List pools.
    #[command(after_help = "Example:\n  bcctl pools list")]
    List,
    /// Show one pool.
    #[command(after_help = "Example:\n  bcctl pools get pool_01...")]
    Get {
        /// The pool.
        pool_id: String,
    },
    /// Create a pool (root).
    #[command(
        after_help = "Example:\n  bcctl pools create --name us-central1 --region us-central1 \
            --account pacct_01... --flavor n2-standard-4:4:16 --quota \
            instances=100"
    )]
    Create {
        /// Its name.
        #[arg(long)]
        name: String,
        /// Its region.
        #[arg(long)]
        region: String,
        /// The provider account it is built on.
        #[arg(long)]
        account: String,
        /// A flavor as name:vcpus:memoryGib or name:vcpus:memoryGib:gpus (repeat for more).
        #[arg(long = "flavor", required = true)]
        flavors: Vec<String>,
        /// A quota as resource=max (repeat for more).
        #[arg(long = "quota")]
        quotas: Vec<String>,
        /// Let the pool's grants lend idle slots to interruptible instances,
        /// taken back with this notice (seconds, 0 to 3600; a managed pool
        /// only: `bcctl call pools.create` with `vm` makes one).
        #[arg(long, value_name = "SECONDS")]
        lending_notice: Option<u32>,
        /// The idempotency key (default: a new UUIDv7).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Offer a pool to a tenant with its quotas (root).
    #[command(
        after_help = "Example:\n  bcctl pools offer pool_01... --to acme --quota \
            instances=10 --quota vcpus=40"
    )]
    Offer {
        /// The pool.
        pool_id: String,
        /// The tenant.
        #[arg(long = "to")]
        offer_to: String,
        /// A quota as resource=max (repeat for more).
        #[arg(long = "quota", required = true)]
        quotas: Vec<String>,
    },
}

/// `bcctl quotas`.
#[derive(Debug, Subcommand)]
pub enum Quotas {
    /// Show the acting tenant's quotas.
    #[command(after_help = "Example:\n  bcctl --tenant acme quotas get")]
    Get {
        /// One pool only.
        #[arg(long)]
        pool: Option<String>,
    },
    /// Set one quota of the acting tenant.
    #[command(
        after_help = "Example:\n  bcctl --tenant acme quotas set --pool pool_01... \
            --resource instances --max 20"
    )]
    Set {
        /// The pool.
        #[arg(long)]
        pool: String,
        /// The resource (`instances`, `vcpus`, ...).
        #[arg(long)]
        resource: String,
        /// The new maximum.
        #[arg(long)]
        max: i64,
    },
}

/// `resource=max` pairs as a quotas object.
fn quotas(pairs: &[String]) -> Result<Value, Failure> {
    let mut q = Map::new();
    for pair in pairs {
        let (k, v) = pair
            .split_once('=')
            .ok_or_else(|| usage(format!("quota {pair:?} is not resource=max")))?;
        let n: i64 = v
            .parse()
            .map_err(|_| usage(format!("quota {pair:?}: {v:?} is not a number")))?;
        q.insert(k.to_owned(), json!(n));
    }
    Ok(Value::Object(q))
}

/// `name:vcpus:memoryGib[:gpus]` as a flavor object.
fn flavor(spec: &str) -> Result<Value, Failure> {
    let parts: Vec<&str> = spec.split(':').collect();
    let num = |s: &str| {
        s.parse::<i64>()
            .map_err(|_| usage(format!("flavor {spec:?}: {s:?} is not a number")))
    };
    match parts.as_slice() {
        [name, vcpus, mem] => Ok(json!({ "name": name, "vcpus": num(vcpus)?,
            "memoryGib": num(mem)?, "gpus": 0 })),
        [name, vcpus, mem, gpus] => Ok(json!({ "name": name, "vcpus": num(vcpus)?,
            "memoryGib": num(mem)?, "gpus": num(gpus)? })),
        _ => Err(usage(format!(
            "flavor {spec:?} is not name:vcpus:memoryGib[:gpus]"
        ))),
    }
}

pub(super) async fn pools(ctx: &Ctx, p: Pools) -> Result<(), Failure> {
    match p {
        Pools::List => {
            let a = ctx.call("pools.list", json!({})).await?;
            ctx.list(
                &a,
                &[
                    text("POOL", "poolId"),
                    text("NAME", "name"),
                    text("REGION", "region"),
                    text("ACCOUNT", "accountId"),
                    text("FLAVORS", "flavors"),
                ],
            );
        }
        Pools::Get { pool_id } => {
            let a = ctx.call("pools.get", json!({ "poolId": pool_id })).await?;
            ctx.one(&a, "pool");
        }
        Pools::Create {
            name,
            region,
            account,
            flavors,
            quotas: q,
            lending_notice,
            idempotency_key,
        } => {
            let flavors: Vec<Value> = flavors
                .iter()
                .map(|f| flavor(f))
                .collect::<Result<_, _>>()?;
            let mut body = json!({
                "name": name, "region": region, "provider": "gce", "accountId": account,
                "flavors": flavors, "idempotencyKey": ctx.key(idempotency_key),
            });
            if !q.is_empty() {
                set(&mut body, "quotas", quotas(&q)?);
            }
            if let Some(n) = lending_notice {
                set(&mut body, "lending", json!({ "noticeSeconds": n }));
            }
            let a = ctx.call("pools.create", body).await?;
            ctx.id(&a, "pool.poolId");
        }
        Pools::Offer {
            pool_id,
            offer_to,
            quotas: q,
        } => {
            let body =
                json!({ "poolId": pool_id, "offerTenantId": offer_to, "quotas": quotas(&q)? });
            ctx.call_quiet("pools.offer", body).await?;
        }
    }
    Ok(())
}

const QUOTA_COLS: &[Col] = &[
    text("POOL", "poolId"),
    text("RESOURCE", "resource"),
    text("MAX", "max"),
    text("USED", "used"),
];

pub(super) async fn quota_cmd(ctx: &Ctx, q: Quotas) -> Result<(), Failure> {
    match q {
        Quotas::Get { pool } => {
            let mut body = json!({});
            opt(&mut body, "poolId", pool);
            let a = ctx.call("quotas.get", body).await?;
            ctx.list(&a, QUOTA_COLS);
        }
        Quotas::Set {
            pool,
            resource,
            max,
        } => {
            let body = json!({ "poolId": pool, "resource": resource, "max": max });
            ctx.call_quiet("quotas.set", body).await?;
        }
    }
    Ok(())
}
