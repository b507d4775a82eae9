//! Where a run's kernel side is: programs loaded by this process ([`own::OwnSource`]) or a
//! `spacetime agent`'s, reached over its socket ([`agent::AgentSource`]). Both give the same
//! records (the agent forwards the ring's bytes) and the same taskstats datagrams, so
//! everything above decodes, reduces and reports them alike; `trace`, `bench`, `trace -p` and
//! `watch` hold a `Box<dyn KernelSource>` and never ask which one it is.

pub mod agent;
pub mod own;
mod records;

use std::os::fd::RawFd;

pub use records::{discard, Io, Records};

use super::{
    attach::Attached,
    counters::KernelCounters,
    loader::{KernelProgramStats, LearnedPid, LoadError},
    provenance::Provenance,
    remote::client::AgentConn,
    taskstats::{ListenerStats, Unavailable},
};

/// A forked child held before its exec (the run's root), as the kernel side needs it.
#[derive(Clone, Copy, Debug)]
pub struct HeldChild {
    /// As spacetime's PID namespace numbers it (what `fork` returned).
    pub pid: libc::pid_t,
    /// The child ran the program that records its kernel pid: 0, or the errno that failed
    /// (None when no program was given).
    pub own_pid_run: Option<i32>,
}

/// Where a run's taskstats records come from.
#[derive(Clone, Debug)]
pub enum TaskstatsFeed {
    /// A listener of this process's receives them.
    Listener,
    /// They come with the agent's records, about the session's processes only.
    Agent,
    /// None come.
    Unavailable(Unavailable),
}

/// What a run's end reads from the kernel side.
pub struct EndFigures {
    /// The run's own loss and failure counters.
    pub counters: KernelCounters,
    pub tree_rss: Option<spacetime_common::TreeRss>,
    /// The followed mms of processes still running (read only when some are).
    pub mms: Result<Vec<spacetime_common::MmState>, String>,
    /// Where the records the kernel had written when the mms were read end (a ring's
    /// position): the run takes them after the read, the last records of a process no longer
    /// followed then among them. None: they came with the end (an agent's answer).
    pub records_end: Option<u64>,
}

/// What a kernel side can do and how it was set up, fixed when it is opened: asked once,
/// passed around as a value.
#[derive(Clone, Debug)]
pub struct Capabilities {
    /// Whose programs these are.
    pub provenance: Provenance,
    /// The kernel follows RSS changes (rss_stat), so memory over time is the kernel's.
    pub rss_tracking: bool,
    /// The kernel samples the traced threads' run time on a CPU clock tick (CPU over time).
    pub cpu_ticks: bool,
    /// The final CPU of a process comes with its release record.
    pub cpu_at_release: bool,
    pub ring_buffer_bytes: u32,
    /// Start-up of the kernel side, ms: loading the programs here, or reaching the agent
    /// and opening a session (it loaded its programs once, when it started).
    pub load_ms: f64,
    /// The kernel mechanisms in use, as `-v` lists them.
    pub mechanisms: Vec<String>,
    /// Where taskstats records come from, or why none do.
    pub taskstats: TaskstatsFeed,
    /// The program a held child runs to tell its kernel pid (programs loaded here only).
    pub own_pid_program: Option<RawFd>,
    /// /proc numbers processes as the kernel programs do.
    pub proc_has_kernel_pids: bool,
    /// The uid whose processes alone this source shows (an agent's watch for a user who is
    /// not root); None: every process asked for.
    pub sees_only_uid: Option<u32>,
}

impl Capabilities {
    /// `-v`: whose programs, how long they took, the ring, the mechanisms.
    pub fn tell(&self) {
        let how = match self.provenance {
            Provenance::Agent => "ready in",
            Provenance::Own => "loaded in",
        };
        crate::errln!(
            "spacetime: programs: {}, {how} {:.1} ms; ring buffer {} KiB",
            self.provenance.as_str(),
            self.load_ms,
            self.ring_buffer_bytes >> 10
        );
        for m in &self.mechanisms {
            crate::errln!("spacetime:   {m}");
        }
    }
}

