//! spacetime: a process tree tracer built on eBPF.
//!
//! The data flows one way: the kernel programs ([`loader`]) write records to a ring buffer,
//! [`events`] decodes them, [`tree`] builds the process tree, [`report`] renders it.
//! [`launch`] starts and reaps the traced command; [`btf`] and [`offsets`] resolve the kernel
//! fields the programs read; [`taskstats`] listens to the kernel's exit accounting.
//! [`core`](crate::core) loads the programs once and runs one traced command after another
//! (a session); [`trace`] is one such run, rendered, for `spacetime trace`; [`selfstats`]
//! measures what spacetime itself costs. [`term`] makes untrusted bytes (argv, comm, paths)
//! safe for a terminal; [`outputs`] opens the files a trace writes before CMD starts;
//! [`format`] is `--format`; [`pidfd`] proves a pid is still the process meant before it is
//! signalled.

pub mod attach;
pub mod bench;
pub mod btf;
pub mod cgroup_peak;
pub mod chart;
pub mod cli;
pub mod clock;
pub mod core;
pub mod cputime;
pub mod crosscheck;
pub mod events;
pub mod export;
pub mod format;
pub mod idhash;
pub mod launch;
pub mod loader;
pub mod memory;
pub mod offsets;
pub mod outputs;
pub mod pidfd;
pub mod pidns;
pub mod pss;
pub mod report;
pub mod selfstats;
pub mod signals;
pub mod status;
pub mod taskstats;
pub mod term;
pub mod timeline;
pub mod trace;
pub mod tree;
pub mod units;
pub mod watch;
