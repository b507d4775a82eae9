//! The clocks tests and workloads read, one way: libc's `clock_gettime` (the vDSO), whose text
//! the workloads' measured code has already run. A clock read there must fault in nothing new:
//! read through rustix instead, peak-sleep's peak came just after the read that said what it
//! held, in every run.

/// A clock to read.
#[derive(Clone, Copy, Debug)]
pub enum ClockId {
    Realtime,
    Monotonic,
    ProcessCPUTime,
    ThreadCPUTime,
}

/// `id` now, in ns.
pub fn clock_ns(id: ClockId) -> i64 {
    let id = match id {
        ClockId::Realtime => libc::CLOCK_REALTIME,
        ClockId::Monotonic => libc::CLOCK_MONOTONIC,
        ClockId::ProcessCPUTime => libc::CLOCK_PROCESS_CPUTIME_ID,
        ClockId::ThreadCPUTime => libc::CLOCK_THREAD_CPUTIME_ID,
    };
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; async-signal-safe.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// CLOCK_MONOTONIC now, in ns: one clock for every process of the machine.
pub fn monotonic_ns() -> i64 {
    clock_ns(ClockId::Monotonic)
}

/// CLOCK_REALTIME now, in ns since the epoch (the report's `start_unix_ns` scale).
pub fn unix_ns() -> i64 {
    clock_ns(ClockId::Realtime)
}
