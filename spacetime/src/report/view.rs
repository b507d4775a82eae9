//! The report's processes and images: views over the tree's entries that compute each figure
//! when asked, so the report of a 100k-process trace copies nothing of the tree. Serialized
//! with the same fields, in the same order, as the JSON contract in docs/json.md.

use serde::{Deserialize, Serialize};

use super::{
    figures,
    lossless::{argv_b64, exe_b64, Argv, ArgvB64, Lossy, B64},
    saved::{SavedImage, SavedProcess},
    Exit,
};
use crate::model::{
    crosscheck::{PerProcess, ProcessTaskstats},
    process::Names,
    tree::{Image, Key, Process, Tree},
};
use rustc_hash::FxHashSet;

/// What turns the tree's figures into the report's: times since `t0`, pages into bytes.
#[derive(Clone, Copy, Debug)]
pub struct Scale {
    pub t0: u64,
    pub page: u64,
}

impl Scale {
    pub(super) fn since(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.t0)
    }
}

/// What every process of a live report shares: the tree's processes, their taskstats sums,
/// the scale and which are gone. Held once, by the caller of [`super::Report::build`]: each
/// [`ProcessReport`] points here instead of carrying its own copy (56 bytes a process where
/// 24 do: 3.2 MB of a 100 000-process trace's peak).
#[derive(Debug)]
pub struct Live<'a> {
    procs: &'a [Process],
    sums: &'a PerProcess,
    pub(super) scale: Scale,
    /// Processes whose exit was never seen and that were gone when the trace ended.
    gone: &'a FxHashSet<Key>,
}

impl<'a> Live<'a> {
    /// The views' context over `tree`'s processes: times since `t0_ns`, pages of `page_size`.
    pub fn new(
        tree: &'a Tree,
        sums: &'a PerProcess,
        gone: &'a FxHashSet<Key>,
        t0_ns: u64,
        page_size: u64,
    ) -> Live<'a> {
        Live {
            procs: tree.processes(),
            sums,
            scale: Scale {
                t0: t0_ns,
                page: page_size,
            },
            gone,
        }
    }

    pub(super) fn processes(&self) -> &'a [Process] {
        self.procs
    }
}

/// One process of the report: a view over the tree's process, or over one read back from a
/// saved report ([`super::saved`]).
#[derive(Clone, Copy, Debug)]
pub struct ProcessReport<'a> {
    pub(super) at: At<'a>,
    /// Where it is in the report's list.
    pub(super) pos: u32,
}

/// Where a [`ProcessReport`]'s process is: what it stores, expanded into a [`Src`] when asked.
#[derive(Clone, Copy, Debug)]
pub(super) enum At<'a> {
    /// Process `index` of the tree.
    Live {
        run: &'a Live<'a>,
        index: u32,
    },
    Saved(&'a SavedProcess),
}

/// What a [`ProcessReport`] shows.
#[derive(Clone, Copy, Debug)]
pub(super) enum Src<'a> {
    Live {
        p: &'a Process,
        /// The taskstats sums, and where this process is in the tree.
        sums: &'a PerProcess,
        index: usize,
        scale: Scale,
        /// Processes whose exit was never seen and that were gone when the trace ended.
        gone: &'a FxHashSet<Key>,
    },
    Saved(&'a SavedProcess),
}

/// Where a process stands at the end of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Exited,
    /// Still running when the trace stopped (proven alive).
    Running,
    /// Its exit was never seen (record lost) and it is gone: how it ended is unknown.
    Unknown,
    /// It left the trace at an exec that gave it credentials its user does not have (a
    /// setuid, setgid or file-capability program, or one its user cannot read): traced
    /// through an agent, nothing of it after that is shown.
    Left,
}

/// Why a process has no peak: one still running whose memory the kernel did not follow.
pub const PEAK_UNKNOWN: &str = "still running, and its memory was not followed by the kernel";
/// See [`crate::model::image_mem`].
pub const PEAK_OUT_OF_RANGE: &str =
    "an image's peak RSS was above 2^40 pages, more than spacetime keeps";

impl<'a> ProcessReport<'a> {
    pub fn pos(&self) -> usize {
        self.pos as usize
    }

