//! Storage's operations called directly, each test on a database of its own
//! ([`storage::test_db`]): the platform is built with the operations alone
//! (`world`), no provider and no server is involved, and each test checks
//! the values an operation answers, the rows it leaves, the events it
//! publishes and the typed details of its refusals.

mod world;

mod claims;
mod compaction;
mod errors;
mod events;
mod grants;
mod instances;
mod steps;
mod webhooks;
