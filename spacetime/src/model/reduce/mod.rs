//! One store of processes, built from decoded records: one reducer ([`Store`]) over two
//! storages ([`Storage`]): `trace`'s keeps every process and image ([`Kept`]), `watch`'s a
//! bounded set of the live ones ([`LiveSet`]). The reducer is the one place for the rules
//! both follow; each storage owns what it holds and what only it needs:
//!
//! - identity: a process is (tgid, start time of its group leader); a record whose start time
//!   does not match the process known by that tgid is for another process that reused the pid
//!   (kept apart by `trace`; by `watch`, which keys live processes by tgid, counted as stale
//!   and replaced). A process read from /proc has a start time to the clock tick only and takes
//!   the exact one from the first record that matches it ([`crate::model::process::same_start`]);
//! - images: a forked child starts on its parent's image (shared, not copied), each exec adds
//!   one, an image-end record or the exit ends one with its memory figures; a vfork child's
//!   image ran on its parent's address space and has no memory of its own;
//! - argv: an exec record's first bytes, continuation records at the offset where the last
//!   ended ([`crate::model::argv`]); what arrived stays when the image or the process ends;
//! - one group exit per process: a second "last thread" record (kernels before 6.16) is
//!   counted and taken as a thread's exit;
//! - parents: who forked whom, and (live) who still has live children.
//!
//! Records may arrive out of order or be lost: `trace` makes a process for any record of an
//! unknown one and a later fork fills in where it came from; `watch` makes one only for a fork
//! or an exec, within its bound.

use std::{
    ops::{Deref, DerefMut},
    sync::Arc,
};

use spacetime_common::{flags, ExitEvent, ForkEvent, ImageEndEvent, ReapEvent, RssEvent};

use crate::{
    kernel::events::{Args, Event, Exec},
    model::{
        argv::{append_args, exec_names, publish_partial, Appended},
        cputime,
        opt_ns::OptNs,
        process::{EndMem, Key, OptExit},
    },
};

mod adopt;
mod ancestry;
mod budget;
mod kept;
mod live;
mod model;
mod storage;
mod tracked;

pub use adopt::Adopted;
pub use ancestry::Ancestor;
pub use budget::{evicted, KEEP_BYTES};
pub use kept::Kept;
pub use live::{LiveOptions, LiveSet};
pub use model::{Image, Process};
pub use storage::{Held, Storage};
pub use tracked::Tracked;

/// What the store counts of records it could not take as they came.
#[derive(Debug, Clone, Copy, Default)]
pub struct Stats {
    /// Processes not added because the live set was full.
    pub full: u64,
    /// Live processes replaced by a newer process with the same pid (their exit was lost).
    pub stale: u64,
    /// Exits of processes the live set did not know.
    pub unknown_exits: u64,
    /// Thread exits (`watch --threads`) whose process was neither live nor just ended: no row.
    pub unowned_thread_exits: u64,
    /// argv continuations that did not follow on.
    pub args_gaps: u64,
    /// Ghosts dropped to keep the live set bounded.
    pub ghosts_evicted: u64,
    /// Processes that started while the programs were being attached and were gone when
    /// checked: their exit fell before the exit program was attached.
    pub missed_at_start: u64,
    /// Second "last thread" records of a process (kernels before 6.16, where two threads
    /// exiting at once can both look like the last one): taken as thread exits.
    pub duplicate_exits: u64,
    /// argv cut to keep the live set within its argv budget, and the bytes that freed.
    pub argv_evicted: u64,
    pub argv_evicted_bytes: u64,
    /// Memory figures of images that did not fit the packed form (above
    /// [`crate::model::image_mem::MAX_PAGES`] pages): reported as unknown.
    pub figures_out_of_range: u64,
}

/// The reducer: records into the processes its storage holds. What the storage answers
/// besides (the tree's processes, the live set's rows) is read through it (`Deref`).
#[derive(Debug)]
pub struct Store<S> {
    storage: S,
    pub stats: Stats,
}

impl<S> Deref for Store<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.storage
    }
}

impl<S> DerefMut for Store<S> {
    fn deref_mut(&mut self) -> &mut S {
        &mut self.storage
    }
}

impl<S: Storage> Store<S> {
    /// A store over `storage`, with nothing counted yet.
    pub fn with(storage: S) -> Store<S> {
        Store {
            storage,
            stats: Stats::default(),
        }
    }

    /// The storage and the counters apart, for the storage's own work that counts.
    pub fn parts(&mut self) -> (&mut S, &mut Stats) {
        (&mut self.storage, &mut self.stats)
    }

