//! The kernel side, seen from userspace: the programs and their loader ([`loader`], with
//! [`btf`] and [`offsets`] resolving the fields they read), the records they write
//! ([`events`], read from their ring buffer by [`ring`]) and their counters ([`counters`]),
//! the kernel's own exit accounting ([`taskstats`]), PID namespaces ([`pidns`]), processes
//! pinned by pidfd ([`pidfd`]) and attached to ([`attach`]), and the agent's connection
//! ([`remote`]), a second source of the same records. [`source`] is what every command asks
//! of a kernel side, whichever of the two it is.

pub mod attach;
pub(crate) mod btf;
pub mod counters;
pub(crate) mod creds;
pub mod events;
pub mod grace;
pub mod loader;
pub(crate) mod offsets;
pub mod pidfd;
pub(crate) mod pidns;
pub mod provenance;
pub mod remote;
pub mod ring;
pub mod source;
pub mod taskstats;
