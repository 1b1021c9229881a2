//! Sealed log cursors (contract 1.6): a `usage.list` position is the
//! record's platform-wide sequence number, which in clear would let a tenant
//! count the records every other tenant got between two of its own cursors.
//! A cursor here is that number and a tag of its reader, encrypted as one
//! AES-256 block under the database's cursor key: deterministic (the same
//! position gives the same cursor, so a poller can compare them), bound to
//! its reader (another tenant's cursor does not open), and it tells nothing
//! of the number inside.

use aes_gcm::aes::Aes256;
use aes_gcm::aes::cipher::generic_array::GenericArray;
use aes_gcm::aes::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};
use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use sha2::{Digest, Sha256};

use crate::error::{Result, StorageError};
use crate::schema::cursor_keys;

/// The first character of a sealed cursor.
const PREFIX: char = 'u';

/// Who reads a log: a tenant its own records, or root all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader<'a> {
    /// A tenant reading its own records.
    Tenant(&'a str),
    /// The root tenant reading every tenant's (`all: true`).
    AllTenants,
    /// A tenant reading one webhook's attempts (`webhooks.deliveries`).
    Webhook(&'a str),
}

impl Reader<'_> {
    /// Eight bytes naming the reader inside the sealed block.
    fn tag(self) -> [u8; 8] {
        let mut h = Sha256::new();
        match self {
            Reader::Tenant(t) => {
                h.update(b"tenant\0");
                h.update(t.as_bytes());
            }
            Reader::AllTenants => h.update(b"all-tenants\0"),
            Reader::Webhook(w) => {
                h.update(b"webhook\0");
                h.update(w.as_bytes());
            }
        }
        let d = h.finalize();
        let mut tag = [0u8; 8];
        for (t, b) in tag.iter_mut().zip(d) {
            *t = b;
        }
        tag
    }
}

/// Seals and opens `usage.list` cursors with the database's cursor key.
#[derive(Clone)]
pub struct CursorSealer(Aes256);

impl std::fmt::Debug for CursorSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorSealer(redacted)")
    }
}

impl CursorSealer {
    /// A sealer with `key`.
    pub fn new(key: &[u8; 32]) -> CursorSealer {
        CursorSealer(Aes256::new(GenericArray::from_slice(key)))
    }

    /// Reads the database's cursor key (made by its migration).
    pub async fn load(conn: &mut AsyncPgConnection) -> Result<CursorSealer> {
        let key: Vec<u8> = cursor_keys::table
            .select(cursor_keys::key)
            .first(conn)
            .await?;
        let key: [u8; 32] = key
            .try_into()
            .map_err(|_| StorageError::internal("the cursor key is not 32 bytes"))?;
        Ok(CursorSealer::new(&key))
    }

    /// The cursor of position `seq` for `reader`: `u` and 26 lower-case
    /// base32hex characters.
    pub fn seal(&self, reader: Reader<'_>, seq: i64) -> String {
        let mut block = [0u8; 16];
        let bytes = seq.to_be_bytes().into_iter().chain(reader.tag());
        for (b, byte) in block.iter_mut().zip(bytes) {
            *b = byte;
        }
        let mut block = GenericArray::from(block);
        self.0.encrypt_block(&mut block);
        let mut out = String::with_capacity(27);
        out.push(PREFIX);
        out.push_str(
            &data_encoding::BASE32HEX_NOPAD
                .encode(&block)
                .to_ascii_lowercase(),
        );
        out
    }

    /// The position of a cursor sealed for `reader`; `None` for anything
    /// else (garbage, another reader's cursor, another database's).
    pub fn open(&self, reader: Reader<'_>, cursor: &str) -> Option<i64> {
        let body = cursor.strip_prefix(PREFIX)?;
        let bytes = data_encoding::BASE32HEX_NOPAD
            .decode(body.to_ascii_uppercase().as_bytes())
            .ok()?;
        let bytes: [u8; 16] = bytes.try_into().ok()?;
        let mut block = GenericArray::from(bytes);
        self.0.decrypt_block(&mut block);
        if !block.ends_with(&reader.tag()) {
            return None;
        }
        let seq = i64::from_be_bytes(*block.first_chunk()?);
        (seq >= 0).then_some(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sealer(k: u8) -> CursorSealer {
        CursorSealer::new(&[k; 32])
    }

    proptest! {
        #[test]
        fn a_cursor_opens_for_its_reader_only(seq in 0..i64::MAX, a in "[a-z]{1,12}") {
            let s = sealer(7);
            let c = s.seal(Reader::Tenant(&a), seq);
            prop_assert_eq!(c.len(), 27);
            prop_assert!(c.starts_with('u'));
            prop_assert_eq!(s.open(Reader::Tenant(&a), &c), Some(seq));
            let other = format!("{a}x");
            prop_assert_eq!(s.open(Reader::Tenant(&other), &c), None);
            prop_assert_eq!(s.open(Reader::AllTenants, &c), None);
            prop_assert_eq!(sealer(8).open(Reader::Tenant(&a), &c), None);
            // Deterministic: a poller can compare positions.
            prop_assert_eq!(s.seal(Reader::Tenant(&a), seq), c);
        }
    }

    #[test]
    fn neighbouring_positions_share_nothing_visible() {
        // Positions one apart give unrelated cursors: no common prefix
        // beyond chance, so a difference cannot be read off.
        let s = sealer(1);
        let a = s.seal(Reader::Tenant("acme"), 1000);
        let b = s.seal(Reader::Tenant("acme"), 1001);
        let common = a
            .chars()
            .zip(b.chars())
            .skip(1)
            .take_while(|(x, y)| x == y)
            .count();
        assert!(common < 6, "{a} {b}");
        assert_eq!(s.open(Reader::Tenant("acme"), "garbage"), None);
        assert_eq!(s.open(Reader::Tenant("acme"), ""), None);
        assert_eq!(s.open(Reader::Tenant("acme"), &a[..20]), None);
    }
}
