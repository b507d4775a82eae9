//! One store of processes, built from decoded records, for `trace` (keeps every process and
//! image: [`Store::keep_all`]) and `watch` (a bounded set of the live ones: [`Store::live`]).
//! One place for the rules both follow:
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

use std::sync::Arc;

use spacetime_common::{flags, ExitEvent, ForkEvent, ImageEndEvent, ReapEvent, RssEvent};

use crate::{
    kernel::events::{Args, Event, Exec},
    model::{
        argv::{append_args, exec_names, publish_partial, Appended},
        cputime,
        process::{end_peak_pages, EndMem, ExitStatus, Key},
    },
};

mod adopt;
mod ancestry;
mod budget;
mod kept;
mod live;
mod model;

pub use adopt::Adopted;
pub use ancestry::Ancestor;
pub use budget::{evicted, KEEP_BYTES};
pub use live::{LiveOptions, Tracked};
pub use model::{Image, Process};

use kept::Kept;
use live::LiveSet;

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
}

/// The store: every process ([`Store::keep_all`]) or the live ones ([`Store::bounded`]).
#[derive(Debug, Default)]
pub struct Store {
    /// Every process, when keeping all.
    kept: Kept,
    /// The live set, when bounded.
    live: Option<Box<LiveSet>>,
    pub stats: Stats,
}

/// A process the store holds, as a record reaches it.
enum Slot<'a> {
    Kept(&'a mut Process),
    Live(&'a mut Tracked),
}

impl Slot<'_> {
    fn p(&mut self) -> &mut Process {
        match self {
            Slot::Kept(p) => p,
            Slot::Live(t) => &mut t.process,
        }
    }
}

impl Store {
    /// Keeps every process and image: `trace`'s tree, rooted at the first process seen with
    /// `root_pid`, started by `root_ppid`.
    pub fn keep_all(root_pid: u32, root_ppid: u32) -> Store {
        Store {
            kept: Kept::new(root_pid, root_ppid),
            ..Store::default()
        }
    }

    /// Keeps the live processes only, within `opts`' bounds: `watch`'s table.
    pub fn bounded(opts: LiveOptions) -> Store {
        Store {
            live: Some(Box::new(LiveSet::new(opts))),
            ..Store::default()
        }
    }

    /// Takes one record. With a live set, a process's end returns it (it leaves the set):
    /// `None` for a duplicate end record.
    pub fn apply(&mut self, ev: Event) -> Option<Tracked> {
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

    /// The process a record is about. Keeping all, made when unknown; in the live set, found
    /// by the identity rule, and made (within the bound) only with `create`.
    fn find(&mut self, key: Key, create: bool) -> Option<Slot<'_>> {
        match self.live.as_deref_mut() {
            None => {
                let i = self.kept.entry(key);
                Some(Slot::Kept(&mut self.kept.procs[i]))
            }
            Some(l) => l.find(key, create, &mut self.stats).map(Slot::Live),
        }
    }

    /// Whether a record for `key` reaches a process the store holds (applies the identity
    /// rule: a stale live entry for the tgid goes).
    pub fn knows(&mut self, key: Key) -> bool {
        match self.live.as_deref_mut() {
            None => self.index_of(&key).is_some(),
            Some(l) => l.find(key, false, &mut self.stats).is_some(),
        }
    }

