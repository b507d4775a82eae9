//! A session's kernel side, one of two: the programs loaded by this process ([`Kernel::Own`]),
//! or a `spacetime agent`'s, reached over its socket ([`Kernel::Agent`]). Either gives the
//! same records (the agent forwards the ring's bytes), so everything above decodes, reduces
//! and reports them the same way.

use std::os::fd::{AsFd, FromRawFd, OwnedFd};

use aya::maps::{MapData, RingBuf};

use super::{
    event_loop::{self, Io},
    session::RunError,
};
use crate::{
    kernel::{
        loader::{KernelCounters, KernelLogger, LearnedPid, LoadOptions, Probes},
        remote::client::AgentConn,
        taskstats::{ListenerStats, TaskstatsListener},
    },
    report::selfstats::OwnCost,
    run::launch,
};

/// Programs loaded here.
pub(super) struct Own {
    pub probes: Probes,
    pub ring: RingBuf<MapData>,
    pub logger: Option<KernelLogger>,
    /// The listener, or why there is none.
    pub taskstats: Result<TaskstatsListener, String>,
}

pub(super) enum Kernel {
    Own(Box<Own>),
    Agent(Box<AgentConn>),
}

/// What a run's end reads from the kernel side.
pub(super) struct EndFigures {
    /// The run's own loss and failure counters.
    pub counters: KernelCounters,
    pub tree_rss: Option<spacetime_common::TreeRss>,
    /// The followed mms of processes still running (read only when some are).
    pub mms: Result<Vec<spacetime_common::MmState>, String>,
}

impl Kernel {
    pub fn open_own(load: &LoadOptions, taskstats_buffer: u32) -> anyhow::Result<Kernel> {
        let mut probes = Probes::load(load)?;
        Ok(Kernel::Own(Box::new(Own {
            ring: probes.take_events()?,
            logger: probes.take_logger(),
            probes,
            taskstats: crate::model::matcher::open_listener(taskstats_buffer as usize),
        })))
    }

    pub fn probes(&self) -> Option<&Probes> {
        match self {
            Kernel::Own(o) => Some(&o.probes),
            Kernel::Agent(_) => None,
        }
    }

