//! `bcctl login`: a profile saved after the token is checked.

use std::io::{IsTerminal, Read};

use clap::Args;
use serde_json::Map;

use crate::cli;
use crate::client::Client;
use crate::config;
use crate::exit::{Failure, usage};

/// `bcctl login`: the global --endpoint (required), --tenant (default
/// `root`) and --profile (default `default`) say what to save.
#[derive(Debug, Args)]
pub struct Login {
    /// Save without checking the token against the server.
    #[arg(long)]
    pub no_verify: bool,
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

pub(super) async fn run_login(g: &cli::Global, login: Login) -> Result<(), Failure> {
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