    fn src(&self) -> Src<'a> {
        match self.at {
            At::Live { run, index } => Src::Live {
                p: &run.procs[index as usize],
                sums: run.sums,
                index: index as usize,
                scale: run.scale,
                gone: run.gone,
            },
            At::Saved(s) => Src::Saved(s),
        }
    }

    pub fn pid(&self) -> u32 {
        match self.src() {
            Src::Live { p, .. } => p.pid,
            Src::Saved(s) => s.pid,
        }
    }

    pub fn ppid(&self) -> u32 {
        match self.src() {
            Src::Live { p, .. } => p.ppid,
            Src::Saved(s) => s.ppid,
        }
    }

    pub fn start_ns(&self) -> u64 {
        match self.src() {
            Src::Live { p, scale, .. } => scale.since(p.start_ns),
            Src::Saved(s) => s.start_ns,
        }
    }

    pub fn end_ns(&self) -> Option<u64> {
        match self.src() {
            Src::Live { p, scale, .. } => p.end_ns.get().map(|e| scale.since(e)),
            Src::Saved(s) => s.end_ns,
        }
    }

    pub fn threads(&self) -> u32 {
        match self.src() {
            Src::Live { p, .. } => p.threads,
            Src::Saved(s) => s.threads,
        }
    }

    pub fn exit(&self) -> Option<Exit> {
        match self.src() {
            Src::Live { p, .. } => p.exit.get().map(Exit),
            Src::Saved(s) => s.exit,
        }
    }

    /// Ended with a non-zero status or a signal.
    pub fn failed(&self) -> bool {
        self.exit().is_some_and(|e| e.0.shell_code() != 0)
    }

    pub fn state(&self) -> State {
        match self.src() {
            Src::Live { p, gone, .. } => match (p.end_ns.get(), p.key.get()) {
                (Some(_), _) => State::Exited,
                (None, _) if p.left() => State::Left,
                (None, Some(k)) if gone.contains(&k) => State::Unknown,
                (None, _) => State::Running,
            },
            Src::Saved(s) => s.state,
        }
    }

    pub fn peak_rss_bytes(&self) -> u64 {
        match self.src() {
            Src::Live { p, scale, .. } => p.peak_rss_pages() * scale.page,
            Src::Saved(s) => s.peak_rss_bytes.unwrap_or(0),
        }
    }

    /// Why a process has no peak at all, when it has none: one still running whose memory
    /// the kernel did not follow (its peak would read 0 for memory it may hold). A process
    /// that ended always has its images' figures, unless one was out of range (then the
    /// maximum over the others could be too low).
    pub fn peak_rss_unknown(&self) -> Option<&'static str> {
        match self.src() {
            Src::Live { p, .. } => {
                if p.images.iter().any(|i| i.mem.rss_out_of_range()) {
                    return Some(PEAK_OUT_OF_RANGE);
                }
                let known = p.images.iter().any(|i| i.peak_rss_pages().is_some());
                (p.end_ns.is_none() && !known).then_some(PEAK_UNKNOWN)
            }
            Src::Saved(s) => s.peak_rss_bytes.is_none().then_some(PEAK_UNKNOWN),
        }
    }

    pub fn user_ns(&self) -> u64 {
        match self.src() {
            Src::Live { p, .. } => p.user_ns,
            Src::Saved(s) => s.user_ns,
        }
    }

    pub fn sys_ns(&self) -> u64 {
        match self.src() {
            Src::Live { p, .. } => p.sys_ns,
            Src::Saved(s) => s.sys_ns,
        }
    }

    /// User and system CPU.
    pub fn cpu_ns(&self) -> u64 {
        self.user_ns() + self.sys_ns()
    }

    /// The CPU figures are wait4's, read at the process's release; false: summed at its
    /// threads' exits (not reaped when the trace ended), which misses each thread's last slice.
    pub fn cpu_final(&self) -> bool {
        match self.src() {
            Src::Live { p, .. } => p.cpu_final,
            Src::Saved(s) => s.cpu_final,
        }
    }

    /// What getrusage's ru_maxrss says for this process: the maximum over all its images (and
    /// what it inherited), which is why it misleads after exec.
    pub fn ru_maxrss_bytes(&self) -> Option<u64> {
        match self.src() {
            Src::Live { p, scale, .. } => p
                .end_ns
                .get()
                .map(|_| u64::from(p.signal_maxrss_pages) * scale.page),
            Src::Saved(s) => s.ru_maxrss_bytes,
        }
    }

    pub fn images(&self) -> Images<'a> {
        Images {
            src: self.src(),
            next: 0,
            back: match self.src() {
                Src::Live { p, .. } => p.images.len(),
                Src::Saved(s) => s.images.len(),
            },
        }
    }

    /// The images it ran itself (not the one inherited at fork).
    pub fn own_images(&self) -> impl DoubleEndedIterator<Item = ImageReport<'a>> {
        self.images().filter(|i| !i.inherited())
    }

    /// The image that names the process: the last it ran itself, else what it inherited.
    pub fn naming_image(&self) -> Option<ImageReport<'a>> {
        self.own_images()
            .next_back()
            .or_else(|| self.images().next())
    }

    /// The process's taskstats figures (all threads summed), when its exit was confirmed.
    pub fn taskstats(&self) -> Option<ProcessTaskstats> {
        match self.src() {
            Src::Live { sums, index, .. } => sums.get(index),
            Src::Saved(s) => s.taskstats.clone(),
        }
    }

    /// The process's key in the tree (a live report only).
    pub(super) fn key(&self) -> Option<Key> {
        match self.src() {
            Src::Live { p, .. } => p.key.get(),
            Src::Saved(_) => None,
        }
    }
}

