//! The step functions of a reservation over a window: its committed slots
//! ([`committed_steps`]) and its running instances in grants and on
//! ordinary slots ([`in_use_steps`]), contiguous, gapless and merged where
//! equal.

use crate::capacity::{Commitment, Term};
use crate::views::preview::Stint;

/// One step of the committed slots: `slots` over `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CommittedStep {
    /// First instant.
    pub from: i64,
    /// First instant after it.
    pub to: i64,
    /// The slots of the grants live throughout it.
    pub slots: u64,
}

/// One step of the running instances: over `[from, to)`, `in_grants` held in
/// grants and `ordinary` on ordinary slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InUseStep {
    /// First instant.
    pub from: i64,
    /// First instant after it.
    pub to: i64,
    /// Running instances in grants.
    pub in_grants: u64,
    /// Running instances on ordinary slots.
    pub ordinary: u64,
}

/// The step function of live committed slots over `window`: at every
/// instant `t`, the slots of the `commitments` whose term contains `t`. The
/// steps are contiguous and cover `window` exactly (a step of 0 where
/// nothing is committed), and adjacent steps differ. Nothing for an empty
/// window. Pass every non-cancelled grant (ended ones with their final
/// `endsAt`).
pub fn committed_steps(commitments: &[Commitment], window: Term) -> Vec<CommittedStep> {
    let items = commitments.iter().map(|c| (c.term, [u64::from(c.slots)]));
    sweep(window, items)
        .into_iter()
        .map(|(term, [slots])| CommittedStep {
            from: term.start,
            to: term.end,
            slots,
        })
        .collect()
}

/// The step function of running instances over `window`, from the
/// reservation's placement segments: at every instant, the running segments
/// in a grant and those on an ordinary slot. An open segment lasts to the
/// window's end (pass a window that ends at now at the latest). Contiguous,
/// covering `window` exactly, adjacent steps differ.
pub fn in_use_steps(stints: &[Stint], window: Term) -> Vec<InUseStep> {
    let items = stints.iter().filter(|s| s.running).map(|s| {
        let weight = if s.grant_id.is_some() { [1, 0] } else { [0, 1] };
        (s.term(window.end), weight)
    });
    sweep(window, items)
        .into_iter()
        .map(|(term, [in_grants, ordinary])| InUseStep {
            from: term.start,
            to: term.end,
            in_grants,
            ordinary,
        })
        .collect()
}

/// The step function over `window` of the summed weights of the terms
/// containing each instant, merged where equal.
fn sweep<const N: usize>(
    window: Term,
    items: impl IntoIterator<Item = (Term, [u64; N])>,
) -> Vec<(Term, [u64; N])> {
    if window.is_empty() {
        return Vec::new();
    }
    let mut edges: Vec<(i64, [i128; N])> = Vec::new();
    for (term, weight) in items {
        if let Some(inside) = term.intersection(&window) {
            edges.push((inside.start, weight.map(i128::from)));
            edges.push((inside.end, weight.map(|w| -i128::from(w))));
        }
    }
    edges.sort_by_key(|&(at, _)| at);
    let mut steps: Vec<(Term, [u64; N])> = Vec::new();
    let mut level = [0i128; N];
    let mut next_edge = 0;
    let mut at = window.start;
    while at < window.end {
        while let Some((t, delta)) = edges.get(next_edge)
            && *t <= at
        {
            for (l, d) in level.iter_mut().zip(delta) {
                *l += d;
            }
            next_edge += 1;
        }
        let until = edges
            .get(next_edge)
            .map_or(window.end, |&(t, _)| t.min(window.end));
        let value = level.map(|l| u64::try_from(l).unwrap_or(0));
        match steps.last_mut() {
            Some((last, v)) if *v == value => last.end = until,
            _ => steps.push((Term::new(at, until), value)),
        }
        at = until;
    }
    steps
}
