//! Human times and durations: what `bcctl` reads from its flags and writes
//! in its tables.
//!
//! Instants are epoch milliseconds (`i64`), as in the API. They are read from
//! RFC 3339, epoch milliseconds, `now` or a time relative to now, and written
//! as RFC 3339 in UTC or in the machine's local offset. Durations are
//! milliseconds, read and written in `humantime`'s units (`7d`, `2h30m`).
//! Nothing here reads a clock: the caller passes its `now`.

use std::fmt;

use chrono::{DateTime, Datelike, Local, SecondsFormat, Utc};

/// The forms [`parse_instant`] accepts, for its error messages.
const INSTANT_FORMS: &str = "an RFC 3339 time (2030-01-01T00:00:00Z, \
     2030-01-01T02:00:00+02:00), epoch milliseconds (1893456000000), `now`, \
     or a time relative to now (+2h, -7d, +1h30m, now+2h, now-15m)";

/// The forms [`parse_duration`] accepts, for its error messages.
const DURATION_FORMS: &str = "a positive duration such as 30d, 2h, 90m, 1h30m, 45s or 250ms";

/// A parse error with a message naming the input and the accepted forms.
///
/// ```
/// use bcctl::when::parse_duration;
///
/// let err = parse_duration("soon").unwrap_err();
/// assert!(err.to_string().contains("\"soon\""));
/// assert!(err.0.contains("1h30m"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WhenError(pub String);

impl fmt::Display for WhenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WhenError {}

/// Reads an instant as epoch milliseconds; `now_ms` is the instant `now` and
/// the relative forms count from.
///
/// Accepted, after trimming surrounding whitespace:
/// - RFC 3339 with any offset (`2030-01-01T00:00:00Z`,
///   `2030-01-01T02:00:00+02:00`); fractional seconds are truncated to
///   milliseconds;
/// - epoch milliseconds: an optional `-` and digits only;
/// - `now`;
/// - a duration (in `humantime`'s units) after `+` or `-`, optionally after
///   `now`: `+2h`, `-7d`, `+1h30m`, `now+2h`, `now-15m`.
///
/// Anything else, and any instant outside `i64` milliseconds, is an error
/// whose message quotes the input and lists these forms.
///
/// ```
/// use bcctl::when::parse_instant;
///
/// let now = 1_893_456_000_000; // 2030-01-01T00:00:00Z
/// assert_eq!(parse_instant("2030-01-01T02:00:00+02:00", 0), Ok(now));
/// assert_eq!(parse_instant("2030-01-01T00:00:00.2509Z", 0), Ok(now + 250));
/// assert_eq!(parse_instant("1893456000000", 0), Ok(now));
/// assert_eq!(parse_instant(" now ", now), Ok(now));
/// assert_eq!(parse_instant("+1h30m", now), Ok(now + 5_400_000));
/// assert_eq!(parse_instant("now-15m", now), Ok(now - 900_000));
/// assert!(parse_instant("tomorrow", now).is_err());
/// ```
pub fn parse_instant(s: &str, now_ms: i64) -> Result<i64, WhenError> {
    let t = s.trim();
    let fail = |why: &str| {
        WhenError(format!(
            "cannot read {t:?} as an instant ({why}): expected {INSTANT_FORMS}"
        ))
    };
    if t.is_empty() {
        return Err(fail("it is empty"));
    }
    if t.eq_ignore_ascii_case("now") {
        return Ok(now_ms);
    }
    let digits = t.strip_prefix('-').unwrap_or(t);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<i64>()
            .map_err(|_| fail("epoch milliseconds out of range"));
    }
    let relative = match t.get(..3) {
        Some(head) if head.eq_ignore_ascii_case("now") => t[3..].trim_start(),
        _ => t,
    };
    let (sign, rest) = if let Some(rest) = relative.strip_prefix('+') {
        (1, rest)
    } else if let Some(rest) = relative.strip_prefix('-') {
        (-1, rest)
    } else {
        return match DateTime::parse_from_rfc3339(t) {
            Ok(at) => Ok(at.timestamp_millis()),
            Err(e) => Err(fail(&e.to_string())),
        };
    };
    let d = duration_ms(rest.trim_start()).map_err(|why| fail(&why))?;
    let at = if sign > 0 {
        now_ms.checked_add(d)
    } else {
        now_ms.checked_sub(d)
    };
    at.ok_or_else(|| fail("the result is out of range"))
}

