//! Failures and exit codes. Every failure prints one `error:` line on
//! standard error (the API's code and message), then the error's details as
//! JSON when there are any; standard output gets nothing.
//!
//! | code | class |
//! |---|---|
//! | 0 | success |
//! | 1 | unexpected: `INTERNAL`, an answer bcctl cannot read, a redirect |
//! | 2 | usage: bad flags or fields, found before anything is sent |
//! | 3 | configuration: no endpoint or token, an unreadable profile |
//! | 4 | `INVALID_INPUT`, `PAYLOAD_TOO_LARGE`, `METHOD_NOT_ALLOWED` |
//! | 5 | `UNAUTHENTICATED`, `ACCESS_DENIED` |
//! | 6 | `NOT_FOUND` |
//! | 7 | `CONFLICT`, `INVALID_STATE`, `CAPACITY_UNAVAILABLE`, `QUOTA_EXCEEDED` |
//! | 8 | `UNAVAILABLE`, `RATE_LIMITED`, the server unreachable: worth a retry |

use std::fmt;

use serde_json::Value;

/// Why a command failed.
#[derive(Debug)]
pub enum Failure {
    /// Bad flags or fields (exit 2).
    Usage(String),
    /// No endpoint or token, or an unreadable configuration (exit 3).
    Config(String),
    /// The API answered an error.
    Api {
        /// HTTP status.
        status: u16,
        /// The contract's code (`NOT_FOUND`).
        code: String,
        /// Its message.
        message: String,
        /// Its details.
        details: Value,
    },
    /// The server could not be reached (exit 8).
    Unreachable(String),
    /// Anything else (exit 1).
    Unexpected(String),
}

impl Failure {
    /// The process exit code of this failure's class.
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => 2,
            Failure::Config(_) => 3,
            Failure::Unreachable(_) => 8,
            Failure::Unexpected(_) => 1,
            Failure::Api { code, .. } => match code.as_str() {
                "INVALID_INPUT" | "PAYLOAD_TOO_LARGE" | "METHOD_NOT_ALLOWED" => 4,
                "UNAUTHENTICATED" | "ACCESS_DENIED" => 5,
                "NOT_FOUND" => 6,
                "CONFLICT" | "INVALID_STATE" | "CAPACITY_UNAVAILABLE" | "QUOTA_EXCEEDED" => 7,
                "UNAVAILABLE" | "RATE_LIMITED" => 8,
                _ => 1,
            },
        }
    }

    /// What goes to standard error.
    pub fn report(&self) -> String {
        match self {
            Failure::Api {
                code,
                message,
                details,
                ..
            } => {
                let mut out = format!("error: {code}: {message}");
                if details.as_object().is_some_and(|d| !d.is_empty()) {
                    let pretty = serde_json::to_string_pretty(details).unwrap_or_default();
                    out.push_str(&format!("\ndetails: {pretty}"));
                }
                out
            }
            other => format!("error: {other}"),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Usage(m) | Failure::Config(m) | Failure::Unexpected(m) => f.write_str(m),
            Failure::Unreachable(m) => write!(f, "the server could not be reached: {m}"),
            Failure::Api { code, message, .. } => write!(f, "{code}: {message}"),
        }
    }
}

impl std::error::Error for Failure {}

/// A usage failure.
pub fn usage(message: impl Into<String>) -> Failure {
    Failure::Usage(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: &str) -> Failure {
        Failure::Api {
            status: 400,
            code: code.into(),
            message: "m".into(),
            details: serde_json::json!({}),
        }
    }

    #[test]
    fn each_class_has_its_code() {
        assert_eq!(api("INVALID_INPUT").exit_code(), 4);
        assert_eq!(api("ACCESS_DENIED").exit_code(), 5);
        assert_eq!(api("NOT_FOUND").exit_code(), 6);
        assert_eq!(api("CAPACITY_UNAVAILABLE").exit_code(), 7);
        assert_eq!(api("UNAVAILABLE").exit_code(), 8);
        assert_eq!(api("INTERNAL").exit_code(), 1);
        assert_eq!(usage("x").exit_code(), 2);
        assert_eq!(Failure::Config("x".into()).exit_code(), 3);
    }
}
