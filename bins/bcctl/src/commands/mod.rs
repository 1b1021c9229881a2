//! What each command calls and prints. Reads print a table (or the answer
//! with `-o json|yaml`); creations print the new object's id, other
//! mutations print nothing in table mode, so scripts read only what they
//! need.
//!
//! One file per command group, grouped as the api-server's handlers are
//! (`tenancy`, `accounts`, `secrets`, `capacity`, `grants`, `instances`,
//! `system`, `views`, `webhooks`), plus `login` and the generic `call`; each holds its
//! group's arguments and what they call.

use clap::CommandFactory;
use serde_json::{Map, Value};

use crate::cli::{Cli, Command};
use crate::client::Client;
use crate::config;
use crate::exit::{Failure, usage};
use crate::fields;
use crate::output::{Col, Printer, text};
use crate::when;

mod accounts;
mod call;
mod capacity;
mod grants;
mod instances;
mod login;
mod secrets;
mod system;
mod tenancy;
mod views;
mod webhooks;

pub use accounts::Accounts;
pub use call::Call;
pub use capacity::{Pools, Quotas};
pub use grants::{Grants, Terms};
pub use instances::Instances;
pub use login::Login;
pub use secrets::Secrets;
pub use system::{Clock, Events, SumBy, Usage};
pub use tenancy::{Keys, Projects, Tenants};
pub use views::Timeline;
pub use webhooks::Webhooks;

/// Everything one command needs.
struct Ctx {
    client: Client,
    out: Printer,
    verbose: bool,
}

impl Ctx {
    /// The server's now, or this machine's when the key may not read the
    /// server's clock.
    async fn now(&self) -> i64 {
        match self.client.now().await {
            Ok(now) => now,
            Err(_) => chrono::Utc::now().timestamp_millis(),
        }
    }

    async fn instant(&self, raw: &str) -> Result<i64, Failure> {
        let now = if raw.trim().chars().all(|c| c.is_ascii_digit()) {
            0
        } else {
            self.now().await
        };
        when::parse_instant(raw, now).map_err(|e| usage(e.to_string()))
    }

    async fn call(&self, method: &str, body: Value) -> Result<Value, Failure> {
        let body = match body {
            Value::Object(map) => map,
            _ => Map::new(),
        };
        self.client.call(method, body).await
    }

    /// A key for a creating call: the given one, or a new UUIDv7 (shown
    /// with -v so a retry can reuse it).
    fn key(&self, given: Option<String>) -> String {
        let key = given.unwrap_or_else(fields::new_key);
        if self.verbose {
            eprintln!("bcctl: idempotency key {key} (retry with --idempotency-key {key})");
        }
        key
    }

    fn list(&self, answer: &Value, cols: &[Col]) {
        self.out.print(answer, |p| {
            Some(p.table(
                answer["items"].as_array().map_or(&[][..], Vec::as_slice),
                cols,
            ))
        });
    }

    fn one(&self, answer: &Value, key: &str) {
        self.out.print(answer, |p| Some(p.object(&answer[key])));
    }

    fn id(&self, answer: &Value, path: &str) {
        self.out.print(answer, |_| {
            let v = path.split('.').fold(answer, |v, k| &v[k]);
            Some(v.as_str().map_or_else(|| v.to_string(), str::to_owned))
        });
    }

    fn quiet(&self, answer: &Value) {
        self.out.print(answer, |_| None);
    }

    /// Calls `method` and prints its answer only where it is asked for
    /// whole (`-o json`): the commands that change something and show
    /// nothing.
    async fn call_quiet(&self, method: &str, body: Value) -> Result<(), Failure> {
        let answer = self.call(method, body).await?;
        self.quiet(&answer);
        Ok(())
    }
}

/// Sets `key` in `body` when `value` is there.
fn opt(body: &mut Value, key: &str, value: Option<impl Into<Value>>) {
    if let Some(v) = value {
        set(body, key, v.into());
    }
}

/// Sets `key` in the object `body`.
fn set(body: &mut Value, key: &str, value: Value) {
    if let Some(body) = body.as_object_mut() {
        body.insert(key.to_owned(), value);
    }
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Result<(), Failure> {
    let g = &cli.global;
    let out = Printer {
        format: g.output,
        local: g.local,
    };
    match cli.command {
        Command::Completion { shell } => {
            let mut cmd = Cli::command();
            clap_complete::generate(shell, &mut cmd, "bcctl", &mut std::io::stdout());
            return Ok(());
        }
        Command::Login(login) => return login::run_login(g, login).await,
        _ => {}
    }
    let target = config::resolve(
        g.endpoint.as_deref(),
        g.tenant.as_deref(),
        g.profile.as_deref(),
    )?;
    let ctx = Ctx {
        client: Client::new(target, g.verbose)?,
        out,
        verbose: g.verbose,
    };
    match cli.command {
        Command::Login(_) | Command::Completion { .. } => Ok(()),
        Command::Call(call) => call::run_call(&ctx, call).await,
        Command::Methods => {
            let answer = ctx.client.get("/api/compute/methods").await?;
            let cols = [
                text("METHOD", "name"),
                text("KIND", "kind"),
                text("PERMISSION", "permission"),
                text("SUMMARY", "summary"),
            ];
            ctx.list(&answer, &cols);
            Ok(())
        }
        Command::Tenants(t) => tenancy::tenants(&ctx, t).await,
        Command::Keys(k) => tenancy::keys(&ctx, k).await,
        Command::Projects(p) => tenancy::projects(&ctx, p).await,
        Command::Accounts(a) => accounts::accounts(&ctx, a).await,
        Command::Secrets(s) => secrets::secrets(&ctx, s).await,
        Command::Webhooks(w) => webhooks::webhooks(&ctx, w).await,
        Command::Pools(p) => capacity::pools(&ctx, p).await,
        Command::Quotas(q) => capacity::quota_cmd(&ctx, q).await,
        Command::Grants(gr) => grants::grants(&ctx, gr).await,
        Command::Instances(i) => instances::instances(&ctx, i).await,
        Command::Usage(u) => system::usage_cmd(&ctx, u).await,
        Command::Events(e) => system::events(&ctx, e).await,
        Command::Clock(c) => system::clock(&ctx, c).await,
        Command::Timeline(t) => views::timeline(&ctx, t).await,
    }
}
