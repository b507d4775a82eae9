//! Where a run's kernel side is: programs loaded by this process ([`own::OwnSource`]) or a
//! `spacetime agent`'s, reached over its socket ([`agent::AgentSource`]). Both give the same
//! records (the agent forwards the ring's bytes) and the same taskstats datagrams, so
//! everything above decodes, reduces and reports them alike; `trace`, `bench`, `trace -p` and
//! `watch` hold a `Box<dyn KernelSource>` and never ask which one it is.

pub mod agent;
pub mod own;

use std::os::fd::RawFd;

use super::{attach::Attached, event_loop::Io, launch::Held, RunError};
use crate::{
    kernel::{
        counters::KernelCounters,
        loader::{LearnedPid, LoadError},
        provenance::Provenance,
        taskstats::{ListenerStats, Unavailable},
    },
    report::selfstats::OwnCost,
};

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

/// A kernel side: what a session or a watch asks of the programs, wherever they run.
pub trait KernelSource {
    fn provenance(&self) -> Provenance;
    /// The kernel follows RSS changes (rss_stat), so memory over time is the kernel's.
    fn rss_tracking(&self) -> bool;
    /// The kernel samples the traced threads' run time on a CPU clock tick (CPU over time).
    fn cpu_ticks(&self) -> bool;
    /// The final CPU of a process comes with its release record.
    fn cpu_at_release(&self) -> bool;
    fn ring_buffer_bytes(&self) -> u32;
    /// Start-up of the kernel side, ms: loading the programs here, or reaching the agent
    /// and opening a session (it loaded its programs once, when it started).
    fn load_ms(&self) -> f64;
    /// The kernel mechanisms in use, as `-v` lists them.
    fn mechanisms(&self) -> Vec<String>;
    /// Where taskstats records come from, or why none do.
    fn taskstats(&self) -> TaskstatsFeed;
    fn taskstats_stats(&self) -> ListenerStats;
    /// The latest cumulative counters (an agent's trace session sends the run's own at its
    /// end: until then, zeros).
    fn counters(&self) -> Option<KernelCounters>;
    /// spacetime's own cost so far, with what the kernel side adds.
    fn own_cost(&self) -> OwnCost;
    /// The program a held child runs to tell its kernel pid (programs loaded here only).
    fn own_pid_program(&self) -> Option<RawFd>;
    /// Whether /proc numbers processes as the kernel programs do.
    fn proc_has_kernel_pids(&self) -> bool;
    /// Clears what an earlier run left in the kernel and in the queues.
    fn begin(&mut self) -> Result<(), RunError>;
    /// Has the kernel track a held child (the run's root); returns its kernel pid.
    fn track_root(&mut self, held: &Held) -> anyhow::Result<LearnedPid>;
    /// Has the kernel track a running process and, from now on, its new children.
    fn track(&mut self, pid: u32) -> anyhow::Result<()>;
    /// Attaches to running processes (`trace -p`).
    fn attach(&mut self, pids: &[u32]) -> Result<Attached, RunError>;
    /// What the event loop reads from.
    fn io(&mut self, sigfd: RawFd) -> Io<'_>;
    /// The run's end: its counters since `baseline`, the tree-wide RSS, and the followed
    /// mms when processes still run (`live`). An agent untracks the run's processes here.
    fn end_run(&mut self, baseline: &KernelCounters, live: bool) -> EndFigures;
    /// Stops tracing every process of the session; returns how many were still tracked.
    fn untrack_all(&mut self) -> Result<usize, LoadError>;
    /// Why the kernel side went away during the run, if it did (an agent that stopped).
    fn gone(&self) -> Option<String>;
    /// The uid whose processes alone this source shows (an agent's watch for a user who is
    /// not root); None: every process asked for.
    fn sees_only_uid(&self) -> Option<u32> {
        None
    }

    /// `-v`: whose programs, how long they took, the ring, the mechanisms.
    fn tell(&self) {
        let how = match self.provenance() {
            Provenance::Agent => "ready in",
            Provenance::Own => "loaded in",
        };
        crate::errln!(
            "spacetime: programs: {}, {how} {:.1} ms; ring buffer {} KiB",
            self.provenance().as_str(),
            self.load_ms(),
            self.ring_buffer_bytes() >> 10
        );
        for m in self.mechanisms() {
            crate::errln!("spacetime:   {m}");
        }
    }
}
