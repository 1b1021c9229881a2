//! TypeIDs (`prefix_` + 26 lowercase Crockford base32 characters of a UUIDv7)
//! and API key secrets.

mod typed;

pub use typed::{
    AccountId, GrantId, IdError, InstanceId, KeyId, PoolId, ProjectId, ReservationId, TenantId,
    WebhookId,
};

use rand::RngCore;
use sha2::{Digest, Sha256};

const ALPHABET: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Encodes a 128-bit value as the 26-character TypeID suffix.
pub fn encode_suffix(value: u128) -> String {
    (0..26)
        .map(|i| {
            let shift = 5 * (25 - i);
            let index = ((value >> shift) & 31) as usize;
            #[expect(
                clippy::indexing_slicing,
                reason = "the index is masked to 0..=31 and the alphabet has 32 letters"
            )]
            let letter = ALPHABET[index];
            char::from(letter)
        })
        .collect()
}

/// The 128-bit value of a 26-character TypeID suffix ([`encode_suffix`]'s
/// inverse); `None` for anything else (another length, a letter outside the
/// alphabet, a first letter above `7`). The ids of one kind made by
/// [`new_id`] compare as their values do: by their instant, then in the
/// order they were made.
pub fn decode_suffix(suffix: &str) -> Option<u128> {
    if suffix.len() != 26 || !matches!(suffix.as_bytes().first(), Some(b'0'..=b'7')) {
        return None;
    }
    suffix.bytes().try_fold(0u128, |value, b| {
        let digit = ALPHABET.iter().position(|&a| a == b)?;
        Some((value << 5) | digit as u128)
    })
}

/// A new TypeID with `prefix` (without the underscore) whose UUIDv7 carries
/// the instant `now_ms` (the product's clock, not the OS clock).
///
/// Within one process, ids made in the same millisecond increase in the
/// order they are made (the random bits count up from a random start), so
/// "newest first" lists that break ties by id follow creation order, and a
/// batch of ids appends to its index instead of landing all over it.
pub fn new_id(prefix: &str, now_ms: i64) -> String {
    format!("{prefix}_{}", encode_suffix(next_uuid(now_ms)))
}

/// The next UUIDv7 (as an integer) of this process for `now_ms`.
fn next_uuid(now_ms: i64) -> u128 {
    use std::sync::{Mutex, PoisonError};
    static LAST: Mutex<u128> = Mutex::new(0);
    // The 62 "rand_b" bits below the variant.
    const RAND_B: u128 = (1 << 62) - 1;
    let mut random = [0u8; 10];
    rand::rng().fill_bytes(&mut random);
    let millis = u64::try_from(now_ms).unwrap_or(0);
    let fresh = uuid::Builder::from_unix_timestamp_millis(millis, &random)
        .into_uuid()
        .as_u128();
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    let same_ms = *last >> 80 == fresh >> 80;
    let id = if same_ms && fresh <= *last && *last & RAND_B != RAND_B {
        *last + 1
    } else {
        fresh
    };
    *last = id;
    id
}

/// A new API key secret: `bck_` and 32 random bytes in lowercase base32.
pub fn new_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let encoded = data_encoding::BASE32_NOPAD
        .encode(&bytes)
        .to_ascii_lowercase();
    format!("bck_{encoded}")
}

/// SHA-256 of a secret: the only form in which secrets are stored.
pub fn hash_secret(secret: &str) -> Vec<u8> {
    Sha256::digest(secret.as_bytes()).to_vec()
}

/// SHA-256 of a canonical JSON request body (object keys sorted), used to
/// tell an idempotent retry from a different request under the same key.
pub fn request_hash(body: &serde_json::Value) -> Vec<u8> {
    // serde_json's default map is ordered by key, so this is canonical.
    Sha256::digest(body.to_string().as_bytes()).to_vec()
}

/// A random request id (32 hex characters) for requests that bring none.
pub fn new_request_id() -> String {
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    data_encoding::HEXLOWER.encode(&bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typeid_suffix_matches_the_spec_vectors() {
        // From the TypeID specification's valid test cases.
        assert_eq!(encode_suffix(0), "00000000000000000000000000");
        assert_eq!(encode_suffix(1), "00000000000000000000000001");
        assert_eq!(encode_suffix(u128::MAX), "7zzzzzzzzzzzzzzzzzzzzzzzzz");
        let uuid = uuid::Uuid::parse_str("01890a5d-ac96-774b-bcce-b302099a8057").unwrap();
        assert_eq!(encode_suffix(uuid.as_u128()), "01h455vb4pex5vsknk084sn02q");
    }

    #[test]
    fn suffixes_decode_to_their_value_and_nothing_else_does() {
        for value in [0, 1, u128::MAX, 0x0189_0a5d_ac96_774b_bcce_b302_099a_8057] {
            assert_eq!(decode_suffix(&encode_suffix(value)), Some(value));
        }
        for bad in [
            "",
            "0000000000000000000000000",
            "000000000000000000000000000",
            "80000000000000000000000000",
            "0000000000000000000000000u",
            "0000000000000000000000000A",
        ] {
            assert_eq!(decode_suffix(bad), None, "{bad}");
        }
        let (older, newer) = (
            new_id("inst", 1_700_000_000_000),
            new_id("inst", 1_700_000_000_001),
        );
        let value = |id: &str| id.strip_prefix("inst_").and_then(decode_suffix);
        assert!(value(&older) < value(&newer));
    }

    #[test]
    fn ids_of_one_millisecond_increase_in_creation_order() {
        let ids: Vec<String> = (0..1000)
            .map(|_| new_id("use", 1_700_000_000_000))
            .collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]));
        assert!(new_id("use", 1_700_000_000_001) > ids[999]);
    }

    #[test]
    fn new_ids_have_the_prefix_and_pattern() {
        let id = new_id("rgrant", 1_700_000_000_000);
        let re = regex_lite(&id);
        assert!(re, "{id}");
    }

    fn regex_lite(id: &str) -> bool {
        let Some(rest) = id.strip_prefix("rgrant_") else {
            return false;
        };
        rest.len() == 26 && rest.bytes().all(|b| ALPHABET.contains(&b))
    }

    #[test]
    fn secrets_are_long_and_distinct() {
        let a = new_secret();
        let b = new_secret();
        assert!(a.starts_with("bck_") && a.len() >= 4 + 52);
        assert_ne!(a, b);
        assert_eq!(hash_secret(&a).len(), 32);
    }
}
