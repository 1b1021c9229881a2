//! reconciler-worker: reads its configuration (`reconciler-worker --help`),
//! sets up tracing, runs the passes.

use std::process::ExitCode;

use reconciler_worker::config::{Args, Config};

/// The exit code of a usage or configuration error.
const BAD_CONFIGURATION: u8 = 2;

#[tokio::main]
async fn main() -> ExitCode {
    let args = match telemetry::config::parse_from::<Args, _, _>(std::env::args_os()) {
        Ok(args) => args,
        Err(e) => return telemetry::config::exit_code(&e, BAD_CONFIGURATION),
    };
    telemetry::logging::init();
    let config = match Config::from_args(&args) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "bad configuration");
            return ExitCode::from(BAD_CONFIGURATION);
        }
    };
    match reconciler_worker::run(config, telemetry::signals::shutdown()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "reconciler-worker failed");
            ExitCode::FAILURE
        }
    }
}
