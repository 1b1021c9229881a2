//! Property tests of `bcctl::when`: what it writes it reads back, and no
//! input makes it panic.

use bcctl::when::{format_duration, format_instant, parse_duration, parse_instant};
use proptest::prelude::*;

/// 1970-01-01T00:00:00Z.
const MIN_MS: i64 = 0;
/// 9999-12-31T23:59:59.999Z.
const MAX_MS: i64 = 253_402_300_799_999;

/// Instants over 1970–9999, with whole seconds (no milliseconds shown) half
/// of the time.
fn instant() -> impl Strategy<Value = i64> {
    prop_oneof![
        MIN_MS..=MAX_MS,
        (MIN_MS / 1000..=MAX_MS / 1000).prop_map(|s| s * 1000),
    ]
}

/// Positive durations: short ones, whole units, and up to ten thousand years.
fn duration() -> impl Strategy<Value = i64> {
    prop_oneof![
        1i64..=100_000,
        (
            1i64..=10_000,
            prop::sample::select(vec![1000, 60_000, 3_600_000, 86_400_000])
        )
            .prop_map(|(n, unit)| n * unit),
        1i64..=MAX_MS,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn utc_instants_round_trip(ms in instant(), now in any::<i64>()) {
        let text = format_instant(ms, false);
        prop_assert!(text.ends_with('Z'), "{}", text);
        prop_assert_eq!(text.contains('.'), ms % 1000 != 0, "{}", &text);
        prop_assert_eq!(parse_instant(&text, now), Ok(ms), "{}", text);
    }

    #[test]
    fn local_instants_round_trip(ms in instant(), now in any::<i64>()) {
        let text = format_instant(ms, true);
        prop_assert_eq!(parse_instant(&text, now), Ok(ms), "{}", text);
    }

    #[test]
    fn every_instant_written_is_read_back(ms in any::<i64>(), local in any::<bool>()) {
        let text = format_instant(ms, local);
        prop_assert_eq!(parse_instant(&text, 0), Ok(ms), "{}", text);
    }

    #[test]
    fn epoch_milliseconds_round_trip(ms in any::<i64>(), now in any::<i64>()) {
        prop_assert_eq!(parse_instant(&ms.to_string(), now), Ok(ms));
        prop_assert_eq!(parse_instant(&format!("  {ms}\t"), now), Ok(ms));
    }

    #[test]
    fn relative_instants_count_from_now(d in duration(), now in MIN_MS..=MAX_MS) {
        let text = format_duration(d);
        prop_assert_eq!(parse_instant(&format!("+{text}"), now), Ok(now + d), "{}", &text);
        prop_assert_eq!(parse_instant(&format!("-{text}"), now), Ok(now - d), "{}", &text);
        prop_assert_eq!(parse_instant(&format!("now+{text}"), now), Ok(now + d), "{}", &text);
        prop_assert_eq!(parse_instant(&format!("now-{text}"), now), Ok(now - d), "{}", &text);
    }

    #[test]
    fn relative_instants_past_the_range_are_errors(d in duration()) {
        let text = format_duration(d);
        let (later, earlier) = (format!("+{text}"), format!("-{text}"));
        prop_assert!(parse_instant(&later, i64::MAX).is_err(), "{}", later);
        prop_assert!(parse_instant(&earlier, i64::MIN).is_err(), "{}", earlier);
    }

    #[test]
    fn durations_round_trip(d in duration()) {
        let text = format_duration(d);
        prop_assert_eq!(parse_duration(&text), Ok(d), "{}", &text);
        prop_assert_eq!(format_duration(-d), format!("-{text}"));
    }

    #[test]
    fn durations_are_compact(d in duration()) {
        let text = format_duration(d);
        // Each unit at most once, largest first, and no zero unit.
        let units: Vec<&str> = text
            .split(|c: char| c.is_ascii_digit())
            .filter(|u| !u.is_empty())
            .collect();
        let order = ["d", "h", "m", "s", "ms"];
        let ranks: Vec<usize> = units
            .iter()
            .map(|u| order.iter().position(|o| o == u).expect("a known unit"))
            .collect();
        prop_assert!(ranks.windows(2).all(|w| w[0] < w[1]), "{}", &text);
        let numbers: Vec<&str> = text
            .split(|c: char| c.is_ascii_alphabetic())
            .filter(|n| !n.is_empty())
            .collect();
        prop_assert!(numbers.iter().all(|n| !n.starts_with('0')), "{}", &text);
    }

    #[test]
    fn garbage_never_panics(s in any::<String>(), now in any::<i64>()) {
        check_garbage(&s, now)?;
    }

    #[test]
    fn near_misses_never_panic(
        s in r"[ \t]*(now|NOW)?[ +-]{0,2}[0-9]{0,25}[.:]?[0-9]{0,3}(d|h|m|s|ms|us|y|T|Z|x)?[ ]*",
        now in any::<i64>(),
    ) {
        check_garbage(&s, now)?;
    }

    #[test]
    fn rfc3339_near_misses_never_panic(
        s in concat!(
            r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}",
            r"(\.[0-9]{0,12})?(Z|[+-][0-9]{2}:[0-9]{2})?",
        ),
        now in any::<i64>(),
    ) {
        check_garbage(&s, now)?;
    }
}

/// Either parses or fails with an error quoting the (trimmed) input.
fn check_garbage(s: &str, now: i64) -> Result<(), TestCaseError> {
    let quoted = format!("{:?}", s.trim());
    if let Err(e) = parse_instant(s, now) {
        prop_assert!(e.0.contains(&quoted), "{} does not quote {}", e, quoted);
        prop_assert!(e.0.contains("RFC 3339"), "{}", e);
    }
    match parse_duration(s) {
        Ok(ms) => prop_assert!(ms > 0),
        Err(e) => prop_assert!(e.0.contains(&quoted), "{} does not quote {}", e, quoted),
    }
    Ok(())
}
