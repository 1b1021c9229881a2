//! What each command calls and prints. Reads print a table (or the answer
//! with `-o json|yaml`); creations print the new object's id, other
//! mutations print nothing in table mode, so scripts read only what they
//! need.

use std::io::{IsTerminal, Read};
use std::time::Duration;

use clap::CommandFactory;
use serde_json::{Map, Value, json};

use crate::cli::{self, Cli, Command};
use crate::client::Client;
use crate::config;
use crate::exit::{Failure, usage};
use crate::fields;
use crate::output::{Col, Printer, text, time};
use crate::when;

const GRANT_COLS: &[Col] = &[
    text("GRANT", "grantId"),
    text("TENANT", "tenantId"),
    text("SLOTS", "slots"),
    text("STATE", "state"),
    time("STARTS", "startsAt"),
    time("ENDS", "endsAt"),
    text("RESERVATION", "reservationId"),
];

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

const USAGE_COLS: &[Col] = &[
    time("PERIOD", "periodStart"),
    text("METER", "meter"),
    text("QUANTITY", "quantity"),
    text("UNIT", "unit"),
    text("GRANT", "grantId"),
    text("INSTANCE", "instanceId"),
];

const EVENT_COLS: &[Col] = &[
    time("AT", "occurredAt"),
    text("TYPE", "type"),
    text("GRANT", "data.grantId"),
    text("DATA", "data"),
];

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
}

/// Sets `key` in `body` when `value` is there.
fn opt(body: &mut Value, key: &str, value: Option<impl Into<Value>>) {
    if let Some(v) = value {
        body[key] = v.into();
    }
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
        Command::Login(login) => return run_login(g, login).await,
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
        Command::Call(call) => run_call(&ctx, call).await,
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
        Command::Tenants(t) => tenants(&ctx, t).await,
        Command::Keys(k) => keys(&ctx, k).await,
        Command::Projects(p) => projects(&ctx, p).await,
        Command::Accounts(a) => accounts(&ctx, a).await,
        Command::Secrets(s) => secrets(&ctx, s).await,
        Command::Pools(p) => pools(&ctx, p).await,
        Command::Quotas(q) => quota_cmd(&ctx, q).await,
        Command::Grants(gr) => grants(&ctx, gr).await,
        Command::Instances(i) => instances(&ctx, i).await,
        Command::Usage(u) => usage_cmd(&ctx, u).await,
        Command::Events(e) => events(&ctx, e).await,
        Command::Clock(c) => clock(&ctx, c).await,
        Command::Timeline(t) => timeline(&ctx, t).await,
    }
}

/// Reads the token: standard input when it is not a terminal, else a
/// prompt without echo. It is never an argument.
fn read_token() -> Result<String, Failure> {
    let token = if std::io::stdin().is_terminal() {
        rpassword::prompt_password("token: ")
            .map_err(|e| Failure::Config(format!("cannot read the token: {e}")))?
    } else {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| Failure::Config(format!("cannot read the token: {e}")))?;
        s
    };
    let token = token.trim().to_owned();
    if token.is_empty() {
        return Err(usage(
            "no token given (on standard input, or at the prompt)",
        ));
    }
    Ok(token)
}

async fn run_login(g: &cli::Global, login: cli::Login) -> Result<(), Failure> {
    let endpoint = g
        .endpoint
        .clone()
        .ok_or_else(|| usage("bcctl login needs --endpoint URL"))?;
    let endpoint = endpoint.trim_end_matches('/').to_owned();
    let tenant = g.tenant.clone().unwrap_or_else(|| "root".into());
    let name = g.profile.clone().unwrap_or_else(|| "default".into());
    let token = read_token()?;
    let profile = config::Profile {
        endpoint: endpoint.clone(),
        tenant: tenant.clone(),
        token: token.clone(),
    };
    if !login.no_verify {
        let client = Client::new(
            config::Target {
                endpoint,
                token,
                tenant,
            },
            g.verbose,
        )?;
        // Any read the key may make proves it: its own tenant's keys.
        client.call("apiKeys.list", Map::new()).await?;
    }
    let mut file = config::load()?;
    file.profiles.insert(name.clone(), profile);
    if file.default.is_none() {
        file.default = Some(name.clone());
    }
    let path = config::save(&file)?;
    eprintln!("saved profile {name} in {}", path.display());
    Ok(())
}

