//! The live process table: the store over the storage bounded to the live processes
//! ([`crate::model::reduce`], [`LiveSet`]): every running process with its current
//! program image (exe, argv, comm), parent, thread count and the peaks of the images it already
//! left. Seeded from /proc at start, then kept from fork/exec/exit records; a process leaves on
//! exit, as the [`Entry`] its row is written from.
//!
//! What the table adds to the store: the start times of threads (`--threads`), and the rows'
//! view of a process.

use std::{
    collections::{HashMap, VecDeque},
    ops::Deref,
    sync::Arc,
};

pub use crate::model::process::Names;
pub use crate::model::reduce::{Ancestor, Stats as TableStats, KEEP_BYTES};
use crate::{
    kernel::events::{Args, Exec},
    model::reduce::{LiveOptions, LiveSet, Store, Tracked},
};
use rustc_hash::FxHashMap;

use spacetime_common::{ExitEvent, ForkEvent, ImageEndEvent};

/// An image the process left by exec, with its peak (pages; `None`: not measured).
#[derive(Debug, Clone)]
pub struct EndedImage {
    pub image: Arc<Names>,
    pub peak_rss_pages: Option<u64>,
    pub shared_mm: bool,
}

/// A process that ended, as its row reports it.
#[derive(Debug)]
pub struct Entry {
    /// The process that forked it (for processes found at start: the parent then).
    pub ppid: u32,
    pub image: Arc<Names>,
    /// Ran on its parent's address space (vfork): it never exec'd.
    pub shared_mm: bool,
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
    /// A descendant of `--pid-tree`.
    pub in_tree: bool,
    /// When its current image started (its exec record; 0: no exec seen).
    pub exec_ns: u64,
    /// In the table (false: made up for an exit whose process was unknown).
    pub known: bool,
}

impl Entry {
    /// The row's view of a process that left the store.
    fn of(t: Tracked, keep_images: bool) -> Entry {
        let exec_ns = t.exec_ns();
        let Tracked {
            process: mut p,
            left_peak_pages,
            images_dropped,
            runtime_ns,
            in_tree,
            known,
            ..
        } = t;
        let mut images = std::mem::take(&mut p.images);
        let last = images.pop().unwrap_or_default();
        // Not `collect()`: it would reuse the images' allocation and shrink it (a realloc
        // per exit).
        let mut ended = Vec::new();
        if keep_images && !images.is_empty() {
            ended.reserve_exact(images.len());
            ended.extend(images.into_iter().map(|i| EndedImage {
                peak_rss_pages: i.peak_rss_pages(),
                shared_mm: i.shared_mm,
                image: i.names,
            }));
        }
        Entry {
            ppid: p.ppid,
            image: last.names,
            shared_mm: last.shared_mm,
            left_peak_pages,
            images: ended,
            images_dropped,
            threads: p.threads,
            user_ns: p.user_ns,
            sys_ns: p.sys_ns,
            runtime_ns,
            in_tree,
            exec_ns,
            known,
        }
    }
}

/// A live process as the table shows it.
#[derive(Debug, Clone)]
pub struct Live {
    pub pid: u32,
    pub start_ns: u64,
    pub ppid: u32,
    pub image: Arc<Names>,
    pub threads: u32,
    pub in_tree: bool,
    /// Found in /proc at start rather than seen forking.
    #[cfg(test)]
    pub seeded: bool,
    /// When its current image started (its exec record; 0: no exec seen).
    pub exec_ns: u64,
}

