//! Content negotiation of the exposition, as Prometheus' own client
//! libraries do it: OpenMetrics text when the scraper's `Accept` header asks
//! for it, the 0.0.4 text format otherwise (what `promtool check metrics`
//! and older scrapers read).

/// The content type of the 0.0.4 text format.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The two formats a scrape can get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// OpenMetrics 1.0 text (`application/openmetrics-text`).
    OpenMetrics,
    /// The Prometheus 0.0.4 text format (`text/plain`).
    Text,
}

impl Format {
    /// The format an `Accept` header asks for: of the media types it lists
    /// with a non-zero weight, the heaviest of `application/openmetrics-text`
    /// and `text/plain` (the first on a tie); text when it names neither.
    ///
    /// ```
    /// use telemetry::Format;
    /// assert_eq!(Format::negotiate(None), Format::Text);
    /// let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,\
    ///                   text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    /// assert_eq!(Format::negotiate(Some(prometheus)), Format::OpenMetrics);
    /// assert_eq!(Format::negotiate(Some("text/plain")), Format::Text);
    /// ```
    pub fn negotiate(accept: Option<&str>) -> Format {
        let mut best: Option<(f64, Format)> = None;
        for part in accept.unwrap_or_default().split(',') {
            let mut params = part.split(';').map(str::trim);
            let media = params.next().unwrap_or_default().to_ascii_lowercase();
            let format = match media.as_str() {
                "application/openmetrics-text" => Format::OpenMetrics,
                "text/plain" => Format::Text,
                _ => continue,
            };
            let q = params
                .filter_map(|p| p.split_once('='))
                .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
                .and_then(|(_, v)| v.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            if q > 0.0 && best.is_none_or(|(w, _)| q > w) {
                best = Some((q, format));
            }
        }
        best.map_or(Format::Text, |(_, f)| f)
    }

    /// The answer's `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => crate::CONTENT_TYPE,
            Format::Text => TEXT_CONTENT_TYPE,
        }
    }
}

/// Rewrites an OpenMetrics exposition (as `prometheus-client` writes it) in
/// the 0.0.4 text format: no `# EOF`, `# UNIT` or exemplars; a counter's
/// family is named with its `_total` suffix and loses its `_created`
/// samples; an info metric is a gauge named `_info`; the OpenMetrics-only
/// types are untyped.
pub fn to_text(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // The family's HELP waits for its TYPE, which says what to rename.
    let mut help: Option<(&str, String)> = None;
    let mut family_type = "";
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, text) = rest.split_once(' ').unwrap_or((rest, ""));
            help = Some((name, text.replace("\\\"", "\"")));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, "unknown"));
            family_type = kind;
            let (name, kind) = match kind {
                "counter" => (format!("{name}_total"), "counter"),
                "info" => (format!("{name}_info"), "gauge"),
                "gauge" | "histogram" | "summary" => (name.to_owned(), kind),
                _ => (name.to_owned(), "untyped"),
            };
            if let Some((_, text)) = help.take() {
                out.push_str(&format!("# HELP {name} {text}\n"));
            }
            out.push_str(&format!("# TYPE {name} {kind}\n"));
            continue;
        }
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        let sample = without_exemplar(line);
        let name = sample.split(['{', ' ']).next().unwrap_or_default();
        if name.ends_with("_created") && matches!(family_type, "counter" | "histogram" | "summary")
        {
            continue;
        }
        out.push_str(sample);
        out.push('\n');
    }
    out
}

/// A sample line without its exemplar (` # {labels} value [timestamp]`),
/// found after the label set so a `#` inside a label value is kept.
fn without_exemplar(line: &str) -> &str {
    let mut in_quotes = false;
    let mut escaped = false;
    let mut labels_closed = !line.contains('{');
    for (i, c) in line.char_indices() {
        if !labels_closed {
            match c {
                _ if escaped => escaped = false,
                '\\' if in_quotes => escaped = true,
                '"' => in_quotes = !in_quotes,
                '}' if !in_quotes => labels_closed = true,
                _ => {}
            }
            continue;
        }
        if c == '#' && line[..i].ends_with(' ') {
            return line[..i].trim_end();
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_follows_the_weights() {
        assert_eq!(Format::negotiate(Some("")), Format::Text);
        assert_eq!(Format::negotiate(Some("*/*")), Format::Text);
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text; version=1.0.0")),
            Format::OpenMetrics
        );
        assert_eq!(
            Format::negotiate(Some("text/plain;q=0.9, application/openmetrics-text;q=0.5")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("application/openmetrics-text;q=0, text/plain")),
            Format::Text
        );
        assert_eq!(
            Format::negotiate(Some("Application/OpenMetrics-Text")),
            Format::OpenMetrics
        );
    }

    #[test]
    fn openmetrics_becomes_the_text_format() {
        let om = "# HELP bc_api_requests API \\\"requests\\\".\n\
                  # TYPE bc_api_requests counter\n\
                  bc_api_requests_total{method=\"a # b\",code=\"OK\"} 3 # {trace=\"x\"} 1.0\n\
                  bc_api_requests_created{method=\"a # b\",code=\"OK\"} 1.7e9\n\
                  # HELP bc_wait Time waited.\n\
                  # TYPE bc_wait histogram\n\
                  # UNIT bc_wait seconds\n\
                  bc_wait_bucket{le=\"+Inf\"} 1\n\
                  bc_wait_sum 0.5\n\
                  bc_wait_count 1\n\
                  # HELP bc_build The build.\n\
                  # TYPE bc_build info\n\
                  bc_build_info{version=\"1\"} 1\n\
                  # HELP bc_up Up.\n\
                  # TYPE bc_up gauge\n\
                  bc_up 1\n\
                  # EOF\n";
        let text = to_text(om);
        assert_eq!(
            text,
            "# HELP bc_api_requests_total API \"requests\".\n\
             # TYPE bc_api_requests_total counter\n\
             bc_api_requests_total{method=\"a # b\",code=\"OK\"} 3\n\
             # HELP bc_wait Time waited.\n\
             # TYPE bc_wait histogram\n\
             bc_wait_bucket{le=\"+Inf\"} 1\n\
             bc_wait_sum 0.5\n\
             bc_wait_count 1\n\
             # HELP bc_build_info The build.\n\
             # TYPE bc_build_info gauge\n\
             bc_build_info{version=\"1\"} 1\n\
             # HELP bc_up Up.\n\
             # TYPE bc_up gauge\n\
             bc_up 1\n"
        );
    }
}
