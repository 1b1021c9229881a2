//! providerAccounts and what they reach: create, get, list and delete, their
//! reservations (list, scan, bind), the secret store and real Google
//! authentication; also the clock (`basics`), and listings left partial by
//! an unreachable zone (`partial_listings`).

mod basics;
mod delete;
pub(crate) mod google_auth;
mod partial_listings;
mod reservations;
mod secrets;
