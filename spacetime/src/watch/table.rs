//! The live process table: every running process with its current program image (exe, argv,
//! comm), parent, thread count and the peaks of the images it already left. Seeded from /proc
//! at start, then kept from fork/exec/exit records, and bounded: a process leaves on exit.
//!
//! With ancestry on, a process that exits while some of its children still run stays as a
//! small "ghost" (pid, start, image) until its last child exits, so a line can show who forked
//! whom even through a parent that is already gone. Ghosts are bounded too.
//!
//! Entries are keyed by tgid and carry the start time of their group leader, which every record
//! also carries: a record whose start time does not match is for a newer process that reused the
//! pid (the old one's exit was lost). Seeded entries only know their start time to the clock
//! tick from /proc and adopt the exact one from the first record.

use std::{
    collections::{HashMap, VecDeque},
    sync::Arc,
};

pub use crate::core::process::Names;
use crate::core::process::{end_peak_pages, same_start};
use crate::{
    core::argv::{append_args, exec_names, publish_partial, Appended, PendingArgv},
    idhash::IdMap,
};

mod ancestry;
mod budget;
pub use ancestry::Ancestor;
use ancestry::Ghost;
pub use budget::KEEP_BYTES;

use spacetime_common::{flags, ExitEvent, ForkEvent, ImageEndEvent};

use crate::{
    cputime::split_runtime,
    events::{Args, Exec},
};

/// Images kept per process with `--images` (the last ones; older are counted).
const MAX_IMAGES: usize = 32;

/// An image the process left by exec, with its peak (pages; `None`: not measured).
#[derive(Debug, Clone)]
pub struct EndedImage {
    pub image: Arc<Names>,
    pub peak_rss_pages: Option<u64>,
    pub shared_mm: bool,
}

/// A live process.
#[derive(Debug)]
pub struct Entry {
    pub pid: u32,
    /// Start of its group leader, CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    start_exact: bool,
    /// The process that forked it (for processes found at start: the parent then).
    pub ppid: u32,
    pub image: Arc<Names>,
    /// argv still streaming in continuation records.
    building: Option<Box<PendingArgv>>,
    /// Runs on its parent's address space (vfork) until it execs.
    pub shared_mm: bool,
    /// The peak of the current image, read by an image-end record, awaiting the exec.
    ended_peak: Option<Option<u64>>,
    /// Largest peak of the images it left (pages).
    pub left_peak_pages: u64,
    /// With `--images`: the images it left.
    pub images: Vec<EndedImage>,
    pub images_dropped: u32,
    /// Threads it ever had, the main one included (at start: those running then).
    pub threads: u32,
    /// CPU time of the threads that exited (split as the kernel's cputime_adjust).
    pub user_ns: u64,
    pub sys_ns: u64,
    pub runtime_ns: u64,
    live_children: u32,
    /// A descendant of `--pid-tree`.
    pub in_tree: bool,
    /// Found in /proc at start rather than seen forking.
    pub seeded: bool,
    /// When its current image started (its exec record; 0: no exec seen).
    pub exec_ns: u64,
    /// In the table (false: made up for an exit whose process was unknown).
    pub known: bool,
}

impl Entry {
    fn new(pid: u32, start_ns: u64, image: Arc<Names>) -> Entry {
        Entry {
            pid,
            start_ns,
            start_exact: true,
            ppid: 0,
            image,
            building: None,
            shared_mm: false,
            ended_peak: None,
            left_peak_pages: 0,
            images: Vec::new(),
            images_dropped: 0,
            threads: 1,
            user_ns: 0,
            sys_ns: 0,
            runtime_ns: 0,
            live_children: 0,
            in_tree: false,
            seeded: false,
            exec_ns: 0,
            known: true,
        }
    }

    /// Whether a record for the process started at `start_ns` is for this entry; adopts the
    /// exact start time of a seeded entry.
    fn same_process(&mut self, start_ns: u64) -> bool {
        if self.start_exact {
            return self.start_ns == start_ns;
        }
        if same_start(self.start_ns, start_ns) {
            self.start_ns = start_ns;
            self.start_exact = true;
            return true;
        }
        false
    }

    /// Ends argv streaming with what arrived.
    fn finish_building(&mut self) {
        publish_partial(&mut self.building, &mut self.image, true);
    }
}