/// A kernel side: the operations a session or a watch asks of the programs, wherever they
/// run; what it can do is its [`Capabilities`].
pub trait KernelSource {
    fn capabilities(&self) -> &Capabilities;
    fn taskstats_stats(&self) -> ListenerStats;
    /// The latest cumulative counters (an agent's trace session sends the run's own at its
    /// end: until then, zeros).
    fn counters(&self) -> Option<KernelCounters>;
    /// The time spent in each of the programs (none for an agent's: they are not this
    /// process's cost).
    fn program_stats(&self) -> KernelProgramStats;
    /// Clears what an earlier run left in the kernel and in the queues.
    fn begin(&mut self) -> anyhow::Result<()>;
    /// Has the kernel track a held child (the run's root); returns its kernel pid.
    fn track_root(&mut self, held: HeldChild) -> anyhow::Result<LearnedPid>;
    /// Has the kernel track a running process and, from now on, its new children.
    fn track(&mut self, pid: u32) -> anyhow::Result<()>;
    /// Attaches to running processes (`trace -p`).
    fn attach(&mut self, pids: &[u32]) -> anyhow::Result<Attached>;
    /// What the event loop reads from.
    fn io(&mut self, sigfd: RawFd) -> Io<'_>;
    /// The run's end: its counters since `baseline`, the tree-wide RSS, and the followed
    /// mms when processes still run (`live`). An agent untracks the run's processes here.
    fn end_run(&mut self, baseline: &KernelCounters, live: bool) -> EndFigures;
    /// Stops tracing every process of the session; returns how many were still tracked.
    fn untrack_all(&mut self) -> Result<usize, LoadError>;
    /// Why the kernel side went away during the run, if it did (an agent that stopped).
    fn gone(&self) -> Option<String>;
}

/// Whose kernel programs a session or a watch may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Programs {
    /// The agent's when its socket answers, else programs loaded here (root).
    AgentElseOwn,
    /// The agent's only: a run it cannot serve fails rather than load programs here.
    Agent,
    /// Programs loaded here, even when an agent answers.
    Own,
}

impl Programs {
    /// From the `--agent` and `--no-agent` flags (which exclude each other).
    pub fn from_flags(agent: bool, no_agent: bool) -> Programs {
        match (agent, no_agent) {
            (true, _) => Programs::Agent,
            (false, true) => Programs::Own,
            (false, false) => Programs::AgentElseOwn,
        }
    }
}

/// Opens a kernel side as `programs` allows: a session of the agent at its socket, asking
/// for `want` ([`crate::kernel::remote::proto::want`]) and at most `max` tracked processes
/// (0: the agent's limit), made a source by `agent` (`held` may start the first run's root
/// once the hello is sent: see [`AgentConn::connect_for`]); else (or for [`Programs::Own`]) the
/// programs loaded here by `own`. Root gets the same figures from its own programs, quietly
/// (`-vv` says why); a user who can do neither is told, in one sentence, what the agent said
/// or to start one or use sudo.
pub fn open(
    programs: Programs,
    want: u8,
    max: u32,
    held: impl FnOnce() -> Option<std::os::fd::OwnedFd>,
    agent: impl FnOnce(AgentConn) -> anyhow::Result<Box<dyn KernelSource>>,
    own: impl FnOnce() -> anyhow::Result<Box<dyn KernelSource>>,
) -> anyhow::Result<Box<dyn KernelSource>> {
    if programs == Programs::Own {
        return own();
    }
    let path = crate::kernel::remote::socket_path();
    let why = match AgentConn::connect_for(&path, want, max, held) {
        Ok(conn) => return agent(conn),
        Err(e) if programs == Programs::Agent => {
            return Err(
                anyhow::Error::new(e).context("--agent: the spacetime agent cannot serve this run")
            );
        }
        Err(e) => e,
    };
    log::debug!("{why}; loading the programs here");
    own().map_err(|e| crate::kernel::remote::client::instead(e, why, &path))
}
