#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod capacity;
pub mod deficit;
pub mod lending;
pub mod metering;
pub mod notices;
pub mod placement;
pub mod settlement;
pub mod views;
pub mod vm;

mod rules;

pub use capacity::{CapacityShort, Commitment, Term, check_capacity, fits, peak_overlap};
pub use metering::{
    HOUR_MS, MICROS_PER_UNIT, Record, Segment, bucket_start, cumulative_rounded_records,
    format_micros, grant_slot_records, hour_buckets,
};
pub use placement::{
    Billing, CapacityUnavailable, LiveGrant, Placement, PlacementRequest, Refusal, ReservationView,
    Seat, place, place_in_order, place_on,
};
pub use settlement::{
    Destination, EndReason, ForcedEnd, GrantState, Move, Power, SettlementGrant,
    SettlementInstance, Transition, apply, force_end, grant_state, has_due, refill, settle,
};
