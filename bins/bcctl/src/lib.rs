//! `bcctl`: the command line of the reservation grants and quotas API.
//!
//! It speaks the public HTTP API only. Where it sends requests and with
//! which key comes from `bcctl login` profiles or `BC_ENDPOINT`/`BC_TOKEN`
//! ([`config`]). Every method is reachable with `bcctl call`, whose fields
//! come from the server's own OpenAPI document; the nouns (`grants`,
//! `accounts`, ...) are the commands people reach for. Output is an aligned
//! table, or the API's answer exactly with `-o json` / `-o yaml`
//! ([`output`]); failures print the API's code, message and details on
//! standard error and exit with a code per class ([`exit`]). Times are
//! RFC 3339, epoch milliseconds, `now` or relative (`+2h`, `-7d`)
//! ([`when`]).

pub mod cli;
pub mod client;
pub mod config;
pub mod exit;
pub mod gantt;
pub mod output;
pub mod when;

mod commands;
mod fields;

use std::process::ExitCode;

use clap::Parser;

/// Runs bcctl with the process's arguments.
pub fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{}", failure.report());
            ExitCode::from(failure.exit_code())
        }
    }
}
