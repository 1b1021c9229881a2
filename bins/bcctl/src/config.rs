//! Where requests go and with which key. In order: `--endpoint`, then
//! `BC_ENDPOINT`, then the profile; the token from `BC_TOKEN`, then the
//! profile (never from a flag: a token on the command line ends up in shell
//! history and in every process listing); the acting tenant from
//! `--tenant`, `BC_TENANT`, the profile, else `root`.
//!
//! Profiles live in `$XDG_CONFIG_HOME/bcctl/config.toml` (else
//! `~/.config/bcctl/config.toml`), written by `bcctl login` with mode 0600
//! in a directory of mode 0700:
//!
//! ```toml
//! default = "dev"
//!
//! [profiles.dev]
//! endpoint = "http://127.0.0.1:8080"
//! tenant = "root"
//! token = "..."
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::exit::Failure;

/// The configuration file.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ConfigFile {
    /// The profile used without `--profile`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Named profiles.
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// One profile.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Profile {
    /// The api-server's base URL.
    pub endpoint: String,
    /// The acting tenant.
    pub tenant: String,
    /// The API key's secret.
    pub token: String,
}

/// Where requests go.
#[derive(Debug, Clone)]
pub struct Target {
    /// The api-server's base URL, without a trailing slash.
    pub endpoint: String,
    /// The API key's secret.
    pub token: String,
    /// The acting tenant.
    pub tenant: String,
}

/// The configuration file's path.
pub fn path() -> Result<PathBuf, Failure> {
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => PathBuf::from(home).join(".config"),
            None => {
                return Err(Failure::Config(
                    "neither XDG_CONFIG_HOME nor HOME is set: nowhere to keep profiles".into(),
                ));
            }
        },
    };
    Ok(base.join("bcctl").join("config.toml"))
}

/// Reads the configuration file (empty when there is none).
pub fn load() -> Result<ConfigFile, Failure> {
    let path = path()?;
    match std::fs::read_to_string(&path) {
        Ok(text) => toml::from_str(&text)
            .map_err(|e| Failure::Config(format!("{} is not valid: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ConfigFile::default()),
        Err(e) => Err(Failure::Config(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// Writes the configuration file: readable by its owner only, replaced
/// atomically.
pub fn save(config: &ConfigFile) -> Result<PathBuf, Failure> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
    let path = path()?;
    let dir = path
        .parent()
        .ok_or_else(|| Failure::Config("no directory for the configuration".into()))?;
    let io = |what: &str, e: std::io::Error| Failure::Config(format!("{what}: {e}"));
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| io(&format!("cannot create {}", dir.display()), e))?;
    let text = toml::to_string_pretty(config).map_err(|e| Failure::Unexpected(e.to_string()))?;
    let tmp = dir.join(".config.toml.tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io(&format!("cannot write {}", tmp.display()), e))?;
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|e| io(&format!("cannot write {}", tmp.display()), e))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| io("cannot restrict the file", e))?;
    std::fs::rename(&tmp, &path).map_err(|e| io(&format!("cannot write {}", path.display()), e))?;
    Ok(path)
}

/// The profile name in use: `--profile`, `BC_PROFILE`, the file's default,
/// else `default`.
pub fn profile_name(flag: Option<&str>, file: &ConfigFile) -> String {
    flag.map(str::to_owned)
        .or_else(|| env("BC_PROFILE"))
        .or_else(|| file.default.clone())
        .unwrap_or_else(|| "default".into())
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Resolves where requests go from the flags, the environment and the
/// profile.
pub fn resolve(
    endpoint: Option<&str>,
    tenant: Option<&str>,
    profile: Option<&str>,
) -> Result<Target, Failure> {
    let file = load()?;
    let name = profile_name(profile, &file);
    let chosen = file.profiles.get(&name);
    if profile.is_some() && chosen.is_none() {
        return Err(Failure::Config(format!(
            "no profile {name:?} (known: {}); create it with bcctl login --profile {name}",
            file.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
        )));
    }
    let endpoint = endpoint
        .map(str::to_owned)
        .or_else(|| env("BC_ENDPOINT"))
        .or_else(|| chosen.map(|p| p.endpoint.clone()))
        .ok_or_else(|| {
            Failure::Config(
                "no endpoint: pass --endpoint, set BC_ENDPOINT, or run bcctl login".into(),
            )
        })?;
    let token = env("BC_TOKEN")
        .or_else(|| chosen.map(|p| p.token.clone()))
        .ok_or_else(|| Failure::Config("no token: set BC_TOKEN or run bcctl login".into()))?;
    let tenant = tenant
        .map(str::to_owned)
        .or_else(|| env("BC_TENANT"))
        .or_else(|| chosen.map(|p| p.tenant.clone()))
        .unwrap_or_else(|| "root".into());
    Ok(Target {
        endpoint: endpoint.trim_end_matches('/').to_owned(),
        token,
        tenant,
    })
}
