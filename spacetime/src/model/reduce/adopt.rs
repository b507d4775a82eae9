//! Processes that predate an attach (`trace -p`): they have no fork or exec record, so what
//! /proc said of them at the attach is kept by tgid until their first record arrives, which
//! gives the kernel's exact key. A fork record for the tgid means the process started after
//! its parent was tracked: the record then says everything and the /proc reading is dropped.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::{Image, Kept, Process};
use crate::model::process::{same_start, Key, Names};

/// What /proc said of a running process when spacetime attached to it.
#[derive(Clone, Debug)]
pub struct Adopted {
    /// The kernel's pid (the tree's key).
    pub tgid: u32,
    /// The parent's pid at the attach.
    pub ppid: u32,
    /// Start time from /proc (CLOCK_MONOTONIC ns, to a clock tick): the provisional key
    /// until a record gives the exact one.
    pub start_ns: u64,
    pub threads: u32,
    /// The executable (/proc/PID/exe: resolved, not the path given to execve), the arguments
    /// (NUL-separated) and the comm.
    pub names: Names,
    /// When spacetime attached (CLOCK_MONOTONIC ns): the image is dated from then.
    pub attach_ns: u64,
}

impl Adopted {
    /// Fills a new entry from its /proc reading.
    pub(super) fn fill(self, p: &mut Process) {
        p.ppid = self.ppid;
        p.threads = self.threads.max(1);
        p.seen |= Process::FORK_SEEN;
        p.images.push(Image {
            names: Arc::new(self.names),
            start_ns: self.attach_ns,
            read_at_attach: true,
            ..Image::default()
        });
    }
}

/// Processes that predate an attach, by tgid, until a record names them.
#[derive(Debug, Default)]
pub(super) struct Adoptions(FxHashMap<u32, Adopted>);

impl Adoptions {
    fn insert(&mut self, a: Adopted) {
        self.0.insert(a.tgid, a);
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// The /proc reading for a process about to get its entry, when it is the same process.
    pub(super) fn take(&mut self, key: Key) -> Option<Adopted> {
        let a = self.0.get(&key.tgid)?;
        if !same_start(a.start_ns, key.start_ns) {
            return None;
        }
        self.0.remove(&key.tgid)
    }

    /// A fork record names `tgid`: it did not predate the attach.
    pub(super) fn forget(&mut self, tgid: u32) {
        if !self.0.is_empty() {
            self.0.remove(&tgid);
        }
    }

    /// Every one no record named, in no order.
    fn drain(&mut self) -> Vec<Adopted> {
        self.0.drain().map(|(_, a)| a).collect()
    }
}

impl Kept {
    /// Keeps what /proc said of a process that predates the attach.
    pub fn adopt(&mut self, a: Adopted) {
        self.tgids.entry(a.tgid).or_insert(Kept::NO_SLOT);
        self.adopted.insert(a);
    }

    /// Adopted processes no record has named yet.
    pub fn pending_adoptions(&self) -> usize {
        self.adopted.len()
    }

    /// Gives every adopted process no record named an entry (keyed by its /proc start time):
    /// still running at the end, or gone with its records lost.
    pub fn settle_adopted(&mut self) {
        let pending = self.adopted.drain();
        for a in pending {
            let key = Key {
                tgid: a.tgid,
                start_ns: a.start_ns,
            };
            let i = self.entry(key);
            a.fill(&mut self.procs[i]);
        }
    }

    /// The peak so far of a process still running at the end that predates the attach (the
    /// kernel followed its mm from the attach only): its VmHWM, read then, if higher. False
    /// when it did not fit the packed figures (see [`super::Stats::figures_out_of_range`]).
    #[must_use]
    pub fn set_peak_so_far(&mut self, key: Key, pages: u64) -> bool {
        let Some(i) = self.indexed(&key) else {
            return true;
        };
        match self.procs[i].images.last_mut() {
            Some(img) => img.mem.follow(pages),
            None => true,
        }
    }
}
