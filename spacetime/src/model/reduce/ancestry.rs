//! Parent chains (ancestry): who forked whom, through exited parents. A process that exits
//! while some of its children still run stays as a small ghost (pid, start, image) that still
//! counts as its own parent's child, until its last child exits; ghosts are bounded.

use std::sync::Arc;

use super::{live::LiveSet, Stats, Store, Tracked};
use crate::model::process::Names;

/// A process that exited while children of its still run, kept for their ancestry.
#[derive(Debug)]
pub(super) struct Ghost {
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

impl LiveSet {
    /// The parent of a process started at `child_start`: live, or a ghost.
    fn parent(&self, ppid: u32, child_start: u64) -> Option<(u64, u32, &Arc<Names>, bool)> {
        let limit = child_start.saturating_add(self.slack_ns);
        if let Some(p) = self.map.get(&ppid).filter(|p| p.start_ns <= limit) {
            return Some((p.start_ns, p.ppid, p.image(), false));
        }
        self.ghosts
            .get(&ppid)
            .filter(|g| g.start_ns <= limit)
            .map(|g| (g.start_ns, g.ppid, &g.image, true))
    }

    /// Fills `out` with the parent chain of a process (parent first), up to 64 steps.
    pub(super) fn chain_of(&self, mut ppid: u32, mut start: u64, out: &mut Vec<Ancestor>) {
        while ppid != 0 && out.len() < 64 {
            let Some((pstart, pppid, image, exited)) = self.parent(ppid, start) else {
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

    /// A child of `ppid` exited: a ghost whose last child it was goes, and so on up.
    pub(super) fn release_parent(&mut self, mut ppid: u32, mut start: u64) {
        for _ in 0..64 {
            let limit = start.saturating_add(self.slack_ns);
            if let Some(p) = self.map.get_mut(&ppid).filter(|p| p.start_ns <= limit) {
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

    pub(super) fn add_ghost(&mut self, e: &Tracked, stats: &mut Stats) {
        let cap = (self.opts.max_processes / 4).max(64);
        while self.ghosts.len() >= cap {
            let Some((pid, start)) = self.ghost_order.pop_front() else {
                break;
            };
            if self.ghosts.get(&pid).is_some_and(|g| g.start_ns == start) {
                let g = self.ghosts.remove(&pid).expect("present");
                stats.ghosts_evicted += 1;
                self.release_parent(g.ppid, g.start_ns);
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

impl Store {
    /// Fills `out` with the parent chain of a process (parent first), up to 64 steps.
    pub fn chain(&self, ppid: u32, start: u64, out: &mut Vec<Ancestor>) {
        if let Some(l) = self.live.as_deref() {
            l.chain_of(ppid, start, out);
        }
    }
}