/// A process's images, in order.
#[derive(Clone, Debug)]
pub struct Images<'a> {
    src: Src<'a>,
    next: usize,
    back: usize,
}

impl<'a> Images<'a> {
    fn at(&self, i: usize) -> ImageReport<'a> {
        match self.src {
            Src::Live { p, scale, .. } => ImageReport::Live {
                img: &p.images[i],
                scale,
            },
            Src::Saved(s) => ImageReport::Saved(&s.images[i]),
        }
    }
}

impl<'a> Iterator for Images<'a> {
    type Item = ImageReport<'a>;

    fn next(&mut self) -> Option<ImageReport<'a>> {
        (self.next < self.back).then(|| {
            self.next += 1;
            self.at(self.next - 1)
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.back - self.next;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Images<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        (self.next < self.back).then(|| {
            self.back -= 1;
            self.at(self.back)
        })
    }
}

impl ExactSizeIterator for Images<'_> {}

/// One image of a process.
#[derive(Clone, Copy, Debug)]
pub enum ImageReport<'a> {
    Live { img: &'a Image, scale: Scale },
    Saved(&'a SavedImage),
}

impl<'a> ImageReport<'a> {
    fn names(&self) -> &'a Names {
        match *self {
            ImageReport::Live { img, .. } => &img.names,
            ImageReport::Saved(s) => &s.names,
        }
    }

    /// The path passed to execve, exact bytes.
    pub fn exe(&self) -> &'a [u8] {
        &self.names().exe
    }

    /// The arguments, exact bytes.
    pub fn argv(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        self.names().argv()
    }

    /// The argument area: the arguments NUL-separated ([`Names::args`]).
    pub fn args(&self) -> &'a [u8] {
        &self.names().args
    }

    pub fn comm(&self) -> &'a [u8] {
        self.names().comm.as_bytes()
    }

    /// The path that names the program ([`crate::model::labels::program_path`]): the exe, or
    /// argv[0] where the kernel may have cut the exe.
    pub fn program(&self) -> &'a [u8] {
        crate::model::labels::program_path(self.exe(), self.argv().next())
    }

    pub fn start_ns(&self) -> u64 {
        match *self {
            ImageReport::Live { img, scale } => scale.since(img.start_ns),
            ImageReport::Saved(s) => s.start_ns,
        }
    }

    pub fn end_ns(&self) -> Option<u64> {
        match *self {
            ImageReport::Live { img, scale } => img.end_ns.get().map(|e| scale.since(e)),
            ImageReport::Saved(s) => s.end_ns,
        }
    }

    /// Null while the image is still running or when the kernel gave no figure for it.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        match *self {
            ImageReport::Live { img, scale } => img.peak_rss_pages().map(|p| p * scale.page),
            ImageReport::Saved(s) => s.peak_rss_bytes,
        }
    }

    pub fn peak_vm_bytes(&self) -> Option<u64> {
        match *self {
            ImageReport::Live { img, scale } => img.peak_vm_pages().map(|p| p * scale.page),
            ImageReport::Saved(s) => s.peak_vm_bytes,
        }
    }

    /// Inherited from the parent at fork, rather than started by an exec.
    pub fn inherited(&self) -> bool {
        match *self {
            ImageReport::Live { img, .. } => img.inherited,
            ImageReport::Saved(s) => s.inherited,
        }
    }

    /// Ran on the parent's address space (vfork/posix_spawn): its memory is the parent's.
    pub fn shared_mm(&self) -> bool {
        match *self {
            ImageReport::Live { img, .. } => img.shared_mm,
            ImageReport::Saved(s) => s.shared_mm,
        }
    }

    /// The RSS counters were summed exactly (per-CPU deltas included).
    pub fn exact(&self) -> bool {
        match *self {
            ImageReport::Live { img, .. } => img.exact(),
            ImageReport::Saved(s) => s.exact,
        }
    }

    /// Every byte of argv arrived.
    pub fn argv_complete(&self) -> bool {
        self.names().argv_complete
    }

    /// Started before `trace -p` attached: names read from /proc then.
    pub fn read_at_attach(&self) -> bool {
        match *self {
            ImageReport::Live { img, .. } => img.read_at_attach,
            ImageReport::Saved(s) => s.read_at_attach,
        }
    }
}

