//! The kernel side, seen from userspace: the programs and their loader ([`loader`], with
//! [`btf`] and [`offsets`] resolving the fields they read), the records they write
//! ([`events`], read from their ring buffer by [`ring`]) and their counters ([`counters`]), the kernel's own exit accounting
//! ([`taskstats`]), PID namespaces ([`pidns`]), and the agent's connection ([`remote`]), a
//! second source of the same records.

pub(crate) mod btf;
pub(crate) mod counters;
pub(crate) mod creds;
pub mod events;
pub mod loader;
pub(crate) mod offsets;
pub(crate) mod pidns;
pub(crate) mod provenance;
pub mod remote;
pub mod ring;
pub(crate) mod taskstats;
