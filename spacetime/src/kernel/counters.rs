//! The kernel side's loss and failure counters as a plain type: the report shows them without
//! knowing the loader that reads them.

/// Loss and failure counters from the kernel side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct KernelCounters {
    /// Records dropped because the ring buffer was full.
    pub ringbuf_lost: u64,
    /// Processes not tracked because the tracking map was full.
    pub track_full: u64,
    /// Processes not tracked because their session had reached its process limit (an agent's
    /// sessions; never for a standalone trace).
    pub session_limit: u64,
    /// Kernel reads that failed.
    pub read_failures: u64,
    /// Records the kernel-side filter kept from being sent (see `stat::FILTERED`). Only
    /// `watch` filters: a trace report leaves it out.
    #[serde(skip)]
    pub filtered: u64,
    /// Processes whose final CPU figures could not be awaited (the kernel's map of exited
    /// processes was full): their CPU figures stay the exit-time ones.
    pub reap_full: u64,
    /// Runs of spacetime's programs the kernel skipped because the same program was already
    /// running on that CPU (its `recursion_misses`): events lost without a trace otherwise.
    pub recursion_misses: u64,
    /// Records of the run a `spacetime agent` dropped because this client did not read them
    /// in time (its queue for the client was full): lost, but not in the kernel's ring.
    pub agent_queue_full: u64,
    /// Processes whose end never came because the agent the run went through went away
    /// mid-run (their exit records, and everything after, are lost).
    pub agent_gone: u64,
    /// Stale entries of the tracking map a fork cleared (see `stat::STALE_CLEARED`): not a
    /// loss; the agent logs them.
    #[serde(skip)]
    pub stale_cleared: u64,
}

impl KernelCounters {
    /// Events that never reached userspace.
    pub fn lost(&self) -> u64 {
        self.ringbuf_lost
            + self.track_full
            + self.session_limit
            + self.agent_queue_full
            + self.agent_gone
    }

    /// What was added since `start` (a run's own counts, from cumulative ones).
    pub fn since(&self, start: &KernelCounters) -> KernelCounters {
        KernelCounters {
            ringbuf_lost: self.ringbuf_lost.saturating_sub(start.ringbuf_lost),
            track_full: self.track_full.saturating_sub(start.track_full),
            session_limit: self.session_limit.saturating_sub(start.session_limit),
            read_failures: self.read_failures.saturating_sub(start.read_failures),
            filtered: self.filtered.saturating_sub(start.filtered),
            reap_full: self.reap_full.saturating_sub(start.reap_full),
            recursion_misses: self.recursion_misses.saturating_sub(start.recursion_misses),
            agent_queue_full: self.agent_queue_full.saturating_sub(start.agent_queue_full),
            agent_gone: self.agent_gone.saturating_sub(start.agent_gone),
            stale_cleared: self.stale_cleared.saturating_sub(start.stale_cleared),
        }
    }
}

/// Reads the latest cumulative counters: the programs' maps here, or what an agent last sent.
pub trait CounterSource {
    /// None when they cannot be read now.
    fn current(&self) -> Option<KernelCounters>;
    /// The counters are an agent's (its ring, its queue): loss is not cured by our options.
    fn through_agent(&self) -> bool {
        false
    }
    /// Why the agent went away, once it did: no more counters, nor records, will come.
    fn gone(&self) -> Option<String> {
        None
    }
}

impl CounterSource for std::cell::Cell<KernelCounters> {
    fn current(&self) -> Option<KernelCounters> {
        Some(self.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn processes_refused_by_a_session_limit_are_lost_events() {
        let start = KernelCounters {
            ringbuf_lost: 1,
            track_full: 2,
            session_limit: 3,
            ..KernelCounters::default()
        };
        let end = KernelCounters {
            ringbuf_lost: 1,
            track_full: 2,
            session_limit: 7,
            read_failures: 5,
            ..KernelCounters::default()
        };
        assert_eq!(start.lost(), 6);
        let run = end.since(&start);
        assert_eq!(run.session_limit, 4);
        assert_eq!(run.lost(), 4, "read failures are not lost events: {run:?}");
    }
}
