//! The bottom layer: leaves that import nothing of spacetime's but each other — clocks,
//! signal names, terminal-safe text, units and their spelling, exit codes.

pub(crate) mod caps;
pub(crate) mod clock;
pub(crate) mod exit_code;
pub(crate) mod parse;
pub(crate) mod signals;
pub mod term;
pub(crate) mod units;
