//! `file:` credentials under `BC_CREDENTIAL_DIR`: whether a path may be
//! named (at check time, as far as it exists) and reading it at use, fully
//! resolved and checked again.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use super::{CREDENTIAL_DIR_VAR, PolicyError, ProviderPolicy, policy_error};
use crate::ProviderError;

/// The largest credential file read (a token or a service-account key is a
/// few KiB).
const MAX_CREDENTIAL_FILE_BYTES: u64 = 64 * 1024;

impl ProviderPolicy {
    /// Whether `file:/path` may be read (root accounts), as far as the path
    /// exists now; the reason if not.
    pub(super) fn file_allowed(&self, path: &Path) -> Result<(), String> {
        let Some(dir) = &self.credential_dir else {
            return Err(format!(
                "file: references need {CREDENTIAL_DIR_VAR}, which is not set"
            ));
        };
        if !path.is_absolute() {
            return Err("the path is not absolute".into());
        }
        let resolved = resolve_existing(&normalize(path));
        if resolved.starts_with(dir) && resolved != *dir {
            Ok(())
        } else {
            Err(format!("the path is not inside {CREDENTIAL_DIR_VAR}"))
        }
    }

    /// Reads a `file:` credential at use: the path fully resolved must be a
    /// regular file inside `BC_CREDENTIAL_DIR`; the resolved path is what is
    /// opened (so a symlink swapped in after the check is not followed out),
    /// and on Linux the opened file's own path is checked again. Errors name
    /// the path, never the content.
    pub(crate) fn read_credential_file(&self, path: &Path) -> Result<String, ProviderError> {
        let shown = path.display();
        let Some(dir) = &self.credential_dir else {
            return Err(ProviderError::NotAllowed(format!(
                "file:{shown}: file: references need {CREDENTIAL_DIR_VAR}, which is not set"
            )));
        };
        let unreadable = |e: std::io::Error| {
            ProviderError::Credentials(format!("cannot read token file {shown}: {}", e.kind()))
        };
        let outside = || {
            ProviderError::NotAllowed(format!(
                "file:{shown}: the path resolves outside {CREDENTIAL_DIR_VAR}"
            ))
        };
        let canonical = std::fs::canonicalize(path).map_err(unreadable)?;
        if !canonical.starts_with(dir) || canonical == *dir {
            return Err(outside());
        }
        // Before opening: opening a FIFO would block.
        if !std::fs::metadata(&canonical).map_err(unreadable)?.is_file() {
            return Err(ProviderError::Credentials(format!(
                "token file {shown} is not a regular file"
            )));
        }
        let file = std::fs::File::open(&canonical).map_err(unreadable)?;
        if !file.metadata().map_err(unreadable)?.is_file() {
            return Err(ProviderError::Credentials(format!(
                "token file {shown} is not a regular file"
            )));
        }
        if let Some(opened) = opened_path(&file)
            && !opened.starts_with(dir)
        {
            return Err(outside());
        }
        let mut content = String::new();
        file.take(MAX_CREDENTIAL_FILE_BYTES + 1)
            .read_to_string(&mut content)
            .map_err(unreadable)?;
        if content.len() as u64 > MAX_CREDENTIAL_FILE_BYTES {
            return Err(ProviderError::Credentials(format!(
                "token file {shown} is larger than {MAX_CREDENTIAL_FILE_BYTES} bytes"
            )));
        }
        Ok(content)
    }
}

pub(super) fn parse_dir(value: &str) -> Result<PathBuf, PolicyError> {
    let path = Path::new(value);
    if !path.is_absolute() {
        return Err(policy_error(CREDENTIAL_DIR_VAR, "is not an absolute path"));
    }
    let canonical = std::fs::canonicalize(path).map_err(|e| {
        policy_error(
            CREDENTIAL_DIR_VAR,
            format!("cannot be resolved ({})", e.kind()),
        )
    })?;
    if !canonical.is_dir() {
        return Err(policy_error(CREDENTIAL_DIR_VAR, "is not a directory"));
    }
    if canonical.parent().is_none() {
        return Err(policy_error(
            CREDENTIAL_DIR_VAR,
            "is the root directory, which would expose every file",
        ));
    }
    Ok(canonical)
}

/// `path` with `.` and `..` resolved lexically (`..` above the root stays at
/// the root). Symlinks are not looked at.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir | Component::Normal(_) => {
                out.push(component.as_os_str());
            }
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
        }
    }
    out
}

/// A normalised absolute path with its longest existing ancestor resolved
/// (symlinks followed) and the rest appended as written.
fn resolve_existing(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut current = path;
    loop {
        if let Ok(canonical) = std::fs::canonicalize(current) {
            let mut resolved = canonical;
            resolved.extend(rest.iter().rev());
            return resolved;
        }
        match (current.parent(), current.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                current = parent;
            }
            // The root itself did not resolve: nothing to follow.
            _ => return path.to_path_buf(),
        }
    }
}

/// The path of an open file as the kernel sees it (Linux `/proc/self/fd`);
/// `None` where that is not available.
#[cfg(target_os = "linux")]
fn opened_path(file: &std::fs::File) -> Option<PathBuf> {
    use std::os::fd::AsRawFd;
    std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()
}

#[cfg(not(target_os = "linux"))]
fn opened_path(_file: &std::fs::File) -> Option<PathBuf> {
    None
}
