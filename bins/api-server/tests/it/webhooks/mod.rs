//! Webhooks (contract 3.13): the methods (the secret shown once and kept
//! out of every other answer, event, audit record and log line; the limit
//! of 10; idempotency; the URL rules; another tenant's webhooks; rotation,
//! test, update, delete; the secrets key; permissions), and delivery with
//! the real worker and a receiver in the test (signatures, log order,
//! types, retries on the manual clock's schedule, redirects, disabling,
//! replicas killed while delivering); r4: one tenant's silent endpoints
//! delay no other tenant, a webhook changed or deleted while its deliveries
//! are claimed, the URL rules at every attempt, disabling and enabling,
//! secrets erased, retention.

mod changes;
mod crash;
mod delivery;
mod fairness;
mod methods;
mod retention;
