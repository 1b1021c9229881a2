//! A transaction that finds, once it holds some locks, that it needs rows
//! which come earlier in the lock order ([`crate::locks`]) cannot take them
//! then: it rolls back and tries again with them taken first. This is that
//! retry, written once ([`TRIES`], [`ended`], [`exhausted`]): a managed
//! step's outcome that releases its quota (the tenant's quota rows), a
//! ledger start that needs a new placement (its pool's reservations).

use crate::error::StorageError;

/// Why one try gave up.
#[derive(Debug)]
pub(crate) enum Try<E> {
    /// It needs rows earlier in the lock order than those it holds: roll
    /// back, and take them first next time.
    MoreLocks,
    /// It stopped, for good.
    Stop(E),
}

impl<E: From<StorageError>> From<StorageError> for Try<E> {
    fn from(e: StorageError) -> Self {
        Try::Stop(E::from(e))
    }
}

impl<E: From<StorageError>> From<diesel::result::Error> for Try<E> {
    fn from(e: diesel::result::Error) -> Self {
        Try::Stop(E::from(StorageError::from(e)))
    }
}

/// The tries, in order: without the extra locks, then with them taken
/// first.
pub(crate) const TRIES: [bool; 2] = [false, true];

/// The end of one try: its answer, or `None` to try again with more locks.
pub(crate) fn ended<T, E>(tried: Result<T, Try<E>>) -> Option<Result<T, E>> {
    match tried {
        Ok(value) => Some(Ok(value)),
        Err(Try::Stop(e)) => Some(Err(e)),
        Err(Try::MoreLocks) => None,
    }
}

/// The error of a try that asked for more locks with them all taken: a bug
/// (`what` names the operation).
pub(crate) fn exhausted<E: From<StorageError>>(what: &str) -> E {
    E::from(StorageError::internal(format!(
        "{what}: more locks asked for with them all taken"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The loop every caller writes (a closure would make its future lose
    /// `Send`), over a scripted try.
    fn run(
        answers: &[Result<&'static str, Try<StorageError>>],
    ) -> (Result<&'static str, StorageError>, usize) {
        let mut tries = 0;
        for more in TRIES {
            tries += 1;
            let tried = match &answers[usize::from(more)] {
                Ok(v) => Ok(*v),
                Err(Try::MoreLocks) => Err(Try::MoreLocks),
                Err(Try::Stop(_)) => Err(Try::Stop(StorageError::internal("stop"))),
            };
            if let Some(done) = ended(tried) {
                return (done, tries);
            }
        }
        (Err(exhausted("t")), tries)
    }

    #[test]
    fn a_try_that_asks_for_more_locks_runs_again_with_them_once() {
        let (done, tries) = run(&[Err(Try::MoreLocks), Ok("done")]);
        assert_eq!(done.expect("the second try"), "done");
        assert_eq!(tries, 2);
    }

    #[test]
    fn a_second_ask_is_an_error_and_a_stop_ends_at_once() {
        let (asked, tries) = run(&[Err(Try::MoreLocks), Err(Try::MoreLocks)]);
        assert!(asked.is_err());
        assert_eq!(tries, 2);
        let stop = Try::Stop(StorageError::internal("stop"));
        let (stopped, tries) = run(&[Err(stop), Ok("unreached")]);
        assert!(stopped.is_err());
        assert_eq!(tries, 1);
    }
}
