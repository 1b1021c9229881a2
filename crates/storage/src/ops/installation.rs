//! This installation of the platform (contract 3.12 r4, "Only its own
//! VMs"): the id its database keeps, made once by a migration, which labels
//! every VM it makes (`bc-installation`), and what it tells of the instance
//! ids this database has made.
//!
//! The id is read from the database each time it is needed (one row, by its
//! key), not kept in the process: a process may serve several databases (the
//! test harness does), and a database restored from a backup keeps its id
//! anyway.

use diesel::prelude::*;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

use crate::error::{Result, StorageError};
use crate::ids::decode_suffix;
use crate::schema::{installation, instances};

/// This installation's id: the value of the `bc-installation` label of
/// every VM it makes (lowercase letters, digits, `-` and `_`, at most 63:
/// a GCE label value).
pub async fn id(conn: &mut AsyncPgConnection) -> Result<String> {
    installation::table
        .select(installation::id)
        .first(conn)
        .await
        .optional()?
        .ok_or_else(|| StorageError::internal("the installation row is missing"))
}

/// The newest instance id this database has made, if any. Instance ids are
/// never removed (a deleted instance keeps its row), so this is the newest
/// it ever made. Read through the primary key's index, whose order is the
/// ids' order: they share their prefix and length and their letters sort
/// alike in any collation.
pub(crate) async fn newest_instance_id(conn: &mut AsyncPgConnection) -> Result<Option<String>> {
    Ok(instances::table
        .select(instances::instance_id)
        .order(instances::instance_id.desc())
        .first(conn)
        .await
        .optional()?)
}

/// The value of an instance id as this database makes them (`inst_` and a
/// 26-character TypeID suffix of a UUIDv7: its instant, then the order it
/// was made in); `None` for any other text.
fn instance_value(id: &str) -> Option<u128> {
    id.strip_prefix("inst_").and_then(decode_suffix)
}

/// Whether `id` is an instance id newer than `newest` (the newest this
/// database has made, [`newest_instance_id`]): one made after it, by a copy
/// of this database (it was restored from a backup taken before). Text that
/// is no instance id of ours is never newer; every id is newer than none.
pub(crate) fn made_after(id: &str, newest: Option<&str>) -> bool {
    let Some(value) = instance_value(id) else {
        return false;
    };
    match newest.map(instance_value) {
        None => true,
        Some(Some(newest)) => value > newest,
        // The newest row is no id of ours (ids are checked on the way in,
        // so this is not expected): nothing is known to be newer.
        Some(None) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{encode_suffix, new_id};

    /// An instance id of a UUIDv7 at `ms` whose random bits are `n`.
    fn id_at(ms: u64, n: u64) -> String {
        let version = 0x7000u128 << 64;
        let variant = 0b10u128 << 62;
        let value = (u128::from(ms) << 80) | version | variant | u128::from(n);
        format!("inst_{}", encode_suffix(value))
    }

    #[test]
    fn only_ids_made_after_the_newest_are_newer() {
        let newest = id_at(1_700_000_000_500, 7);
        let later = id_at(1_700_000_000_501, 0);
        // Made in the same millisecond, after it (the random bits count up).
        let same_ms = id_at(1_700_000_000_500, 8);
        let old = id_at(1_700_000_000_000, u64::from(u32::MAX));
        assert!(made_after(&later, Some(&newest)));
        assert!(made_after(&same_ms, Some(&newest)));
        assert!(!made_after(&old, Some(&newest)));
        assert!(!made_after(&id_at(1_700_000_000_500, 6), Some(&newest)));
        assert!(!made_after(&newest, Some(&newest)));
        assert!(made_after(&old, None), "a database that made none");
        // The ids this database makes are of that form.
        assert!(made_after(
            &new_id("inst", 1_700_000_001_000),
            Some(&newest)
        ));
        assert!(!made_after(
            &new_id("inst", 1_700_000_000_000),
            Some(&newest)
        ));
        for other in ["inst_gone", "", "pool_01h455vb4pex5vsknk084sn02q", "bc-1"] {
            assert!(!made_after(other, Some(&newest)), "{other}");
            assert!(!made_after(other, None), "{other}");
        }
        // Compared as values, not as text of another length.
        let long = format!("{later}0");
        assert!(!made_after(&long, Some(&newest)));
    }
}
