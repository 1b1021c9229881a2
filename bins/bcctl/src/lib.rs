//! bcctl, the command-line client of the control plane: human times and
//! durations ([`when`]) and a reservation timeline drawn as text ([`gantt`]).

pub mod gantt;
pub mod when;
