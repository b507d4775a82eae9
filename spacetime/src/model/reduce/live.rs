//! The live set (`watch`): every running process, keyed by tgid, and bounded. A process leaves
//! on exit (returned to the caller, which reports it); with ancestry on, one whose children
//! still run stays as a small ghost ([`super::ancestry`]). Processes found in /proc at start
//! are seeded with a start time to the clock tick and take the exact one from their first
//! record. Only the current image is kept (with `images`, also the last [`MAX_IMAGES`] it
//! left); the peak of every image left stays in [`Tracked::left_peak_pages`].

use std::{
    collections::{hash_map, HashMap, VecDeque},
    ops::Deref,
    sync::Arc,
};

use spacetime_common::ExitEvent;

use super::{
    ancestry::{Ancestor, Ghost},
    budget::Budget,
    Image, Process, Stats, Store,
};
use crate::model::{
    cputime,
    process::{proc_start_slack_ns, same_start, Key, Names},
};
use rustc_hash::FxHashMap;

/// Images left by exec kept per process with `images` (the last ones; older are counted).
pub const MAX_IMAGES: usize = 32;

/// Processes remembered after their exit, to recognize a duplicate end record.
const RECENTLY_ENDED: usize = 4096;

/// The bounds and what the live set keeps.
#[derive(Debug, Clone, Copy)]
pub struct LiveOptions {
    pub max_processes: usize,
    /// Parent chains through exited parents (ghosts).
    pub ancestry: bool,
    /// The images a process left, with their peaks.
    pub images: bool,
}

/// A live process.
#[derive(Debug, Default)]
pub struct Tracked {
    pub process: Process,
    /// The start time is the kernel's (false: read from /proc, to the clock tick).
    start_exact: bool,
    pub(super) live_children: u32,
    /// A descendant of `--pid-tree`.
    pub in_tree: bool,
    /// Found in /proc at start rather than seen forking.
    pub seeded: bool,
    /// In the set (false: made up for an exit whose process was unknown).
    pub known: bool,
    /// Images left beyond the [`MAX_IMAGES`] kept.
    pub images_dropped: u32,
    /// Largest peak of the images it left (pages).
    pub left_peak_pages: u64,
    /// CPU time of the threads that exited, as the kernel's sum_exec_runtime.
    pub runtime_ns: u64,
}

impl Deref for Tracked {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.process
    }
}

impl Tracked {
    fn new(key: Key) -> Tracked {
        Tracked {
            process: Process {
                key: Some(key),
                pid: key.tgid,
                start_ns: key.start_ns,
                threads: 1,
                ..Process::default()
            },
            start_exact: true,
            known: true,
            ..Tracked::default()
        }
    }

    /// A process found in /proc: start time approximate, its image as /proc gave it.
    pub fn seeded(pid: u32, ppid: u32, start_ns: u64, names: Arc<Names>) -> Tracked {
        let mut t = Tracked::new(Key {
            tgid: pid,
            start_ns,
        });
        t.process.ppid = ppid;
        t.process.images.push(Image {
            names,
            start_ns,
            read_at_attach: true,
            ..Image::default()
        });
        t.start_exact = false;
        t.seeded = true;
        t
    }

    /// Its current program image (none known: empty names).
    pub fn image(&self) -> &Arc<Names> {
        match self.process.images.last() {
            Some(i) => &i.names,
            None => Image::no_names(),
        }
    }

    /// When its current image started by exec (0: no exec seen).
    pub fn exec_ns(&self) -> u64 {
        match self.process.images.last() {
            Some(i) if !i.inherited && !i.read_at_attach => i.start_ns,
            _ => 0,
        }
    }

    /// Whether its argv is still arriving in continuation records.
    pub fn argv_pending(&self) -> bool {
        self.images.last().is_some_and(|i| i.pending_args.is_some())
    }

    /// Whether a record for the process started at `start_ns` is for this one; a seeded one
    /// takes the exact start time.
    fn same_process(&mut self, start_ns: u64) -> bool {
        if !self.started_at(start_ns) {
            return false;
        }
        if !self.start_exact {
            let p = &mut self.process;
            p.start_ns = start_ns;
            p.key = Some(Key {
                tgid: p.pid,
                start_ns,
            });
            self.start_exact = true;
        }
        true
    }

    /// Whether a record for the process started at `start_ns` is for this one (without
    /// taking the exact start time, see [`Self::same_process`]).
    pub fn started_at(&self, start_ns: u64) -> bool {
        match self.start_exact {
            true => self.process.start_ns == start_ns,
            false => same_start(self.process.start_ns, start_ns),
        }
    }

