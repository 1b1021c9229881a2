//! The secret store's encryption (contract 3.9): AES-256-GCM from the
//! RustCrypto `aes-gcm` crate, a fresh random 96-bit nonce per value, the
//! tenant id and secret name as associated data (a ciphertext moved to
//! another row does not decrypt), and key ids for rotation.
//!
//! A [`Keyring`] holds the current key (`BC_SECRETS_KEY`), which every write
//! uses, and older keys (`BC_SECRETS_OLD_KEYS`) that are still read. A key's
//! id is the first 8 hex digits of its SHA-256, recorded with each row.

use std::fmt;

use aes_gcm::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use sha2::{Digest, Sha256};

/// Why a key or a sealed value could not be used. Never holds key material
/// or plaintext.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A configured key is not 32 bytes of base64.
    #[error("{0} must be 32 bytes, base64-encoded")]
    BadKey(&'static str),
    /// The row was sealed under a key that is not configured.
    #[error("the secret is encrypted under key {0}, which is not configured")]
    UnknownKey(String),
    /// Authentication failed: the ciphertext, nonce or row identity changed.
    #[error("the secret does not decrypt under key {0} for this tenant and name")]
    Corrupt(String),
    /// There is no current key to write under.
    #[error("no BC_SECRETS_KEY is configured")]
    NoKey,
}

/// One AES-256 key and its id.
#[derive(Clone)]
struct Key {
    id: String,
    cipher: Aes256Gcm,
}

impl Key {
    fn parse(text: &str, what: &'static str) -> Result<Key, KeyError> {
        let bytes = data_encoding::BASE64
            .decode(text.trim().as_bytes())
            .map_err(|_| KeyError::BadKey(what))?;
        if bytes.len() != 32 {
            return Err(KeyError::BadKey(what));
        }
        let id = hex8(&Sha256::digest(&bytes));
        let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|_| KeyError::BadKey(what))?;
        Ok(Key { id, cipher })
    }
}

fn hex8(digest: &[u8]) -> String {
    let mut hex = data_encoding::HEXLOWER.encode(digest);
    hex.truncate(8);
    hex
}

/// A value as stored: the key id, the nonce and the ciphertext (with its tag).
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The id of the key it is encrypted under.
    pub key_id: String,
    /// The 12-byte nonce.
    pub nonce: Vec<u8>,
    /// The ciphertext and the 16-byte tag.
    pub ciphertext: Vec<u8>,
}

impl fmt::Debug for Sealed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sealed")
            .field("key_id", &self.key_id)
            .field("ciphertext_len", &self.ciphertext.len())
            .finish()
    }
}

/// The keys the process may use: the current one, if any, and older ones.
#[derive(Clone, Default)]
pub struct Keyring {
    current: Option<Key>,
    old: Vec<Key>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("current", &self.current.as_ref().map(|k| &k.id))
            .field("old", &self.old.iter().map(|k| &k.id).collect::<Vec<_>>())
            .finish()
    }
}

impl Keyring {
    /// From `BC_SECRETS_KEY` (base64 of 32 bytes, optional) and
    /// `BC_SECRETS_OLD_KEYS` (comma-separated, optional).
    pub fn from_config(current: Option<&str>, old: Option<&str>) -> Result<Keyring, KeyError> {
        let current = match current.map(str::trim).filter(|s| !s.is_empty()) {
            Some(k) => Some(Key::parse(k, "BC_SECRETS_KEY")?),
            None => None,
        };
        let old = old
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|k| Key::parse(k, "BC_SECRETS_OLD_KEYS"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Keyring { current, old })
    }

    /// From the process environment.
    pub fn from_env() -> Result<Keyring, KeyError> {
        Keyring::from_config(
            std::env::var("BC_SECRETS_KEY").ok().as_deref(),
            std::env::var("BC_SECRETS_OLD_KEYS").ok().as_deref(),
        )
    }

    /// The id of the key writes use, if one is configured.
    pub fn current_id(&self) -> Option<&str> {
        self.current.as_ref().map(|k| k.id.as_str())
    }

    /// The ids of the older keys still read.
    pub fn old_ids(&self) -> Vec<&str> {
        self.old.iter().map(|k| k.id.as_str()).collect()
    }

    /// Logs which keys the process holds (ids only) at start.
    pub fn log_at_start(&self) {
        match self.current_id() {
            Some(id) => tracing::info!(current = id, old = ?self.old_ids(), "secrets key"),
            None => tracing::warn!(
                old = ?self.old_ids(),
                "secrets key: BC_SECRETS_KEY is not set, secrets.put is refused (no-secrets-key)"
            ),
        }
    }

