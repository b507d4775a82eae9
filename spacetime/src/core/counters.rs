//! The kernel side's loss and failure counters as a plain type: the report shows them without
//! knowing the loader that reads them.

/// Loss and failure counters from the kernel side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct KernelCounters {
    /// Records dropped because the ring buffer was full.
    pub ringbuf_lost: u64,
    /// Processes not tracked because the tracking map was full.
    pub track_full: u64,
    /// Kernel reads that failed.
    pub read_failures: u64,
}

impl KernelCounters {
    /// Events that never reached userspace.
    pub fn lost(&self) -> u64 {
        self.ringbuf_lost + self.track_full
    }

    /// What was added since `start` (a run's own counts, from cumulative ones).
    pub fn since(&self, start: &KernelCounters) -> KernelCounters {
        KernelCounters {
            ringbuf_lost: self.ringbuf_lost.saturating_sub(start.ringbuf_lost),
            track_full: self.track_full.saturating_sub(start.track_full),
            read_failures: self.read_failures.saturating_sub(start.read_failures),
        }
    }
}