    pub fn fork(&mut self, f: &ForkEvent) {
        let parent_key = Key::of(&f.hdr);
        if f.hdr.flags & flags::FORK_THREAD != 0 {
            if let Some(mut s) = self.find(parent_key, false) {
                s.p().threads += 1;
            }
            return;
        }
        let fits = self.live.as_ref().is_none_or(|l| l.has_room(f.child_tgid));
        let ancestry = self.live.as_ref().is_some_and(|l| l.opts.ancestry);
        let (names, ppid, in_tree) = match self.find(parent_key, false) {
            Some(mut s) => {
                let in_tree = match &mut s {
                    Slot::Live(t) => {
                        // A ghost counts its children: only those it will see exit.
                        if ancestry && fits {
                            t.live_children += 1;
                        }
                        t.in_tree
                    }
                    Slot::Kept(_) => false,
                };
                let p = s.p();
                let names = p.image_at(f.hdr.ts_ns).map(|i| Arc::clone(&i.names));
                (names, p.pid, in_tree)
            }
            None => (None, f.hdr.tgid, false),
        };
        if !fits {
            self.stats.full += 1;
            return;
        }
        self.kept.adopted.forget(f.child_tgid);
        let ns_pids = self.kept.root_ns_pid.is_some();
        let live = self.live.is_some();
        let child_key = Key {
            tgid: f.child_tgid,
            start_ns: f.child_start_ns,
        };
        let Some(mut s) = self.find(child_key, true) else {
            return;
        };
        if let Slot::Live(t) = &mut s {
            t.in_tree |= in_tree;
            // Forked after the programs were attached, found in /proc too: as for an adopted
            // process, the records say everything (an exec /proc already showed is still to
            // come), so the /proc reading goes.
            if std::mem::take(&mut t.seeded) {
                t.process.images.clear();
            }
        }
        let child = s.p();
        if child.fork_seen {
            return;
        }
        child.fork_seen = true;
        child.untracked = f.hdr.flags & flags::FORK_UNTRACKED != 0;
        if ns_pids {
            child.pid = f.child_ns_tgid;
        }
        child.ppid = ppid;
        child.parent_tgid = f.hdr.tgid;
        child.parent_start_ns = parent_key.start_ns;
        child.start_ns = f.child_start_ns;
        // The inherited image runs from the fork until the first exec (or the exit).
        let end_ns = child.images.first().map(|i| i.start_ns).or(child.end_ns);
        // Most processes have one or two images: without this the first insert reserves
        // four (864 bytes, the largest allocation per process in a 100k-process trace). A live
        // set is bounded: room for the exec that mostly follows saves a reallocation.
        child.images.reserve_exact(if live { 2 } else { 1 });
        let mut img = Image {
            start_ns: f.child_start_ns,
            end_ns,
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
        let keep_images = self.live.as_ref().is_some_and(|l| l.opts.images);
        if let Some(l) = self.live.as_deref_mut() {
            l.charge_argv(e.args_len as usize, &mut self.stats);
        }
        let hdr = e.hdr;
        let (names, pending_args) = exec_names(e);
        let names = match pending_args.is_none() && self.live.is_none() {
            true => self.kept.intern(names),
            false => Arc::new(names),
        };
        let Some(mut s) = self.find(Key::of(&hdr), true) else {
            return;
        };
        let p = s.p();
        if let Some(open) = p.open_image() {
            open.end_ns = Some(hdr.ts_ns);
        }
        // No continuation reaches an image once another started: what came of it stays.
        if let Some(last) = p.images.last_mut() {
            publish_partial(&mut last.pending_args, &mut last.names, true);
        }
        let (start_ns, exec_flags) = (hdr.ts_ns, hdr.flags);
        if exec_flags & flags::EXEC_LEFT != 0 {
            // Nothing of it comes any more, its exit neither: it is not waited for.
            p.left = true;
            p.untracked = true;
        }
        let img = Image {
            names,
            start_ns,
            // Out of order: the exit may already be known; the image then ended with it.
            end_ns: p.end_ns,
            pending_args,
            exec_flags,
            ..Image::default()
        };
        p.images.reserve_exact(1);
        p.images.push(img);
        if let Slot::Live(t) = s {
            t.trim_images(keep_images);
        }
    }

    pub fn args(&mut self, a: Args) {
        // A trace reports whatever arrived (each record's bytes count at once); watch shows
        // argv once every byte came, or the image ended.
        let publish = self.live.is_none();
        let gap = match self.find(Key::of(&a.hdr), false) {
            None => true,
            Some(mut s) => match s.p().images.iter_mut().rev().find(|i| !i.inherited) {
                None => true,
                Some(img) => {
                    match append_args(&mut img.pending_args, &mut img.names, a.offset, &a.data) {
                        Appended::Gap => true,
                        Appended::Partial if publish => {
                            publish_partial(&mut img.pending_args, &mut img.names, false);
                            false
                        }
                        Appended::Partial | Appended::Arrived => false,
                    }
                }
            },
        };
        if gap {
            self.stats.args_gaps += 1;
        }
    }

    pub fn image_end(&mut self, m: &ImageEndEvent) {
        let Some(mut s) = self.find(Key::of(&m.hdr), false) else {
            return;
        };
        let p = s.p();
        let shared_mm = p.images.last().is_some_and(|i| i.shared_mm);
        // The root's first exec ends no image of its own: its images start at CMD's exec.
        if let Some(img) = p.open_image() {
            img.end_ns = Some(m.hdr.ts_ns);
            if let Some(mem) = EndMem::of_image(m.mem, img.shared_mm) {
                img.mem = Some(mem);
            }
        }
        if let Slot::Live(t) = s {
            if let Some(pages) = end_peak_pages(&m.mem, shared_mm) {
                t.left_peak_pages = t.left_peak_pages.max(pages);
            }
        }
    }

    /// The exact peak of an mm the kernel followed since `hdr.ts_ns`: it belongs to the image
    /// that was running then.
    pub fn mm_peak(&mut self, r: &RssEvent) {
        let Some(mut s) = self.find(Key::of(&r.hdr), false) else {
            return;
        };
        let ts = r.hdr.ts_ns;
        let images = &mut s.p().images;
        let at = images
            .iter()
            .rposition(|img| img.start_ns <= ts)
            .unwrap_or(0);
        if let Some(img) = images.get_mut(at).filter(|img| !img.shared_mm) {
            img.followed_peak_pages = Some(img.followed_peak_pages.unwrap_or(0).max(r.rss_pages));
        }
    }

    /// The process was released: its CPU figures are final, as its parent's wait4 saw them.
    pub fn reap(&mut self, r: &ReapEvent) {
        // A release of a process never seen (its exit was lost) still tells its CPU.
        let Some(mut s) = self.find(Key::of(&r.hdr), false) else {
            return;
        };
        let p = s.p();
        let cpu = cputime::at_release(r);
        p.user_ns = cpu.user_ns;
        p.sys_ns = cpu.sys_ns;
        p.cpu_final = true;
    }

    /// A thread exited, or (`EXIT_GROUP_DEAD`) the process. With a live set, the process
    /// leaves it and is returned (made up, not `known`, when the set did not hold it); `None`
    /// for a thread or a duplicate end record.
    pub fn exit(&mut self, x: &ExitEvent) -> Option<Tracked> {
        let key = Key::of(&x.hdr);
        let group = x.hdr.flags & flags::EXIT_GROUP_DEAD != 0;
        let Some(mut s) = self.find(key, false) else {
            let l = self.live.as_deref_mut()?;
            return group.then(|| l.unknown_exit(x, &mut self.stats)).flatten();
        };
        let p = s.p();
        let duplicate = group && p.end_ns.is_some();
        // Out of order: the release already gave the final figures.
        if !p.cpu_final {
            let (user, sys) = cputime::split_runtime(x.runtime_ns, x.utime_ns, x.stime_ns);
            p.user_ns += user;
            p.sys_ns += sys;
        }
        if group && !duplicate {
            p.end_ns = Some(x.hdr.ts_ns);
            p.exit = Some(ExitStatus::from_wait(x.exit_code));
            p.signal_maxrss_pages = x.signal_maxrss_pages;
            if let Some(img) = p.open_image() {
                img.end_ns = Some(x.hdr.ts_ns);
                if let Some(mem) = EndMem::of_image(x.mem, img.shared_mm) {
                    img.mem = Some(mem);
                }
            }
            if let Some(last) = p.images.last_mut() {
                publish_partial(&mut last.pending_args, &mut last.names, true);
            }
        }
        let live = match s {
            Slot::Live(t) => {
                t.runtime_ns += x.runtime_ns;
                true
            }
            Slot::Kept(_) => false,
        };
        if duplicate {
            self.stats.duplicate_exits += 1;
        }
        if !group || duplicate || !live {
            return None;
        }
        self.live.as_deref_mut()?.evict(key.tgid, &mut self.stats)
    }
}

#[cfg(test)]
mod tests;
