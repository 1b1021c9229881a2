//! `bcctl instances`.
//!
//! A managed instance's change (create, start, stop, delete) answers at once
//! with the step under way (`provisioning`, `starting`, `stopping`,
//! `deleting`); `--wait` follows the instance (`instances.get` every 500 ms)
//! until the step ends and prints its state and VM, or fails (exit 1) when
//! the instance `failed` or the wait timed out.
//!
//! An interruptible instance (`--interruptible`) takes only a slot another
//! tenant's grant lends; it is shown with `INTERRUPTIBLE yes`, and while its
//! VM is to be deleted to give the slot back, with `INTERRUPT AT`.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{Map, Value, json};

use super::{Ctx, opt, set};
use crate::exit::Failure;
use crate::output::{Col, text, time, yes_no};

/// How often `--wait` reads the instance.
const POLL_EVERY: Duration = Duration::from_millis(500);

/// `--wait` and `--timeout`.
#[derive(Debug, Clone, Copy, Args)]
pub struct Wait {
    /// Follow the instance until its step ends (its VM created, started,
    /// stopped or deleted) and print its state and VM; exit 1 if it failed.
    #[arg(long)]
    wait: bool,
    /// How long --wait follows it (90s, 15m, 1h).
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    timeout: Duration,
}

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
        after_help = "Examples:\n  bcctl --tenant acme instances create --pool pool_01... \
            --flavor n2-standard-4\n  \
            bcctl --tenant globex instances create --pool pool_01... \
            --flavor n2-standard-4 --interruptible"
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
        /// Take only a slot another tenant's grant lends (a pool whose
        /// grants may lend), given back with the pool's notice when the
        /// grantee needs it.
        #[arg(long)]
        interruptible: bool,
        /// The idempotency key (default: a new UUIDv7).
        #[arg(long)]
        idempotency_key: Option<String>,
        #[command(flatten)]
        wait: Wait,
    },
    /// Start an instance.
    #[command(after_help = "Example:\n  bcctl --tenant acme instances start inst_01... --wait")]
    Start {
        /// The instance.
        instance_id: String,
        #[command(flatten)]
        wait: Wait,
    },
    /// Stop an instance.
    #[command(after_help = "Example:\n  bcctl --tenant acme instances stop inst_01... --wait")]
    Stop {
        /// The instance.
        instance_id: String,
        #[command(flatten)]
        wait: Wait,
    },
    /// Delete an instance.
    #[command(after_help = "Example:\n  bcctl --tenant acme instances delete inst_01... --wait")]
    Delete {
        /// The instance.
        instance_id: String,
        #[command(flatten)]
        wait: Wait,
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
    text("VM", "vm.name"),
    text("ZONE", "vm.zone"),
    text("VM STATUS", "vm.status"),
    yes_no("INTERRUPTIBLE", "interruptible"),
    time("INTERRUPT AT", "interruptAt"),
    time("CREATED", "createdAt"),
];

/// What `--wait` prints when the step ended.
const ENDED_COLS: &[Col] = &[
    text("INSTANCE", "instanceId"),
    text("STATE", "state"),
    text("VM", "vm.name"),
    text("ZONE", "vm.zone"),
    text("VM STATUS", "vm.status"),
    text("FAILURE", "failure.code"),
    text("DELETED REASON", "deletedReason"),
    yes_no("INTERRUPTIBLE", "interruptible"),
    time("INTERRUPT AT", "interruptAt"),
];

/// Whether a step of the instance is under way (its state one of a step).
fn in_step(instance: &Value) -> bool {
    matches!(
        instance["state"].as_str(),
        Some("provisioning" | "stopping" | "starting" | "deleting")
    )
}

/// The instance with its nested objects' fields as `object.field` (shown
/// one per row by `instances get`).
fn flat(instance: &Value) -> Value {
    let mut out = Map::new();
    if let Some(fields) = instance.as_object() {
        for (k, v) in fields {
            match v.as_object() {
                Some(inner) => {
                    for (ik, iv) in inner {
                        out.insert(format!("{k}.{ik}"), iv.clone());
                    }
                }
                None => {
                    out.insert(k.clone(), v.clone());
                }
            }
        }
    }
    Value::Object(out)
}

