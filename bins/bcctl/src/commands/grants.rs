//! `bcctl grants`: create, preview, list, end and read reservation grants,
//! and lend a grant's idle slots (or stop lending them).

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::{Ctx, opt, set};
use crate::exit::{Failure, usage};
use crate::output::{Col, text, time};
use crate::when;

/// The terms of a grant (`grants create` and `grants preview`).
#[derive(Debug, Args)]
pub struct Terms {
    /// The root provider account.
    #[arg(long)]
    pub account: String,
    /// The reservation.
    #[arg(long)]
    pub reservation: String,
    /// The tenant the slots are committed to.
    #[arg(long)]
    pub grantee: String,
    /// One project of the grantee.
    #[arg(long)]
    pub project: Option<String>,
    /// Slots to commit.
    #[arg(long)]
    pub slots: u32,
    /// The term's start (RFC 3339, epoch ms, now, +2h).
    #[arg(long, default_value = "now", allow_hyphen_values = true)]
    pub starts_at: String,
    /// The term's end.
    #[arg(
        long,
        allow_hyphen_values = true,
        conflicts_with = "for_",
        required_unless_present = "for_"
    )]
    pub ends_at: Option<String>,
    /// The term's length instead of --ends-at (`30d`).
    #[arg(long = "for", id = "for_")]
    pub for_: Option<String>,
}

/// `bcctl grants`.
#[derive(Debug, Subcommand)]
pub enum Grants {
    /// Commit slots of a reservation to a tenant (root).
    #[command(
        after_help = "Example:\n  bcctl grants create --account pacct_01... --reservation R \
            --grantee acme --slots 2 --starts-at 2030-01-01T00:00:00Z --for 30d"
    )]
    Create {
        /// The terms.
        #[command(flatten)]
        terms: Terms,
        /// Call preview instead: what the grant would decide and bill.
        #[arg(long)]
        dry_run: bool,
        /// The idempotency key (default: a new UUIDv7).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// What a grant would decide and bill, written nowhere (root).
    #[command(
        after_help = "Example:\n  bcctl grants preview --account pacct_01... --reservation R \
            --grantee acme --slots 2 --for 7d"
    )]
    Preview {
        /// The terms.
        #[command(flatten)]
        terms: Terms,
    },
    /// List grants.
    #[command(
        after_help = "Example:\n  bcctl grants list --all --state active,scheduled --active-at +1d"
    )]
    List {
        /// Every tenant's (root).
        #[arg(long)]
        all: bool,
        /// Of one account.
        #[arg(long)]
        account: Option<String>,
        /// Of one reservation.
        #[arg(long)]
        reservation: Option<String>,
        /// In these states (repeat, or comma-separated).
        #[arg(long = "state", value_delimiter = ',')]
        states: Vec<String>,
        /// Live at this instant.
        #[arg(long, allow_hyphen_values = true)]
        active_at: Option<String>,
        /// At most this many.
        #[arg(long)]
        limit: Option<u32>,
        /// After this cursor.
        #[arg(long)]
        after: Option<String>,
    },
    /// Show one grant.
    #[command(after_help = "Example:\n  bcctl grants get rgrant_01... -o yaml")]
    Get {
        /// The grant.
        grant_id: String,
    },
    /// End a grant now (cancel it before it starts) (root).
    #[command(after_help = "Example:\n  bcctl grants end rgrant_01...")]
    End {
        /// The grant.
        grant_id: String,
        /// Its account (looked up when not given).
        #[arg(long)]
        account: Option<String>,
    },
    /// Let a grant's idle slots be lent to other tenants' interruptible
    /// instances, taken back with the pool's notice when the grantee needs
    /// them (the grantee's admin keys, or root).
    #[command(after_help = "Example:\n  bcctl --tenant acme grants lend rgrant_01...")]
    Lend {
        /// The grant.
        grant_id: String,
    },
    /// Stop lending a grant's idle slots: every borrower in it is
    /// interrupted, with the pool's notice (the grantee's admin keys, or
    /// root).
    #[command(after_help = "Example:\n  bcctl --tenant acme grants unlend rgrant_01...")]
    Unlend {
        /// The grant.
        grant_id: String,
    },
    /// A grant's hours: slot-hours billed, instance-hours held and run,
    /// slot-hours lent.
    #[command(after_help = "Example:\n  bcctl --tenant acme grants usage rgrant_01... --from -1d")]
    Usage {
        /// The grant.
        grant_id: String,
        /// From.
        #[arg(long, allow_hyphen_values = true)]
        from: Option<String>,
        /// To.
        #[arg(long, allow_hyphen_values = true)]
        to: Option<String>,
    },
}

