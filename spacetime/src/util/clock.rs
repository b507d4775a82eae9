//! The clocks and machine constants every part reads, in one place. Kernel records are dated
//! by CLOCK_MONOTONIC (`bpf_ktime_get_ns`); /proc dates processes by CLOCK_BOOTTIME (clock
//! ticks); reports and taskstats use CLOCK_REALTIME.

pub use rustix::time::ClockId;

/// `clock`'s time now, in nanoseconds.
pub fn now_ns(clock: ClockId) -> i128 {
    let ts = rustix::time::clock_gettime(clock);
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// The calling thread's CPU time, ns (CLOCK_THREAD_CPUTIME_ID). The kernel brings the
/// thread's run time up to date before it answers, so what it accounts for the thread later
/// is at least this.
pub fn thread_cpu_ns() -> u64 {
    now_ns(ClockId::ThreadCPUTime) as u64
}

/// CLOCK_MONOTONIC now: the kernel records' clock.
pub fn monotonic_ns() -> u64 {
    now_ns(ClockId::Monotonic) as u64
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now: turns a record's time into wall-clock time.
pub fn realtime_offset_ns() -> i64 {
    offset_from_monotonic(ClockId::Realtime) as i64
}

/// `clock` − CLOCK_MONOTONIC, read between two monotonic reads. A thread preempted between
/// two reads (or a virtual CPU descheduled: milliseconds under an emulator) would be off by
/// the whole pause, so the tightest of a few brackets is taken; one under 20 µs ends the
/// search. /proc's start times are turned into the records' clock and back through this, with
/// a tolerance of 1 ms: a pause between two unbracketed reads once refused a live process.
fn offset_from_monotonic(clock: ClockId) -> i128 {
    const TIGHT_NS: i128 = 20_000;
    let mut best: Option<(i128, i128)> = None;
    for _ in 0..8 {
        let before = now_ns(ClockId::Monotonic);
        let other = now_ns(clock);
        let after = now_ns(ClockId::Monotonic);
        let gap = after - before;
        let offset = other - (before + gap / 2);
        if best.is_none_or(|(g, _)| gap < g) {
            best = Some((gap, offset));
        }
        if gap < TIGHT_NS {
            break;
        }
    }
    best.map_or(0, |(_, offset)| offset)
}

/// CLOCK_BOOTTIME − CLOCK_MONOTONIC now: the time the machine spent suspended, which /proc's
/// start times (boot clock) include and the records' (monotonic) do not.
pub fn boottime_offset_ns() -> u64 {
    offset_from_monotonic(ClockId::Boottime).max(0) as u64
}

/// The page size, in bytes.
pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// Clock ticks per second (USER_HZ), as /proc counts times.
pub fn ticks_per_s() -> u64 {
    match rustix::param::clock_ticks_per_second() {
        0 => 100,
        hz => hz,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_agree_with_each_other() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a);
        // Realtime is after 2020 and boottime is not behind monotonic.
        assert!(a as i64 + realtime_offset_ns() > 1_577_836_800_000_000_000);
        assert!(now_ns(ClockId::Boottime) >= a as i128 + boottime_offset_ns() as i128 - 1_000_000);
        assert!(page_size().is_power_of_two() && page_size() >= 4096);
        assert!(ticks_per_s() >= 100);
    }

    /// Without a suspend in between, the offset is the same at every read, to well within
    /// the 1 ms that /proc start times are matched with.
    #[test]
    fn boottime_offset_is_steady() {
        let offsets: Vec<u64> = (0..2000).map(|_| boottime_offset_ns()).collect();
        let (lo, hi) = (offsets.iter().min(), offsets.iter().max());
        let spread = hi.expect("read") - lo.expect("read");
        assert!(spread < 200_000, "boottime offsets spread over {spread} ns");
    }
}