/// Reads the instance with `get` every `every` while a step is under way,
/// from `answer` (a `{ instance }` answer) until the step ends or `timeout`
/// passes. A failure worth a retry (the server unreachable, `UNAVAILABLE`)
/// is retried; any other ends the wait.
pub(crate) async fn follow<F, Fut>(
    answer: Value,
    mut get: F,
    every: Duration,
    timeout: Duration,
) -> Result<Value, Failure>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Value, Failure>>,
{
    let until = tokio::time::Instant::now() + timeout;
    let mut answer = answer;
    while in_step(at(&answer, "instance")) {
        if tokio::time::Instant::now() + every > until {
            return Err(Failure::Unexpected(format!(
                "instance {} still {} after {}",
                str_at(&answer, "instance.instanceId"),
                str_at(&answer, "instance.state"),
                humantime::format_duration(timeout)
            )));
        }
        tokio::time::sleep(every).await;
        match get().await {
            Ok(a) => answer = a,
            Err(e) if e.exit_code() == 8 => {}
            Err(e) => return Err(e),
        }
    }
    if str_at(&answer, "instance.state") == "failed" {
        return Err(Failure::Unexpected(format!(
            "instance {} failed: {}",
            str_at(&answer, "instance.instanceId"),
            at(&answer, "instance.failure.code")
                .as_str()
                .unwrap_or("unknown")
        )));
    }
    Ok(answer)
}

/// The value at a dotted path (`Null` when absent).
fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.')
        .fold(v, |v, k| v.get(k).unwrap_or(&Value::Null))
}

/// The string at a dotted path (empty when absent).
fn str_at<'a>(v: &'a Value, path: &str) -> &'a str {
    at(v, path).as_str().unwrap_or_default()
}

impl Ctx {
    /// Follows the instance of `answer` until its step ends (`--wait`),
    /// then prints it.
    async fn wait_for(&self, answer: Value, wait: Wait) -> Result<(), Failure> {
        let id = str_at(&answer, "instance.instanceId").to_owned();
        let get = || self.call("instances.get", json!({ "instanceId": id }));
        let ended = follow(answer, get, POLL_EVERY, wait.timeout).await?;
        self.out.print(&ended, |p| {
            Some(p.table(std::slice::from_ref(at(&ended, "instance")), ENDED_COLS))
        });
        Ok(())
    }
}

