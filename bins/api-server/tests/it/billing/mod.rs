//! Billing: usage records written by the real `reconciler-worker --once`.

mod basics;
pub(crate) mod deficit;
mod rules;
