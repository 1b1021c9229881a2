//! The command line (clap derive). Every command's help ends with an
//! example.

use clap::{Args, Parser, Subcommand};

use crate::output::Format;

/// The command line of the reservation grants and quotas API.
#[derive(Debug, Parser)]
#[command(
    name = "bcctl",
    version,
    about = "The command line of the reservation grants and quotas API.",
    after_help = "Examples:\n  \
        bcctl login --endpoint http://127.0.0.1:8080 --tenant root   (token read without echo)\n  \
        bcctl accounts reservations pacct_01...\n  \
        bcctl grants create --account pacct_01... --reservation R --grantee acme --slots 2 \
        --for 30d\n  \
        bcctl call reservationGrants.list states=active,scheduled\n\n\
        Exit codes: 0 ok, 1 unexpected, 2 usage, 3 configuration, 4 invalid input, \
        5 unauthenticated or denied, 6 not found, 7 conflict/state/capacity/quota, \
        8 unavailable (retry)."
)]
pub struct Cli {
    /// Global options.
    #[command(flatten)]
    pub global: Global,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Options of every command.
#[derive(Debug, Args)]
pub struct Global {
    /// The profile of the configuration file to use (default: its default).
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// The api-server's URL (overrides BC_ENDPOINT and the profile).
    #[arg(long, global = true)]
    pub endpoint: Option<String>,
    /// The acting tenant (overrides BC_TENANT and the profile).
    #[arg(long, global = true)]
    pub tenant: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table", global = true)]
    pub output: Format,
    /// Show times in the local offset instead of UTC.
    #[arg(long, global = true)]
    pub local: bool,
    /// Log each call (and its idempotency key) on standard error.
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Save an endpoint, tenant and token as a profile (token read from
    /// standard input, or prompted for without echo).
    #[command(after_help = "Example:\n  \
        echo \"$TOKEN\" | bcctl login --endpoint http://127.0.0.1:8080 --tenant root")]
    Login(Login),
    /// Call any method: fields as name=value (dotted for nested ones) or
    /// --data JSON; see --fields.
    #[command(after_help = "Examples:\n  \
        bcctl call reservationGrants.list --fields\n  \
        bcctl call reservationGrants.preview accountId=pacct_01... reservationId=R \
        grantTenantId=acme slots=2 startsAt=now endsAt=+30d\n  \
        bcctl call pools.offer --data '{\"poolId\":\"pool_01...\",\"offerTenantId\":\"acme\",\
        \"quotas\":{\"instances\":10}}'")]
    Call(Call),
    /// List the server's methods.
    #[command(after_help = "Example:\n  bcctl methods")]
    Methods,
    /// Tenants (root only).
    #[command(subcommand, after_help = "Example:\n  bcctl tenants create acme")]
    Tenants(Tenants),
    /// API keys of the acting tenant.
    #[command(
        subcommand,
        after_help = "Example:\n  bcctl keys create --role viewer --name ci"
    )]
    Keys(Keys),
    /// Projects of the acting tenant.
    #[command(subcommand, after_help = "Example:\n  bcctl projects create web")]
    Projects(Projects),
    /// Provider accounts and their reservations.
    #[command(
        subcommand,
        after_help = "Example:\n  bcctl accounts create --name dev --project platform-dev \
            --provider-endpoint http://127.0.0.1:8085 --credentials none"
    )]
    Accounts(Accounts),
    /// Secrets of the acting tenant (values never shown).
    #[command(
        subcommand,
        after_help = "Example:\n  bcctl secrets put gce-key --from-file key.json"
    )]
    Secrets(Secrets),
    /// Pools.
    #[command(
        subcommand,
        after_help = "Example:\n  bcctl pools create --name us-central1 --region us-central1 \
            --account pacct_01... --flavor n2-standard-4:4:16 --quota instances=100"
    )]
    Pools(Pools),
    /// Quotas of the acting tenant.
    #[command(
        subcommand,
        after_help = "Example:\n  bcctl --tenant acme quotas set --pool pool_01... \
            --resource instances --max 20"
    )]
    Quotas(Quotas),
    /// Reservation grants.
    #[command(
        subcommand,
        after_help = "Example:\n  bcctl grants create --account pacct_01... --reservation R \
            --grantee acme --slots 2 --starts-at now --for 30d --dry-run"
    )]
    Grants(Grants),
    /// Instances of the acting tenant.
    #[command(
        subcommand,
        after_help = "Example:\n  bcctl instances create --pool pool_01... --flavor n2-standard-4"
    )]
    Instances(Instances),
    /// Usage records, or their sums.
    #[command(
        after_help = "Example:\n  bcctl usage --from -7d --meter vm.grant.slot.hours \
        --sum-by day"
    )]
    Usage(Usage),
    /// The acting tenant's events; --follow keeps printing new ones.
    #[command(after_help = "Example:\n  bcctl events --follow --type reservation-grant.expiring")]
    Events(Events),
    /// The server's clock.
    #[command(subcommand, after_help = "Example:\n  bcctl clock set +1h")]
    Clock(Clock),
    /// A reservation's grants, committed slots and use as a text chart.
    #[command(
        after_help = "Example:\n  bcctl timeline --account pacct_01... R --from -1d --to +14d"
    )]
    Timeline(Timeline),
    /// Print a shell completion script.
    #[command(
        after_help = "Example:\n  bcctl completion bash > ~/.local/share/bash-completion/\
        completions/bcctl"
    )]
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `bcctl login`: the global --endpoint (required), --tenant (default
/// `root`) and --profile (default `default`) say what to save.
#[derive(Debug, Args)]
pub struct Login {
    /// Save without checking the token against the server.
    #[arg(long)]
    pub no_verify: bool,
}

/// `bcctl call`.
#[derive(Debug, Args)]
pub struct Call {
    /// The method, `module.method` (or `module/method`).
    pub method: String,
    /// Fields as name=value; values are typed by the method's schema.
    pub fields: Vec<String>,
    /// The body as a JSON object (fields given as name=value go on top).
    #[arg(long)]
    pub data: Option<String>,
    /// Describe the method's fields instead of calling it.
    #[arg(long = "fields", id = "describe")]
    pub describe: bool,
    /// The idempotency key (default: a new UUIDv7 where the method takes one).
    #[arg(long)]
    pub idempotency_key: Option<String>,
}

/// `bcctl tenants`.
#[derive(Debug, Subcommand)]
pub enum Tenants {
    /// List tenants.
    #[command(after_help = "Example:\n  bcctl tenants list")]
    List,
    /// Create a tenant; prints its first admin key's secret once.
    #[command(after_help = "Example:\n  bcctl tenants create acme --display-name \"Acme Corp\"")]
    Create {
        /// Its name (its id).
        name: String,
        /// A display name.
        #[arg(long)]
        display_name: Option<String>,
    },
    /// Delete a tenant (its grants end, its instances go).
    #[command(after_help = "Example:\n  bcctl tenants delete acme")]
    Delete {
        /// The tenant.
        tenant_id: String,
    },
}

/// `bcctl keys`.
#[derive(Debug, Subcommand)]
pub enum Keys {
    /// List keys.
    #[command(after_help = "Example:\n  bcctl keys list")]
    List,
    /// Create a key; prints its secret once.
    #[command(after_help = "Example:\n  bcctl --tenant acme keys create --role viewer --name ci")]
    Create {
        /// `admin`, `member`, `viewer`, ...
        #[arg(long)]
        role: String,
        /// Its name.
        #[arg(long, default_value = "bcctl")]
        name: String,
        /// Limit it to one provider account.
        #[arg(long)]
        account: Option<String>,
    },
    /// Revoke a key.
    #[command(after_help = "Example:\n  bcctl keys revoke key_01...")]
    Revoke {
        /// The key.
        key_id: String,
    },
}

/// `bcctl projects`.
#[derive(Debug, Subcommand)]
pub enum Projects {
    /// List projects.
    #[command(after_help = "Example:\n  bcctl --tenant acme projects list")]
    List,
    /// Create a project.
    #[command(after_help = "Example:\n  bcctl --tenant acme projects create web")]
    Create {
        /// Its name.
        name: String,
    },
}

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

/// `bcctl secrets`.
#[derive(Debug, Subcommand)]
pub enum Secrets {
    /// List secrets (names, kinds, fingerprints).
    #[command(after_help = "Example:\n  bcctl --tenant acme secrets list")]
    List,
    /// Create or replace a secret; the value comes from --from-file or
    /// standard input, never from the command line.
    #[command(
        after_help = "Example:\n  bcctl --tenant acme secrets put gce-key --from-file key.json"
    )]
    Put {
        /// Its name.
        name: String,
        /// Read the value from this file.
        #[arg(long)]
        from_file: Option<std::path::PathBuf>,
    },
    /// Delete a secret.
    #[command(after_help = "Example:\n  bcctl --tenant acme secrets delete gce-key")]
    Delete {
        /// Its name.
        name: String,
    },
}

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
    /// A grant's hours: slot-hours billed, instance-hours held and run.
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