    /// Encrypts `plaintext` for the secret `name` of `tenant` under the
    /// current key.
    pub fn seal(&self, tenant: &str, name: &str, plaintext: &str) -> Result<Sealed, KeyError> {
        let key = self.current.as_ref().ok_or(KeyError::NoKey)?;
        let nonce = Aes256Gcm::generate_nonce(&mut OsRng);
        let aad = associated_data(tenant, name);
        let ciphertext = key
            .cipher
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &aad,
                },
            )
            .map_err(|_| KeyError::Corrupt(key.id.clone()))?;
        Ok(Sealed {
            key_id: key.id.clone(),
            nonce: nonce.to_vec(),
            ciphertext,
        })
    }

    /// Decrypts a value sealed for the secret `name` of `tenant`.
    pub fn open(&self, tenant: &str, name: &str, sealed: &Sealed) -> Result<String, KeyError> {
        let key = self
            .current
            .iter()
            .chain(&self.old)
            .find(|k| k.id == sealed.key_id)
            .ok_or_else(|| KeyError::UnknownKey(sealed.key_id.clone()))?;
        let corrupt = || KeyError::Corrupt(sealed.key_id.clone());
        if sealed.nonce.len() != 12 {
            return Err(corrupt());
        }
        let aad = associated_data(tenant, name);
        let plaintext = key
            .cipher
            .decrypt(
                Nonce::from_slice(&sealed.nonce),
                Payload {
                    msg: &sealed.ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| corrupt())?;
        String::from_utf8(plaintext).map_err(|_| corrupt())
    }
}

/// The row's identity, bound into the tag. Tenant ids and secret names
/// never contain a NUL, so the encoding is unambiguous.
fn associated_data(tenant: &str, name: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(tenant.len() + name.len() + 20);
    aad.extend_from_slice(b"bc-secret\0");
    aad.extend_from_slice(tenant.as_bytes());
    aad.push(0);
    aad.extend_from_slice(name.as_bytes());
    aad
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    const K2: &str = "HxwdHhsaGRgXFhUUExIREA8ODQwLCgkIBwYFBAMCAQA=";

    fn ring(current: &str, old: &str) -> Keyring {
        Keyring::from_config(Some(current), Some(old)).expect("keys")
    }

    #[test]
    fn a_value_round_trips_and_is_not_stored_in_the_clear() {
        let ring = ring(K1, "");
        let sealed = ring.seal("acme", "gce", "tok-123456").expect("seal");
        assert_eq!(sealed.nonce.len(), 12);
        assert!(!sealed.ciphertext.windows(10).any(|w| w == b"tok-123456"));
        assert_eq!(
            ring.open("acme", "gce", &sealed).expect("open"),
            "tok-123456"
        );
    }

    #[test]
    fn each_seal_uses_a_fresh_nonce() {
        let ring = ring(K1, "");
        let a = ring.seal("acme", "gce", "same").expect("seal");
        let b = ring.seal("acme", "gce", "same").expect("seal");
        assert_ne!(a.nonce, b.nonce);
        assert_ne!(a.ciphertext, b.ciphertext);
    }

    #[test]
    fn a_ciphertext_moved_to_another_row_does_not_decrypt() {
        let ring = ring(K1, "");
        let sealed = ring.seal("acme", "gce", "v").expect("seal");
        assert!(matches!(
            ring.open("evil", "gce", &sealed),
            Err(KeyError::Corrupt(_))
        ));
        assert!(matches!(
            ring.open("acme", "other", &sealed),
            Err(KeyError::Corrupt(_))
        ));
        // "acme\0gce" must not equal "acm" + "e\0gce" or the like.
        assert!(matches!(
            ring.open("acme\0g", "ce", &sealed),
            Err(KeyError::Corrupt(_))
        ));
    }

    #[test]
    fn rotation_reads_old_keys_and_writes_under_the_new_one() {
        let before = ring(K1, "");
        let sealed = before.seal("acme", "gce", "v").expect("seal");
        let after = ring(K2, K1);
        assert_eq!(
            after.open("acme", "gce", &sealed).expect("old key read"),
            "v"
        );
        let resealed = after.seal("acme", "gce", "v").expect("seal");
        assert_eq!(Some(resealed.key_id.as_str()), after.current_id());
        assert_ne!(resealed.key_id, sealed.key_id);
        // Without the old key the row cannot be read, and says why.
        let forgot = ring(K2, "");
        assert_eq!(
            forgot.open("acme", "gce", &sealed),
            Err(KeyError::UnknownKey(sealed.key_id.clone()))
        );
    }

    #[test]
    fn a_tampered_ciphertext_is_refused() {
        let ring = ring(K1, "");
        let mut sealed = ring.seal("acme", "gce", "v").expect("seal");
        sealed.ciphertext[0] ^= 1;
        assert!(matches!(
            ring.open("acme", "gce", &sealed),
            Err(KeyError::Corrupt(_))
        ));
    }

    #[test]
    fn bad_keys_are_refused_without_echoing_them() {
        for bad in ["x", "c2hvcnQ=", "not base64!!"] {
            let got = Keyring::from_config(Some(bad), None).err();
            assert_eq!(got, Some(KeyError::BadKey("BC_SECRETS_KEY")), "{bad:?}");
        }
        let blank = Keyring::from_config(Some("  "), None).expect("blank is no key");
        assert_eq!(blank.current_id(), None);
        let err = Keyring::from_config(Some(K1), Some("c2hvcnQ=")).expect_err("short old key");
        assert_eq!(
            err.to_string(),
            "BC_SECRETS_OLD_KEYS must be 32 bytes, base64-encoded"
        );
        let none = Keyring::from_config(None, None).expect("no key is allowed");
        assert_eq!(none.seal("a", "b", "c"), Err(KeyError::NoKey));
    }

    #[test]
    fn key_ids_have_the_contract_length_and_keys_are_never_printed() {
        let ring = ring(K1, "");
        assert_eq!(ring.current_id().map(str::len), Some(8));
        assert!(!format!("{ring:?}").contains(K1));
    }
}
