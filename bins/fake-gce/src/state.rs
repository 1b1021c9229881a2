//! The state file (`BC_FAKE_GCE_STATE`, [`FakeGce::with_state_file`]): the
//! fake's world kept across restarts.
//!
//! The file is one JSON object, written whole after every request that
//! changed the world (before that request is answered) and when serving
//! stops, and read once at start:
//!
//! ```json
//! {
//!   "format": "fake-gce-state", "version": 1,
//!   "reservations": { "nextId": "…", "projects": { "<project>": {
//!     "zones": ["<zone>"],
//!     "reservations": [{ "zone", "name", "id", "count", "inUseCount",
//!                        "machineType", "status" }] } } },
//!   "vms": { "nextId": "…", "clockMs": null,
//!     "zones": { "<project>": ["<zone>"] },
//!     "instances": [{ "project", "zone", "name", "id", "machineType",
//!       "labels", "reservationAffinity", "reservation", "counted",
//!       "status", "creationTimestamp" }],
//!     "operations": [{ "project", "zone", "name", "id", "operationType",
//!       "target", "targetId", "pollsLeft", "readyAtMs", "done", "error",
//!       "effect", "insertTime", "endTime" }],
//!     "requestIds": [{ "project", "requestId", "zone", "operation" }],
//!     "runs": { "<vm name>": [[fromMs, toMs | null]] },
//!     "created": { "<vm name>": n } },
//!   "serviceAccounts": { "<email>": "<public key PEM>" }
//! }
//! ```
//!
//! Ids are decimal strings; `readyAtMs` is the wall time (epoch ms) an
//! operation's latency ends, so an operation in flight at a stop finishes
//! on time after the start (at once if that time has passed). Nothing else
//! is kept: issued access tokens (clients get a 401 and fetch another),
//! injected failures, delays, unreachable and stocked-out zones, the
//! counts of `/fake/calls`, `/fake/tokens`, `/fake/token-scopes` and
//! `/fake/stats`, the write-quota windows and the `/fake/requests` log all
//! start afresh. The file holds no secret: public keys, and names and
//! labels of the fake's own making.
//!
//! Each write goes to `PATH.tmp` (mode 0600) and is renamed over `PATH`, so
//! a process killed at any point leaves the last whole state behind.

use std::error::Error;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::FakeGce;
use crate::store::Store;
use crate::vms::Vms;

/// The `format` of a state file.
pub const STATE_FORMAT: &str = "fake-gce-state";
/// The `version` of the state files this build writes and reads.
pub const STATE_VERSION: u64 = 1;

/// Where the world is kept, and the text last written there.
#[derive(Debug)]
pub(crate) struct Persist {
    path: PathBuf,
    written: Mutex<String>,
}

/// A state file that could not be read, understood or written.
#[derive(Debug)]
pub struct StateError {
    path: PathBuf,
    why: String,
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "state file {}: {}", self.path.display(), self.why)
    }
}

impl Error for StateError {}

impl FakeGce {
    /// Keeps the fake's world in the file at `path` across restarts.
    ///
    /// If the file exists its world replaces this fake's (an unreadable or
    /// malformed file is an error: the fake never starts empty over a world
    /// it cannot read); if it does not, the fake starts empty. Either way
    /// the file is written at once, so a path that cannot be written fails
    /// here, and then after every request that changed the world and when
    /// [`serve`](crate::serve) stops.
    pub fn with_state_file(mut self, path: impl Into<PathBuf>) -> Result<Self, StateError> {
        let path = path.into();
        let fail = |why: String| StateError {
            path: path.clone(),
            why,
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let world: Value = serde_json::from_str(&text)
                    .map_err(|e| fail(format!("not JSON ({e}); move it away to start empty")))?;
                self.restore(&world).map_err(|why| {
                    fail(format!(
                        "not a world this fake-gce reads ({why}); move it away to start empty"
                    ))
                })?;
                let vms = world.get("vms");
                let count = |key: &str| vms.and_then(|v| v.get(key)).and_then(Value::as_array);
                tracing::info!(
                    path = %path.display(),
                    reservations = self.store().reservation_count(),
                    vms = count("instances").map_or(0, Vec::len),
                    operations = count("operations").map_or(0, Vec::len),
                    "world restored from the state file"
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                tracing::info!(
                    path = %path.display(),
                    "no state file yet: starting empty, the world will be kept there"
                );
            }
            Err(e) => return Err(fail(e.to_string())),
        }
        self.persist = Some(std::sync::Arc::new(Persist {
            path,
            written: Mutex::new(String::new()),
        }));
        self.save_state()?;
        Ok(self)
    }

