//! providerAccounts and what they reach: create, get, list and delete, their
//! reservations (list, scan, bind), the secret store and real Google
//! authentication; also the clock (`basics`).

mod basics;
mod delete;
pub(crate) mod google_auth;
mod reservations;
mod secrets;