async fn run_call(ctx: &Ctx, call: cli::Call) -> Result<(), Failure> {
    let openapi = ctx.client.get("/api/openapi.json").await?;
    let m = fields::find(&openapi, &call.method)?;
    if call.describe {
        println!("{}", fields::describe(&m));
        return Ok(());
    }
    let now = if fields::needs_now(&call.fields) {
        ctx.now().await
    } else {
        0
    };
    let key = m.keyed().then(|| ctx.key(call.idempotency_key.clone()));
    let body = fields::body(
        &m,
        call.data.as_deref(),
        &call.fields,
        ctx.client.tenant(),
        key.as_deref(),
        now,
    )?;
    let answer = ctx.client.call(&m.name, body).await?;
    ctx.out.print(&answer, |p| {
        // A list as a table of its items' scalar fields, else the object.
        if let Some(items) = answer["items"].as_array() {
            let keys: Vec<String> = items
                .first()
                .and_then(Value::as_object)
                .map(|o| {
                    o.iter()
                        .filter(|(_, v)| !v.is_object() && !v.is_array())
                        .map(|(k, _)| k.clone())
                        .collect()
                })
                .unwrap_or_default();
            return Some(p.table_by_fields(items, &keys));
        }
        match answer.as_object() {
            Some(o) if o.len() == 1 => o.values().next().map(|v| p.object(v)),
            _ => Some(p.object(&answer)),
        }
    });
    Ok(())
}

async fn tenants(ctx: &Ctx, t: cli::Tenants) -> Result<(), Failure> {
    match t {
        cli::Tenants::List => {
            let a = ctx.call("tenants.list", json!({})).await?;
            ctx.list(
                &a,
                &[
                    text("TENANT", "tenantId"),
                    text("NAME", "displayName"),
                    text("STATE", "state"),
                    time("CREATED", "createdAt"),
                ],
            );
        }
        cli::Tenants::Create { name, display_name } => {
            let mut body = json!({ "name": name });
            opt(&mut body, "displayName", display_name);
            let a = ctx.call("tenants.create", body).await?;
            // The admin key's secret is shown once: it is the answer.
            ctx.id(&a, "adminKey.secret");
        }
        cli::Tenants::Delete { tenant_id } => {
            let a = ctx
                .call("tenants.delete", json!({ "targetTenantId": tenant_id }))
                .await?;
            ctx.quiet(&a);
        }
    }
    Ok(())
}

async fn keys(ctx: &Ctx, k: cli::Keys) -> Result<(), Failure> {
    match k {
        cli::Keys::List => {
            let a = ctx.call("apiKeys.list", json!({})).await?;
            ctx.list(
                &a,
                &[
                    text("KEY", "keyId"),
                    text("NAME", "name"),
                    text("ROLE", "role"),
                    text("ACCOUNT", "accountId"),
                    time("CREATED", "createdAt"),
                    time("REVOKED", "revokedAt"),
                ],
            );
        }
        cli::Keys::Create {
            role,
            name,
            account,
        } => {
            let mut body = json!({ "role": role, "name": name });
            opt(&mut body, "accountId", account);
            let a = ctx.call("apiKeys.create", body).await?;
            ctx.id(&a, "secret");
        }
        cli::Keys::Revoke { key_id } => {
            let a = ctx
                .call("apiKeys.revoke", json!({ "keyId": key_id }))
                .await?;
            ctx.quiet(&a);
        }
    }
    Ok(())
}

