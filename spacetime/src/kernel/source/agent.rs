//! A `spacetime agent`'s programs, reached over its socket: the records, taskstats
//! datagrams and counters of this client's session come on the connection.

use std::{cell::Cell, os::fd::AsFd, rc::Rc};

use super::{Capabilities, EndFigures, HeldChild, Io, KernelSource, Provenance, TaskstatsFeed};
use crate::kernel::{
    attach::{self, Attached},
    counters::{CounterSource, KernelCounters},
    loader::{KernelProgramStats, LearnedPid, LoadError},
    pidns,
    remote::{
        client::{AgentConn, Gone},
        proto,
    },
    taskstats::{ListenerStats, Unavailable},
};

pub struct AgentSource {
    conn: AgentConn,
    capabilities: Capabilities,
    /// What the connection learns while the loop runs, shared with it.
    news: AgentNews,
}

/// The counters the agent last sent, and why it went away once it did (shared with the
/// connection, which updates them).
struct AgentNews {
    counters: Rc<Cell<KernelCounters>>,
    gone: Rc<std::cell::RefCell<Option<Gone>>>,
}

impl CounterSource for AgentNews {
    fn current(&self) -> Option<KernelCounters> {
        Some(self.counters.get())
    }
    fn through_agent(&self) -> bool {
        true
    }
    fn gone(&self) -> Option<String> {
        self.gone.borrow().as_ref().map(ToString::to_string)
    }
}

impl AgentSource {
    /// A session that asked for memory over time.
    pub fn new(conn: AgentConn) -> Self {
        AgentSource::asking(conn, true)
    }

    /// A session that asked the agent for no memory over time ([`proto::want::NO_MEMORY`]):
    /// the kernel follows none of its mms.
    pub fn without_memory(conn: AgentConn) -> Self {
        AgentSource::asking(conn, false)
    }

    fn asking(conn: AgentConn, memory: bool) -> Self {
        AgentSource {
            news: AgentNews {
                counters: conn.counters.clone(),
                gone: conn.gone_news.clone(),
            },
            capabilities: capabilities(&conn, memory),
            conn,
        }
    }
}

/// What the agent's welcome says its programs do for this session, which asked for memory
/// over time (`memory`) or not.
fn capabilities(conn: &AgentConn, memory: bool) -> Capabilities {
    let w = &conn.welcome;
    Capabilities {
        provenance: Provenance::Agent,
        rss_tracking: memory && w.rss_tracking,
        // Attached by the agent before its welcome, and kept while the session is open.
        cpu_ticks: matches!(w.cpu_clock, proto::CpuClockState::Ticking { cpus } if cpus > 0),
        cpu_at_release: w.cpu_at_release,
        ring_buffer_bytes: w.ring_buffer_bytes,
        load_ms: conn.ready_ms,
        mechanisms: mechanisms(w, memory),
        taskstats: match w.taskstats {
            proto::TaskstatsState::Available => TaskstatsFeed::Agent,
            proto::TaskstatsState::OtherNetNamespace => {
                TaskstatsFeed::Unavailable(Unavailable::OtherNetNamespace)
            }
            proto::TaskstatsState::Failed => TaskstatsFeed::Unavailable(Unavailable::Agent(
                String::from_utf8_lossy(&w.taskstats_error).into_owned(),
            )),
        },
        own_pid_program: None,
        // The client shares its PID namespace with the agent (the agent refuses others).
        proc_has_kernel_pids: pidns::in_initial_namespace(),
        sees_only_uid: match w.sees_uid {
            proto::SEES_ALL => None,
            uid => Some(uid),
        },
    }
}