#[derive(Debug, Clone, Copy)]
pub struct TableOptions {
    pub max_processes: usize,
    pub ancestry: bool,
    pub images: bool,
    pub threads: bool,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct TableStats {
    /// Processes not added because the table was full.
    pub full: u64,
    /// Entries replaced by a newer process with the same pid (their exit was lost).
    pub stale: u64,
    /// Exits of processes the table did not know.
    pub unknown_exits: u64,
    /// argv continuations that did not follow on.
    pub args_gaps: u64,
    /// Ghosts dropped to keep the table bounded.
    pub ghosts_evicted: u64,
    /// Processes that started while the programs were being attached and were gone when
    /// checked: their exit fell before the exit program was attached.
    pub missed_at_start: u64,
    /// Second "last thread" records of a process (kernels before 6.16, where two threads
    /// exiting at once can both look like the last one): taken as thread exits.
    pub duplicate_exits: u64,
    /// argv cut to keep the table within `--argv-budget`, and the bytes that freed.
    pub argv_evicted: u64,
    pub argv_evicted_bytes: u64,
}

/// Processes remembered after their exit, to recognize a duplicate end record.
const RECENTLY_ENDED: usize = 4096;

pub struct Table {
    live: IdMap<u32, Entry>,
    ghosts: IdMap<u32, Ghost>,
    ghost_order: VecDeque<(u32, u64)>,
    thread_starts: IdMap<u32, u64>,
    /// (tgid → start) of the last processes that ended, oldest first in `ended_order`.
    ended: IdMap<u32, u64>,
    ended_order: VecDeque<u32>,
    /// Processes seen by a record but started before every program was attached, to be
    /// checked against /proc once (`verify_early`).
    early: Vec<(u32, u64)>,
    /// CLOCK_MONOTONIC when every program was attached (0: not set).
    attached_ns: u64,
    opts: TableOptions,
    empty: Arc<Names>,
    pub stats: TableStats,
    budget: budget::Budget,
}

impl Table {
    pub fn new(opts: TableOptions) -> Table {
        Table {
            live: IdMap::default(),
            ghosts: IdMap::default(),
            ghost_order: VecDeque::new(),
            thread_starts: IdMap::default(),
            ended: IdMap::default(),
            ended_order: VecDeque::new(),
            early: Vec::new(),
            attached_ns: 0,
            opts,
            empty: Arc::new(Names::default()),
            stats: TableStats::default(),
            budget: budget::Budget::default(),
        }
    }

    /// When every kernel program was attached (CLOCK_MONOTONIC ns): a process started before
    /// may have exited before the exit program was attached, leaving no exit record.
    pub fn set_attached(&mut self, ns: u64) {
        self.attached_ns = ns;
    }

    /// Drops the processes created by a record, started before the programs were all
    /// attached, that `alive` (pid → start time if running) says are gone. Done once, after
    /// the first records were applied.
    pub fn verify_early(&mut self, alive: impl Fn(u32) -> Option<u64>) {
        for (pid, start) in std::mem::take(&mut self.early) {
            if !self
                .live
                .get(&pid)
                .is_some_and(|e| e.start_ns == start && !e.seeded)
            {
                continue;
            }
            let running = alive(pid).is_some_and(|s| same_start(s, start));
            if !running {
                log::debug!("pid {pid}: started while attaching, exited unseen");
                self.live.remove(&pid);
                self.stats.missed_at_start += 1;
            }
        }
    }

    fn note_early(&mut self, pid: u32, start_ns: u64) {
        if start_ns < self.attached_ns && self.early.len() < 65536 {
            self.early.push((pid, start_ns));
        }
    }

    /// Live processes in the table.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    #[cfg(test)]
    pub fn ghost_count(&self) -> usize {
        self.ghosts.len()
    }

    pub fn get(&self, pid: u32) -> Option<&Entry> {
        self.live.get(&pid)
    }

    /// Adds a process found at start (see [`super::procfs`]).
    pub(crate) fn insert_seeded(&mut self, mut e: Entry) {
        e.seeded = true;
        e.start_exact = false;
        self.live.insert(e.pid, e);
    }

