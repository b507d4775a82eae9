//! The process tree, built from decoded events.
//!
//! A process is keyed by (tgid, start time of its group leader): pids are reused, that pair is
//! not. A process keeps one entry for its whole life, with one image per program it ran: the
//! image inherited from its parent at fork (unless it is the root), then one per exec.
//! Events may arrive out of order (or be lost): an event for an unknown process creates it, and
//! a later fork fills in where it came from.

use std::sync::{Arc, LazyLock};

use spacetime_common::{flags, ExitEvent, ForkEvent, ImageEndEvent, ReapEvent, RssEvent};

pub use crate::core::process::{EndMem, ExitStatus, Key, Names};
use crate::{
    core::argv::{append_args, exec_names, publish_partial, Appended, PendingArgv},
    cputime,
    events::{Args, Event, Exec},
    idhash::{IdMap, IdSet},
};

/// One program image of a process.
#[derive(Clone, Debug)]
pub struct Image {
    pub names: Arc<Names>,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    /// Carried over from the parent at fork rather than started by an exec.
    pub inherited: bool,
    /// Ran on the parent's address space (vfork/posix_spawn before exec): its memory figures
    /// are the parent's and are not counted for this process.
    pub shared_mm: bool,
    /// Memory figures at the end of the image, when known.
    pub mem: Option<EndMem>,
    /// The exact maximum RSS of the image's mm, when the kernel followed every change of it.
    pub followed_peak_pages: Option<u64>,
    /// argv while it is assembled from continuation records; dropped once every byte came.
    pending_args: Option<Box<PendingArgv>>,
    pub exec_flags: u32,
    /// Started before spacetime attached (`trace -p`): exe, argv and comm were read from
    /// /proc at the attach, not from an exec record.
    pub read_at_attach: bool,
}

impl Default for Image {
    /// An image with no names yet: they point at one shared empty [`Names`] (a fork builds
    /// its inherited image from a default one, and should not allocate names to drop them).
    fn default() -> Image {
        static NO_NAMES: LazyLock<Arc<Names>> = LazyLock::new(Arc::default);
        Image {
            names: Arc::clone(&NO_NAMES),
            start_ns: 0,
            end_ns: None,
            inherited: false,
            shared_mm: false,
            mem: None,
            followed_peak_pages: None,
            pending_args: None,
            exec_flags: 0,
            read_at_attach: false,
        }
    }
}

impl Image {
    pub fn exe(&self) -> &[u8] {
        &self.names.exe
    }

    /// The arguments, exact bytes.
    pub fn argv(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.names.argv()
    }

    pub fn comm(&self) -> &[u8] {
        self.names.comm.as_bytes()
    }

    /// Every argv byte arrived and none was cut.
    pub fn argv_complete(&self) -> bool {
        self.names.argv_complete
    }

