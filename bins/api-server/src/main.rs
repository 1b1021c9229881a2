//! api-server: reads its configuration (`api-server --help`), sets up
//! tracing, serves.
//!
//! `api-server openapi` prints the OpenAPI document generated from the
//! method registry and exits (no database needed).

use std::process::ExitCode;

use api_server::config::{Args, Command};

/// The exit code of a configuration that cannot be served.
const BAD_CONFIGURATION: u8 = 1;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args = match telemetry::config::parse_from::<Args, _, _>(std::env::args_os()) {
        Ok(args) => args,
        Err(e) => return Ok(telemetry::config::exit_code(&e, BAD_CONFIGURATION)),
    };
    if let Some(Command::Openapi) = args.command {
        let doc = api_server::registry::Registry::new().openapi();
        #[expect(clippy::print_stdout, reason = "the document is the command's output")]
        {
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    telemetry::logging::init();
    let config = api_server::Config::from_args(&args)?;
    if let Err(e) = api_server::run(config).await {
        tracing::error!(error = format!("{e:#}"), "api-server failed");
        return Err(e);
    }
    Ok(ExitCode::SUCCESS)
}
