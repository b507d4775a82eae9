//! The report's processes and images: views over the model's entries that compute each figure
//! when asked, so the report of a 100k-process trace copies nothing of the tree. A saved report
//! is read back into the same model ([`super::saved`]), so a run and its saved report are
//! drawn by the same code. Serialized with the same fields, in the same order, as the JSON
//! contract in docs/json.md.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::{
    figures,
    lossless::{argv_b64, exe_b64, Argv, ArgvB64, Lossy, B64},
    Exit,
};
use crate::model::{
    crosscheck::{PerProcess, ProcessTaskstats},
    tree::{Image, Key, Process, Tree},
};
use rustc_hash::FxHashSet;

/// What turns the model's figures into the report's: times since `t0`, pages into bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scale {
    pub t0: u64,
    pub page: u64,
}

impl Scale {
    pub(super) fn since(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.t0)
    }
}

/// What every process of a report shares: the processes, their taskstats sums, the scale and
/// which are gone. A run's borrows its tree's; a saved report's owns what was read back.
/// Held once: each [`ProcessReport`] points here instead of carrying its own copy (16 bytes
/// a process).
#[derive(Debug, Default)]
pub struct Processes<'a> {
    procs: Cow<'a, [Process]>,
    sums: Cow<'a, PerProcess>,
    pub(super) scale: Scale,
    /// Processes whose exit was never seen and that were gone when the trace ended.
    gone: Cow<'a, FxHashSet<Key>>,
}

impl<'a> Processes<'a> {
    /// The processes of `tree`: times since `t0_ns`, pages of `page_size`.
    pub fn new(
        tree: &'a Tree,
        sums: &'a PerProcess,
        gone: &'a FxHashSet<Key>,
        t0_ns: u64,
        page_size: u64,
    ) -> Processes<'a> {
        Processes {
            procs: Cow::Borrowed(tree.processes()),
            sums: Cow::Borrowed(sums),
            scale: Scale {
                t0: t0_ns,
                page: page_size,
            },
            gone: Cow::Borrowed(gone),
        }
    }

    /// Processes read back from a saved report, in its order: its times are since the start
    /// already, its pages of `page_size`.
    pub(super) fn owned(
        procs: Vec<Process>,
        sums: PerProcess,
        gone: FxHashSet<Key>,
        page_size: u64,
    ) -> Processes<'static> {
        Processes {
            procs: Cow::Owned(procs),
            sums: Cow::Owned(sums),
            scale: Scale {
                t0: 0,
                page: page_size,
            },
            gone: Cow::Owned(gone),
        }
    }

    pub(super) fn processes(&self) -> &[Process] {
        &self.procs
    }

    /// The report's view of process `index`, at `pos` in the report's list.
    pub(super) fn view(&'a self, index: u32, pos: u32) -> ProcessReport<'a> {
        ProcessReport {
            set: self,
            index,
            pos,
        }
    }
}

/// One process of the report: a view over the model's process.
#[derive(Clone, Copy, Debug)]
pub struct ProcessReport<'a> {
    set: &'a Processes<'a>,
    /// Which of the set's processes.
    index: u32,
    /// Where it is in the report's list.
    pos: u32,
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

    fn p(&self) -> &'a Process {
        &self.set.procs[self.index as usize]
    }

    /// The model's process (Perfetto's tracks draw it).
    pub(super) fn model(&self) -> &'a Process {
        self.p()
    }

    fn scale(&self) -> Scale {
        self.set.scale
    }

    pub fn pid(&self) -> u32 {
        self.p().pid
    }

    pub fn ppid(&self) -> u32 {
        self.p().ppid
    }

    pub fn start_ns(&self) -> u64 {
        self.scale().since(self.p().start_ns)
    }

    pub fn end_ns(&self) -> Option<u64> {
        self.p().end_ns.get().map(|e| self.scale().since(e))
    }

    pub fn threads(&self) -> u32 {
        self.p().threads
    }

    pub fn exit(&self) -> Option<Exit> {
        self.p().exit.get().map(Exit)
    }

    /// Ended with a non-zero status or a signal.
    pub fn failed(&self) -> bool {
        self.exit().is_some_and(|e| e.0.shell_code() != 0)
    }

    pub fn state(&self) -> State {
        let p = self.p();
        match (p.end_ns.get(), p.key.get()) {
            (Some(_), _) => State::Exited,
            (None, _) if p.left() => State::Left,
            (None, Some(k)) if self.set.gone.contains(&k) => State::Unknown,
            (None, _) => State::Running,
        }
    }

    pub fn peak_rss_bytes(&self) -> u64 {
        self.p().peak_rss_pages() * self.scale().page
    }

    /// Why a process has no peak at all, when it has none: one still running whose memory
    /// the kernel did not follow (its peak would read 0 for memory it may hold). A process
    /// that ended always has its images' figures, unless one was out of range (then the
    /// maximum over the others could be too low).
    pub fn peak_rss_unknown(&self) -> Option<&'static str> {
        let p = self.p();
        if p.images.iter().any(|i| i.mem.rss_out_of_range()) {
            return Some(PEAK_OUT_OF_RANGE);
        }
        let known = p.images.iter().any(|i| i.peak_rss_pages().is_some());
        (p.end_ns.is_none() && !known).then_some(PEAK_UNKNOWN)
    }

    pub fn user_ns(&self) -> u64 {
        self.p().user_ns
    }

    pub fn sys_ns(&self) -> u64 {
        self.p().sys_ns
    }

    /// User and system CPU.
    pub fn cpu_ns(&self) -> u64 {
        self.user_ns() + self.sys_ns()
    }

    /// The CPU figures are wait4's, read at the process's release; false: summed at its
    /// threads' exits (not reaped when the trace ended), which misses each thread's last slice.
    pub fn cpu_final(&self) -> bool {
        self.p().cpu_final
    }

    /// What getrusage's ru_maxrss says for this process: the maximum over all its images (and
    /// what it inherited), which is why it misleads after exec.
    pub fn ru_maxrss_bytes(&self) -> Option<u64> {
        let p = self.p();
        p.end_ns
            .get()
            .map(|_| u64::from(p.signal_maxrss_pages) * self.scale().page)
    }

    pub fn images(&self) -> Images<'a> {
        Images {
            it: self.p().images.iter(),
            scale: self.scale(),
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
        self.set.sums.get(self.index as usize)
    }

    /// The process's key in the model.
    pub(super) fn key(&self) -> Option<Key> {
        self.p().key.get()
    }
}

