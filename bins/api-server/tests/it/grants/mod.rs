//! reservationGrants: create and its rules, preview, who sees and ends
//! which grant, settlement at a grant's start and end, events and notices,
//! placement in the grantee's own grants first, concurrency, and what a
//! create reads under the reservation's lock.

mod concurrency;
mod create_rules;
mod events;
mod first;
mod hot_paths;
mod lifecycle;
mod notices;
mod preview;
mod settlement;
mod steps;
mod visibility;
