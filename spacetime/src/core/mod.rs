//! What `trace` and `watch` share: the kernel programs loaded once and driven run after run
//! ([`session`]), one run's event loop ([`run_loop`]), delay accounting switched on for as
//! long as spacetime traces ([`delayacct`]), the one taskstats matcher ([`matcher`]), the
//! process and image model ([`process`]), argv as records stream it in ([`argv`]) and the
//! one store of processes both build from the records ([`reduce`]).

pub mod argv;
pub mod counters;
pub mod delayacct;
pub mod event_loop;
pub mod exit_code;
mod kernel;
pub mod matcher;
pub mod parse;
pub mod process;
pub mod reduce;
pub mod run_loop;
pub mod session;

pub use session::{Run, RunError, RunOptions, Session, SessionOptions, Spawn, Start};