    /// Drops the images left beyond what is kept.
    pub(super) fn trim_images(&mut self, keep: bool) {
        let left = self.process.images.len().saturating_sub(1);
        let cap = if keep { MAX_IMAGES } else { 0 };
        if left > cap {
            let n = left - cap;
            self.process.images.drain(..n);
            if keep {
                self.images_dropped += n as u32;
            }
        }
    }
}

#[derive(Debug)]
pub(super) struct LiveSet {
    pub(super) map: FxHashMap<u32, Tracked>,
    pub(super) opts: LiveOptions,
    pub(super) ghosts: FxHashMap<u32, Ghost>,
    pub(super) ghost_order: VecDeque<(u32, u64)>,
    /// (tgid → start) of the last processes that ended, oldest first in `ended_order`.
    ended: FxHashMap<u32, u64>,
    ended_order: VecDeque<u32>,
    /// Processes made by a record but started before every program was attached, to be
    /// checked against /proc once (`verify_early`).
    early: Vec<(u32, u64)>,
    /// CLOCK_MONOTONIC when every program was attached (0: not set).
    attached_ns: u64,
    pub(super) budget: Budget,
    /// The parent chain of the last process that ended (with ancestry).
    chain: Vec<Ancestor>,
    /// [`proc_start_slack_ns`], read once (it asks sysconf).
    pub(super) slack_ns: u64,
}

