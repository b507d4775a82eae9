//! The clocks and machine constants every part reads, in one place. Kernel records are dated
//! by CLOCK_MONOTONIC (`bpf_ktime_get_ns`); /proc dates processes by CLOCK_BOOTTIME (clock
//! ticks); reports and taskstats use CLOCK_REALTIME.

pub use rustix::time::ClockId;

/// `clock`'s time now, in nanoseconds.
pub fn now_ns(clock: ClockId) -> i128 {
    let ts = rustix::time::clock_gettime(clock);
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

/// CLOCK_MONOTONIC now: the kernel records' clock.
pub fn monotonic_ns() -> u64 {
    now_ns(ClockId::Monotonic) as u64
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now: turns a record's time into wall-clock time.
pub fn realtime_offset_ns() -> i64 {
    let mono = now_ns(ClockId::Monotonic);
    (now_ns(ClockId::Realtime) - mono) as i64
}

/// CLOCK_BOOTTIME − CLOCK_MONOTONIC now: the time the machine spent suspended, which /proc's
/// start times (boot clock) include and the records' (monotonic) do not.
pub fn boottime_offset_ns() -> u64 {
    let mono = now_ns(ClockId::Monotonic);
    (now_ns(ClockId::Boottime) - mono).max(0) as u64
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
}
