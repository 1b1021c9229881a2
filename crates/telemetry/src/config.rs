//! The servers' one configuration layer: each binary's settings are a
//! `clap` derive, every setting a flag and an environment variable
//! (`--http-write-timeout-ms`, `BC_HTTP_WRITE_TIMEOUT_MS`), the settings both
//! read flattened in from [`SharedArgs`]. [`parse_from`] reads them; `--help`
//! lists them.
//!
//! A variable set to an empty (or blank) value is as if unset, except
//! `BC_PROVIDER_ENDPOINTS`, where empty means no origin. Durations take one
//! format ([`Durations`]): `30s`, `1500ms`, `2m`, or a bare whole number,
//! milliseconds for the names ending in `_MS` and seconds for the others.

mod shared;
mod values;

#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Command, Parser};
use providers::policy::ProviderPolicy;

pub use shared::{Shared, SharedArgs, WEBHOOK_ENDPOINTS_VAR};
pub use values::{Bare, Checked, Durations, Whole};

/// The variables whose empty value is a value (an empty list), not unset.
const EMPTY_IS_A_VALUE: [&str; 1] = [providers::policy::ENDPOINTS_VAR];

/// Reads the command line `args` (the program's name first) and the
/// environment as `A`. A help or version request is an `Err` too (see
/// [`exit_code`]).
pub fn parse_from<A, I, T>(args: I) -> Result<A, clap::Error>
where
    A: Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let mut cmd = A::command().mut_args(|arg| {
        let blank = arg.get_env().is_some_and(|name| {
            !EMPTY_IS_A_VALUE.iter().any(|n| name == *n)
                && std::env::var_os(name).is_some_and(|v| v.to_string_lossy().trim().is_empty())
        });
        if blank { arg.env(None::<&str>) } else { arg }
    });
    let mut matches = cmd
        .try_get_matches_from_mut(args)
        .map_err(|e| unknown_argument(e, &mut cmd))?;
    A::from_arg_matches_mut(&mut matches).map_err(|e| e.format(&mut cmd))
}

/// clap's "unexpected argument" as "unknown argument", the word the
/// servers' usage errors have always used.
fn unknown_argument(e: clap::Error, cmd: &mut Command) -> clap::Error {
    if e.kind() != ErrorKind::UnknownArgument {
        return e;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return e;
    };
    let like = match e.get(ContextKind::SuggestedArg) {
        Some(ContextValue::String(like)) => Some(like.clone()),
        Some(ContextValue::StyledStr(like)) => Some(like.to_string()),
        _ => None,
    };
    let message = match like {
        Some(like) => format!("unknown argument '{arg}' (a similar one exists: '{like}')"),
        None => format!("unknown argument '{arg}'"),
    };
    cmd.error(ErrorKind::UnknownArgument, message)
}

/// Prints what [`parse_from`] answered instead of the settings: help or
/// the version on standard output (exit 0), an error on standard error
/// (exit `error`).
pub fn exit_code(e: &clap::Error, error: u8) -> ExitCode {
    // Nothing else can be done if standard output or error is gone.
    let _ = e.print();
    if e.use_stderr() {
        ExitCode::from(error)
    } else {
        ExitCode::SUCCESS
    }
}

/// Logs every stored account the provider `policy` no longer allows (a
/// warning each: they stay unusable, each scan failing as a provider error,
/// until fixed) and the policy with their count. Both servers run it at
/// start.
pub async fn log_disallowed_accounts(
    conn: &mut storage::db::Conn,
    root: &storage::ids::TenantId,
    policy: &ProviderPolicy,
) -> anyhow::Result<usize> {
    let refused = storage::db::read_only(conn, async |conn| {
        control::accounts::warn_disallowed(conn, root.as_str(), policy).await
    })
    .await
    .map_err(|e| anyhow::anyhow!("checking provider accounts: {e}"))?;
    tracing::info!(
        policy = ?policy,
        disallowed_accounts = refused,
        "provider policy"
    );
    Ok(refused)
}