    /// Takes one record. A process's end returns it when the storage lets processes go (the
    /// live set): `None` for a duplicate end record.
    pub fn apply(&mut self, ev: Event) -> Option<S::Ended> {
        match ev {
            Event::Fork(f) => self.fork(&f),
            Event::Exec(e) => self.exec(e),
            Event::Args(a) => self.args(a),
            Event::ImageEnd(m) => self.image_end(&m),
            Event::Exit(x) => return self.exit(&x),
            Event::Rss(r) if r.hdr.flags & flags::RSS_MM_PEAK != 0 => self.mm_peak(&r),
            // Memory over time belongs to the timeline, not to the store.
            Event::Rss(_) => {}
            Event::Reap(r) => self.reap(&r),
            // Identity is watch's, kept by its cgroup cache.
            Event::CgroupName(_) => {}
            // CPU over time belongs to the timeline.
            Event::Tick(_) => {}
        }
        None
    }

    /// The process a record is about (see [`Storage::find`]).
    fn find(&mut self, key: Key, create: bool) -> Option<&mut S::Held> {
        self.storage.find(key, create, &mut self.stats)
    }

    /// Whether a record for `key` reaches a process the store holds (applies the identity
    /// rule: a stale live entry for the tgid goes).
    pub fn knows(&mut self, key: Key) -> bool {
        self.storage.knows(key, &mut self.stats)
    }

    pub fn fork(&mut self, f: &ForkEvent) {
        let parent_key = Key::of(&f.hdr);
        if f.hdr.flags & flags::FORK_THREAD != 0 {
            if let Some(h) = self.find(parent_key, false) {
                h.process().threads += 1;
            }
            return;
        }
        let fits = self.storage.has_room(f.child_tgid);
        let count = self.storage.counts_children() && fits;
        let (names, ppid, in_tree) = match self.find(parent_key, false) {
            Some(h) => {
                let in_tree = h.forked_child(count);
                let p = h.process();
                let names = p.image_at(f.hdr.ts_ns).map(|i| Arc::clone(&i.names));
                (names, p.pid, in_tree)
            }
            None => (None, f.hdr.tgid, false),
        };
        if !fits {
            self.stats.full += 1;
            return;
        }
        self.storage.forked(f.child_tgid);
        let ns_pids = self.storage.namespace_pids();
        let reserve = self.storage.child_images();
        let child_key = Key {
            tgid: f.child_tgid,
            start_ns: f.child_start_ns,
        };
        let Some(h) = self.find(child_key, true) else {
            return;
        };
        h.fork_record(in_tree);
        let child = h.process();
        if child.fork_seen() {
            return;
        }
        let untracked = match f.hdr.flags & flags::FORK_UNTRACKED {
            0 => 0,
            _ => Process::UNTRACKED,
        };
        child.seen = child.seen & !Process::UNTRACKED | Process::FORK_SEEN | untracked;
        if ns_pids {
            child.pid = f.child_ns_tgid;
        }
        child.ppid = ppid;
        child.parent_tgid = f.hdr.tgid;
        child.parent_start_ns = parent_key.start_ns;
        child.start_ns = f.child_start_ns;
        // The inherited image runs from the fork until the first exec (or the exit).
        let end_ns = child
            .images
            .first()
            .map(|i| i.start_ns)
            .or(child.end_ns.get());
        child.images.reserve_exact(reserve);
        let mut img = Image {
            start_ns: f.child_start_ns,
            end_ns: end_ns.into(),
            inherited: true,
            shared_mm: f.hdr.flags & flags::FORK_SHARED_MM != 0,
            ..Image::default()
        };
        if let Some(names) = names {
            img.names = names;
        }
        child.images.insert(0, img);
    }

    pub fn exec(&mut self, e: Exec) {
        let keep_images = self.storage.keeps_images();
        let (hdr, args_len) = (e.hdr, e.args_len as usize);
        let (names, pending_args) = exec_names(e);
        let names =
            self.storage
                .exec_names(names, pending_args.is_none(), args_len, &mut self.stats);
        let Some(h) = self.find(Key::of(&hdr), true) else {
            return;
        };
        let p = h.process();
        if let Some(open) = p.open_image() {
            open.end_ns = OptNs::some(hdr.ts_ns);
        }
        // No continuation reaches an image once another started: what came of it stays.
        if let Some(last) = p.images.last_mut() {
            publish_partial(&mut p.pending_args, &mut last.names, true);
        }
        let (start_ns, exec_flags) = (hdr.ts_ns, hdr.flags);
        if exec_flags & flags::EXEC_LEFT != 0 {
            // Nothing of it comes any more, its exit neither: it is not waited for.
            p.seen |= Process::LEFT | Process::UNTRACKED;
        }
        let img = Image {
            names,
            start_ns,
            // Out of order: the exit may already be known; the image then ended with it.
            end_ns: p.end_ns,
            ..Image::default()
        };
        p.images.reserve_exact(1);
        p.images.push(img);
        p.pending_args = pending_args;
        h.exec_done(keep_images);
    }

