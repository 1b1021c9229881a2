//! Billing: usage records written by the real `reconciler-worker --once`.

mod basics;
mod deficit;
mod rules;