/// The mechanisms `-v` lists: the agent's, and what this session asked of them.
fn mechanisms(w: &proto::Welcome, memory: bool) -> Vec<String> {
    let mut m = vec![format!(
        "programs of spacetime agent (session {}), loaded once by it",
        w.session
    )];
    m.extend(
        w.mechanisms
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned()),
    );
    match &w.cpu_clock {
        proto::CpuClockState::NotAsked => {}
        proto::CpuClockState::Ticking { cpus } => m.push(format!(
            "CPU over time: threads' run time sampled by the agent's CPU clock at {} Hz on \
             {cpus} CPUs (attached while a session shows CPU over time)",
            spacetime_common::CPU_TICK_HZ
        )),
        proto::CpuClockState::Failed(why) => m.push(format!(
            "CPU over time: each process's CPU spread over its life (the agent's CPU clock \
             program cannot run: {})",
            String::from_utf8_lossy(why)
        )),
    }
    if !memory {
        m.push(
            "this session asked for no memory over time: the kernel follows none of its \
             mms, and each image's peak is the kernel's own at its end"
                .into(),
        );
    }
    m
}

impl KernelSource for AgentSource {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn taskstats_stats(&self) -> ListenerStats {
        self.conn.taskstats_stats()
    }

    fn counters(&self) -> Option<KernelCounters> {
        Some(self.news.counters.get())
    }

    fn program_stats(&self) -> KernelProgramStats {
        // The agent's programs are not this process's cost.
        KernelProgramStats::default()
    }

    fn begin(&mut self) -> anyhow::Result<()> {
        // The agent cleared the session's kernel state when the last run finished.
        let stale = self.conn.discard();
        if stale > 0 {
            log::debug!("{stale} records of earlier runs discarded");
        }
        Ok(())
    }

    fn track_root(&mut self, held: HeldChild) -> anyhow::Result<LearnedPid> {
        // Our child, unreaped: the pid cannot have been reused.
        let pidfd = crate::kernel::pidfd::open_pidfd(held.pid as u32)?;
        let (kernel_pid, level) = self.conn.track(pidfd.as_fd())?;
        Ok(LearnedPid { kernel_pid, level })
    }

    fn track(&mut self, pid: u32) -> anyhow::Result<()> {
        // The agent tracks only what a client proves is its own (a pidfd, or `attach`).
        anyhow::bail!("tracking process {pid} by pid is not offered through the agent")
    }

    fn attach(&mut self, pids: &[u32]) -> anyhow::Result<Attached> {
        let (tracked, attach_ns, memory_followed) = self.conn.attach(pids)?;
        // What the report shows of each process is read here, as the client sees it (its
        // own processes); the agent only made the kernel follow them.
        let caller = attach::caller();
        let mut targets = Vec::new();
        let mut skipped = Vec::new();
        for pid in tracked {
            match attach::Target::hold(pid, caller) {
                Ok(t) => targets.push(t),
                Err(e) => skipped.push((pid, e)),
            }
        }
        if targets.first().map(|t| t.pid) != pids.first().copied() {
            anyhow::bail!(
                "process {} ended while it was being attached to",
                pids.first().copied().unwrap_or(0)
            );
        }
        Ok(Attached {
            targets,
            skipped,
            attach_ns,
            memory_followed,
        })
    }

    fn io(&mut self, sigfd: std::os::fd::RawFd) -> Io<'_> {
        Io {
            ring: &mut self.conn,
            sigfd,
            logger: None,
            taskstats: None,
            counters: &self.news,
        }
    }

    fn end_run(&mut self, _baseline: &KernelCounters, _live: bool) -> EndFigures {
        let a = &mut self.conn;
        let end = a.finish();
        a.tell_if_gone();
        let mms = match (&end.end, a.gone()) {
            (None, Some(why)) => Err(format!("the agent went away: {why}")),
            _ => Ok(end.mms),
        };
        let e = end.end.unwrap_or_default();
        let mut counters = e.counters;
        // Dropped for a slow reader: lost, in the agent's queue, not in a ring.
        counters.agent_queue_full += e.dropped_records;
        EndFigures {
            counters,
            tree_rss: end.end.map(|e| e.tree_rss),
            mms,
            // The agent sent what the kernel wrote until after its read, before its answer.
            records_end: None,
        }
    }

    fn untrack_all(&mut self) -> Result<usize, LoadError> {
        // Done by the agent when the run finished.
        Ok(0)
    }

    fn gone(&self) -> Option<String> {
        self.conn.gone().map(ToString::to_string)
    }
}