impl Live {
    fn of(t: &Tracked) -> Live {
        Live {
            pid: t.pid,
            start_ns: t.start_ns,
            ppid: t.ppid,
            image: Arc::clone(t.image()),
            threads: t.threads,
            in_tree: t.in_tree,
            #[cfg(test)]
            seeded: t.seeded,
            exec_ns: t.exec_ns(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct TableOptions {
    pub max_processes: usize,
    pub ancestry: bool,
    pub images: bool,
    pub threads: bool,
}

/// Ended processes that had threads, kept for thread exits that come after their process's
/// (`--threads`). Before Linux 6.16 the exit tracepoint fires after `exit_mm()`, which wakes
/// a joining thread: the process can exit, and its record reach the ring, first. Those late
/// records come within the few exits the kernel handles meanwhile.
const ENDED_WITH_THREADS: usize = 1024;

pub struct Table {
    store: Store<LiveSet>,
    opts: TableOptions,
    thread_starts: FxHashMap<u32, u64>,
    ended_with_threads: VecDeque<Live>,
}

/// The store's counters and queries (`stats`, `chain`, `ghost_count`, `argv_bytes`).
impl Deref for Table {
    type Target = Store<LiveSet>;
    fn deref(&self) -> &Store<LiveSet> {
        &self.store
    }
}

impl Table {
    pub fn new(opts: TableOptions) -> Table {
        Table {
            store: Store::with(LiveSet::new(LiveOptions {
                max_processes: opts.max_processes,
                ancestry: opts.ancestry,
                images: opts.images,
            })),
            opts,
            thread_starts: FxHashMap::default(),
            ended_with_threads: VecDeque::new(),
        }
    }

    /// See [`LiveSet::set_attached`].
    pub fn set_attached(&mut self, ns: u64) {
        self.store.set_attached(ns);
    }

    /// See [`LiveSet::verify_early`].
    pub fn verify_early(&mut self, alive: impl Fn(u32) -> Option<u64>) {
        let (live, stats) = self.store.parts();
        live.verify_early(alive, stats);
    }

    /// Live processes in the table.
    pub fn len(&self) -> usize {
        self.store.live()
    }

    pub fn get(&self, pid: u32) -> Option<Live> {
        self.store.live_get(pid).map(Live::of)
    }

    /// The process a thread's exit record belongs to: the live one if it is the record's
    /// (by start time), else one that ended just before with threads (`--threads` only).
    /// None is counted ([`TableStats::unowned_thread_exits`]).
    pub fn thread_owner(&mut self, x: &ExitEvent) -> Option<Live> {
        let (tgid, start) = (x.hdr.tgid, x.hdr.leader_start_ns);
        let owner = match self.store.live_get(tgid) {
            Some(t) if t.started_at(start) => Some(Live::of(t)),
            _ => self
                .ended_with_threads
                .iter()
                .rev()
                .find(|l| l.pid == tgid && l.start_ns == start)
                .cloned(),
        };
        if owner.is_none() {
            self.store.stats.unowned_thread_exits += 1;
        }
        owner
    }

    /// Whether the process's argv is still arriving in continuation records.
    pub fn argv_pending(&self, pid: u32) -> bool {
        self.store.live_get(pid).is_some_and(Tracked::argv_pending)
    }

    /// Adds a process found at start (see [`super::procfs`]).
    pub(crate) fn insert_seeded(&mut self, t: Tracked) {
        self.store.insert_seeded(t);
    }

    /// A seeded entry: start time approximate, everything else from /proc.
    pub(crate) fn seeded_entry(pid: u32, ppid: u32, start_ns: u64, image: Names) -> Tracked {
        Tracked::seeded(pid, ppid, start_ns, Arc::new(image))
    }

    /// After seeding: counts children (for ghosts) and marks the `--pid-tree` descendants.
    pub(crate) fn finish_seeding(&mut self, pid_tree: Option<u32>, threads: &HashMap<u32, u32>) {
        self.store.finish_seeding(pid_tree, threads);
    }

    /// `--pid-tree` (the kernel's tree mode): the processes of the tree found in /proc, for
    /// the kernel to follow; every other seeded process is dropped, since the kernel will
    /// send nothing about it.
    pub fn keep_tree_only(&mut self) -> Vec<u32> {
        self.store.keep_tree_only()
    }

    /// Sets the argv budget in bytes (at least a page).
    pub fn set_argv_budget(&mut self, bytes: u64) {
        self.store.set_argv_budget(bytes);
    }

    /// argv bytes /proc gave at start: see [`LiveSet::charge_argv`].
    pub fn charge_argv(&mut self, len: usize) {
        let (live, stats) = self.store.parts();
        live.charge_argv(len, stats);
    }

    /// Over budget: cuts the largest argv until three quarters of it are used.
    pub fn enforce_argv_budget(&mut self) {
        let (live, stats) = self.store.parts();
        live.enforce_argv_budget(stats);
    }

    pub fn fork(&mut self, f: &ForkEvent) {
        let thread = f.hdr.flags & spacetime_common::flags::FORK_THREAD != 0;
        if thread && self.opts.threads && self.thread_starts.len() < self.opts.max_processes {
            self.thread_starts.insert(f.child_pid, f.child_start_ns);
        }
        self.store.fork(f);
    }

    pub fn exec(&mut self, e: Exec) {
        self.store.exec(e);
    }

    pub fn args(&mut self, a: Args) {
        self.store.args(a);
    }

    pub fn image_end(&mut self, m: &ImageEndEvent) {
        self.store.image_end(m);
    }

    /// A thread (not the last) exited: adds its CPU time to its process. Returns the thread's
    /// start time when known (`--threads`).
    pub fn thread_exit(&mut self, x: &ExitEvent) -> Option<u64> {
        self.store.exit(x);
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
        if self.opts.threads && x.hdr.pid != x.hdr.tgid {
            self.thread_starts.remove(&x.hdr.pid);
        }
        let t = self.store.exit(x)?;
        if self.opts.threads && t.threads > 1 && t.known {
            if self.ended_with_threads.len() == ENDED_WITH_THREADS {
                self.ended_with_threads.pop_front();
            }
            let mut ended = Live::of(&t);
            // Outside the argv budget: bounded by a cut argv instead (1024 × 256 bytes).
            if ended.image.args.len() > KEEP_BYTES {
                ended.image = Arc::new(crate::model::reduce::evicted(&ended.image));
            }
            self.ended_with_threads.push_back(ended);
        }
        self.store.take_chain(ancestry);
        Some(Entry::of(t, self.opts.images))
    }

    /// A process the kernel-side filter kept out ended (`EXIT_FILTERED`): its entry goes, if
    /// it had one (it passed the filter once, then changed uid or cgroup), uncounted.
    pub fn forget(&mut self, x: &ExitEvent) {
        if self.store.knows(crate::model::process::Key::of(&x.hdr)) {
            let mut chain = Vec::new();
            let _ = self.exit(x, &mut chain);
        }
    }
}
