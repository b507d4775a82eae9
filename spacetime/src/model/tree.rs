//! The process tree `trace` reports: the store keeping every process and image
//! ([`crate::model::reduce`], [`Store::keep_all`]).
//!
//! A process is keyed by (tgid, start time of its group leader): pids are reused, that pair is
//! not. A process keeps one entry for its whole life, with one image per program it ran: the
//! image inherited from its parent at fork (unless it is the root), then one per exec.

pub use crate::model::process::{ExitStatus, Key, Names};
use crate::model::reduce::Store;
pub use crate::model::reduce::{Adopted, Image, Process, Store as Tree};

impl Tree {
    /// A tree whose root is the process with this pid (the first one seen with it), started
    /// by `root_ppid`.
    pub fn new(root_pid: u32, root_ppid: u32) -> Tree {
        Store::keep_all(root_pid, root_ppid)
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
