//! The command line (clap derive). Every command's help ends with an
//! example. The top level is here; each group's arguments are defined
//! beside the code that runs them (`commands/<group>.rs`) and re-exported.

use clap::{Args, Parser, Subcommand};

pub use crate::commands::{
    Accounts, Call, Clock, Events, Grants, Instances, Keys, Login, Pools, Projects, Quotas,
    Secrets, SumBy, Tenants, Terms, Timeline, Usage, Webhooks,
};
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
    /// Webhooks of the acting tenant: its events pushed, signed, to its
    /// endpoints.
    #[command(
        subcommand,
        after_help = "Example:\n  bcctl --tenant acme webhooks create \
            --url https://hooks.acme.example/bc"
    )]
    Webhooks(Webhooks),
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
                let help = sub.get_after_help().map(ToString::to_string);
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
