//! api-server: reads config, sets up tracing, serves.
//!
//! `api-server openapi` prints the OpenAPI document generated from the
//! method registry and exits (no database needed).

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("openapi") {
        let doc = api_server::registry::Registry::new().openapi();
        #[expect(clippy::print_stdout, reason = "the document is the command's output")]
        {
            println!("{}", serde_json::to_string_pretty(&doc)?);
        }
        return Ok(());
    }
    telemetry::logging::init();
    let config = api_server::Config::from_env()?;
    if let Err(e) = api_server::run(config).await {
        tracing::error!(error = format!("{e:#}"), "api-server failed");
        return Err(e);
    }
    Ok(())
}
