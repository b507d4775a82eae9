//! Programs loaded by this process: its ring buffer, its taskstats listener, its counters.

use std::os::fd::RawFd;

use super::{
    discard, Capabilities, EndFigures, HeldChild, Io, KernelSource, Provenance, TaskstatsFeed,
};
use crate::kernel::{
    attach::{self, Attached},
    counters::KernelCounters,
    loader::{KernelLogger, KernelProgramStats, LearnedPid, LoadError, LoadOptions, Probes},
    pidns,
    ring::Ring,
    taskstats::{self, ListenerStats, TaskstatsListener, Unavailable},
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
        bpf_maps_not_inherited();
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

    fn begin(&mut self) -> anyhow::Result<()> {
        self.probes.untrack_all()?;
        self.probes.reset_run_state()?;
        let stale = discard(&mut self.ring);
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

    fn track_root(&mut self, held: HeldChild) -> anyhow::Result<LearnedPid> {
        let r = root_kernel_pid(&self.probes, held)?;
        self.probes.track(r.kernel_pid)?;
        Ok(r)
    }

    fn track(&mut self, pid: u32) -> anyhow::Result<()> {
        Ok(self.probes.track(pid)?)
    }

    fn attach(&mut self, pids: &[u32]) -> anyhow::Result<Attached> {
        Ok(attach::attach(&mut self.probes, pids, 0)?)
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

/// The traced command's kernel pid, which its held child recorded by running `own_pid`.
fn root_kernel_pid(probes: &Probes, held: HeldChild) -> anyhow::Result<LearnedPid> {
    let learned = match held.own_pid_run {
        Some(0) => probes.learned_pid()?,
        Some(errno) => {
            log::debug!(
                "running own_pid: {}",
                std::io::Error::from_raw_os_error(errno)
            );
            None
        }
        None => None,
    };
    match learned {
        Some(l) if l.level > 0 || l.kernel_pid == held.pid as u32 => Ok(l),
        Some(l) => anyhow::bail!(
            "the kernel numbers the traced command {} while fork returned {} in the initial PID namespace",
            l.kernel_pid,
            held.pid
        ),
        // Without the program (a kernel without raw tracepoint test runs), pids are the
        // kernel's only in the initial namespace.
        None if crate::kernel::pidns::in_initial_namespace() => Ok(LearnedPid {
            kernel_pid: held.pid as u32,
            level: 0,
        }),
        None => anyhow::bail!(
            "spacetime runs inside a PID namespace and this kernel did not tell the traced command's kernel pid (BPF_PROG_TEST_RUN of a raw tracepoint program, Linux 5.10+): it cannot be traced"
        ),
    }
}

/// Keeps the mappings of BPF maps (the ring buffers' pages) out of the children spacetime
/// forks. Such a mapping is built page by page (VM_MIXEDMAP), so fork copies each of its
/// page-table entries and the child's exec throws them away again: 2 114 entries for the
/// default 4 MiB ring (mapped twice) and the log ring, on every command started. The held
/// child never touches them. A mapping that refuses the advice is only copied, as before.
fn bpf_maps_not_inherited() {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for line in maps.lines().filter(|l| l.ends_with("anon_inode:bpf-map")) {
        let range = line.split(' ').next().and_then(|r| r.split_once('-'));
        let Some((Ok(start), Ok(end))) =
            range.map(|(a, b)| (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)))
        else {
            continue;
        };
        // SAFETY: the range is one of our own mappings, whole; MADV_DONTFORK changes only
        // what fork does with it, not its contents.
        let advised = unsafe {
            rustix::mm::madvise(
                start as *mut std::ffi::c_void,
                end.saturating_sub(start),
                rustix::mm::Advice::LinuxDontFork,
            )
        };
        if let Err(e) = advised {
            log::debug!("madvise(MADV_DONTFORK) of a BPF map's mapping: {e}");
        }
    }
}