/// Reads a duration in `humantime`'s units (`30d`, `2h`, `90m`, `1h30m`,
/// `45s`, `250ms`, combinations) as milliseconds, truncating anything below a
/// millisecond. It must be at least `1ms`; otherwise, or on anything else,
/// the error quotes the input and lists the forms.
///
/// ```
/// use bcctl::when::parse_duration;
///
/// assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
/// assert_eq!(parse_duration(" 30d "), Ok(30 * 86_400_000));
/// assert_eq!(parse_duration("250ms"), Ok(250));
/// assert!(parse_duration("0s").is_err());
/// assert!(parse_duration("-2h").is_err());
/// ```
pub fn parse_duration(s: &str) -> Result<i64, WhenError> {
    let t = s.trim();
    let fail = |why: &str| {
        WhenError(format!(
            "cannot read {t:?} as a duration ({why}): expected {DURATION_FORMS}"
        ))
    };
    if t.is_empty() {
        return Err(fail("it is empty"));
    }
    match duration_ms(t) {
        Ok(0) => Err(fail("it is shorter than 1ms")),
        Ok(ms) => Ok(ms),
        Err(why) => Err(fail(&why)),
    }
}

/// `humantime::parse_duration` in whole milliseconds (zero allowed).
fn duration_ms(s: &str) -> Result<i64, String> {
    let d = humantime::parse_duration(s).map_err(|e| e.to_string())?;
    i64::try_from(d.as_millis()).map_err(|_| "it is too long".to_owned())
}

/// Writes an instant as RFC 3339, in UTC with `Z` or, with `local`, in the
/// machine's local offset; milliseconds are shown only when non-zero.
///
/// An instant whose year (in the chosen offset) is outside 0000–9999 has no
/// RFC 3339 form and is written as epoch milliseconds, so that
/// [`parse_instant`] always reads the output back.
///
/// ```
/// use bcctl::when::{format_instant, parse_instant};
///
/// assert_eq!(format_instant(1_893_456_000_000, false), "2030-01-01T00:00:00Z");
/// assert_eq!(format_instant(1_893_456_000_250, false), "2030-01-01T00:00:00.250Z");
/// let local = format_instant(1_893_456_000_000, true); // e.g. 2030-01-01T01:00:00+01:00
/// assert_eq!(parse_instant(&local, 0), Ok(1_893_456_000_000));
/// ```
pub fn format_instant(ms: i64, local: bool) -> String {
    let Some(utc) = DateTime::<Utc>::from_timestamp_millis(ms) else {
        return ms.to_string();
    };
    let secs = if ms.rem_euclid(1000) == 0 {
        SecondsFormat::Secs
    } else {
        SecondsFormat::Millis
    };
    let (year, text) = if local {
        let at = utc.with_timezone(&Local);
        (at.year(), at.to_rfc3339_opts(secs, false))
    } else {
        (utc.year(), utc.to_rfc3339_opts(secs, true))
    };
    if (0..=9999).contains(&year) {
        text
    } else {
        ms.to_string()
    }
}

/// The units [`format_duration`] writes, largest first.
const UNITS: [(&str, u64); 5] = [
    ("d", 86_400_000),
    ("h", 3_600_000),
    ("m", 60_000),
    ("s", 1000),
    ("ms", 1),
];

