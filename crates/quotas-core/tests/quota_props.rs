//! Property tests of the quota arithmetic.

use std::collections::BTreeMap;

use proptest::prelude::*;
use quotas_core::{Charge, QuotaRow, charge, effective_max, instance_charges, release};

const RESOURCES: [&str; 5] = ["instances", "vcpus", "memoryGib", "gpus", "other"];

/// Consistent rows: unique resources, `0 <= used <= max`.
fn rows() -> impl Strategy<Value = Vec<QuotaRow>> {
    proptest::collection::btree_map(
        proptest::sample::select(RESOURCES.to_vec()),
        (0i64..=64).prop_flat_map(|max| (Just(max), 0..=max)),
        0..=RESOURCES.len(),
    )
    .prop_map(|m| {
        m.into_iter()
            .map(|(r, (max, used))| QuotaRow::new(r, max, used))
            .collect()
    })
    .prop_shuffle()
}

fn charges() -> impl Strategy<Value = Vec<Charge>> {
    proptest::collection::vec(
        (proptest::sample::select(RESOURCES.to_vec()), 0i64..=24)
            .prop_map(|(r, a)| Charge::new(r, a)),
        0..8,
    )
}

/// Any values at all, including negative and extreme ones.
fn wild_rows() -> impl Strategy<Value = Vec<QuotaRow>> {
    proptest::collection::vec(
        (
            proptest::sample::select(RESOURCES.to_vec()),
            any::<i64>(),
            any::<i64>(),
        )
            .prop_map(|(r, max, used)| QuotaRow::new(r, max, used)),
        0..6,
    )
}

fn wild_charges() -> impl Strategy<Value = Vec<Charge>> {
    proptest::collection::vec(
        (
            proptest::sample::select(RESOURCES.to_vec()),
            prop_oneof![any::<i64>(), (i64::MAX - 4)..=i64::MAX, -2i64..=2],
        )
            .prop_map(|(r, a)| Charge::new(r, a)),
        0..8,
    )
}

/// The per-resource totals, computed wide (no overflow possible), negatives
/// counted as 0, in the order each resource first appears.
fn model_totals(charges: &[Charge]) -> Vec<(String, i128)> {
    let mut out: Vec<(String, i128)> = Vec::new();
    for c in charges {
        let a = i128::from(c.amount.max(0));
        match out.iter_mut().find(|(r, _)| *r == c.resource) {
            Some((_, t)) => *t += a,
            None => out.push((c.resource.clone(), a)),
        }
    }
    out
}

fn row_of<'a>(rows: &'a [QuotaRow], resource: &str) -> Option<&'a QuotaRow> {
    rows.iter().find(|r| r.resource == resource)
}

