//! spacetime: a process tree tracer built on eBPF.
//!
//! # Layers
//!
//! Data flows one way, and imports point the same way (a layer uses those above it, never
//! those below):
//!
//! 1. **Kernel and decode.** The kernel programs, loaded by [`loader`] (with [`btf`] and
//!    [`offsets`] resolving the fields they read), write records to a ring buffer;
//!    [`events`] decodes them. [`taskstats`] reads the kernel's own exit accounting.
//! 2. **Reduce.** [`tree`] builds `trace`'s process tree (every process kept); `watch`'s
//!    table (`watch::table`) keeps a bounded live set. [`memory`], [`timeline`] and [`pss`]
//!    follow memory over time; [`cputime`] splits CPU as the kernel does.
//! 3. **Match.** [`core::matcher`] pairs each exit with its taskstats
//!    record, for both commands; [`crosscheck`] sums `trace`'s per-process figures on top.
//! 4. **Report and render.** [`report`] is `trace`'s one report model (JSON, and through
//!    [`report::text`], [`chart`], [`format`](mod@crate::format) and `export` what people read); [`term`] makes
//!    untrusted bytes (argv, comm, paths) safe for a terminal; [`units`] names sizes and
//!    durations. The report does not know the loader: its counters are a plain type
//!    ([`core::counters`]).
//! 5. **Commands, as thin orchestrations.** [`core`](mod@crate::core) holds what the commands
//!    share: a session that loads the programs once and runs one traced command after
//!    another (`core::session`), the one event loop (`core::event_loop`), the one spelling
//!    of sizes and durations (`core::parse`), exit codes. [`trace`] is one run of a session,
//!    rendered; [`watch`] plugs its table, filter, output and metrics into the event loop;
//!    [`cli`] parses the command line. [`launch`] starts the traced command, [`outputs`]
//!    opens the files a trace writes before CMD starts, [`pidfd`] proves a pid is still the
//!    process meant before it is signalled, [`selfstats`] measures what spacetime costs.
//!
//! [`agent`] is `spacetime agent`, the daemon that loads the programs once and serves the
//! commands of any user over a socket ([`agent::proto`]); a command's kernel side is then
//! the agent's connection instead of programs of its own (`core::kernel`, `watch::kernel`),
//! carrying the same ring records.
//!
//! Leaves that import nothing of spacetime's (`core::parse`, `core::counters`,
//! `core::exit_code`, [`units`], [`clock`]) are shared by every layer.

pub mod agent;
pub mod attach;
pub mod bench;
pub mod btf;
pub mod caps;
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
