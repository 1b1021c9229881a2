//! Keyset paging of the newest-first lists (`reservationGrants.list`,
//! `instances.list`): a position is the last item's `(createdAt, id)`, the
//! next page is the rows strictly below it in `(created_at DESC, id DESC)`
//! order (an index range, never an offset), and the cursor that carries a
//! position is opaque to clients.
//!
//! A cursor is `k`, the creation instant as 13 lower-case base32hex
//! characters (a non-negative 64-bit integer, the last character's padding
//! bit zero), then the 26-character suffix of the item's TypeID: every
//! string of that shape decodes, so the API's pattern for it admits only
//! decodable cursors.

const SUFFIX_ALPHABET: &str = "0123456789abcdefghjkmnpqrstvwxyz";

/// Characters of a TypeID suffix.
const SUFFIX_LEN: usize = 26;

/// The position after an item of a newest-first list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Position {
    /// The item's creation instant.
    pub created_at: i64,
    /// The item's id (`prefix_` and its TypeID suffix).
    pub id: String,
}

impl Position {
    /// The position of an item.
    pub fn of(created_at: i64, id: &str) -> Position {
        Position {
            created_at,
            id: id.to_owned(),
        }
    }

    /// The position before the newest possible item of ids with `prefix`:
    /// the cursor a first page that found nothing hands out, so a client
    /// can always pass `nextCursor` back.
    pub fn start(prefix: &str) -> Position {
        Position {
            created_at: i64::MAX,
            id: format!("{prefix}_7{}", "z".repeat(SUFFIX_LEN - 1)),
        }
    }

    /// The opaque cursor of this position (its id must carry `prefix`).
    pub fn encode(&self, prefix: &str) -> String {
        let suffix = self
            .id
            .strip_prefix(prefix)
            .and_then(|s| s.strip_prefix('_'))
            .unwrap_or_default();
        format!(
            "k{}{suffix}",
            data_encoding::BASE32HEX_NOPAD
                .encode(&self.created_at.to_be_bytes())
                .to_ascii_lowercase()
        )
    }

    /// The position a cursor made by [`Position::encode`] for ids with
    /// `prefix` carries; `None` for anything else.
    pub fn decode(cursor: &str, prefix: &str) -> Option<Position> {
        let body = cursor.strip_prefix('k')?;
        let (instant, suffix) = (body.get(..13)?, body.get(13..)?);
        let bytes = data_encoding::BASE32HEX_NOPAD
            .decode(instant.to_ascii_uppercase().as_bytes())
            .ok()?;
        let created_at = i64::from_be_bytes(bytes.try_into().ok()?);
        let typeid_suffix = suffix.len() == SUFFIX_LEN
            && suffix.starts_with(|c: char| ('0'..='7').contains(&c))
            && suffix.chars().all(|c| SUFFIX_ALPHABET.contains(c));
        (created_at >= 0 && typeid_suffix).then(|| Position {
            created_at,
            id: format!("{prefix}_{suffix}"),
        })
    }
}

/// One page of a newest-first list.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The items, newest first.
    pub items: Vec<T>,
    /// The position after the last item returned, or the position asked
    /// for when none was ([`Position::start`] without one).
    pub next: Position,
    /// Whether more items follow.
    pub has_more: bool,
}

impl<T> Page<T> {
    /// The page from `rows` read with `limit + 1`: at most `limit` of them,
    /// whether one more was there, and the position after the last.
    pub fn from_rows(
        mut rows: Vec<T>,
        limit: i64,
        after: Option<Position>,
        prefix: &str,
        position: impl Fn(&T) -> Position,
    ) -> Page<T> {
        let limit = usize::try_from(limit).unwrap_or(0);
        let has_more = rows.len() > limit;
        rows.truncate(limit);
        let next = rows
            .last()
            .map(position)
            .or(after)
            .unwrap_or_else(|| Position::start(prefix));
        Page {
            items: rows,
            next,
            has_more,
        }
    }

    /// The same page with its items mapped.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            next: self.next,
            has_more: self.has_more,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip() {
        for p in [
            Position::of(0, "rgrant_00000000000000000000000000"),
            Position::of(1_893_456_000_000, "rgrant_01jd8x4m2b7zc3rvt5q9w6e0ya"),
            Position::start("inst"),
        ] {
            let prefix = p.id.split('_').next().unwrap_or_default().to_owned();
            let cursor = p.encode(&prefix);
            assert_eq!(cursor.len(), 1 + 13 + 26, "{cursor}");
            assert_eq!(Position::decode(&cursor, &prefix), Some(p));
        }
    }

    #[test]
    fn anything_else_is_no_cursor() {
        let good = Position::of(5, "inst_01jd8x4m2b7zc3rvt5q9w6e0ya").encode("inst");
        assert!(Position::decode(&good, "inst").is_some());
        for bad in [
            "",
            "k",
            "garbage",
            &good[1..],
            &good[..good.len() - 1],
            &format!("{good}0"),
            &good.replace('k', "c"),
            // A suffix out of the TypeID alphabet, or too large for 128 bits.
            &format!("{}u{}", &good[..14], &good[15..]),
            &format!("{}8{}", &good[..14], &good[15..]),
        ] {
            assert_eq!(Position::decode(bad, "inst"), None, "{bad:?}");
        }
        // A negative instant.
        let negative = format!("kvvvvvvvvvvvvu{}", &good[14..]);
        assert_eq!(Position::decode(&negative, "inst"), None);
    }

    #[test]
    fn an_empty_first_page_starts_at_the_start() {
        let page = Page::<i64>::from_rows(vec![], 10, None, "rgrant", |_| Position::of(0, ""));
        assert_eq!(page.next, Position::start("rgrant"));
        assert!(!page.has_more);
        let rows = vec![3, 2, 1];
        let page = Page::from_rows(rows, 2, None, "x", |n| Position::of(*n, "x_a"));
        assert_eq!((page.items.clone(), page.has_more), (vec![3, 2], true));
        assert_eq!(page.next, Position::of(2, "x_a"));
    }
}