async fn projects(ctx: &Ctx, p: cli::Projects) -> Result<(), Failure> {
    match p {
        cli::Projects::List => {
            let a = ctx.call("projects.list", json!({})).await?;
            ctx.list(
                &a,
                &[
                    text("PROJECT", "projectId"),
                    text("NAME", "name"),
                    time("CREATED", "createdAt"),
                ],
            );
        }
        cli::Projects::Create { name } => {
            let a = ctx.call("projects.create", json!({ "name": name })).await?;
            ctx.id(&a, "project.projectId");
        }
    }
    Ok(())
}

async fn accounts(ctx: &Ctx, a: cli::Accounts) -> Result<(), Failure> {
    use cli::Accounts as A;
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
            let ans = ctx.call("providerAccounts.bindReservation", body).await?;
            ctx.quiet(&ans);
        }
        A::Unbind {
            account_id,
            reservation_id,
        } => {
            let body = json!({ "accountId": account_id, "reservationId": reservation_id });
            let ans = ctx.call("providerAccounts.unbindReservation", body).await?;
            ctx.quiet(&ans);
        }
        A::Delete { account_id } => {
            let ans = ctx
                .call(
                    "providerAccounts.delete",
                    json!({ "accountId": account_id }),
                )
                .await?;
            ctx.quiet(&ans);
        }
    }
    Ok(())
}

async fn secrets(ctx: &Ctx, s: cli::Secrets) -> Result<(), Failure> {
    match s {
        cli::Secrets::List => {
            let a = ctx.call("secrets.list", json!({})).await?;
            ctx.list(
                &a,
                &[
                    text("NAME", "name"),
                    text("KIND", "kind"),
                    text("FINGERPRINT", "fingerprint"),
                    time("UPDATED", "updatedAt"),
                ],
            );
        }
        cli::Secrets::Put { name, from_file } => {
            let value = match from_file {
                Some(path) => std::fs::read_to_string(&path)
                    .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?,
                None => {
                    if std::io::stdin().is_terminal() {
                        rpassword::prompt_password("value: ")
                            .map_err(|e| usage(format!("cannot read the value: {e}")))?
                    } else {
                        let mut v = String::new();
                        std::io::stdin()
                            .read_to_string(&mut v)
                            .map_err(|e| usage(format!("cannot read the value: {e}")))?;
                        v
                    }
                }
            };
            // A token's trailing newline is not part of it; a key file is JSON.
            let value = value.trim_end_matches(['\n', '\r']).to_owned();
            let a = ctx
                .call("secrets.put", json!({ "name": name, "value": value }))
                .await?;
            ctx.id(&a, "secret.fingerprint");
        }
        cli::Secrets::Delete { name } => {
            let a = ctx.call("secrets.delete", json!({ "name": name })).await?;
            ctx.quiet(&a);
        }
    }
    Ok(())
}