/// A process as the JSON contract spells it, built on the stack while it is written.
#[derive(Serialize)]
struct ProcessJson<'a> {
    pid: u32,
    ppid: u32,
    start_ns: u64,
    end_ns: Option<u64>,
    threads: u32,
    exit: Option<Exit>,
    state: State,
    /// Null, with the reason next to it, when there is no figure (see `peak_rss_unknown`).
    peak_rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_rss_unknown_reason: Option<&'static str>,
    user_ns: u64,
    sys_ns: u64,
    cpu_final: bool,
    ru_maxrss_bytes: Option<u64>,
    images: ImagesJson<'a>,
    taskstats: Option<ProcessTaskstats>,
    #[serde(flatten)]
    figures: figures::Json,
}

struct ImagesJson<'a>(ProcessReport<'a>);

impl Serialize for ImagesJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.images())
    }
}

impl Serialize for ProcessReport<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let taskstats = self.taskstats();
        let mut sums = figures::Sums::default();
        sums.add(taskstats.as_ref());
        ProcessJson {
            pid: self.pid(),
            ppid: self.ppid(),
            start_ns: self.start_ns(),
            end_ns: self.end_ns(),
            threads: self.threads(),
            exit: self.exit(),
            state: self.state(),
            peak_rss_bytes: match self.peak_rss_unknown() {
                None => Some(self.peak_rss_bytes()),
                Some(_) => None,
            },
            peak_rss_unknown_reason: self.peak_rss_unknown(),
            user_ns: self.user_ns(),
            sys_ns: self.sys_ns(),
            cpu_final: self.cpu_final(),
            ru_maxrss_bytes: self.ru_maxrss_bytes(),
            images: ImagesJson(*self),
            taskstats,
            figures: figures::Json {
                sums: Ok(sums),
                place: figures::Place::Process,
            },
        }
        .serialize(s)
    }
}

#[derive(Serialize)]
#[serde(bound(serialize = ""))]
struct ImageJson<'a, I: Iterator<Item = &'a [u8]> + Clone> {
    exe: Lossy<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exe_b64: Option<B64<'a>>,
    argv: Argv<I>,
    #[serde(skip_serializing_if = "Option::is_none")]
    argv_b64: Option<ArgvB64<I>>,
    comm: Lossy<'a>,
    start_ns: u64,
    end_ns: Option<u64>,
    peak_rss_bytes: Option<u64>,
    peak_vm_bytes: Option<u64>,
    inherited: bool,
    shared_mm: bool,
    exact: bool,
    argv_complete: bool,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    read_at_attach: bool,
}

impl Serialize for ImageReport<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        ImageJson {
            exe: Lossy(self.exe()),
            exe_b64: exe_b64(self.exe()),
            argv: Argv(self.argv()),
            argv_b64: argv_b64(self.argv()),
            comm: Lossy(self.comm()),
            start_ns: self.start_ns(),
            end_ns: self.end_ns(),
            peak_rss_bytes: self.peak_rss_bytes(),
            peak_vm_bytes: self.peak_vm_bytes(),
            inherited: self.inherited(),
            shared_mm: self.shared_mm(),
            exact: self.exact(),
            argv_complete: self.argv_complete(),
            read_at_attach: self.read_at_attach(),
        }
        .serialize(s)
    }
}