/// What `usage --sum-by` groups by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SumBy {
    /// Per grant (records of no grant together).
    Grant,
    /// Per meter.
    Meter,
    /// Per day (UTC, or local with --local) and meter.
    Day,
}

/// `bcctl usage`.
#[derive(Debug, Args)]
pub struct Usage {
    /// Records from this instant.
    #[arg(long, allow_hyphen_values = true)]
    pub from: Option<String>,
    /// Records before this instant.
    #[arg(long, allow_hyphen_values = true)]
    pub to: Option<String>,
    /// One meter.
    #[arg(long)]
    pub meter: Option<String>,
    /// One grant's.
    #[arg(long)]
    pub grant: Option<String>,
    /// One instance's.
    #[arg(long)]
    pub instance: Option<String>,
    /// Every tenant's (root).
    #[arg(long)]
    pub all: bool,
    /// Sum the quantities instead of listing records.
    #[arg(long, value_enum)]
    pub sum_by: Option<SumBy>,
}

/// `bcctl events`.
#[derive(Debug, Args)]
pub struct Events {
    /// Keep polling and print events as they arrive (Ctrl-C stops).
    #[arg(short, long)]
    pub follow: bool,
    /// Only these types (repeat, or comma-separated).
    #[arg(long = "type", value_delimiter = ',')]
    pub types: Vec<String>,
    /// After this cursor.
    #[arg(long)]
    pub after: Option<String>,
    /// Seconds between polls with --follow.
    #[arg(long, default_value_t = 2.0)]
    pub interval: f64,
}