/// Writes a duration in milliseconds compactly, largest units first and zero
/// units left out (`7d`, `2h30m`, `1d1h`, `250ms`); `0` is `0s` and a negative
/// duration has a `-` in front. [`parse_duration`] reads a positive one back.
///
/// ```
/// use bcctl::when::format_duration;
///
/// assert_eq!(format_duration(7 * 86_400_000), "7d");
/// assert_eq!(format_duration(9_000_000), "2h30m");
/// assert_eq!(format_duration(90_000_000), "1d1h");
/// assert_eq!(format_duration(250), "250ms");
/// assert_eq!(format_duration(0), "0s");
/// assert_eq!(format_duration(-45_000), "-45s");
/// ```
pub fn format_duration(ms: i64) -> String {
    if ms == 0 {
        return "0s".to_owned();
    }
    let mut out = String::new();
    if ms < 0 {
        out.push('-');
    }
    let mut left = ms.unsigned_abs();
    for (name, size) in UNITS {
        let n = left / size;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push_str(name);
            left %= size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const T2030: i64 = 1_893_456_000_000;

    #[test]
    fn instants_in_every_form() {
        assert_eq!(parse_instant("2030-01-01T00:00:00Z", 0), Ok(T2030));
        assert_eq!(parse_instant("2029-12-31T19:00:00-05:00", 0), Ok(T2030));
        assert_eq!(
            parse_instant("2030-01-01T00:00:00.999999Z", 0),
            Ok(T2030 + 999)
        );
        assert_eq!(parse_instant("1969-12-31T23:59:59.9995Z", 0), Ok(-1));
        assert_eq!(parse_instant("-1000", 5), Ok(-1000));
        assert_eq!(parse_instant("0", 5), Ok(0));
        assert_eq!(parse_instant("NOW", 5), Ok(5));
        assert_eq!(parse_instant("-7d", T2030), Ok(T2030 - 7 * 86_400_000));
        assert_eq!(parse_instant("now + 2h", 0), Ok(7_200_000));
        assert_eq!(parse_instant("+0s", 9), Ok(9));
    }

    #[test]
    fn instant_errors_quote_the_input_and_list_the_forms() {
        for bad in [
            "",
            "  ",
            "tomorrow",
            "+",
            "now+",
            "now2h",
            "2030-13-01T00:00:00Z",
            "--5",
            "+-2h",
        ] {
            let err = parse_instant(bad, 0).expect_err(bad);
            assert!(err.0.contains(&format!("{:?}", bad.trim())), "{err}");
            assert!(
                err.0.contains("RFC 3339") && err.0.contains("now-15m"),
                "{err}"
            );
        }
    }

    #[test]
    fn overflow_is_an_error() {
        assert!(parse_instant("9223372036854775808", 0).is_err());
        assert!(parse_instant("-9223372036854775809", 0).is_err());
        assert!(parse_instant("+1ms", i64::MAX).is_err());
        assert!(parse_instant("-1ms", i64::MIN).is_err());
        assert!(parse_instant("+300000000y", 0).is_err());
        assert!(parse_duration("300000000y").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90m"), Ok(5_400_000));
        assert_eq!(parse_duration("1d1h"), Ok(90_000_000));
        let err = parse_duration("999us").expect_err("under 1ms");
        assert!(
            err.0.contains("\"999us\"") && err.0.contains("shorter than 1ms"),
            "{err}"
        );
        assert!(parse_duration("").is_err());
        assert!(parse_duration("5").is_err());
    }

    #[test]
    fn formatting() {
        assert_eq!(format_instant(0, false), "1970-01-01T00:00:00Z");
        assert_eq!(format_instant(-1, false), "1969-12-31T23:59:59.999Z");
        assert_eq!(format_instant(i64::MAX, false), i64::MAX.to_string());
        assert_eq!(format_instant(i64::MIN, true), i64::MIN.to_string());
        assert_eq!(format_duration(86_400_001), "1d1ms");
        assert_eq!(format_duration(i64::MIN), "-106751991167d7h12m55s808ms");
    }
}
