//! The process tree `trace` reports: the store over the storage that keeps every process and
//! image ([`crate::model::reduce`], [`Kept`]).
//!
//! A process is keyed by (tgid, start time of its group leader): pids are reused, that pair is
//! not. A process keeps one entry for its whole life, with one image per program it ran: the
//! image inherited from its parent at fork (unless it is the root), then one per exec.

pub use crate::model::process::{ExitStatus, Key, Names};
pub use crate::model::reduce::{Adopted, Image, Process};
use crate::model::reduce::{Kept, Store};

/// `trace`'s tree: every process and image kept.
pub type Tree = Store<Kept>;

impl Store<Kept> {
    /// A tree whose root is the process with this pid (the first one seen with it), started
    /// by `root_ppid`.
    pub fn new(root_pid: u32, root_ppid: u32) -> Tree {
        Store::with(Kept::new(root_pid, root_ppid))
    }

    /// spacetime runs inside a PID namespace, where the root is `root_ns_pid` (see
    /// [`Kept::set_namespace_root`]).
    pub fn in_namespace(mut self, root_ns_pid: u32) -> Tree {
        self.set_namespace_root(root_ns_pid);
        self
    }
}

#[cfg(test)]
use {
    crate::{
        kernel::events::{Args, Event},
        model::cputime,
    },
    spacetime_common::{flags, ExitEvent, ImageEndEvent, RssEvent},
};

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
