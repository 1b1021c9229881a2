use std::time::Duration;

use super::*;

const MS: &str = "BC_SOME_TIMEOUT_MS";
const SECS: &str = "BC_SOME_LEASE";

#[test]
fn a_bare_number_is_milliseconds_or_seconds_by_the_name() {
    assert_eq!(
        Durations::millis().parse(MS, "1500"),
        Ok(Duration::from_millis(1500))
    );
    assert_eq!(
        Durations::seconds().parse(SECS, "600"),
        Ok(Duration::from_secs(600))
    );
    assert_eq!(
        Durations::millis().parse(MS, " 250 "),
        Ok(Duration::from_millis(250))
    );
}

#[test]
fn every_duration_setting_takes_a_duration_with_its_unit() {
    for parser in [Durations::millis(), Durations::seconds()] {
        for (text, expected) in [
            ("30s", Duration::from_secs(30)),
            ("1500ms", Duration::from_millis(1500)),
            ("2m", Duration::from_secs(120)),
            ("1h 30m", Duration::from_secs(5400)),
            ("7d", Duration::from_secs(7 * 24 * 3600)),
        ] {
            assert_eq!(parser.parse(MS, text), Ok(expected), "{text}");
        }
    }
}

#[test]
fn zero_negative_and_garbage_are_refused_naming_the_variable() {
    for bad in ["0", "0s", "0ms"] {
        let e = Durations::millis().parse(MS, bad).unwrap_err();
        assert!(e.starts_with(MS) && e.contains("longer than 0"), "{e}");
    }
    for bad in ["-5", "-5s"] {
        let e = Durations::seconds().parse(SECS, bad).unwrap_err();
        assert!(e.starts_with(SECS) && e.contains("negative"), "{e}");
    }
    for bad in [
        "abc",
        "",
        "5 parsecs",
        "1.5",
        "30 s s",
        "99999999999999999999999",
    ] {
        let e = Durations::millis().parse(MS, bad).unwrap_err();
        assert!(e.starts_with(MS), "{e}");
        assert!(e.contains(&format!("{bad:?}")), "{e}");
        assert!(e.contains("milliseconds"), "{e}");
    }
    let e = Durations::seconds().parse(SECS, "soon").unwrap_err();
    assert!(e.contains("whole number of seconds"), "{e}");
}

#[test]
fn zero_and_a_ceiling_are_the_setting_s_choice() {
    let upto = Durations::millis()
        .or_zero()
        .at_most(Duration::from_secs(60));
    assert_eq!(upto.parse(MS, "0"), Ok(Duration::ZERO));
    assert_eq!(upto.parse(MS, "60000"), Ok(Duration::from_secs(60)));
    assert_eq!(upto.parse(MS, "1m"), Ok(Duration::from_secs(60)));
    let e = upto.parse(MS, "60001").unwrap_err();
    assert!(
        e.starts_with(MS) && e.contains("at most 1m (60000 ms)"),
        "{e}"
    );
}

#[test]
fn whole_numbers_keep_to_their_range() {
    let w = Whole::range(1, 1024);
    assert_eq!(w.parse("BC_N", "4"), Ok(4));
    for bad in ["0", "1025", "four", "-1", ""] {
        let e = w.parse("BC_N", bad).unwrap_err();
        assert_eq!(
            e,
            format!("BC_N must be a whole number from 1 to 1024, not {bad:?}")
        );
    }
    assert_eq!(Whole::any().parse("BC_N", "0"), Ok(0));
    assert!(Whole::any().parse("BC_N", "x").is_err());
    assert!(
        Whole::range(1, u64::MAX)
            .parse("BC_N", "0")
            .unwrap_err()
            .contains("at least 1")
    );
}

/// A command with one setting of each kind.
#[derive(clap::Parser)]
#[command(name = "probe")]
struct Probe {
    #[arg(long, env = "BC_TELEMETRY_PROBE_WAIT_MS", value_parser = Durations::millis())]
    probe_wait_ms: Option<Duration>,
    #[arg(long, env = "BC_TELEMETRY_PROBE_COUNT", value_parser = Whole::range(1, 9))]
    probe_count: Option<u64>,
    #[arg(long)]
    once: bool,
}

#[test]
fn errors_name_the_variable_and_unknown_arguments_are_called_so() {
    let parsed = parse_from::<Probe, _, _>(["probe", "--probe-wait-ms", "2s", "--once"]).unwrap();
    assert_eq!(parsed.probe_wait_ms, Some(Duration::from_secs(2)));
    assert!(parsed.once);
    assert_eq!(parsed.probe_count, None);

    let Err(e) = parse_from::<Probe, _, _>(["probe", "--probe-wait-ms", "abc"]) else {
        panic!("abc accepted");
    };
    let text = e.render().to_string();
    assert!(
        text.contains("BC_TELEMETRY_PROBE_WAIT_MS must be a duration"),
        "{text}"
    );
    assert!(e.use_stderr());

    let Err(e) = parse_from::<Probe, _, _>(["probe", "--probe-count", "10"]) else {
        panic!("10 accepted");
    };
    assert!(e.render().to_string().contains("BC_TELEMETRY_PROBE_COUNT"));

    let Err(e) = parse_from::<Probe, _, _>(["probe", "--onc"]) else {
        panic!("--onc accepted");
    };
    let text = e.render().to_string();
    assert!(text.contains("unknown argument '--onc'"), "{text}");
    assert!(text.contains("'--once'"), "{text}");

    let Err(e) = parse_from::<Probe, _, _>(["probe", "--help"]) else {
        panic!("no help");
    };
    assert!(!e.use_stderr());
    assert!(
        e.render()
            .to_string()
            .contains("BC_TELEMETRY_PROBE_WAIT_MS")
    );
}
