//! A process's CPU time as `wait4`/`getrusage` report it.
//!
//! The kernel keeps two measures: tick samples (`utime`, `stime`: HZ granularity, usually 0 for
//! a process that lives under a tick) and the scheduler's precise runtime (`sum_exec_runtime`).
//! What wait4 returns is `cputime_adjust()` (kernel/sched/cputime.c): the precise runtime split
//! in the ratio of the tick samples, never going below the split returned before
//! (`signal->prev_cputime`). The release record ([`ReapEvent`]) carries its inputs.

use spacetime_common::ReapEvent;

/// User and system time, in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Split {
    pub user_ns: u64,
    pub sys_ns: u64,
}

/// `cputime_adjust(curr, prev)` of Linux 5.9 to 6.18: `rtime` split in the ratio `stime` :
/// `utime`, both halves kept monotonic against `prev`.
pub fn cputime_adjust(rtime: u64, utime: u64, stime: u64, prev: Split) -> Split {
    // rtime not past what was already handed out: the previous answer stands.
    if prev.sys_ns.saturating_add(prev.user_ns) >= rtime {
        return prev;
    }
    let mut st = if stime == 0 {
        // No system tick: all of it is user time (the monotonic clamps below still apply).
        0
    } else if utime == 0 {
        rtime
    } else {
        // mul_u64_u64_div_u64: exact on x86-64 (128-bit product, truncating division).
        let scaled = stime as u128 * rtime as u128 / (stime as u128 + utime as u128);
        (scaled.min(rtime as u128)) as u64
    };
    st = st.max(prev.sys_ns);
    let mut ut = rtime - st;
    if ut < prev.user_ns {
        ut = prev.user_ns;
        st = rtime - ut;
    }
    Split {
        user_ns: ut,
        sys_ns: st,
    }
}

/// A precise run time split in the ratio of its tick samples with nothing handed out before:
/// (user, system). For figures summed at exits, where no wait has run yet.
pub fn split_runtime(rtime: u64, utime: u64, stime: u64) -> (u64, u64) {
    let s = cputime_adjust(rtime, utime, stime, Split::default());
    (s.user_ns, s.sys_ns)
}

/// The process's CPU time at its release, as its reaper's wait4 returned it: the same
/// computation on the final figures, starting from what the wait handed out (`prev_cputime`).
/// The two differ only if the child's final schedule folded runtime in after the wait read it
/// (microseconds, while the parent was already reaping).
pub fn at_release(r: &ReapEvent) -> Split {
    let prev = Split {
        user_ns: r.prev_utime_ns,
        sys_ns: r.prev_stime_ns,
    };
    cputime_adjust(r.rtime_ns, r.utime_ns, r.stime_ns, prev)
}

/// When the process's last task left the CPU for good, past its exit at `exit_ns`: the
/// release record's time when it was sent at that final switch (its exit's teardown done,
/// which the CPU time counts), not at the free, a grace period later.
pub fn left_cpu_ns(r: &ReapEvent, exit_ns: u64) -> Option<u64> {
    (r.hdr.flags & spacetime_common::flags::REAP_AT_SWITCH != 0 && r.hdr.ts_ns > exit_ns)
        .then_some(r.hdr.ts_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(user_ns: u64, sys_ns: u64) -> Split {
        Split { user_ns, sys_ns }
    }

    #[test]
    fn no_ticks_is_all_user() {
        assert_eq!(
            cputime_adjust(700_000, 0, 0, Split::default()),
            split(700_000, 0)
        );
    }

    #[test]
    fn only_system_ticks_is_all_system() {
        assert_eq!(
            cputime_adjust(9_000_000, 0, 4_000_000, Split::default()),
            split(0, 9_000_000)
        );
    }

    #[test]
    fn scaled_by_the_tick_ratio_truncating_system() {
        // stime * rtime / (stime + utime) = 4 * 10_000_001 / 12 = 3_333_333.67 → 3_333_333.
        assert_eq!(
            cputime_adjust(10_000_001, 8, 4, Split::default()),
            split(6_666_668, 3_333_333)
        );
    }

    #[test]
    fn previous_answer_stands_when_rtime_did_not_grow() {
        let prev = split(500, 300);
        assert_eq!(cputime_adjust(800, 0, 4, prev), prev);
        assert_eq!(cputime_adjust(700, 4, 4, prev), prev);
    }

    #[test]
    fn halves_never_go_below_the_previous_split() {
        // The ratio says all system, but user time already handed out stays.
        assert_eq!(cputime_adjust(1000, 0, 4, split(600, 100)), split(600, 400));
        // The ratio says all user, but system time already handed out stays.
        assert_eq!(cputime_adjust(1000, 4, 0, split(100, 600)), split(400, 600));
    }

    #[test]
    fn a_reaped_process_keeps_what_the_wait_computed() {
        let r = ReapEvent {
            rtime_ns: 1_500_000,
            prev_utime_ns: 1_200_000,
            prev_stime_ns: 300_000,
            ..ReapEvent::default()
        };
        assert_eq!(at_release(&r), split(1_200_000, 300_000));
        // Autoreaped: nobody asked before, so the computation runs on the final figures.
        let r = ReapEvent {
            rtime_ns: 2_000_000,
            utime_ns: 4_000_000,
            stime_ns: 4_000_000,
            ..ReapEvent::default()
        };
        assert_eq!(at_release(&r), split(1_000_000, 1_000_000));
    }
}
