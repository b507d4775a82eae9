//! The report's processes and images: views over the tree's entries that compute each figure
//! when asked, so the report of a 100k-process trace copies nothing of the tree. Serialized
//! with the same fields, in the same order, as the JSON contract in the README.

use serde::Serialize;

use super::{
    lossless::{argv_b64, exe_b64, Argv, ArgvB64, Lossy, B64},
    Exit,
};
use crate::model::{
    crosscheck::{PerProcess, ProcessTaskstats},
    tree::{Image, Key, Process},
};
use rustc_hash::FxHashSet;

/// What turns the tree's figures into the report's: times since `t0`, pages into bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Scale {
    pub t0: u64,
    pub page: u64,
}

impl Scale {
    fn since(&self, ns: u64) -> u64 {
        ns.saturating_sub(self.t0)
    }
}

/// One process of the report.
#[derive(Clone, Copy, Debug)]
pub struct ProcessReport<'a> {
    pub(super) p: &'a Process,
    /// The taskstats sums, and where this process is in the tree.
    pub(super) sums: &'a PerProcess,
    pub(super) index: usize,
    pub(super) scale: Scale,
    /// Processes whose exit was never seen and that were gone when the trace ended.
    pub(super) gone: &'a FxHashSet<Key>,
}

/// Where a process stands at the end of the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
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

impl<'a> ProcessReport<'a> {
    pub fn pid(&self) -> u32 {
        self.p.pid
    }

    pub fn ppid(&self) -> u32 {
        self.p.ppid
    }

    pub fn start_ns(&self) -> u64 {
        self.scale.since(self.p.start_ns)
    }

    pub fn end_ns(&self) -> Option<u64> {
        self.p.end_ns.map(|e| self.scale.since(e))
    }

    pub fn threads(&self) -> u32 {
        self.p.threads
    }

    pub fn exit(&self) -> Option<Exit> {
        self.p.exit.map(Exit)
    }

    pub fn state(&self) -> State {
        match (self.p.end_ns, self.p.key) {
            (Some(_), _) => State::Exited,
            (None, _) if self.p.left => State::Left,
            (None, Some(k)) if self.gone.contains(&k) => State::Unknown,
            (None, _) => State::Running,
        }
    }

    pub fn peak_rss_bytes(&self) -> u64 {
        self.p.peak_rss_pages() * self.scale.page
    }

    /// Why a process has no peak at all, when it has none: one still running whose memory
    /// the kernel did not follow (its peak would read 0 for memory it may hold). A process
    /// that ended always has its images' figures.
    pub fn peak_rss_unknown(&self) -> Option<&'static str> {
        let known = self.p.images.iter().any(|i| i.peak_rss_pages().is_some());
        (self.p.end_ns.is_none() && !known)
            .then_some("still running, and its memory was not followed by the kernel")
    }

    pub fn user_ns(&self) -> u64 {
        self.p.user_ns
    }

    pub fn sys_ns(&self) -> u64 {
        self.p.sys_ns
    }

    /// The CPU figures are wait4's, read at the process's release; false: summed at its
    /// threads' exits (not reaped when the trace ended), which misses each thread's last slice.
    pub fn cpu_final(&self) -> bool {
        self.p.cpu_final
    }

    /// What getrusage's ru_maxrss says for this process: the maximum over all its images (and
    /// what it inherited), which is why it misleads after exec.
    pub fn ru_maxrss_bytes(&self) -> Option<u64> {
        self.p
            .end_ns
            .map(|_| self.p.signal_maxrss_pages * self.scale.page)
    }

    pub fn images(&self) -> impl DoubleEndedIterator<Item = ImageReport<'a>> + ExactSizeIterator {
        let scale = self.scale;
        self.p
            .images
            .iter()
            .map(move |img| ImageReport { img, scale })
    }

    /// The process's taskstats figures (all threads summed), when its exit was confirmed.
    pub fn taskstats(&self) -> Option<ProcessTaskstats> {
        self.sums.get(self.index)
    }
}

/// One image of a process.
#[derive(Clone, Copy, Debug)]
pub struct ImageReport<'a> {
    img: &'a Image,
    scale: Scale,
}

impl<'a> ImageReport<'a> {
    /// The path passed to execve, exact bytes.
    pub fn exe(&self) -> &'a [u8] {
        self.img.exe()
    }

    /// The arguments, exact bytes.
    pub fn argv(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        self.img.argv()
    }

    pub fn comm(&self) -> &'a [u8] {
        self.img.comm()
    }

    pub fn start_ns(&self) -> u64 {
        self.scale.since(self.img.start_ns)
    }

    pub fn end_ns(&self) -> Option<u64> {
        self.img.end_ns.map(|e| self.scale.since(e))
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
        self.img.argv_complete()
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
    images: Images<'a>,
    taskstats: Option<ProcessTaskstats>,
}

struct Images<'a>(ProcessReport<'a>);

impl Serialize for Images<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.images())
    }
}

impl Serialize for ProcessReport<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
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
            images: Images(*self),
            taskstats: self.taskstats(),
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
