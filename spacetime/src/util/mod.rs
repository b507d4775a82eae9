//! The bottom layer: leaves that import nothing of spacetime's but each other — clocks,
//! signal names, terminal-safe text, units and their spelling, exit codes, readiness for a service
//! manager, a service's scheduling policy.

pub(crate) mod arg_area;
pub(crate) mod caps;
pub(crate) mod clock;
pub(crate) mod exit_code;
pub(crate) mod notify;
pub(crate) mod nss;
pub(crate) mod parse;
pub(crate) mod proc_text;
pub(crate) mod sched;
pub(crate) mod signals;
pub mod term;
pub(crate) mod units;