/// The first resource that does not fit, by the model.
fn model_first_misfit(rows: &[QuotaRow], charges: &[Charge]) -> Option<(String, i128)> {
    model_totals(charges).into_iter().find(|(r, t)| {
        *t > 0
            && match row_of(rows, r) {
                None => true,
                Some(row) => i128::from(row.used) + *t > i128::from(row.max),
            }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// On success every row is returned, in order; each used grows by exactly
    /// the summed amount of its resource and stays within max; every charged
    /// resource had a row.
    #[test]
    fn charge_ok_conserves_and_never_overcommits(rows in rows(), charges in charges()) {
        if let Ok(after) = charge(&rows, &charges) {
            prop_assert_eq!(after.len(), rows.len());
            let totals: BTreeMap<String, i128> = model_totals(&charges).into_iter().collect();
            for (old, new) in rows.iter().zip(&after) {
                prop_assert_eq!(&old.resource, &new.resource);
                prop_assert_eq!(old.max, new.max);
                let t = totals.get(&old.resource).copied().unwrap_or(0);
                prop_assert_eq!(i128::from(new.used), i128::from(old.used) + t);
                prop_assert!(new.used <= new.max);
            }
            for (r, t) in &totals {
                prop_assert!(*t == 0 || row_of(&rows, r).is_some(), "{} charged without a row", r);
            }
        }
    }

    /// It fails exactly when the model says some resource does not fit, and
    /// then names the first such resource with the row's numbers.
    #[test]
    fn charge_err_iff_something_does_not_fit(rows in rows(), charges in charges()) {
        let result = charge(&rows, &charges);
        match model_first_misfit(&rows, &charges) {
            None => prop_assert!(result.is_ok(), "{:?}", result),
            Some((resource, total)) => {
                let err = result.expect_err("the model says it does not fit");
                prop_assert_eq!(&err.resource, &resource);
                prop_assert_eq!(i128::from(err.requested), total);
                let (max, used) = row_of(&rows, &resource).map_or((0, 0), |r| (r.max, r.used));
                prop_assert_eq!((err.max, err.used), (max, used));
                prop_assert!(
                    i128::from(err.used) + i128::from(err.requested) > i128::from(err.max)
                );
            }
        }
    }

    /// A charge that fits, then its release, gives back the original rows.
    #[test]
    fn charge_then_release_is_identity(rows in rows(), charges in charges()) {
        if let Ok(after) = charge(&rows, &charges) {
            prop_assert_eq!(release(&after, &charges), rows);
        }
    }

    /// Charging the same request again and again stops exactly when it no
    /// longer fits, and never over-commits on the way.
    #[test]
    fn repeated_admissions_never_overcommit(rows in rows(), charges in charges()) {
        let mut current = rows;
        for _ in 0..16 {
            match charge(&current, &charges) {
                Ok(next) => {
                    for r in &next {
                        prop_assert!(r.used <= r.max);
                    }
                    current = next;
                }
                Err(_) => break,
            }
        }
    }

    /// Release never goes below 0, never raises a counter, and never touches
    /// `max` or the order of rows.
    #[test]
    fn release_never_below_zero(rows in rows(), charges in charges()) {
        let after = release(&rows, &charges);
        prop_assert_eq!(after.len(), rows.len());
        for (old, new) in rows.iter().zip(&after) {
            prop_assert_eq!(&old.resource, &new.resource);
            prop_assert_eq!(old.max, new.max);
            prop_assert!(new.used >= 0);
            prop_assert!(new.used <= old.used);
        }
    }

    /// No panics and no wrap-around for any values at all: a success still
    /// means every charged row ends within its max.
    #[test]
    fn extreme_values_never_panic(rows in wild_rows(), charges in wild_charges()) {
        match charge(&rows, &charges) {
            Ok(after) => {
                prop_assert_eq!(after.len(), rows.len());
                prop_assert_eq!(model_first_misfit(&rows, &charges), None);
                for (old, new) in rows.iter().zip(&after) {
                    if new.used != old.used {
                        prop_assert!(new.used <= new.max);
                        prop_assert!(new.used > old.used);
                    }
                }
            }
            Err(e) => prop_assert!(e.requested > 0),
        }
        for r in release(&rows, &charges).iter().zip(&rows) {
            prop_assert!(r.0.used >= 0 || r.0.used == r.1.used);
        }
    }

    /// `available` is `max - used`, never below 0.
    #[test]
    fn available_is_never_negative(max in any::<i64>(), used in any::<i64>()) {
        let a = QuotaRow::new("x", max, used).available();
        prop_assert!(a >= 0);
        let wide = (i128::from(max) - i128::from(used)).clamp(0, i128::from(i64::MAX));
        prop_assert_eq!(i128::from(a), wide);
    }

    /// `quotas.set`: the effective max is never below used, and is the
    /// requested one whenever that is at least used.
    #[test]
    fn effective_max_respects_used(requested in any::<i64>(), used in any::<i64>()) {
        let m = effective_max(requested, used);
        prop_assert!(m >= used);
        if requested >= used {
            prop_assert_eq!(m, requested);
        } else {
            prop_assert_eq!(m, used);
        }
    }

    /// An instance always charges one `instances` and never a zero amount.
    #[test]
    fn instance_charges_shape(v in -2i64..64, m in -2i64..256, g in -2i64..8) {
        let cs = instance_charges(v, m, g);
        prop_assert_eq!(&cs[0], &Charge::new("instances", 1));
        prop_assert!(cs.iter().all(|c| c.amount > 0));
        let expected = 1 + usize::from(v > 0) + usize::from(m > 0) + usize::from(g > 0);
        prop_assert_eq!(cs.len(), expected);
    }
}