    /// argv joined by spaces, or the exe (or comm) when there is none: a name for the image
    /// where Unicode text is needed (invalid UTF-8 shown as U+FFFD).
    pub fn title_lossy(&self) -> String {
        let bytes: Vec<u8> = if self.argv().next().is_some() {
            self.argv().collect::<Vec<_>>().join(&b' ')
        } else if !self.exe().is_empty() {
            self.exe().to_vec()
        } else {
            self.comm().to_vec()
        };
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Peak RSS of this image in pages (None while running or when not measured).
    pub fn peak_rss_pages(&self) -> Option<u64> {
        if self.shared_mm {
            return Some(0);
        }
        // The followed maximum is exact; the end-of-image figure may miss a peak that was
        // freed before (hiwater_rss is raised lazily, from approximate counts).
        match (self.mem.map(|m| m.peak_rss_pages), self.followed_peak_pages) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn peak_vm_pages(&self) -> Option<u64> {
        if self.shared_mm {
            return Some(0);
        }
        self.mem.map(|m| m.peak_vm_pages)
    }

    pub fn exact(&self) -> bool {
        self.shared_mm
            || self.followed_peak_pages.is_some()
            || self.mem.is_some_and(|m| m.flags & flags::MEM_EXACT != 0)
    }
}

/// One process (thread group).
#[derive(Clone, Debug, Default)]
pub struct Process {
    pub key: Option<Key>,
    /// The pid as spacetime's PID namespace numbers it (the kernel's, `key.tgid`, unless
    /// spacetime runs inside a namespace; there 0 when its fork record was lost).
    pub pid: u32,
    /// The process that forked this one, numbered like `pid` (0 when unknown); kept when the
    /// kernel reparents.
    pub ppid: u32,
    /// The key of the process that forked this one, when its fork was seen: see
    /// [`Process::parent`].
    parent_tgid: u32,
    parent_start_ns: u64,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    /// Every thread it ever had, the main thread included.
    pub threads: u32,
    pub exit: Option<ExitStatus>,
    pub images: Vec<Image>,
    /// CPU time: what wait4 reported for it once its release was seen (`cpu_final`); until
    /// then the sum over its exited threads, each read in the exit path (a thread's last
    /// slice is not yet counted there, so short processes read low).
    pub user_ns: u64,
    pub sys_ns: u64,
    /// `user_ns`/`sys_ns` are the kernel's figures at the process's release (as wait4).
    pub cpu_final: bool,
    /// `signal->maxrss` at exit: what ru_maxrss reports (pages).
    pub signal_maxrss_pages: u64,
    /// Its fork was seen (false for the root and for processes whose fork was lost).
    pub fork_seen: bool,
    pub is_root: bool,
}

impl Process {
    /// The process that forked this one, when its fork was seen.
    pub fn parent(&self) -> Option<Key> {
        self.fork_seen.then_some(Key {
            tgid: self.parent_tgid,
            start_ns: self.parent_start_ns,
        })
    }

    /// Peak RSS over its images, in pages.
    pub fn peak_rss_pages(&self) -> u64 {
        self.images
            .iter()
            .filter_map(Image::peak_rss_pages)
            .max()
            .unwrap_or(0)
    }

    /// The image running at `ts_ns`: the last one started at or before it.
    fn image_at(&self, ts_ns: u64) -> Option<&Image> {
        self.images
            .iter()
            .rev()
            .find(|i| i.start_ns <= ts_ns)
            .or(self.images.first())
    }

    /// The image still open (not yet ended by exec or exit).
    fn open_image(&mut self) -> Option<&mut Image> {
        self.images.last_mut().filter(|i| i.end_ns.is_none())
    }
}

#[derive(Debug, Default)]
pub struct Tree {
    procs: Vec<Process>,
    index: IdMap<Key, usize>,
    /// Every tgid seen, for filtering other sources (taskstats) by process.
    tgids: IdSet<u32>,
    root_pid: u32,
    root_ppid: u32,
    /// spacetime runs inside a PID namespace: the root's pid there (see [`Tree::in_namespace`]).
    root_ns_pid: Option<u32>,
    root: Option<usize>,
    /// Continuation records that did not follow on from what had arrived.
    pub args_gaps: u64,
    /// Processes that predate an attach, by tgid, until a record names them.
    adopted: IdMap<u32, Adopted>,
}

impl Tree {
    /// A tree whose root is the process with this pid (the first one seen with it), started
    /// by `root_ppid`.
    pub fn new(root_pid: u32, root_ppid: u32) -> Tree {
        Tree {
            root_pid,
            root_ppid,
            ..Tree::default()
        }
    }

    /// spacetime runs inside a PID namespace, where the root is `root_ns_pid` (`root_pid` is
    /// the kernel's): pids shown are the namespace's, from the fork records.
    pub fn in_namespace(mut self, root_ns_pid: u32) -> Tree {
        self.root_ns_pid = Some(root_ns_pid);
        self
    }

    pub fn processes(&self) -> &[Process] {
        &self.procs
    }

    pub fn root(&self) -> Option<&Process> {
        self.root.map(|i| &self.procs[i])
    }

    /// Where the process is in [`processes`](Tree::processes).
    pub fn index_of(&self, key: &Key) -> Option<usize> {
        self.index.get(key).copied()
    }

    pub fn get(&self, key: &Key) -> Option<&Process> {
        self.index.get(key).map(|&i| &self.procs[i])
    }

    /// Processes that exited but whose final CPU time (their free record) has not come.
    pub fn awaiting_release(&self) -> usize {
        self.procs
            .iter()
            .filter(|p| p.end_ns.is_some() && !p.cpu_final)
            .count()
    }

    /// Processes that have not exited.
    pub fn live(&self) -> usize {
        self.procs.iter().filter(|p| p.end_ns.is_none()).count()
    }

    fn entry(&mut self, key: Key) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.procs.len();
        let is_root = self.root.is_none() && key.tgid == self.root_pid;
        if is_root {
            self.root = Some(i);
        }
        let pid = match self.root_ns_pid {
            None => key.tgid,
            Some(root) if is_root => root,
            // Until its fork record names it.
            Some(_) => 0,
        };
        self.procs.push(Process {
            key: Some(key),
            pid,
            start_ns: key.start_ns,
            ppid: if is_root { self.root_ppid } else { 0 },
            threads: 1,
            is_root,
            ..Process::default()
        });
        self.index.insert(key, i);
        self.tgids.insert(key.tgid);
        if let Some(a) = self.take_adopted(key) {
            Tree::fill_adopted(&mut self.procs[i], a);
        }
        i
    }

    /// Whether any process with this tgid is (or was) in the tree; the root's pid counts from
    /// the start.
    pub fn knows_tgid(&self, tgid: u32) -> bool {
        tgid == self.root_pid || self.tgids.contains(&tgid)
    }

    pub fn apply(&mut self, ev: Event) {
        match ev {
            Event::Fork(f) => self.fork(&f),
            Event::Exec(e) => self.exec(e),
            Event::Args(a) => self.args(a),
            Event::ImageEnd(m) => self.image_end(&m),
            Event::Exit(x) => self.exit(&x),
            Event::Rss(r) if r.hdr.flags & flags::RSS_MM_PEAK != 0 => self.mm_peak(&r),
            // Memory over time belongs to the timeline, not to the tree.
            Event::Rss(_) => {}
            Event::Reap(r) => self.reap(&r),
        }
    }

    fn fork(&mut self, f: &ForkEvent) {
        let parent_key = Key::of(&f.hdr);
        let pi = self.entry(parent_key);
        if f.hdr.flags & flags::FORK_THREAD != 0 {
            self.procs[pi].threads += 1;
            return;
        }
        let child_key = Key {
            tgid: f.child_tgid,
            start_ns: f.child_start_ns,
        };
        self.forget_adopted(f.child_tgid);
        let ci = self.entry(child_key);
        let shared_mm = f.hdr.flags & flags::FORK_SHARED_MM != 0;
        let inherited = self.procs[pi]
            .image_at(f.hdr.ts_ns)
            .map(|img| Image {
                names: Arc::clone(&img.names),
                ..Image::default()
            })
            .unwrap_or_default();
        let parent_pid = self.procs[pi].pid;
        let child = &mut self.procs[ci];
        if child.fork_seen {
            return;
        }
        child.fork_seen = true;
        if self.root_ns_pid.is_some() {
            child.pid = f.child_ns_tgid;
        }
        child.ppid = parent_pid;
        child.parent_tgid = f.hdr.tgid;
        child.parent_start_ns = parent_key.start_ns;
        child.start_ns = f.child_start_ns;
        // The inherited image runs from the fork until the first exec (or the exit).
        let end_ns = child.images.first().map(|i| i.start_ns).or(child.end_ns);
        // Most processes have one or two images: without this the first insert reserves
        // four (864 bytes, the largest allocation per process in a 100k-process trace).
        child.images.reserve_exact(1);
        child.images.insert(
            0,
            Image {
                start_ns: f.child_start_ns,
                end_ns,
                inherited: true,
                shared_mm,
                ..inherited
            },
        );
    }

    fn exec(&mut self, e: Exec) {
        let i = self.entry(Key::of(&e.hdr));
        let p = &mut self.procs[i];
        if let Some(open) = p.open_image() {
            open.end_ns = Some(e.hdr.ts_ns);
        }
        let (start_ns, exec_flags) = (e.hdr.ts_ns, e.hdr.flags);
        let (names, pending_args) = exec_names(e);
        let mut img = Image {
            names: Arc::new(names),
            start_ns,
            pending_args,
            exec_flags,
            ..Image::default()
        };
        // Out of order: the exit may already be known; the image then ended with it.
        if let Some(end) = p.end_ns {
            img.end_ns = Some(end);
        }
        p.images.reserve_exact(1);
        p.images.push(img);
    }

    fn args(&mut self, a: Args) {
        let i = self.entry(Key::of(&a.hdr));
        let Some(img) = self.procs[i].images.iter_mut().rev().find(|i| !i.inherited) else {
            self.args_gaps += 1;
            return;
        };
        match append_args(&mut img.pending_args, &mut img.names, a.offset, &a.data) {
            Appended::Gap => self.args_gaps += 1,
            // A trace reports whatever arrived: each record's bytes count at once.
            Appended::Partial => publish_partial(&mut img.pending_args, &mut img.names, false),
            Appended::Arrived => {}
        }
    }

    fn image_end(&mut self, m: &ImageEndEvent) {
        let i = self.entry(Key::of(&m.hdr));
        // The root's first exec ends no image of its own: its images start at CMD's exec.
        if let Some(img) = self.procs[i].open_image() {
            img.end_ns = Some(m.hdr.ts_ns);
            if let Some(mem) = EndMem::of_image(m.mem, img.shared_mm) {
                img.mem = Some(mem);
            }
        }
    }

    /// The exact peak of an mm the kernel followed since `hdr.ts_ns`: it belongs to the image
    /// that was running then.
    fn mm_peak(&mut self, r: &RssEvent) {
        let i = self.entry(Key::of(&r.hdr));
        let ts = r.hdr.ts_ns;
        let images = &mut self.procs[i].images;
        let at = images
            .iter()
            .rposition(|img| img.start_ns <= ts)
            .unwrap_or(0);
        if let Some(img) = images.get_mut(at).filter(|img| !img.shared_mm) {
            img.followed_peak_pages = Some(img.followed_peak_pages.unwrap_or(0).max(r.rss_pages));
        }
    }

    /// The process was released: its CPU figures are final, as its parent's wait4 saw them.
    fn reap(&mut self, r: &ReapEvent) {
        // A release of a process never seen (its exit was lost) still tells its CPU.
        let i = self.entry(Key::of(&r.hdr));
        let p = &mut self.procs[i];
        let cpu = cputime::at_release(r);
        p.user_ns = cpu.user_ns;
        p.sys_ns = cpu.sys_ns;
        p.cpu_final = true;
    }

    fn exit(&mut self, x: &ExitEvent) {
        let i = self.entry(Key::of(&x.hdr));
        let p = &mut self.procs[i];
        // Out of order: the release already gave the final figures.
        if !p.cpu_final {
            let (user, sys) = cputime::split_runtime(x.runtime_ns, x.utime_ns, x.stime_ns);
            p.user_ns += user;
            p.sys_ns += sys;
        }
        if x.hdr.flags & flags::EXIT_GROUP_DEAD == 0 {
            return;
        }
        p.end_ns = Some(x.hdr.ts_ns);
        p.exit = Some(ExitStatus::from_wait(x.exit_code));
        p.signal_maxrss_pages = x.signal_maxrss_pages;
        if let Some(img) = p.open_image() {
            img.end_ns = Some(x.hdr.ts_ns);
            if let Some(mem) = EndMem::of_image(x.mem, img.shared_mm) {
                img.mem = Some(mem);
            }
        }
    }
}

#[path = "tree_adopt.rs"]
mod adopt;
pub use adopt::Adopted;

#[cfg(test)]
#[path = "tree_tests.rs"]
mod tests;