    /// Writes the state file if the world changed since it was last
    /// written (nothing without [`with_state_file`](Self::with_state_file)).
    pub fn save_state(&self) -> Result<(), StateError> {
        let Some(persist) = &self.persist else {
            return Ok(());
        };
        // Held while the world is read and written: the last write holds
        // the newest world.
        let mut written = persist
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let text = self.state_text();
        if *written == text {
            return Ok(());
        }
        write_atomically(&persist.path, &text).map_err(|e| StateError {
            path: persist.path.clone(),
            why: format!("cannot write it: {e}"),
        })?;
        *written = text;
        Ok(())
    }

    /// The world as the state file holds it.
    fn state_text(&self) -> String {
        let (reservations, vms) = {
            let vms = self.vms();
            let store = self.store();
            (store.snapshot(), vms.snapshot())
        };
        let accounts = self.auth().public_keys().clone();
        let world = json!({
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "reservations": reservations,
            "vms": vms,
            "serviceAccounts": accounts,
        });
        let mut text = serde_json::to_string_pretty(&world).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Replaces the world with the one a state file holds.
    fn restore(&self, world: &Value) -> Result<(), String> {
        let format = text(world, "format")?;
        let version = uint(world, "version")?;
        if format != STATE_FORMAT || version != STATE_VERSION {
            return Err(format!(
                "format {format:?} version {version}, not {STATE_FORMAT:?} version {STATE_VERSION}"
            ));
        }
        let store = Store::restore(field(world, "reservations")?)
            .map_err(|why| format!("reservations: {why}"))?;
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let vms = Vms::restore(field(world, "vms")?, Instant::now(), now_ms)
            .map_err(|why| format!("vms: {why}"))?;
        let mut auth = self.auth();
        for (email, pem) in object(world, "serviceAccounts")? {
            let pem = pem
                .as_str()
                .ok_or_else(|| format!("serviceAccounts.{email}: not a string"))?;
            auth.register(email, pem)
                .map_err(|why| format!("serviceAccounts.{email}: {why}"))?;
        }
        *self.vms.lock().unwrap_or_else(PoisonError::into_inner) = vms;
        *self.store() = store;
        Ok(())
    }
}

/// Writes `text` to `PATH.tmp` (mode 0600) and renames it over `path`.
fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        let file = options.open(&tmp)?;
        // A `.tmp` left by an older run keeps its mode when reopened.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        write_all(file, text)?;
    }
    #[cfg(not(unix))]
    write_all(options.open(&tmp)?, text)?;
    std::fs::rename(&tmp, path)
}

fn write_all(mut file: std::fs::File, text: &str) -> std::io::Result<()> {
    file.write_all(text.as_bytes())?;
    file.flush()
}

// Reading the file's fields: each names what is missing or malformed.

pub(crate) fn field<'a>(v: &'a Value, key: &str) -> Result<&'a Value, String> {
    v.get(key).ok_or_else(|| format!("no '{key}'"))
}

pub(crate) fn text<'a>(v: &'a Value, key: &str) -> Result<&'a str, String> {
    field(v, key)?
        .as_str()
        .ok_or_else(|| format!("'{key}' is not a string"))
}

/// A string, or `None` for `null` or absent.
pub(crate) fn opt_text<'a>(v: &'a Value, key: &str) -> Result<Option<&'a str>, String> {
    match v.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("'{key}' is not a string or null")),
    }
}

/// An id: a decimal string.
pub(crate) fn id(v: &Value, key: &str) -> Result<u64, String> {
    text(v, key)?
        .parse()
        .map_err(|_| format!("'{key}' is not a decimal id"))
}

pub(crate) fn uint(v: &Value, key: &str) -> Result<u64, String> {
    field(v, key)?
        .as_u64()
        .ok_or_else(|| format!("'{key}' is not a whole number"))
}

pub(crate) fn int(v: &Value, key: &str) -> Result<i64, String> {
    field(v, key)?
        .as_i64()
        .ok_or_else(|| format!("'{key}' is not an integer"))
}

pub(crate) fn flag(v: &Value, key: &str) -> Result<bool, String> {
    field(v, key)?
        .as_bool()
        .ok_or_else(|| format!("'{key}' is not a boolean"))
}

pub(crate) fn list<'a>(v: &'a Value, key: &str) -> Result<&'a Vec<Value>, String> {
    field(v, key)?
        .as_array()
        .ok_or_else(|| format!("'{key}' is not an array"))
}

pub(crate) fn object<'a>(v: &'a Value, key: &str) -> Result<&'a Map<String, Value>, String> {
    field(v, key)?
        .as_object()
        .ok_or_else(|| format!("'{key}' is not an object"))
}

/// The strings of an array.
pub(crate) fn strings(v: &Value, what: &str) -> Result<Vec<String>, String> {
    v.as_array()
        .ok_or_else(|| format!("{what} is not an array"))?
        .iter()
        .map(|s| {
            s.as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{what} holds a non-string"))
        })
        .collect()
}
