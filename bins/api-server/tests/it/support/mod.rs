//! What the end-to-end tests share: the api-server under test and its
//! clock, the fake Compute Engine, the reconciler-worker process, the
//! platform and its instances built through the API (`builders`, and the
//! smaller `fixtures`), typed builders of the request bodies used most
//! (`bodies`), the methods called most (`calls`), rows read from the
//! database, metering checks, the bcctl binary's runs and a seeded PRNG.

pub mod bcctl;
pub mod bodies;
pub mod builders;
pub mod calls;
pub mod clock;
pub mod db;
pub mod demo;
pub mod fixtures;
pub mod gce;
pub mod meter;
pub mod openapi;
pub mod receiver;
pub mod rng;
pub mod server;
pub mod vms;
pub mod worker;
