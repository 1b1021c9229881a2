//! The two logs: events (`events.list`) and the audit trail (`audit.list`).

mod audit;
mod events;
