//! The real reconciler-worker: its process, scans and their claims, replicas,
//! crashes, one tenant's limits, and the monthly partitions it creates.

mod crash;
mod deficit_crash;
mod lending_crash;
mod limits;
mod partitions;
mod process;
mod replicas;
mod scan_claims;
mod scans;
mod vm_crash;
mod vm_crash_paced;
