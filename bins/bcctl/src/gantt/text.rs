//! Fitting text into columns: cut with `…`, padded, wrapped; grant ids
//! shortened.

/// `rgrant_01J8ZK3ABCD` as `rgrant_…abcd`: the prefix and the last four.
pub(super) fn short_id(id: &str) -> String {
    let chars: Vec<char> = id.chars().collect();
    if chars.len() <= 14 {
        return id.to_owned();
    }
    let prefix: String = match chars.iter().position(|&c| c == '_') {
        Some(p) if p < 8 => chars.iter().take(p + 1).collect(),
        _ => chars.iter().take(4).collect(),
    };
    let tail: String = chars.iter().skip(chars.len() - 4).collect();
    format!("{prefix}…{tail}")
}

/// `s` in at most `max` characters, with `…` when cut.
pub(super) fn shorten(s: &str, max: usize) -> String {
    fit(s, max)
}

pub(super) fn fit(s: &str, width: usize) -> String {
    if s.chars().count() <= width {
        return s.to_owned();
    }
    if width == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(width - 1).collect();
    out.push('…');
    out
}

/// `s` cut or padded with spaces to exactly `width` characters.
pub(super) fn pad(s: &str, width: usize) -> String {
    let mut out = fit(s, width);
    let len = out.chars().count();
    out.extend(std::iter::repeat_n(' ', width - len));
    out
}

/// `items` joined by `sep` into lines of at most `width` characters, an item
/// that is longer alone on its line, cut.
pub(super) fn wrap(items: &[String], sep: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for item in items {
        let item = fit(item, width);
        let joined = line.chars().count() + sep.chars().count() + item.chars().count();
        if line.is_empty() {
            line = item;
        } else if joined <= width {
            line.push_str(sep);
            line.push_str(&item);
        } else {
            lines.push(std::mem::replace(&mut line, item));
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn short_ids_keep_the_prefix_and_the_tail() {
        assert_eq!(short_id("rgrant_01J8ZK3QWABCD"), "rgrant_…ABCD");
        assert_eq!(short_id("rgrant_01J8"), "rgrant_01J8");
        assert_eq!(short_id("abcdefghijklmnopq"), "abcd…nopq");
    }
}
