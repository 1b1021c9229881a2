//! Webhooks (contract 3.13), the methods: the secret shown once and kept
//! out of every other answer, event, audit record and log line; the limit
//! of 10; idempotency; the URL rules; another tenant's webhooks; rotation,
//! test, update, delete; the secrets key; permissions. Delivery is the
//! worker's (`workers`).

mod methods;
