//! spacetime: a process tree tracer built on eBPF.
//!
//! # Layers
//!
//! Each folder is a layer; data flows up through them and imports point down only, which
//! `cargo xtask lint` checks (ARCHITECTURE.md draws the whole):
//!
//! - [`cmd`]: the commands, thin orchestrations — `trace`, `bench`, `watch`, `agent`, the CLI.
//! - [`run`]: running traced commands — the session, the event loop, launching, attaching,
//!   proving pids before signalling them, the outputs opened before CMD starts.
//! - [`report`]: the report model and what people read of it — text, chart, one-line
//!   formats, JSON, Perfetto, the live status line, spacetime's own cost.
//! - [`model`]: what the records mean — processes and images, the one store `trace` and
//!   `watch` build, CPU, memory over time, PSS, the taskstats match and cross-check.
//! - [`kernel`]: the kernel side — loader, BTF and offsets, record decoding, counters,
//!   taskstats, PID namespaces, and the agent's connection (a second source of the same
//!   records).
//! - [`util`]: leaves — clocks, signal names, terminal-safe text, units, exit codes, hashing.

pub mod cmd;
pub mod kernel;
pub mod model;
pub mod report;
pub mod run;
pub mod util;