    pub fn args(&mut self, a: Args) {
        let publish = self.storage.publishes_partial_argv();
        let gap = match self.find(Key::of(&a.hdr), false) {
            None => true,
            Some(h) => {
                let p = h.process();
                // The last exec's image: the only one whose argv can still be arriving.
                match p.images.iter_mut().rev().find(|i| !i.inherited) {
                    None => true,
                    Some(img) => {
                        let pending = &mut p.pending_args;
                        match append_args(pending, &mut img.names, a.offset, &a.data) {
                            Appended::Gap => true,
                            Appended::Partial if publish => {
                                publish_partial(pending, &mut img.names, false);
                                false
                            }
                            Appended::Partial | Appended::Arrived => false,
                        }
                    }
                }
            }
        };
        if gap {
            self.stats.args_gaps += 1;
        }
    }

    pub fn image_end(&mut self, m: &ImageEndEvent) {
        let Some(h) = self.find(Key::of(&m.hdr), false) else {
            return;
        };
        let p = h.process();
        let shared_mm = p.images.last().is_some_and(|i| i.shared_mm);
        let mut fit = true;
        // The root's first exec ends no image of its own: its images start at CMD's exec.
        if let Some(img) = p.open_image() {
            img.end_ns = OptNs::some(m.hdr.ts_ns);
            if let Some(mem) = EndMem::of_image(m.mem, img.shared_mm) {
                fit = img.mem.set_end(mem);
            }
        }
        h.image_ended(m, shared_mm);
        self.count_out_of_range(fit);
    }

    fn count_out_of_range(&mut self, fit: bool) {
        if !fit {
            self.stats.figures_out_of_range += 1;
        }
    }

    /// The exact peak of an mm the kernel followed since `hdr.ts_ns`: it belongs to the image
    /// that was running then.
    pub fn mm_peak(&mut self, r: &RssEvent) {
        let Some(h) = self.find(Key::of(&r.hdr), false) else {
            return;
        };
        let ts = r.hdr.ts_ns;
        let images = &mut h.process().images;
        let at = images
            .iter()
            .rposition(|img| img.start_ns <= ts)
            .unwrap_or(0);
        if let Some(img) = images.get_mut(at).filter(|img| !img.shared_mm) {
            let fit = img.mem.follow(r.rss_pages);
            self.count_out_of_range(fit);
        }
    }

    /// The process was released: its CPU figures are final, as its parent's wait4 saw them.
    pub fn reap(&mut self, r: &ReapEvent) {
        // A release of a process never seen (its exit was lost) still tells its CPU.
        let Some(h) = self.find(Key::of(&r.hdr), false) else {
            return;
        };
        let p = h.process();
        let cpu = cputime::at_release(r);
        p.user_ns = cpu.user_ns;
        p.sys_ns = cpu.sys_ns;
        p.cpu_final = true;
        p.released(r);
    }

    /// A thread exited, or (`EXIT_GROUP_DEAD`) the process. When the storage lets processes
    /// go, the process leaves it and is returned (made up, not `known`, when it did not hold
    /// it); `None` for a thread or a duplicate end record.
    pub fn exit(&mut self, x: &ExitEvent) -> Option<S::Ended> {
        let key = Key::of(&x.hdr);
        let group = x.hdr.flags & flags::EXIT_GROUP_DEAD != 0;
        let Some(h) = self.find(key, false) else {
            return match group {
                true => self.storage.unknown_exit(x, &mut self.stats),
                false => None,
            };
        };
        let p = h.process();
        let duplicate = group && p.end_ns.is_some();
        let mut fit = true;
        // Out of order: the release already gave the final figures.
        if !p.cpu_final {
            let (user, sys) = cputime::split_runtime(x.runtime_ns, x.utime_ns, x.stime_ns);
            p.user_ns += user;
            p.sys_ns += sys;
        }
        if group && !duplicate {
            p.end_ns = OptNs::some(x.hdr.ts_ns);
            p.exit = OptExit::from_wait(x.exit_code);
            p.signal_maxrss_pages = u32::try_from(x.signal_maxrss_pages).unwrap_or(u32::MAX);
            if let Some(img) = p.open_image() {
                img.end_ns = OptNs::some(x.hdr.ts_ns);
                if let Some(mem) = EndMem::of_image(x.mem, img.shared_mm) {
                    fit = img.mem.set_end(mem);
                }
            }
            if let Some(last) = p.images.last_mut() {
                publish_partial(&mut p.pending_args, &mut last.names, true);
            }
        }
        h.thread_exited(x.runtime_ns);
        self.count_out_of_range(fit);
        if duplicate {
            self.stats.duplicate_exits += 1;
        }
        if !group || duplicate {
            return None;
        }
        self.storage.ended(key.tgid, &mut self.stats)
    }
}

#[cfg(test)]
mod tests;