/// `bcctl clock`.
#[derive(Debug, Subcommand)]
pub enum Clock {
    /// The server's now.
    #[command(after_help = "Example:\n  bcctl clock get")]
    Get,
    /// Move a manual clock (root): RFC 3339, epoch ms, or +1h from its now.
    #[command(after_help = "Example:\n  bcctl clock set 2030-01-02T00:00:00Z")]
    Set {
        /// The new now.
        #[arg(allow_hyphen_values = true)]
        now: String,
    },
}

/// `bcctl timeline`.
#[derive(Debug, Args)]
pub struct Timeline {
    /// The reservation.
    pub reservation_id: String,
    /// Its account.
    #[arg(long)]
    pub account: String,
    /// From (default: a day ago).
    #[arg(long, allow_hyphen_values = true, default_value = "-1d")]
    pub from: String,
    /// To (default: in 14 days).
    #[arg(long, allow_hyphen_values = true, default_value = "+14d")]
    pub to: String,
    /// The chart's width (default: the terminal's, else 100).
    #[arg(long)]
    pub width: Option<usize>,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_command_and_subcommand_has_an_example() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for sub in cmd.get_subcommands() {
                let name = format!("{path} {}", sub.get_name());
                let help = sub.get_after_help().map(|h| h.to_string());
                if sub.get_name() != "help" && !help.is_some_and(|h| h.contains("bcctl ")) {
                    missing.push(name.clone());
                }
                walk(sub, &name, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "bcctl", &mut missing);
        assert!(missing.is_empty(), "no example in the help of {missing:?}");
    }
}
