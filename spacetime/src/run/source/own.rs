//! Programs loaded by this process: its ring buffer, its taskstats listener, its counters.

use std::os::fd::RawFd;

use crate::kernel::ring::Ring;

use super::{Capabilities, EndFigures, KernelSource, Provenance, TaskstatsFeed};
use crate::{
    kernel::{
        counters::KernelCounters,
        loader::{KernelLogger, KernelProgramStats, LearnedPid, LoadError, LoadOptions, Probes},
        pidns,
        taskstats::{self, ListenerStats, TaskstatsListener, Unavailable},
    },
    run::{
        attach::{self, Attached},
        event_loop::{self, Io},
        launch::Held,
        RunError,
    },
};

pub struct OwnSource {
    probes: Probes,
    ring: Ring,
    logger: Option<KernelLogger>,
    /// The listener, or why there is none.
    taskstats: Result<TaskstatsListener, Unavailable>,
    capabilities: Capabilities,
}

impl OwnSource {
    /// Loads and attaches the programs, then opens the taskstats listener (after the
    /// programs: every record it receives has its exit record), with a receive buffer of
    /// `taskstats_buffer` bytes (None: no listener, as `--no-taskstats` asks).
    pub fn open(load: &LoadOptions, taskstats_buffer: Option<usize>) -> anyhow::Result<Self> {
        Self::with(Probes::load(load)?, taskstats_buffer)
    }

    /// Programs already loaded (a watch loads its own with the filter's options).
    pub fn with(mut probes: Probes, taskstats_buffer: Option<usize>) -> anyhow::Result<Self> {
        let taskstats = match taskstats_buffer {
            Some(bytes) => taskstats::open_listener(bytes),
            None => Err(Unavailable::Disabled),
        };
        let capabilities = Capabilities {
            provenance: Provenance::Own,
            rss_tracking: probes.rss_tracking,
            cpu_ticks: probes.cpu_ticking() > 0,
            cpu_at_release: probes.cpu_at_release,
            ring_buffer_bytes: probes.ring_buffer_bytes,
            load_ms: probes.load_ms,
            mechanisms: probes.mechanisms.clone(),
            taskstats: match &taskstats {
                Ok(_) => TaskstatsFeed::Listener,
                Err(why) => TaskstatsFeed::Unavailable(why.clone()),
            },
            own_pid_program: probes.own_pid_program(),
            proc_has_kernel_pids: pidns::proc_has_kernel_pids(&probes),
            sees_only_uid: None,
        };
        let source = OwnSource {
            ring: probes.take_events()?,
            logger: probes.take_logger(),
            probes,
            taskstats,
            capabilities,
        };
        // Every ring is mapped now.
        crate::run::launch::bpf_maps_not_inherited();
        Ok(source)
    }
}

impl KernelSource for OwnSource {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn taskstats_stats(&self) -> ListenerStats {
        self.taskstats
            .as_ref()
            .map(|l| l.stats())
            .unwrap_or_default()
    }

    fn counters(&self) -> Option<KernelCounters> {
        // Programs loaded here serve session 0 alone: its counters are all there is (12
        // map reads instead of every session's 768 per run).
        self.probes
            .counters_of(0)
            .map_err(|e| log::warn!("cannot read the kernel counters: {e}"))
            .ok()
    }

    fn program_stats(&self) -> KernelProgramStats {
        self.probes.program_stats()
    }

    fn begin(&mut self) -> Result<(), RunError> {
        self.probes.untrack_all()?;
        self.probes.reset_run_state()?;
        let stale = event_loop::discard(&mut self.ring);
        let mut batch = Vec::new();
        if let Ok(t) = self.taskstats.as_mut() {
            if let Err(e) = t.drain(&mut batch) {
                log::debug!("taskstats: {e}");
            }
        }
        if stale + batch.len() > 0 {
            log::debug!(
                "{stale} records and {} taskstats records of earlier runs discarded",
                batch.len()
            );
        }
        Ok(())
    }

    fn track_root(&mut self, held: &Held) -> anyhow::Result<LearnedPid> {
        let r = crate::run::session::root_kernel_pid(&self.probes, held)?;
        self.probes.track(r.kernel_pid)?;
        Ok(r)
    }

    fn track(&mut self, pid: u32) -> anyhow::Result<()> {
        Ok(self.probes.track(pid)?)
    }

    fn attach(&mut self, pids: &[u32]) -> Result<Attached, RunError> {
        attach::attach(&mut self.probes, pids, 0).map_err(|e| RunError::Other(e.into()))
    }

    fn io(&mut self, sigfd: RawFd) -> Io<'_> {
        Io {
            ring: &mut self.ring,
            sigfd,
            logger: self.logger.as_mut(),
            taskstats: self.taskstats.as_mut().ok(),
            counters: &self.probes,
        }
    }

    fn end_run(&mut self, baseline: &KernelCounters, live: bool) -> EndFigures {
        // The mms before the tree's sum: a process growing between the two reads raises the
        // tree's peak past its own, never its own past the tree's.
        let mms = match live {
            true => self.probes.followed_mms().map_err(|e| e.to_string()),
            false => Ok(Vec::new()),
        };
        // A process that stopped being followed before the read above wrote its last records
        // (its peak, its exit) before it: they end here. Marked before the tree's sum is
        // read, which then covers every peak they carry.
        let records_end = Some(self.ring.written());
        EndFigures {
            counters: self
                .counters()
                .map(|c| c.since(baseline))
                .unwrap_or_default(),
            tree_rss: self.probes.tree_rss().ok(),
            mms,
            records_end,
        }
    }

    fn untrack_all(&mut self) -> Result<usize, LoadError> {
        self.probes.untrack_all()
    }

    fn gone(&self) -> Option<String> {
        None
    }
}
