//! `bcctl secrets`: values in, names, kinds and fingerprints out.

use std::io::{IsTerminal, Read};

use clap::Subcommand;
use serde_json::json;

use super::Ctx;
use crate::exit::{Failure, usage};
use crate::output::{text, time};

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

pub(super) async fn secrets(ctx: &Ctx, s: Secrets) -> Result<(), Failure> {
    match s {
        Secrets::List => {
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
        Secrets::Put { name, from_file } => {
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
        Secrets::Delete { name } => {
            ctx.call_quiet("secrets.delete", json!({ "name": name }))
                .await?;
        }
    }
    Ok(())
}