    /// A seeded entry: start time approximate, everything else from /proc.
    pub(crate) fn seeded_entry(pid: u32, ppid: u32, start_ns: u64, image: Names) -> Entry {
        let mut e = Entry::new(pid, start_ns, Arc::new(image));
        e.ppid = ppid;
        e
    }

    /// After seeding: counts children (for ghosts) and marks the `--pid-tree` descendants.
    pub(crate) fn finish_seeding(&mut self, pid_tree: Option<u32>, threads: &HashMap<u32, u32>) {
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for e in self.live.values() {
            children.entry(e.ppid).or_default().push(e.pid);
        }
        for e in self.live.values_mut() {
            e.live_children = children.get(&e.pid).map_or(0, |c| c.len() as u32);
            if let Some(&n) = threads.get(&e.pid) {
                e.threads = n.max(1);
            }
        }
        if let Some(root) = pid_tree {
            let mut todo = vec![root];
            while let Some(p) = todo.pop() {
                if let Some(e) = self.live.get_mut(&p) {
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
    }

    /// The live entry for (tgid, start), fixing up a seeded one's start; a stale entry with
    /// that pid is dropped.
    fn lookup(&mut self, tgid: u32, start_ns: u64) -> Option<&mut Entry> {
        let stale = match self.live.get_mut(&tgid) {
            None => return None,
            Some(e) => {
                let stale = !e.same_process(start_ns);
                if stale {
                    log::debug!(
                        "pid {tgid}: record for the process started at {start_ns}, table has                          one started at {} (seeded: {})",
                        e.start_ns,
                        e.seeded
                    );
                }
                stale
            }
        };
        if stale {
            self.live.remove(&tgid);
            self.stats.stale += 1;
            return None;
        }
        self.live.get_mut(&tgid)
    }

    /// The entry for (tgid, start), created (unknown origin) when missing and there is room.
    fn lookup_or_create(&mut self, tgid: u32, start_ns: u64) -> Option<&mut Entry> {
        if self.lookup(tgid, start_ns).is_none() {
            if self.live.len() >= self.opts.max_processes {
                self.stats.full += 1;
                return None;
            }
            self.live
                .insert(tgid, Entry::new(tgid, start_ns, self.empty.clone()));
            self.note_early(tgid, start_ns);
        }
        self.live.get_mut(&tgid)
    }

    pub fn fork(&mut self, f: &ForkEvent) {
        let opts = self.opts;
        if f.hdr.flags & flags::FORK_THREAD != 0 {
            if let Some(p) = self.lookup(f.hdr.tgid, f.hdr.leader_start_ns) {
                p.threads += 1;
            }
            if opts.threads && self.thread_starts.len() < opts.max_processes {
                self.thread_starts.insert(f.child_pid, f.child_start_ns);
            }
            return;
        }
        let fits = self.live.len() < opts.max_processes || self.live.contains_key(&f.child_tgid);
        let (image, in_tree) = match self.lookup(f.hdr.tgid, f.hdr.leader_start_ns) {
            Some(p) => {
                if opts.ancestry && fits {
                    p.live_children += 1;
                }
                (p.image.clone(), p.in_tree)
            }
            None => (self.empty.clone(), false),
        };
        if !fits {
            self.stats.full += 1;
            return;
        }
        let mut child = Entry::new(f.child_tgid, f.child_start_ns, image);
        child.ppid = f.hdr.tgid;
        child.in_tree = in_tree;
        child.shared_mm = f.hdr.flags & flags::FORK_SHARED_MM != 0;
        if let Some(mut old) = self.live.insert(f.child_tgid, child) {
            if old.seeded && old.same_process(f.child_start_ns) {
                // Forked after the programs were attached, found in /proc too.
                let child = self.live.get_mut(&f.child_tgid).expect("inserted");
                child.live_children = old.live_children;
                child.in_tree |= old.in_tree;
            } else {
                log::debug!(
                    "pid {}: forked (start {}) while the table had one started at {}",
                    f.child_tgid,
                    f.child_start_ns,
                    old.start_ns,
                );
                self.stats.stale += 1;
            }
        } else {
            self.note_early(f.child_tgid, f.child_start_ns);
        }
    }

    pub fn exec(&mut self, e: Exec) {
        self.charge_argv(e.args_len as usize);
        let keep_images = self.opts.images;
        let Some(p) = self.lookup_or_create(e.hdr.tgid, e.hdr.leader_start_ns) else {
            return;
        };
        p.finish_building();
        if keep_images {
            let peak = match p.ended_peak {
                Some(peak) => peak,
                None if p.shared_mm => Some(0),
                None => None,
            };
            if p.images.len() == MAX_IMAGES {
                p.images.remove(0);
                p.images_dropped += 1;
            }
            p.images.push(EndedImage {
                image: p.image.clone(),
                peak_rss_pages: peak,
                shared_mm: p.shared_mm,
            });
        }
        p.ended_peak = None;
        p.shared_mm = false;
        p.exec_ns = e.hdr.ts_ns;
        let (names, building) = exec_names(e);
        p.image = Arc::new(names);
        p.building = building;
    }

    pub fn args(&mut self, a: Args) {
        let Some(p) = self.lookup(a.hdr.tgid, a.hdr.leader_start_ns) else {
            self.stats.args_gaps += 1;
            return;
        };
        // Shown once every byte came (or the image ended): exec lines wait for it.
        if append_args(&mut p.building, &mut p.image, a.offset, &a.data) == Appended::Gap {
            self.stats.args_gaps += 1;
        }
    }

    pub fn image_end(&mut self, m: &ImageEndEvent) {
        let Some(p) = self.lookup(m.hdr.tgid, m.hdr.leader_start_ns) else {
            return;
        };
        let peak = end_peak_pages(&m.mem, p.shared_mm);
        if let Some(pages) = peak {
            p.left_peak_pages = p.left_peak_pages.max(pages);
        }
        p.ended_peak = Some(peak);
    }

    /// A thread (not the last) exited: adds its CPU time to its process. Returns the thread's
    /// start time when known (`--threads`).
    pub fn thread_exit(&mut self, x: &ExitEvent) -> Option<u64> {
        if let Some(p) = self.lookup(x.hdr.tgid, x.hdr.leader_start_ns) {
            add_times(p, x);
        }
        if self.opts.threads {
            if x.hdr.pid == x.hdr.tgid {
                return Some(x.hdr.leader_start_ns);
            }
            return self.thread_starts.remove(&x.hdr.pid);
        }
        None
    }

    /// The process ended: removes it and returns its entry (made up when unknown), with the
    /// last thread's CPU time added. With ancestry on, `ancestry` receives its parent chain.
    /// `None` for a duplicate end record (see [`TableStats::duplicate_exits`]).
    pub fn exit(&mut self, x: &ExitEvent, ancestry: &mut Vec<Ancestor>) -> Option<Entry> {
        let tgid = x.hdr.tgid;
        let start = x.hdr.leader_start_ns;
        if self.opts.threads && x.hdr.pid != tgid {
            self.thread_starts.remove(&x.hdr.pid);
        }
        let found = self.lookup(tgid, start).is_some();
        let mut e = match found {
            true => self.live.remove(&tgid).expect("looked up"),
            false if self.ended.get(&tgid) == Some(&start) => {
                self.stats.duplicate_exits += 1;
                return None;
            }
            false => {
                log::debug!("exit of unknown process {tgid} (started at {start})");
                self.stats.unknown_exits += 1;
                let mut e = Entry::new(tgid, start, self.empty.clone());
                e.known = false;
                e
            }
        };
        e.finish_building();
        add_times(&mut e, x);
        if self.opts.ancestry {
            ancestry.clear();
            self.chain(e.ppid, e.start_ns, ancestry);
            // A ghost still counts as its parent's child: the whole chain above a live
            // process stays until that process is gone.
            if e.live_children > 0 {
                self.add_ghost(&e);
            } else if e.known {
                self.release_parent(e.ppid, e.start_ns);
            }
        }
        if self.ended.insert(tgid, start).is_none() {
            self.ended_order.push_back(tgid);
        }
        if self.ended_order.len() > RECENTLY_ENDED {
            if let Some(old) = self.ended_order.pop_front() {
                self.ended.remove(&old);
            }
        }
        Some(e)
    }
}

/// Adds a thread's CPU time to its process.
fn add_times(p: &mut Entry, x: &ExitEvent) {
    let (user, sys) = split_runtime(x.runtime_ns, x.utime_ns, x.stime_ns);
    p.user_ns += user;
    p.sys_ns += sys;
    p.runtime_ns += x.runtime_ns;
}
