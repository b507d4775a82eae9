//! Parent chains (ancestry): who forked whom, through exited parents. A process that exits
//! while some of its children still run stays as a small ghost (pid, start, image) that still
//! counts as its own parent's child, until its last child exits; ghosts are bounded.

use std::{collections::VecDeque, sync::Arc};

use super::{live::Processes, Stats, Tracked};
use crate::model::process::{proc_start_slack_ns, Names};
use rustc_hash::FxHashMap;

/// A process that exited while children of its still run, kept for their ancestry.
#[derive(Debug)]
struct Ghost {
    start_ns: u64,
    ppid: u32,
    image: Arc<Names>,
    live_children: u32,
}

/// One step of a parent chain.
#[derive(Debug, Clone)]
pub struct Ancestor {
    pub pid: u32,
    pub image: Arc<Names>,
    /// It has exited (its children live on).
    pub exited: bool,
}

/// The ghosts, and the parent chain of the process that ended last. The live processes are
/// the live set's: each step up a chain looks there first.
#[derive(Debug)]
pub(super) struct Ancestry {
    ghosts: FxHashMap<u32, Ghost>,
    /// (pid, start) of the ghosts, oldest first; entries of ghosts gone are dropped lazily.
    ghost_order: VecDeque<(u32, u64)>,
    /// The parent chain of the last process that ended.
    chain: Vec<Ancestor>,
    /// [`proc_start_slack_ns`], read once (it asks sysconf).
    slack_ns: u64,
}

impl Ancestry {
    pub(super) fn new() -> Ancestry {
        Ancestry {
            ghosts: FxHashMap::default(),
            ghost_order: VecDeque::new(),
            chain: Vec::new(),
            slack_ns: proc_start_slack_ns(),
        }
    }

    #[cfg(test)]
    pub(super) fn ghost_count(&self) -> usize {
        self.ghosts.len()
    }

    /// Moves the parent chain of the process that ended last into `out`.
    pub(super) fn take_chain(&mut self, out: &mut Vec<Ancestor>) {
        std::mem::swap(out, &mut self.chain);
    }

    /// The parent of a process started at `child_start`: live, or a ghost.
    fn parent<'a>(
        &'a self,
        live: &'a Processes,
        ppid: u32,
        child_start: u64,
    ) -> Option<(u64, u32, &'a Arc<Names>, bool)> {
        let limit = child_start.saturating_add(self.slack_ns);
        if let Some(p) = live.get(&ppid).filter(|p| p.start_ns <= limit) {
            return Some((p.start_ns, p.ppid, p.image(), false));
        }
        self.ghosts
            .get(&ppid)
            .filter(|g| g.start_ns <= limit)
            .map(|g| (g.start_ns, g.ppid, &g.image, true))
    }

    /// Fills `out` with the parent chain of a process (parent first), up to 64 steps.
    pub(super) fn chain_of(
        &self,
        live: &Processes,
        mut ppid: u32,
        mut start: u64,
        out: &mut Vec<Ancestor>,
    ) {
        while ppid != 0 && out.len() < 64 {
            let Some((pstart, pppid, image, exited)) = self.parent(live, ppid, start) else {
                break;
            };
            out.push(Ancestor {
                pid: ppid,
                image: image.clone(),
                exited,
            });
            if pppid == ppid {
                break;
            }
            (ppid, start) = (pppid, pstart);
        }
    }

    /// A process left the live set: its parent chain is kept; it stays as a ghost while
    /// children of its live (`ghosts_cap` at most), else its parent has a live child less.
    pub(super) fn ended(
        &mut self,
        live: &mut Processes,
        t: &Tracked,
        ghosts_cap: usize,
        stats: &mut Stats,
    ) {
        let mut chain = std::mem::take(&mut self.chain);
        chain.clear();
        self.chain_of(live, t.ppid, t.start_ns, &mut chain);
        self.chain = chain;
        // A ghost still counts as its parent's child: the whole chain above a live process
        // stays until that process is gone.
        if t.live_children > 0 {
            self.add_ghost(live, t, ghosts_cap, stats);
        } else if t.known {
            self.release_parent(live, t.ppid, t.start_ns);
        }
    }

    /// A child of `ppid` exited: a ghost whose last child it was goes, and so on up.
    fn release_parent(&mut self, live: &mut Processes, mut ppid: u32, mut start: u64) {
        for _ in 0..64 {
            let limit = start.saturating_add(self.slack_ns);
            if let Some(p) = live.get_mut(&ppid).filter(|p| p.start_ns <= limit) {
                p.live_children = p.live_children.saturating_sub(1);
                return;
            }
            let Some(g) = self.ghosts.get_mut(&ppid).filter(|g| g.start_ns <= limit) else {
                return;
            };
            g.live_children = g.live_children.saturating_sub(1);
            if g.live_children > 0 {
                return;
            }
            let g = self.ghosts.remove(&ppid).expect("present");
            (ppid, start) = (g.ppid, g.start_ns);
        }
    }

    fn add_ghost(&mut self, live: &mut Processes, e: &Tracked, cap: usize, stats: &mut Stats) {
        while self.ghosts.len() >= cap {
            let Some((pid, start)) = self.ghost_order.pop_front() else {
                break;
            };
            if self.ghosts.get(&pid).is_some_and(|g| g.start_ns == start) {
                let g = self.ghosts.remove(&pid).expect("present");
                stats.ghosts_evicted += 1;
                self.release_parent(live, g.ppid, g.start_ns);
            }
        }
        self.ghosts.insert(
            e.pid,
            Ghost {
                start_ns: e.start_ns,
                ppid: e.ppid,
                image: e.image().clone(),
                live_children: e.live_children,
            },
        );
        self.ghost_order.push_back((e.pid, e.start_ns));
        // Entries of ghosts already gone are dropped lazily; keep the queue proportionate.
        if self.ghost_order.len() > 2 * self.ghosts.len() + 1024 {
            let ghosts = &self.ghosts;
            self.ghost_order
                .retain(|(pid, start)| ghosts.get(pid).is_some_and(|g| g.start_ns == *start));
        }
    }
}
