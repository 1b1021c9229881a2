//! Logging of the product's servers: one setup for all of them.

/// Sets up logging to standard error: `RUST_LOG` filters (default `info`),
/// `RUST_LOG_FORMAT=json` writes one JSON object per line with the event's
/// fields at the top level and the current span beside them.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let json = std::env::var("RUST_LOG_FORMAT").is_ok_and(|v| v == "json");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init();
    } else {
        builder.init();
    }
}