impl LiveSet {
    pub(super) fn new(opts: LiveOptions) -> LiveSet {
        LiveSet {
            map: FxHashMap::default(),
            opts,
            ghosts: FxHashMap::default(),
            ghost_order: VecDeque::new(),
            ended: FxHashMap::default(),
            ended_order: VecDeque::new(),
            early: Vec::new(),
            attached_ns: 0,
            budget: Budget::default(),
            chain: Vec::new(),
            slack_ns: proc_start_slack_ns(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether a process with this tgid can be added (or replace the one held).
    pub(super) fn has_room(&self, tgid: u32) -> bool {
        self.map.len() < self.opts.max_processes || self.map.contains_key(&tgid)
    }

    /// The identity rule: the process held for the tgid if the record's start time is its
    /// own; otherwise that one is stale (its exit was lost) and goes. With `create`, a new
    /// process is made when there is room.
    pub(super) fn find(
        &mut self,
        key: Key,
        create: bool,
        stats: &mut Stats,
    ) -> Option<&mut Tracked> {
        let full = self.map.len() >= self.opts.max_processes;
        let (early, attached) = (&mut self.early, self.attached_ns);
        let mut note_early = || {
            if key.start_ns < attached && early.len() < 65536 {
                early.push((key.tgid, key.start_ns));
            }
        };
        match self.map.entry(key.tgid) {
            hash_map::Entry::Occupied(mut o) => {
                if o.get_mut().same_process(key.start_ns) {
                    return Some(o.into_mut());
                }
                log::debug!(
                    "pid {}: record for the process started at {}, table has one started at {} (seeded: {})",
                    key.tgid,
                    key.start_ns,
                    o.get().start_ns,
                    o.get().seeded
                );
                // A record of an older process that held the pid (a thread's exit can come
                // after its process's, see `Table::thread_owner`) leaves the newer one be.
                if !create && key.start_ns < o.get().start_ns {
                    return None;
                }
                stats.stale += 1;
                if !create {
                    o.remove();
                    return None;
                }
                note_early();
                *o.get_mut() = Tracked::new(key);
                Some(o.into_mut())
            }
            hash_map::Entry::Vacant(v) => {
                if !create {
                    return None;
                }
                if full {
                    stats.full += 1;
                    return None;
                }
                note_early();
                Some(v.insert(Tracked::new(key)))
            }
        }
    }

    /// The end of a process the set did not hold: `None` for a duplicate end record, else a
    /// made-up entry with the last thread's CPU time.
    pub(super) fn unknown_exit(&mut self, x: &ExitEvent, stats: &mut Stats) -> Option<Tracked> {
        let key = Key::of(&x.hdr);
        if self.ended.get(&key.tgid) == Some(&key.start_ns) {
            stats.duplicate_exits += 1;
            return None;
        }
        log::debug!(
            "exit of unknown process {} (started at {})",
            key.tgid,
            key.start_ns
        );
        stats.unknown_exits += 1;
        let mut t = Tracked::new(key);
        t.known = false;
        let (user, sys) = cputime::split_runtime(x.runtime_ns, x.utime_ns, x.stime_ns);
        t.process.user_ns = user;
        t.process.sys_ns = sys;
        t.runtime_ns = x.runtime_ns;
        t.process.end_ns = Some(x.hdr.ts_ns);
        Some(self.ended(t, stats))
    }

    /// A process ended: it leaves the set.
    pub(super) fn evict(&mut self, tgid: u32, stats: &mut Stats) -> Option<Tracked> {
        let t = self.map.remove(&tgid)?;
        Some(self.ended(t, stats))
    }

    /// Its parent chain; it stays as a ghost while children of its live; remembered to
    /// recognize a second end record.
    fn ended(&mut self, t: Tracked, stats: &mut Stats) -> Tracked {
        if self.opts.ancestry {
            let mut chain = std::mem::take(&mut self.chain);
            chain.clear();
            self.chain_of(t.ppid, t.start_ns, &mut chain);
            self.chain = chain;
            // A ghost still counts as its parent's child: the whole chain above a live
            // process stays until that process is gone.
            if t.live_children > 0 {
                self.add_ghost(&t, stats);
            } else if t.known {
                self.release_parent(t.ppid, t.start_ns);
            }
        }
        let (tgid, start) = (t.pid, t.start_ns);
        if self.ended.insert(tgid, start).is_none() {
            self.ended_order.push_back(tgid);
        }
        if self.ended_order.len() > RECENTLY_ENDED {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
        t
    }
}

impl Store {
    fn live_set(&self) -> Option<&LiveSet> {
        self.live.as_deref()
    }

    /// The live process with this tgid.
    pub fn live_get(&self, tgid: u32) -> Option<&Tracked> {
        self.live_set()?.map.get(&tgid)
    }

    /// Ghosts held for ancestry.
    pub fn ghost_count(&self) -> usize {
        self.live_set().map_or(0, |l| l.ghosts.len())
    }

    /// Moves the parent chain of the process that ended last into `out` (with ancestry on).
    pub fn take_chain(&mut self, out: &mut Vec<Ancestor>) {
        if let Some(l) = self.live.as_deref_mut().filter(|l| l.opts.ancestry) {
            std::mem::swap(out, &mut l.chain);
        }
    }

    /// When every kernel program was attached (CLOCK_MONOTONIC ns): a process started before
    /// may have exited before the exit program was attached, leaving no exit record.
    pub fn set_attached(&mut self, ns: u64) {
        if let Some(l) = self.live.as_deref_mut() {
            l.attached_ns = ns;
        }
    }

    /// Drops the processes made by a record, started before the programs were all attached,
    /// that `alive` (pid → start time if running) says are gone. Done once, after the first
    /// records were applied.
    pub fn verify_early(&mut self, alive: impl Fn(u32) -> Option<u64>) {
        let Some(l) = self.live.as_deref_mut() else {
            return;
        };
        for (pid, start) in std::mem::take(&mut l.early) {
            if !l
                .map
                .get(&pid)
                .is_some_and(|e| e.start_ns == start && !e.seeded)
            {
                continue;
            }
            if !alive(pid).is_some_and(|s| same_start(s, start)) {
                log::debug!("pid {pid}: started while attaching, exited unseen");
                l.map.remove(&pid);
                self.stats.missed_at_start += 1;
            }
        }
    }

    /// Adds a process found at start.
    pub fn insert_seeded(&mut self, t: Tracked) {
        if let Some(l) = self.live.as_deref_mut() {
            l.map.insert(t.pid, t);
        }
    }

    /// After seeding: counts children (for ghosts), sets thread counts and marks the
    /// descendants of `pid_tree`.
    pub fn finish_seeding(&mut self, pid_tree: Option<u32>, threads: &HashMap<u32, u32>) {
        let Some(l) = self.live.as_deref_mut() else {
            return;
        };
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for e in l.map.values() {
            children.entry(e.ppid).or_default().push(e.pid);
        }
        for e in l.map.values_mut() {
            e.live_children = children.get(&e.pid).map_or(0, |c| c.len() as u32);
            if let Some(&n) = threads.get(&e.pid) {
                e.process.threads = n.max(1);
            }
        }
        let Some(root) = pid_tree else {
            return;
        };
        let mut todo = vec![root];
        while let Some(p) = todo.pop() {
            if let Some(e) = l.map.get_mut(&p) {
                if e.in_tree {
                    continue;
                }
                e.in_tree = true;
            }
            if let Some(c) = children.get(&p) {
                todo.extend(c.iter().copied());
            }
        }
    }

    /// Keeps only the `pid_tree` descendants; returns their pids.
    pub fn keep_tree_only(&mut self) -> Vec<u32> {
        let Some(l) = self.live.as_deref_mut() else {
            return Vec::new();
        };
        l.map.retain(|_, e| e.in_tree);
        l.map.keys().copied().collect()
    }
}
