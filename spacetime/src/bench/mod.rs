//! `spacetime bench CMD...`: runs each command many times, every run a full trace through
//! one load of the kernel programs, and reports time and exact memory with their spread
//! ([`stats`]), the commands against each other ([`compare`]), on the terminal ([`summary`],
//! [`progress`]) and as JSON, Markdown and CSV ([`export`]).

pub mod args;
pub mod compare;
pub mod export;
pub mod model;
pub mod progress;
pub mod stats;
pub mod summary;

pub use args::BenchArgs;
