//! reconciler-worker: reads config, sets up tracing, runs the passes.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    telemetry::logging::init();
    let config = match reconciler_worker::Config::from_env_and_args(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "bad configuration");
            return ExitCode::from(2);
        }
    };
    match reconciler_worker::run(config, reconciler_worker::shutdown_signal()).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "reconciler-worker failed");
            ExitCode::FAILURE
        }
    }
}
