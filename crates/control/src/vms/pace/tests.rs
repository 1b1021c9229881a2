use super::*;

const T0: i64 = 1_800_000_000_000; // a minute boundary (divisible by 60 000)

fn allowance(pacer: &Pacer, account: &str, now: i64) -> Option<i32> {
    pacer
        .allowances(now)
        .into_iter()
        .find(|(a, _)| a == account)
        .map(|(_, n)| n)
}

#[test]
fn the_budget_is_per_account_and_minute_and_refills_at_the_minute() {
    let pacer = Pacer::new(3);
    for i in 0..3 {
        assert!(pacer.try_send("a", T0 + i).is_ok());
    }
    assert_eq!(
        pacer.try_send("a", T0 + 10_000),
        Err(Duration::from_millis(50_000))
    );
    assert_eq!(allowance(&pacer, "a", T0 + 10_000), Some(0));
    assert!(
        pacer.try_send("b", T0 + 10_000).is_ok(),
        "another account's budget"
    );
    assert_eq!(
        pacer.next_resume(T0 + 10_000),
        Some(Duration::from_millis(50_000))
    );
    assert!(
        pacer.try_send("a", T0 + MINUTE_MS).is_ok(),
        "the next minute"
    );
    assert_eq!(allowance(&pacer, "a", T0 + MINUTE_MS), Some(2));
}

#[test]
fn a_rate_refusal_pauses_until_the_next_minute_or_retry_after() {
    let pacer = Pacer::new(100);
    assert!(pacer.try_send("a", T0 + 45_000).is_ok());
    let pause = pacer.throttled("a", Throttle::Rate, None, T0 + 45_000);
    assert_eq!(pause, (Duration::from_millis(15_000), true));
    let again = pacer.throttled("a", Throttle::Rate, None, T0 + 45_001);
    assert_eq!(
        again,
        (Duration::from_millis(14_999), false),
        "the same pause"
    );
    assert!(
        pacer.try_send("a", T0 + 59_999).is_err(),
        "not within the window"
    );
    assert_eq!(allowance(&pacer, "a", T0 + 59_999), Some(0));
    assert!(pacer.try_send("a", T0 + MINUTE_MS).is_ok());
    let pause = pacer.throttled(
        "a",
        Throttle::Rate,
        Some(Duration::from_secs(90)),
        T0 + 61_000,
    );
    assert_eq!(pause, (Duration::from_secs(90), true));
    // An operation ending does not lift a rate pause.
    pacer.operation_done("a");
    assert!(pacer.try_send("a", T0 + 62_000).is_err());
}

#[test]
fn a_concurrent_operations_refusal_caps_the_operations_in_flight() {
    let pacer = Pacer::new(100);
    for _ in 0..4 {
        assert!(pacer.try_send("a", T0).is_ok());
    }
    // The fourth was refused: three are in flight, the provider's limit.
    pacer.throttled("a", Throttle::ConcurrentOperations, None, T0);
    assert_eq!(allowance(&pacer, "a", T0 + 1), Some(0));
    assert!(pacer.try_send("a", T0 + 1).is_err());
    pacer.operation_done("a");
    assert_eq!(allowance(&pacer, "a", T0 + 2), Some(1), "one place freed");
    assert!(pacer.try_send("a", T0 + 2).is_ok());
    assert!(pacer.try_send("a", T0 + 3).is_err(), "capped again");
    // A call that started no operation gives its place back.
    pacer.not_in_flight("a");
    assert!(pacer.try_send("a", T0 + 4).is_ok());
    // The cap holds a minute.
    assert!(pacer.try_send("a", T0 + CAP_MS + 1).is_ok());
}

#[test]
fn a_concurrent_refusal_with_nothing_of_ours_in_flight_pauses_a_moment() {
    let pacer = Pacer::new(100);
    assert!(pacer.try_send("a", T0).is_ok());
    let pause = pacer.throttled("a", Throttle::ConcurrentOperations, None, T0);
    assert_eq!(pause, (Duration::from_millis(5_000), true));
    assert!(pacer.try_send("a", T0 + 4_999).is_err());
    assert!(
        pacer.try_send("a", T0 + 5_000).is_ok(),
        "cap 1, nothing in flight"
    );
}

#[test]
fn unlimited_accounts_are_not_named() {
    let pacer = Pacer::new(100);
    assert!(pacer.allowances(T0).is_empty());
    assert!(pacer.next_resume(T0).is_none());
}