pub(super) async fn instances(ctx: &Ctx, i: Instances) -> Result<(), Failure> {
    use Instances as I;
    let op = |m: &'static str, id: String, w: Wait| (m, json!({ "instanceId": id }), w);
    let (method, body, wait) = match i {
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
            ctx.out
                .print(&a, |p| Some(p.object(&flat(at(&a, "instance")))));
            return Ok(());
        }
        I::Create {
            pool,
            flavor,
            name,
            project,
            billing,
            interruptible,
            idempotency_key,
            wait,
        } => {
            let mut body = json!({ "poolId": pool, "flavor": flavor,
                "idempotencyKey": ctx.key(idempotency_key) });
            opt(&mut body, "name", name);
            opt(&mut body, "projectId", project);
            opt(&mut body, "billing", billing);
            if interruptible {
                set(&mut body, "interruptible", json!(true));
            }
            let a = ctx.call("instances.create", body).await?;
            if wait.wait {
                return ctx.wait_for(a, wait).await;
            }
            ctx.id(&a, "instance.instanceId");
            return Ok(());
        }
        I::Start { instance_id, wait } => op("instances.start", instance_id, wait),
        I::Stop { instance_id, wait } => op("instances.stop", instance_id, wait),
        I::Delete { instance_id, wait } => op("instances.delete", instance_id, wait),
    };
    if wait.wait {
        let a = ctx.call(method, body).await?;
        return ctx.wait_for(a, wait).await;
    }
    ctx.call_quiet(method, body).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::Mutex;

    use super::*;

    fn answer(state: &str, extra: Value) -> Value {
        let mut i = json!({ "instanceId": "inst_1", "state": state });
        if let (Some(i), Some(extra)) = (i.as_object_mut(), extra.as_object()) {
            i.extend(extra.clone());
        }
        json!({ "instance": i })
    }

    /// Follows `first` through `then`, counting the reads.
    async fn run(
        first: Value,
        then: Vec<Result<Value, Failure>>,
        timeout: Duration,
    ) -> (Result<Value, Failure>, usize) {
        let then = Mutex::new(then.into_iter().collect::<VecDeque<_>>());
        let reads = Mutex::new(0usize);
        let get = || {
            *reads.lock().unwrap() += 1;
            let next = then.lock().unwrap().pop_front();
            async move { next.unwrap_or_else(|| Ok(answer("provisioning", json!({})))) }
        };
        let r = follow(first, get, Duration::from_millis(1), timeout).await;
        let n = *reads.lock().unwrap();
        (r, n)
    }

    #[tokio::test]
    async fn follows_until_the_step_ends() {
        let vm = json!({ "vm": { "name": "bc-1", "zone": "z-a", "status": "RUNNING" } });
        let (r, reads) = run(
            answer("provisioning", json!({})),
            vec![
                Ok(answer("provisioning", json!({}))),
                Err(Failure::Unreachable("down".into())),
                Ok(answer("running", vm)),
            ],
            Duration::from_secs(5),
        )
        .await;
        let ended = r.unwrap();
        assert_eq!(reads, 3);
        assert_eq!(ended["instance"]["vm"]["name"], "bc-1");
        let p = crate::output::Printer {
            format: crate::output::Format::Table,
            local: false,
        };
        let table = p.table(std::slice::from_ref(&ended["instance"]), ENDED_COLS);
        let row = table.lines().nth(1).unwrap();
        for want in ["inst_1", "running", "bc-1", "z-a", "RUNNING"] {
            assert!(row.contains(want), "{table}");
        }
    }

    #[tokio::test]
    async fn a_settled_instance_is_not_read_again() {
        for state in ["running", "stopped", "deleted"] {
            let (r, reads) = run(answer(state, json!({})), vec![], Duration::from_secs(5)).await;
            assert_eq!(r.unwrap()["instance"]["state"], state);
            assert_eq!(reads, 0);
        }
    }

    #[tokio::test]
    async fn failed_and_timed_out_are_failures() {
        let failed = answer(
            "failed",
            json!({ "failure": { "code": "CONDITION_NOT_MET" } }),
        );
        let (r, _) = run(
            answer("provisioning", json!({})),
            vec![Ok(failed)],
            Duration::from_secs(5),
        )
        .await;
        let e = r.unwrap_err();
        assert_eq!(e.exit_code(), 1);
        assert_eq!(e.to_string(), "instance inst_1 failed: CONDITION_NOT_MET");
        let (r, reads) = run(
            answer("stopping", json!({})),
            vec![],
            Duration::from_millis(30),
        )
        .await;
        let e = r.unwrap_err();
        assert!(
            e.to_string()
                .starts_with("instance inst_1 still provisioning after"),
            "{e}"
        );
        assert!(reads >= 1);
        // Anything but a retryable failure ends the wait.
        let denied = Failure::Api {
            status: 403,
            code: "ACCESS_DENIED".into(),
            message: "no".into(),
            details: json!({}),
        };
        let (r, _) = run(
            answer("deleting", json!({})),
            vec![Err(denied)],
            Duration::from_secs(5),
        )
        .await;
        assert_eq!(r.unwrap_err().exit_code(), 5);
    }

    #[test]
    fn an_interruptible_instance_shows_when_it_will_be_interrupted() {
        let p = crate::output::Printer {
            format: crate::output::Format::Table,
            local: false,
        };
        let i = json!({ "instanceId": "inst_1", "state": "running", "interruptible": true,
            "interruptAt": 1_893_456_060_000i64, "placement": { "kind": "lent" } });
        for cols in [INSTANCE_COLS, ENDED_COLS] {
            let table = p.table(std::slice::from_ref(&i), cols);
            let header = table.lines().next().unwrap_or_default();
            assert!(header.contains("INTERRUPTIBLE") && header.contains("INTERRUPT AT"));
            let row = table.lines().nth(1).unwrap_or_default();
            assert!(
                row.contains("yes") && row.contains("2030-01-01T00:01:00Z"),
                "{table}"
            );
        }
        let table = p.table(std::slice::from_ref(&i), INSTANCE_COLS);
        assert!(table.contains("lent"), "{table}");
    }

    #[test]
    fn get_shows_nested_fields_one_per_row() {
        let i = json!({ "instanceId": "inst_1", "vm": { "name": "bc-1", "observedAt": 5 },
            "placement": { "kind": "grant" } });
        assert_eq!(
            flat(&i),
            json!({ "instanceId": "inst_1", "vm.name": "bc-1", "vm.observedAt": 5,
                "placement.kind": "grant" })
        );
    }
}