    /// `"own"` or `"agent"`: whose programs, for the report.
    pub fn whose(&self) -> &'static str {
        match self {
            Kernel::Own(_) => "own",
            Kernel::Agent(_) => "agent",
        }
    }

    pub fn rss_tracking(&self) -> bool {
        match self {
            Kernel::Own(o) => o.probes.rss_tracking,
            Kernel::Agent(a) => a.welcome.rss_tracking,
        }
    }

    pub fn cpu_at_release(&self) -> bool {
        match self {
            Kernel::Own(o) => o.probes.cpu_at_release,
            Kernel::Agent(a) => a.welcome.cpu_at_release,
        }
    }

    pub fn ring_buffer_bytes(&self) -> u32 {
        match self {
            Kernel::Own(o) => o.probes.ring_buffer_bytes,
            Kernel::Agent(a) => a.welcome.ring_buffer_bytes,
        }
    }

    /// Start-up of the kernel side, ms: loading the programs here, or reaching the agent
    /// and opening a session (it loaded its programs once, when it started).
    pub fn load_ms(&self) -> f64 {
        match self {
            Kernel::Own(o) => o.probes.load_ms,
            Kernel::Agent(a) => a.ready_ms,
        }
    }

    pub fn mechanisms(&self) -> Vec<String> {
        match self {
            Kernel::Own(o) => o.probes.mechanisms.clone(),
            Kernel::Agent(a) => {
                let mut m = vec![format!(
                    "programs of spacetime agent (session {}), loaded once by it",
                    a.welcome.session
                )];
                m.extend(
                    a.welcome
                        .mechanisms
                        .iter()
                        .map(|l| String::from_utf8_lossy(l).into_owned()),
                );
                m
            }
        }
    }

    /// Clears what an earlier run left in the kernel and in the queues.
    pub fn begin(&mut self) -> Result<(), RunError> {
        let (stale, taskstats) = match self {
            Kernel::Own(o) => {
                o.probes.untrack_all()?;
                o.probes.reset_run_state()?;
                let stale = event_loop::discard(&mut o.ring);
                let mut batch = Vec::new();
                if let Ok(t) = o.taskstats.as_mut() {
                    if let Err(e) = t.drain(&mut batch) {
                        log::debug!("taskstats: {e}");
                    }
                }
                (stale, batch.len())
            }
            // The agent cleared the session's kernel state when the last run finished.
            Kernel::Agent(a) => (a.discard(), 0),
        };
        if stale + taskstats > 0 {
            log::debug!(
                "{stale} records and {taskstats} taskstats records of earlier runs discarded"
            );
        }
        Ok(())
    }

    /// Cumulative counters now (an agent's session sends the run's own at its end).
    pub fn counters(&self) -> Result<KernelCounters, RunError> {
        match self {
            Kernel::Own(o) => Ok(o.probes.counters()?),
            Kernel::Agent(_) => Ok(KernelCounters::default()),
        }
    }

    pub fn taskstats_stats(&self) -> ListenerStats {
        match self {
            Kernel::Own(o) => o.taskstats.as_ref().map(|l| l.stats()).unwrap_or_default(),
            Kernel::Agent(a) => a.taskstats_stats(),
        }
    }

    /// Why there are no taskstats records (None: they come).
    pub fn taskstats_unavailable(&self) -> Option<String> {
        match self {
            Kernel::Own(o) => o.taskstats.as_ref().err().cloned(),
            Kernel::Agent(a) if !a.welcome.taskstats_error.is_empty() => {
                Some(String::from_utf8_lossy(&a.welcome.taskstats_error).into_owned())
            }
            Kernel::Agent(_) => None,
        }
    }

    pub fn own_cost(&self) -> OwnCost {
        match self {
            Kernel::Own(o) => OwnCost::measure(&o.probes),
            Kernel::Agent(a) => OwnCost {
                load_us: (a.ready_ms * 1e3) as u64,
                ..OwnCost::measure_process()
            },
        }
    }

    /// The program the held child runs to tell its kernel pid (programs loaded here only).
    pub fn own_pid_program(&self) -> Option<std::os::fd::RawFd> {
        match self {
            Kernel::Own(o) => o.probes.own_pid_program(),
            Kernel::Agent(_) => None,
        }
    }

    /// Has the kernel track the held child; returns its kernel pid.
    pub fn track_root(&mut self, held: &launch::Held) -> anyhow::Result<LearnedPid> {
        match self {
            Kernel::Own(o) => {
                let r = super::session::root_kernel_pid(&o.probes, held)?;
                o.probes.track(r.kernel_pid)?;
                Ok(r)
            }
            Kernel::Agent(a) => {
                let pidfd = pidfd_open(held.pid)?;
                let (kernel_pid, level) = a.track(pidfd.as_fd())?;
                Ok(LearnedPid { kernel_pid, level })
            }
        }
    }

    /// Attaches to running processes (`trace -p`), through the agent or here.
    pub fn attach(&mut self, pids: &[u32]) -> Result<crate::run::attach::Attached, RunError> {
        let other = |e: anyhow::Error| RunError::Other(e);
        match self {
            Kernel::Own(o) => {
                crate::run::attach::attach(&mut o.probes, pids, 0).map_err(|e| other(e.into()))
            }
            Kernel::Agent(a) => {
                let (tracked, attach_ns, memory_followed) =
                    a.attach(pids).map_err(|e| other(e.into()))?;
                // What the report shows of each process is read here, as the client sees it
                // (its own processes); the agent only made the kernel follow them.
                let caller = crate::run::attach::caller();
                let mut targets = Vec::new();
                let mut skipped = Vec::new();
                for pid in tracked {
                    match crate::run::attach::Target::hold(pid, caller) {
                        Ok(t) => targets.push(t),
                        Err(e) => skipped.push((pid, e)),
                    }
                }
                if targets.first().map(|t| t.pid) != pids.first().copied() {
                    return Err(other(anyhow::anyhow!(
                        "process {} ended while it was being attached to",
                        pids.first().copied().unwrap_or(0)
                    )));
                }
                Ok(crate::run::attach::Attached {
                    targets,
                    skipped,
                    attach_ns,
                    memory_followed,
                })
            }
        }
    }

    pub fn io(&mut self, sigfd: std::os::fd::RawFd) -> Io<'_> {
        match self {
            Kernel::Own(o) => Io {
                ring: &mut o.ring,
                sigfd,
                logger: o.logger.as_mut(),
                taskstats: o.taskstats.as_mut().ok(),
            },
            Kernel::Agent(a) => Io {
                ring: &mut **a,
                sigfd,
                logger: None,
                taskstats: None,
            },
        }
    }

    /// The run's end: its counters since `baseline`, the tree-wide RSS, and the followed mms
    /// when processes still run. An agent untracks the run's processes here.
    pub fn end_run(&mut self, baseline: &KernelCounters, live: bool) -> EndFigures {
        match self {
            Kernel::Own(o) => EndFigures {
                counters: o
                    .probes
                    .counters()
                    .map(|c| c.since(baseline))
                    .unwrap_or_else(|e| {
                        log::warn!("cannot read the kernel counters: {e}");
                        KernelCounters::default()
                    }),
                tree_rss: o.probes.tree_rss().ok(),
                mms: match live {
                    true => o.probes.followed_mms().map_err(|e| e.to_string()),
                    false => Ok(Vec::new()),
                },
            },
            Kernel::Agent(a) => {
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
                }
            }
        }
    }

    /// Stops tracing every process of the session; returns how many were still tracked.
    pub fn untrack_all(&mut self) -> Result<usize, crate::kernel::loader::LoadError> {
        match self {
            Kernel::Own(o) => o.probes.untrack_all(),
            // Done by the agent when the run finished.
            Kernel::Agent(_) => Ok(0),
        }
    }

    /// Why the agent went away during the run, if it did.
    pub fn agent_gone(&self) -> Option<String> {
        match self {
            Kernel::Agent(a) => a.gone().map(ToString::to_string),
            Kernel::Own(_) => None,
        }
    }
}

/// A pidfd for our child `pid` (ours and unreaped: the pid cannot have been reused).
fn pidfd_open(pid: libc::pid_t) -> std::io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
