//! The live set (`watch`): every running process, keyed by tgid, and bounded. A process leaves
//! on exit (returned to the caller, which reports it); with ancestry on, one whose children
//! still run stays as a small ghost ([`super::ancestry`]). Processes found in /proc at start
//! are seeded with a start time to the clock tick and take the exact one from their first
//! record ([`Tracked`]). Their argv is held within a budget ([`super::budget`]).

use std::{
    collections::{hash_map, HashMap, VecDeque},
    sync::Arc,
};

use spacetime_common::ExitEvent;

use super::{
    ancestry::{Ancestor, Ancestry},
    budget::Budget,
    Stats, Storage, Tracked,
};
use crate::model::{
    cputime,
    opt_ns::OptNs,
    process::{same_start, Key, Names},
};
use rustc_hash::FxHashMap;

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

/// The live processes by tgid.
pub(super) type Processes = FxHashMap<u32, Tracked>;

/// The running processes within bounds (a [`super::Store`] over it is `watch`'s table).
#[derive(Debug)]
pub struct LiveSet {
    map: Processes,
    opts: LiveOptions,
    ancestry: Ancestry,
    /// (tgid → start) of the last processes that ended, oldest first in `ended_order`.
    ended: FxHashMap<u32, u64>,
    ended_order: VecDeque<u32>,
    /// Processes made by a record but started before every program was attached, to be
    /// checked against /proc once (`verify_early`).
    early: Vec<(u32, u64)>,
    /// CLOCK_MONOTONIC when every program was attached (0: not set).
    attached_ns: u64,
    budget: Budget,
}

impl LiveSet {
    pub fn new(opts: LiveOptions) -> LiveSet {
        LiveSet {
            map: FxHashMap::default(),
            opts,
            ancestry: Ancestry::new(),
            ended: FxHashMap::default(),
            ended_order: VecDeque::new(),
            early: Vec::new(),
            attached_ns: 0,
            budget: Budget::default(),
        }
    }

    /// Processes that have not exited.
    pub fn live(&self) -> usize {
        self.map.len()
    }

    /// The live process with this tgid.
    pub fn live_get(&self, tgid: u32) -> Option<&Tracked> {
        self.map.get(&tgid)
    }

    #[cfg(test)]
    /// Ghosts held for ancestry.
    pub fn ghost_count(&self) -> usize {
        self.ancestry.ghost_count()
    }

    /// Fills `out` with the parent chain of a process (parent first), up to 64 steps.
    pub fn chain(&self, ppid: u32, start: u64, out: &mut Vec<Ancestor>) {
        self.ancestry.chain_of(&self.map, ppid, start, out);
    }

    /// Moves the parent chain of the process that ended last into `out` (with ancestry on).
    pub fn take_chain(&mut self, out: &mut Vec<Ancestor>) {
        if self.opts.ancestry {
            self.ancestry.take_chain(out);
        }
    }

    /// Sets the argv budget in bytes (at least a page).
    pub fn set_argv_budget(&mut self, bytes: u64) {
        self.budget.set_limit(bytes);
    }

    /// argv bytes announced (an exec, or /proc at start): checks the budget every eighth of
    /// it.
    pub fn charge_argv(&mut self, len: usize, stats: &mut Stats) {
        self.budget.charge(&mut self.map, len, stats);
    }

    /// Over budget: cuts the largest argv until three quarters of it are used.
    pub fn enforce_argv_budget(&mut self, stats: &mut Stats) {
        self.budget.enforce(&mut self.map, stats);
    }

    #[cfg(test)]
    /// argv bytes held now: each distinct image once, partial argv included.
    pub fn argv_bytes(&self) -> usize {
        Budget::holders(&self.map).0
    }

    /// When every kernel program was attached (CLOCK_MONOTONIC ns): a process started before
    /// may have exited before the exit program was attached, leaving no exit record.
    pub fn set_attached(&mut self, ns: u64) {
        self.attached_ns = ns;
    }

    /// Drops the processes made by a record, started before the programs were all attached,
    /// that `alive` (pid → start time if running) says are gone. Done once, after the first
    /// records were applied.
    pub fn verify_early(&mut self, alive: impl Fn(u32) -> Option<u64>, stats: &mut Stats) {
        let l = self;
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
                stats.missed_at_start += 1;
            }
        }
    }

    /// Adds a process found at start.
    pub fn insert_seeded(&mut self, t: Tracked) {
        self.map.insert(t.pid, t);
    }

    /// After seeding: counts children (for ghosts), sets thread counts and marks the
    /// descendants of `pid_tree`.
    pub fn finish_seeding(&mut self, pid_tree: Option<u32>, threads: &HashMap<u32, u32>) {
        let l = self;
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
        let l = self;
        l.map.retain(|_, e| e.in_tree);
        l.map.keys().copied().collect()
    }

    /// The identity rule: the process held for the tgid if the record's start time is its
    /// own; otherwise that one is stale (its exit was lost) and goes. With `create`, a new
    /// process is made when there is room.
    fn find(&mut self, key: Key, create: bool, stats: &mut Stats) -> Option<&mut Tracked> {
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
    fn unknown_exit(&mut self, x: &ExitEvent, stats: &mut Stats) -> Option<Tracked> {
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
        t.process.end_ns = OptNs::some(x.hdr.ts_ns);
        Some(self.remember_end(t, stats))
    }

    /// A process ended: it leaves the set.
    fn evict(&mut self, tgid: u32, stats: &mut Stats) -> Option<Tracked> {
        let t = self.map.remove(&tgid)?;
        Some(self.remember_end(t, stats))
    }

    /// Its parent chain; it stays as a ghost while children of its live; remembered to
    /// recognize a second end record.
    fn remember_end(&mut self, t: Tracked, stats: &mut Stats) -> Tracked {
        if self.opts.ancestry {
            let ghosts_cap = (self.opts.max_processes / 4).max(64);
            self.ancestry.ended(&mut self.map, &t, ghosts_cap, stats);
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

impl Storage for LiveSet {
    type Held = Tracked;
    type Ended = Tracked;

    fn find(&mut self, key: Key, create: bool, stats: &mut Stats) -> Option<&mut Tracked> {
        LiveSet::find(self, key, create, stats)
    }

    fn knows(&mut self, key: Key, stats: &mut Stats) -> bool {
        LiveSet::find(self, key, false, stats).is_some()
    }

    fn has_room(&self, tgid: u32) -> bool {
        self.map.len() < self.opts.max_processes || self.map.contains_key(&tgid)
    }

    fn counts_children(&self) -> bool {
        self.opts.ancestry
    }

    /// No process predates the watch's records but those seeded from /proc.
    fn forked(&mut self, _tgid: u32) {}

    fn namespace_pids(&self) -> bool {
        false
    }

    /// A live set is bounded: room for the exec that mostly follows saves a reallocation.
    fn child_images(&self) -> usize {
        2
    }

    /// Charged against the argv budget; shared only by forked children.
    fn exec_names(
        &mut self,
        names: Names,
        _whole: bool,
        args_len: usize,
        stats: &mut Stats,
    ) -> Arc<Names> {
        self.charge_argv(args_len, stats);
        Arc::new(names)
    }

    fn keeps_images(&self) -> bool {
        self.opts.images
    }

    fn publishes_partial_argv(&self) -> bool {
        false
    }

    fn unknown_exit(&mut self, x: &ExitEvent, stats: &mut Stats) -> Option<Tracked> {
        LiveSet::unknown_exit(self, x, stats)
    }

    fn ended(&mut self, tgid: u32, stats: &mut Stats) -> Option<Tracked> {
        self.evict(tgid, stats)
    }
}