async fn pools(ctx: &Ctx, p: cli::Pools) -> Result<(), Failure> {
    match p {
        cli::Pools::List => {
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
        cli::Pools::Get { pool_id } => {
            let a = ctx.call("pools.get", json!({ "poolId": pool_id })).await?;
            ctx.one(&a, "pool");
        }
        cli::Pools::Create {
            name,
            region,
            account,
            flavors,
            quotas: q,
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
                body["quotas"] = quotas(&q)?;
            }
            let a = ctx.call("pools.create", body).await?;
            ctx.id(&a, "pool.poolId");
        }
        cli::Pools::Offer {
            pool_id,
            offer_to,
            quotas: q,
        } => {
            let body =
                json!({ "poolId": pool_id, "offerTenantId": offer_to, "quotas": quotas(&q)? });
            let a = ctx.call("pools.offer", body).await?;
            ctx.quiet(&a);
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

async fn quota_cmd(ctx: &Ctx, q: cli::Quotas) -> Result<(), Failure> {
    match q {
        cli::Quotas::Get { pool } => {
            let mut body = json!({});
            opt(&mut body, "poolId", pool);
            let a = ctx.call("quotas.get", body).await?;
            ctx.list(&a, QUOTA_COLS);
        }
        cli::Quotas::Set {
            pool,
            resource,
            max,
        } => {
            let body = json!({ "poolId": pool, "resource": resource, "max": max });
            let a = ctx.call("quotas.set", body).await?;
            ctx.quiet(&a);
        }
    }
    Ok(())
}

/// The body of a grant's terms (create without its key, or preview).
async fn terms(ctx: &Ctx, t: &cli::Terms) -> Result<Value, Failure> {
    let starts = ctx.instant(&t.starts_at).await?;
    let ends = match (&t.ends_at, &t.for_) {
        (Some(e), _) => ctx.instant(e).await?,
        (None, Some(d)) => {
            let ms = when::parse_duration(d).map_err(|e| usage(e.to_string()))?;
            starts
                .checked_add(ms)
                .ok_or_else(|| usage(format!("--for {d} runs past the end of time")))?
        }
        (None, None) => return Err(usage("give --ends-at or --for")),
    };
    let mut body = json!({
        "tenantId": "root",
        "accountId": t.account,
        "reservationId": t.reservation,
        "grantTenantId": t.grantee,
        "slots": t.slots,
        "startsAt": starts,
        "endsAt": ends,
    });
    opt(&mut body, "projectId", t.project.clone());
    Ok(body)
}

fn print_preview(ctx: &Ctx, answer: &Value) {
    ctx.out.print(answer, |p| {
        let v = &answer["preview"];
        let take_in = v["takeIn"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        let rows = json!({
            "fits": v["fits"],
            "total": v["total"],
            "granted": v["granted"],
            "available": v["available"],
            "slotHours": v["slotHours"],
            "firstPeriodStart": v["firstPeriodStart"],
            "lastPeriodEnd": v["lastPeriodEnd"],
            "takeIn": if take_in.is_empty() { "(none)".to_owned() } else { take_in },
        });
        Some(p.object(&rows))
    });
}

async fn grants(ctx: &Ctx, g: cli::Grants) -> Result<(), Failure> {
    use cli::Grants as G;
    match g {
        G::Create {
            terms: t,
            dry_run,
            idempotency_key,
        } => {
            let mut body = terms(ctx, &t).await?;
            if dry_run {
                let a = ctx.call("reservationGrants.preview", body).await?;
                print_preview(ctx, &a);
                return Ok(());
            }
            body["idempotencyKey"] = json!(ctx.key(idempotency_key));
            let a = ctx.call("reservationGrants.create", body).await?;
            ctx.id(&a, "grant.grantId");
        }
        G::Preview { terms: t } => {
            let body = terms(ctx, &t).await?;
            let a = ctx.call("reservationGrants.preview", body).await?;
            print_preview(ctx, &a);
        }
        G::List {
            all,
            account,
            reservation,
            states,
            active_at,
            limit,
            after,
        } => {
            let mut body = json!({});
            if all {
                body["all"] = json!(true);
            }
            opt(&mut body, "accountId", account);
            opt(&mut body, "reservationId", reservation);
            if !states.is_empty() {
                body["states"] = json!(states);
            }
            if let Some(t) = active_at {
                body["activeAt"] = json!(ctx.instant(&t).await?);
            }
            opt(&mut body, "limit", limit);
            opt(&mut body, "after", after);
            let a = ctx.call("reservationGrants.list", body).await?;
            ctx.list(&a, GRANT_COLS);
        }
        G::Get { grant_id } => {
            let a = ctx
                .call("reservationGrants.get", json!({ "grantId": grant_id }))
                .await?;
            ctx.one(&a, "grant");
        }
        G::End { grant_id, account } => {
            let account = match account {
                Some(a) => a,
                None => {
                    let g = ctx
                        .call(
                            "reservationGrants.get",
                            json!({ "tenantId": "root", "grantId": grant_id }),
                        )
                        .await?;
                    g["grant"]["accountId"]
                        .as_str()
                        .ok_or_else(|| Failure::Unexpected(format!("no accountId in {g}")))?
                        .to_owned()
                }
            };
            let body = json!({ "tenantId": "root", "accountId": account, "grantId": grant_id });
            let a = ctx.call("reservationGrants.end", body).await?;
            ctx.quiet(&a);
        }
        G::Usage { grant_id, from, to } => {
            let mut body = json!({ "grantId": grant_id });
            if let Some(f) = from {
                body["from"] = json!(ctx.instant(&f).await?);
            }
            if let Some(t) = to {
                body["to"] = json!(ctx.instant(&t).await?);
            }
            let a = ctx.call("reservationGrants.usage", body).await?;
            ctx.list(
                &a,
                &[
                    time("PERIOD", "periodStart"),
                    text("SLOTS", "slots"),
                    text("SLOT-HOURS", "slotHours"),
                    text("HELD", "heldHours"),
                    text("RUNNING", "usageHours"),
                ],
            );
        }
    }
    Ok(())
}

async fn instances(ctx: &Ctx, i: cli::Instances) -> Result<(), Failure> {
    use cli::Instances as I;
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
                body["all"] = json!(true);
            }
            opt(&mut body, "poolId", pool);
            opt(&mut body, "reservationId", reservation);
            opt(&mut body, "grantId", grant);
            opt(&mut body, "projectId", project);
            if !states.is_empty() {
                body["states"] = json!(states);
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
    let a = ctx.call(method, body).await?;
    ctx.quiet(&a);
    Ok(())
}

/// Micro-units of a 6-decimal quantity.
fn micros(q: &str) -> i64 {
    let (int, frac) = q.split_once('.').unwrap_or((q, "0"));
    let frac = format!("{frac:0<6}");
    let sign = if int.starts_with('-') { -1 } else { 1 };
    let int: i64 = int.trim_start_matches('-').parse().unwrap_or(0);
    sign * (int * 1_000_000 + frac[..6].parse::<i64>().unwrap_or(0))
}

async fn usage_cmd(ctx: &Ctx, u: cli::Usage) -> Result<(), Failure> {
    let mut body = Map::new();
    if let Some(f) = &u.from {
        body.insert("from".into(), json!(ctx.instant(f).await?));
    }
    if let Some(t) = &u.to {
        body.insert("to".into(), json!(ctx.instant(t).await?));
    }
    for (k, v) in [
        ("meter", &u.meter),
        ("grantId", &u.grant),
        ("instanceId", &u.instance),
    ] {
        if let Some(v) = v {
            body.insert(k.into(), json!(v));
        }
    }
    if u.all {
        body.insert("all".into(), json!(true));
    }
    let records = ctx.client.list_all("usage.list", body).await?;
    let Some(by) = u.sum_by else {
        let answer = json!({ "items": records });
        ctx.list(&answer, USAGE_COLS);
        return Ok(());
    };
    // Exact sums in micro-units, per key and meter.
    let mut sums: std::collections::BTreeMap<(String, String), (i64, String)> =
        std::collections::BTreeMap::new();
    for r in &records {
        let meter = r["meter"].as_str().unwrap_or("").to_owned();
        let key = match by {
            cli::SumBy::Grant => r["grantId"].as_str().unwrap_or("-").to_owned(),
            cli::SumBy::Meter => String::new(),
            cli::SumBy::Day => {
                let t = when::format_instant(r["periodStart"].as_i64().unwrap_or(0), ctx.out.local);
                t.get(..10).unwrap_or(&t).to_owned()
            }
        };
        let unit = r["unit"].as_str().unwrap_or("").to_owned();
        let e = sums.entry((key, meter)).or_insert((0, unit));
        e.0 += micros(r["quantity"].as_str().unwrap_or("0"));
    }
    let key_name = match by {
        cli::SumBy::Grant => "grantId",
        cli::SumBy::Meter => "",
        cli::SumBy::Day => "day",
    };
    let items: Vec<Value> = sums
        .into_iter()
        .map(|((key, meter), (m, unit))| {
            let mut item = json!({
                "meter": meter,
                "quantity": grants_format(m),
                "unit": unit,
            });
            if !key_name.is_empty() {
                item[key_name] = json!(key);
            }
            item
        })
        .collect();
    let answer = json!({ "items": items, "records": records.len() });
    let mut cols = Vec::new();
    match by {
        cli::SumBy::Grant => cols.push(text("GRANT", "grantId")),
        cli::SumBy::Day => cols.push(text("DAY", "day")),
        cli::SumBy::Meter => {}
    }
    cols.extend([
        text("METER", "meter"),
        text("QUANTITY", "quantity"),
        text("UNIT", "unit"),
    ]);
    ctx.list(&answer, &cols);
    Ok(())
}

/// Micro-units as the API writes quantities (6 decimals).
fn grants_format(m: i64) -> String {
    let sign = if m < 0 { "-" } else { "" };
    let a = m.unsigned_abs();
    format!("{sign}{}.{:06}", a / 1_000_000, a % 1_000_000)
}

async fn events(ctx: &Ctx, e: cli::Events) -> Result<(), Failure> {
    let mut body = json!({ "limit": 1000 });
    if !e.types.is_empty() {
        body["types"] = json!(e.types);
    }
    opt(&mut body, "after", e.after.clone());
    if !e.follow {
        let a = ctx.call("events.list", body).await?;
        ctx.list(&a, EVENT_COLS);
        return Ok(());
    }
    use std::io::Write;
    let interval = Duration::from_secs_f64(e.interval.clamp(0.05, 3600.0));
    let mut first = true;
    loop {
        let page = ctx.call("events.list", body.clone()).await?;
        let items = page["items"].as_array().cloned().unwrap_or_default();
        if !items.is_empty() || first {
            match ctx.out.format {
                crate::output::Format::Table => {
                    let table = ctx.out.table(&items, EVENT_COLS);
                    let mut lines = table.lines();
                    let header = lines.next().unwrap_or_default();
                    if first {
                        println!("{}", header.trim_end());
                    }
                    for line in lines {
                        println!("{}", line.trim_end());
                    }
                }
                // One object per line, as they arrive.
                _ => {
                    for item in &items {
                        println!("{}", serde_json::to_string(item).unwrap_or_default());
                    }
                }
            }
            let _ = std::io::stdout().flush();
        }
        first = false;
        if let Some(next) = page["nextCursor"].as_str() {
            body["after"] = json!(next);
        }
        if page["hasMore"] != json!(true) {
            tokio::time::sleep(interval).await;
        }
    }
}

async fn clock(ctx: &Ctx, c: cli::Clock) -> Result<(), Failure> {
    let a = match c {
        cli::Clock::Get => ctx.call("clock.get", json!({})).await?,
        cli::Clock::Set { now } => {
            let now = ctx.instant(&now).await?;
            ctx.call("clock.set", json!({ "tenantId": "root", "now": now }))
                .await?
        }
    };
    ctx.out.print(&a, |p| {
        Some(format!(
            "{} ({})",
            p.cell(&a["now"], crate::output::Kind::Time),
            a["mode"].as_str().unwrap_or("")
        ))
    });
    Ok(())
}

async fn timeline(ctx: &Ctx, t: cli::Timeline) -> Result<(), Failure> {
    let from = ctx.instant(&t.from).await?;
    let to = ctx.instant(&t.to).await?;
    let body = json!({ "accountId": t.account, "reservationId": t.reservation_id,
        "from": from, "to": to });
    let a = ctx.call("reservations.timeline", body).await?;
    let width = t
        .width
        .or_else(|| std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()))
        .or_else(|| terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)))
        .unwrap_or(100);
    ctx.out.print(&a, |p| {
        Some(crate::gantt::render(&a["timeline"], width, p.local))
    });
    Ok(())
}