/// A process's images, in order.
#[derive(Clone, Debug)]
pub struct Images<'a> {
    it: std::slice::Iter<'a, Image>,
    scale: Scale,
}

impl<'a> Iterator for Images<'a> {
    type Item = ImageReport<'a>;

    fn next(&mut self) -> Option<ImageReport<'a>> {
        let scale = self.scale;
        self.it.next().map(|img| ImageReport { img, scale })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.it.size_hint()
    }
}

impl DoubleEndedIterator for Images<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let scale = self.scale;
        self.it.next_back().map(|img| ImageReport { img, scale })
    }
}

impl ExactSizeIterator for Images<'_> {}

/// One image of a process.
#[derive(Clone, Copy, Debug)]
pub struct ImageReport<'a> {
    img: &'a Image,
    scale: Scale,
}

impl<'a> ImageReport<'a> {
    /// The path passed to execve, exact bytes.
    pub fn exe(&self) -> &'a [u8] {
        &self.img.names.exe
    }

    /// The arguments, exact bytes.
    pub fn argv(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        self.img.names.argv()
    }

    /// The argument area: the arguments NUL-separated ([`crate::model::process::Names::args`]).
    pub fn args(&self) -> &'a [u8] {
        &self.img.names.args
    }

    pub fn comm(&self) -> &'a [u8] {
        self.img.names.comm.as_bytes()
    }

    /// The path that names the program ([`crate::model::labels::program_path`]): the exe, or
    /// argv[0] where the kernel may have cut the exe.
    pub fn program(&self) -> &'a [u8] {
        crate::model::labels::program_path(self.exe(), self.argv().next())
    }

    pub fn start_ns(&self) -> u64 {
        self.scale.since(self.img.start_ns)
    }

    pub fn end_ns(&self) -> Option<u64> {
        self.img.end_ns.get().map(|e| self.scale.since(e))
    }

    /// Null while the image is still running or when the kernel gave no figure for it.
    pub fn peak_rss_bytes(&self) -> Option<u64> {
        self.img.peak_rss_pages().map(|p| p * self.scale.page)
    }

    pub fn peak_vm_bytes(&self) -> Option<u64> {
        self.img.peak_vm_pages().map(|p| p * self.scale.page)
    }

    /// Inherited from the parent at fork, rather than started by an exec.
    pub fn inherited(&self) -> bool {
        self.img.inherited
    }

    /// Ran on the parent's address space (vfork/posix_spawn): its memory is the parent's.
    pub fn shared_mm(&self) -> bool {
        self.img.shared_mm
    }

    /// The RSS counters were summed exactly (per-CPU deltas included).
    pub fn exact(&self) -> bool {
        self.img.exact()
    }

    /// Every byte of argv arrived.
    pub fn argv_complete(&self) -> bool {
        self.img.names.argv_complete
    }

    /// Started before `trace -p` attached: names read from /proc then.
    pub fn read_at_attach(&self) -> bool {
        self.img.read_at_attach
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
