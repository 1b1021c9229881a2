//! `bcctl`, the real binary, as the end-to-end tests run it: in a private
//! environment (the server's URL, a token, its own config directory), its
//! exit code and output captured.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::server::{Server, sibling_binary};

/// The `bcctl` executable beside the api-server binary under test (`just
/// test` builds every binary first).
pub fn path() -> PathBuf {
    sibling_binary("bcctl", "cargo build -p bcctl")
}

/// What one run printed.
#[derive(Debug)]
pub struct Run {
    /// The exit code (-1: killed by a signal).
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Run {
    #[track_caller]
    /// Its stdout, asserting it exited 0.
    pub fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "bcctl failed: {self:?}");
        &self.stdout
    }

    #[track_caller]
    /// Its stdout as JSON, asserting it exited 0.
    pub fn json(&self) -> Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("not JSON ({e}): {self:?}"))
    }
}

/// A bcctl environment: the server's URL, a token, and a private config
/// directory.
pub struct Ctl {
    /// `BC_ENDPOINT` (empty: unset).
    pub endpoint: String,
    /// `BC_TOKEN` (`None`: unset).
    pub token: Option<String>,
    /// `XDG_CONFIG_HOME`.
    pub config: tempfile::TempDir,
    /// `COLUMNS`, the width tables are laid out for.
    pub columns: u16,
}

impl Ctl {
    /// With the server's URL and `token`, and a fresh config directory.
    pub fn new(s: &Server, token: &str) -> Ctl {
        Ctl {
            endpoint: s.url.clone(),
            token: Some(token.to_owned()),
            config: tempfile::tempdir().expect("tempdir"),
            columns: 120,
        }
    }

    /// The command running bcctl with `args` in this environment.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(path());
        cmd.args(args)
            .env_remove("BC_ENDPOINT")
            .env_remove("BC_TOKEN")
            .env_remove("BC_TENANT")
            .env_remove("BC_PROFILE")
            .env("XDG_CONFIG_HOME", self.config.path())
            .env("COLUMNS", self.columns.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if !self.endpoint.is_empty() {
            cmd.env("BC_ENDPOINT", &self.endpoint);
        }
        if let Some(t) = &self.token {
            cmd.env("BC_TOKEN", t);
        }
        cmd
    }

    /// Runs bcctl with `args`, `stdin` on its input (at most 60 s).
    pub async fn run_with(&self, args: &[&str], stdin: &str) -> Run {
        let mut child = self.command(args).spawn().expect("spawn bcctl");
        let mut input = child.stdin.take().expect("stdin");
        input.write_all(stdin.as_bytes()).await.expect("stdin");
        drop(input);
        let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
            .await
            .expect("bcctl hung")
            .expect("bcctl");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs bcctl with `args` and nothing on its input.
    pub async fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, "").await
    }
}
