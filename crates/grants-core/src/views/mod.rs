//! Operator views (contract 3.10): the arithmetic behind a reservation's
//! slot accounts, its timeline and a grant's hour-by-hour usage. Nothing
//! here writes or settles anything: the views are computed at the server's
//! now from what is stored, with the transitions due since the last
//! settlement applied in memory ([`preview::preview_settlement`]), so an
//! answer never depends on whether a reconciler has run.
//!
//! * [`preview`]: the settlement due at an instant applied to a copy of the
//!   snapshot, and [`preview::project_stints`]: the placement segments on
//!   the reservation with the due transitions applied, as settlement would
//!   write them.
//! * [`slots`]: `grantedSlots`, `heldInGrants`, `ordinaryInUse`,
//!   `ordinaryFree` and `physicalInUse` of contract 4 at an instant.
//! * [`steps`]: [`steps::committed_steps`] and [`steps::in_use_steps`],
//!   contiguous, gapless step functions over a window, merged where equal.
//! * [`timeline`]: [`timeline::reservation_timeline`], the timeline as one
//!   viewer may see it; a grantee sees other tenants' grants only as
//!   [`timeline::AnonymousGrant`]s.
//! * [`hours`]: [`hours::grant_hours`], one [`hours::HourRow`] per hour
//!   bucket of a grant's term.
//!
//! ```
//! use grants_core::views::steps::{committed_steps, CommittedStep};
//! use grants_core::{Commitment, Term};
//!
//! let grants = [Commitment::new(Term::new(10, 30), 2), Commitment::new(Term::new(20, 40), 3)];
//! let steps = committed_steps(&grants, Term::new(0, 50));
//! let step = |from, to, slots| CommittedStep { from, to, slots };
//! assert_eq!(
//!     steps,
//!     [step(0, 10, 0), step(10, 20, 2), step(20, 30, 5), step(30, 40, 3), step(40, 50, 0)],
//! );
//! ```

pub mod hours;
pub mod preview;
pub mod slots;
pub mod steps;
pub mod timeline;

#[cfg(test)]
mod tests;
