//! Unit tests of the named cases.

use crate::*;

fn rows() -> Vec<QuotaRow> {
    vec![
        QuotaRow::new("instances", 2, 1),
        QuotaRow::new("vcpus", 8, 4),
        QuotaRow::new("memoryGib", 32, 0),
    ]
}

#[test]
fn available_never_negative() {
    assert_eq!(QuotaRow::new("x", 5, 2).available(), 3);
    assert_eq!(QuotaRow::new("x", 5, 5).available(), 0);
    assert_eq!(QuotaRow::new("x", 5, 9).available(), 0);
    assert_eq!(QuotaRow::new("x", i64::MAX, i64::MIN).available(), i64::MAX);
    assert_eq!(QuotaRow::new("x", i64::MIN, i64::MAX).available(), 0);
}

#[test]
fn charge_fits_exactly_to_max() {
    let after = charge(
        &rows(),
        &[Charge::new("vcpus", 4), Charge::new("instances", 1)],
    )
    .expect("fits");
    assert_eq!(
        after,
        vec![
            QuotaRow::new("instances", 2, 2),
            QuotaRow::new("vcpus", 8, 8),
            QuotaRow::new("memoryGib", 32, 0),
        ]
    );
}

#[test]
fn charge_is_all_or_nothing_and_reports_first_misfit() {
    let err = charge(
        &rows(),
        &[
            Charge::new("instances", 1),
            Charge::new("vcpus", 5),
            Charge::new("memoryGib", 64),
        ],
    )
    .expect_err("vcpus does not fit");
    assert_eq!(
        err,
        QuotaExceeded {
            resource: "vcpus".into(),
            max: 8,
            used: 4,
            requested: 5
        }
    );
    assert_eq!(
        err.to_string(),
        "quota exceeded for vcpus: requested 5, used 4 of 8"
    );
}

#[test]
fn missing_row_grants_zero() {
    let err = charge(&rows(), &[Charge::new("gpus", 1)]).expect_err("no row");
    assert_eq!(
        err,
        QuotaExceeded {
            resource: "gpus".into(),
            max: 0,
            used: 0,
            requested: 1
        }
    );
    // A zero amount never fails, even without a row.
    assert_eq!(charge(&rows(), &[Charge::new("gpus", 0)]), Ok(rows()));
    assert_eq!(charge(&[], &[Charge::new("gpus", 0)]), Ok(vec![]));
}

#[test]
fn duplicates_are_summed() {
    let err = charge(&rows(), &[Charge::new("vcpus", 3), Charge::new("vcpus", 2)])
        .expect_err("3 + 2 > 4 available");
    assert_eq!(err.requested, 5);
    let after = charge(&rows(), &[Charge::new("vcpus", 3), Charge::new("vcpus", 1)]).expect("fits");
    assert_eq!(after[1].used, 8);
}

#[test]
fn negative_amounts_count_as_zero() {
    assert_eq!(charge(&rows(), &[Charge::new("vcpus", -4)]), Ok(rows()));
    // A negative amount cannot make room for a positive one.
    assert!(
        charge(
            &rows(),
            &[Charge::new("vcpus", -4), Charge::new("vcpus", 5)]
        )
        .is_err()
    );
    assert_eq!(release(&rows(), &[Charge::new("vcpus", -4)]), rows());
}

#[test]
fn overflow_does_not_fit_and_does_not_panic() {
    let big = vec![QuotaRow::new("vcpus", i64::MAX, i64::MAX - 1)];
    let err = charge(&big, &[Charge::new("vcpus", 2)]).expect_err("overflow");
    assert_eq!(err.requested, 2);
    let err = charge(
        &big,
        &[Charge::new("vcpus", i64::MAX), Charge::new("vcpus", 1)],
    )
    .expect_err("sum overflow");
    assert_eq!(err.requested, i64::MAX);
    assert_eq!(
        release(
            &big,
            &[Charge::new("vcpus", i64::MAX), Charge::new("vcpus", 1)]
        ),
        vec![QuotaRow::new("vcpus", i64::MAX, 0)]
    );
}

#[test]
fn row_already_over_max_admits_nothing_positive() {
    let over = vec![QuotaRow::new("vcpus", 4, 6)];
    assert!(charge(&over, &[Charge::new("vcpus", 1)]).is_err());
    assert_eq!(charge(&over, &[Charge::new("vcpus", 0)]), Ok(over));
}

#[test]
fn duplicate_rows_charge_the_first() {
    let dup = vec![QuotaRow::new("vcpus", 4, 0), QuotaRow::new("vcpus", 100, 0)];
    let after = charge(&dup, &[Charge::new("vcpus", 2)]).expect("fits");
    assert_eq!(
        after,
        vec![QuotaRow::new("vcpus", 4, 2), QuotaRow::new("vcpus", 100, 0)]
    );
    assert_eq!(release(&after, &[Charge::new("vcpus", 2)]), dup);
}

#[test]
fn release_floors_at_zero_and_ignores_missing_rows() {
    let after = release(
        &rows(),
        &[
            Charge::new("vcpus", 10),
            Charge::new("instances", 1),
            Charge::new("gpus", 3),
        ],
    );
    assert_eq!(
        after,
        vec![
            QuotaRow::new("instances", 2, 0),
            QuotaRow::new("vcpus", 8, 0),
            QuotaRow::new("memoryGib", 32, 0),
        ]
    );
}

#[test]
fn effective_max_cases() {
    assert_eq!(effective_max(0, 0), 0);
    assert_eq!(effective_max(5, 3), 5);
    assert_eq!(effective_max(3, 3), 3);
    assert_eq!(effective_max(1, 3), 3);
}

#[test]
fn instance_charges_cases() {
    assert_eq!(
        instance_charges(8, 32, 2),
        vec![
            Charge::new(resources::INSTANCES, 1),
            Charge::new(resources::VCPUS, 8),
            Charge::new(resources::MEMORY_GIB, 32),
            Charge::new(resources::GPUS, 2),
        ]
    );
    assert_eq!(instance_charges(0, 0, 0), vec![Charge::new("instances", 1)]);
    assert_eq!(
        instance_charges(2, -1, 0),
        vec![Charge::new("instances", 1), Charge::new("vcpus", 2)]
    );
}