const GRANT_COLS: &[Col] = &[
    text("GRANT", "grantId"),
    text("TENANT", "tenantId"),
    text("SLOTS", "slots"),
    text("STATE", "state"),
    text("LENDING", "lending"),
    time("STARTS", "startsAt"),
    time("ENDS", "endsAt"),
    text("RESERVATION", "reservationId"),
];

/// A grant as a table shows it: `lending` as `yes (N lent)` or `no`.
fn shown(grant: &Value) -> Value {
    let lending = match grant.get("lending").and_then(Value::as_bool) {
        Some(true) => {
            let lent = grant.get("lentSlots").and_then(Value::as_u64);
            format!("yes ({} lent)", lent.unwrap_or(0))
        }
        Some(false) => "no".to_owned(),
        None => return grant.clone(),
    };
    let mut g = grant.clone();
    set(&mut g, "lending", json!(lending));
    g
}

/// Prints a list of grants (`{ items }`).
fn print_list(ctx: &Ctx, answer: &Value) {
    ctx.out.print(answer, |p| {
        let items: Vec<Value> = answer["items"]
            .as_array()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .map(shown)
            .collect();
        Some(p.table(&items, GRANT_COLS))
    });
}

/// The body of a grant's terms (create without its key, or preview).
async fn terms(ctx: &Ctx, t: &Terms) -> Result<Value, Failure> {
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

/// `grants lend` and `grants unlend`: prints the grant as `grants get` does.
async fn set_lending(ctx: &Ctx, grant_id: String, lend: bool) -> Result<(), Failure> {
    let body = json!({ "grantId": grant_id, "lend": lend });
    let a = ctx.call("reservationGrants.setLending", body).await?;
    ctx.one(&a, "grant");
    Ok(())
}

pub(super) async fn grants(ctx: &Ctx, g: Grants) -> Result<(), Failure> {
    use Grants as G;
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
            set(&mut body, "idempotencyKey", json!(ctx.key(idempotency_key)));
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
                set(&mut body, "all", json!(true));
            }
            opt(&mut body, "accountId", account);
            opt(&mut body, "reservationId", reservation);
            if !states.is_empty() {
                set(&mut body, "states", json!(states));
            }
            if let Some(t) = active_at {
                set(&mut body, "activeAt", json!(ctx.instant(&t).await?));
            }
            opt(&mut body, "limit", limit);
            opt(&mut body, "after", after);
            let a = ctx.call("reservationGrants.list", body).await?;
            print_list(ctx, &a);
        }
        G::Get { grant_id } => {
            let a = ctx
                .call("reservationGrants.get", json!({ "grantId": grant_id }))
                .await?;
            ctx.one(&a, "grant");
        }
        G::Lend { grant_id } => set_lending(ctx, grant_id, true).await?,
        G::Unlend { grant_id } => set_lending(ctx, grant_id, false).await?,
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
                    g.pointer("/grant/accountId")
                        .and_then(Value::as_str)
                        .ok_or_else(|| Failure::Unexpected(format!("no accountId in {g}")))?
                        .to_owned()
                }
            };
            let body = json!({ "tenantId": "root", "accountId": account, "grantId": grant_id });
            ctx.call_quiet("reservationGrants.end", body).await?;
        }
        G::Usage { grant_id, from, to } => {
            let mut body = json!({ "grantId": grant_id });
            if let Some(f) = from {
                set(&mut body, "from", json!(ctx.instant(&f).await?));
            }
            if let Some(t) = to {
                set(&mut body, "to", json!(ctx.instant(&t).await?));
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
                    text("LENT", "lentHours"),
                    text("CREDITED", "deficitHours"),
                ],
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_row_says_whether_it_lends_and_how_many_slots() {
        let lends = json!({ "grantId": "g1", "lending": true, "lentSlots": 2 });
        assert_eq!(shown(&lends)["lending"], "yes (2 lent)");
        assert_eq!(shown(&lends)["lentSlots"], 2);
        assert_eq!(shown(&json!({ "lending": false }))["lending"], "no");
        // An answer without the field (an older server) shows nothing.
        assert_eq!(
            shown(&json!({ "grantId": "g1" })),
            json!({ "grantId": "g1" })
        );
        let p = crate::output::Printer {
            format: crate::output::Format::Table,
            local: false,
        };
        let table = p.table(&[shown(&lends)], GRANT_COLS);
        let header = table.lines().next().unwrap_or_default();
        assert!(header.contains("LENDING"), "{table}");
        assert!(table.contains("yes (2 lent)"), "{table}");
    }
}
