//! Cross-checking process exits against the kernel's taskstats records: every exit the BPF
//! programs report should have a taskstats record, and the other way round.
//!
//! A process's end has a taskstats "pid" record for its last thread, flagged `AGROUP`
//! (taskstats version 12+). It is matched to the BPF exit record of the same thread id whose
//! exit time is close: taskstats has no monotonic timestamps, only the task's start in
//! wall-clock seconds (`ac_btime64`) and its elapsed µs (`ac_etime`), whose sum is its exit time
//! to about a second. Pids are not reused that fast, so pid + closeness is a match. Records left
//! unmatched for a few seconds count as `bpf_only` / `taskstats_only`.
//!
//! When threads exit together the two sides can name different last threads (taskstats sets
//! `AGROUP` when the thread list looks empty, the kernel's `group_dead` comes from a counter),
//! so thread ends are kept briefly too: a process end may match the other side's thread end.
//! Unmatched thread ends are not gaps.

use std::time::{Duration, Instant};

use super::idhash::IdMap;
use crate::taskstats::{flags, RecordKind, TaskstatsRecord};

/// How far the two exit times may be apart (btime has a resolution of one second and is
/// rounded down, etime is truncated).
const WINDOW_US: i64 = 2_500_000;
/// How long a record waits for its counterpart.
const PATIENCE: Duration = Duration::from_secs(3);
/// First taskstats version with `AGROUP` (the end of a thread group).
const AGROUP_VERSION: u16 = 12;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CoverageStats {
    pub matched: u64,
    pub bpf_only: u64,
    pub taskstats_only: u64,
    /// Taskstats records that end a thread, not a process (ignored).
    pub thread_records: u64,
}

/// (exit wall-clock µs, arrival) by thread id.
type Pending = IdMap<u32, (i64, Instant)>;

/// Removes and reports the entry of `tid` in `map` if its exit time is close to `exit_us`.
fn take(map: &mut Pending, tid: u32, exit_us: i64) -> bool {
    let close = map
        .get(&tid)
        .is_some_and(|&(t, _)| (t - exit_us).abs() <= WINDOW_US);
    if close {
        map.remove(&tid);
    }
    close
}

/// Process ends (counted when unmatched) and thread ends (not counted: they only resolve
/// cases where the two sides disagree on which thread was the last, which happens when
/// threads exit together), on each side.
#[derive(Debug, Default)]
pub struct Coverage {
    bpf: Pending,
    bpf_threads: Pending,
    taskstats: Pending,
    ts_threads: Pending,
    pub stats: CoverageStats,
    /// The kernel's taskstats version (0 until a record arrived).
    pub version: u16,
}

impl Coverage {
    /// Records waiting for their counterpart.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.bpf.len() + self.taskstats.len()
    }

    /// A process ended (BPF): `tid` is its last thread, `exit_us` the wall-clock exit time.
    pub fn bpf_exit(&mut self, tid: u32, exit_us: i64, now: Instant) {
        if take(&mut self.taskstats, tid, exit_us) || take(&mut self.ts_threads, tid, exit_us) {
            self.stats.matched += 1;
            return;
        }
        if self.bpf.insert(tid, (exit_us, now)).is_some() {
            // The same tid ended twice before taskstats answered for the first: unmatched.
            self.stats.bpf_only += 1;
        }
    }

    /// A thread (not the last of its process, for BPF) ended.
    pub fn bpf_thread_exit(&mut self, tid: u32, exit_us: i64, now: Instant) {
        if take(&mut self.taskstats, tid, exit_us) || take(&mut self.ts_threads, tid, exit_us) {
            return;
        }
        self.bpf_threads.insert(tid, (exit_us, now));
    }

    /// A taskstats record arrived.
    pub fn taskstats(&mut self, r: &TaskstatsRecord, now: Instant) {
        if r.kind != RecordKind::Pid {
            return;
        }
        let btime = r.ac_btime64.unwrap_or(r.ac_btime as u64) as i64;
        self.record(
            r.ac_pid,
            r.version,
            r.ac_flag & flags::AGROUP != 0,
            btime * 1_000_000 + r.ac_etime_us as i64,
            now,
        );
    }

    /// A taskstats pid record: thread `tid`, ending its group or not, at about `exit_us`.
    fn record(&mut self, tid: u32, version: u16, group: bool, exit_us: i64, now: Instant) {
        self.version = self.version.max(version);
        // Before version 12 a process's end cannot be told from a thread's.
        let group = group || version < AGROUP_VERSION;
        if take(&mut self.bpf, tid, exit_us) {
            self.stats.matched += 1;
            return;
        }
        if take(&mut self.bpf_threads, tid, exit_us) {
            return;
        }
        if !group {
            self.stats.thread_records += 1;
            self.ts_threads.insert(tid, (exit_us, now));
        } else if self.taskstats.insert(tid, (exit_us, now)).is_some() {
            self.stats.taskstats_only += 1;
        }
    }

    /// A process ended after the watch stopped: its taskstats record, if it already
    /// arrived, is neither a match nor a gap.
    pub fn late_bpf_exit(&mut self, tid: u32, exit_us: i64) {
        if !take(&mut self.taskstats, tid, exit_us) {
            take(&mut self.ts_threads, tid, exit_us);
        }
    }

    /// Counts the records that waited too long (all of them with `flush_all`).
    pub fn expire(&mut self, now: Instant, flush_all: bool) {
        let old = |(_, at): &(i64, Instant)| flush_all || now.duration_since(*at) > PATIENCE;
        let before = self.bpf.len();
        self.bpf.retain(|_, v| !old(v));
        self.stats.bpf_only += (before - self.bpf.len()) as u64;
        let before = self.taskstats.len();
        self.taskstats.retain(|_, v| !old(v));
        // Before version 12 thread ends cannot be told apart: unmatched ones are not counted.
        if self.version >= AGROUP_VERSION {
            self.stats.taskstats_only += (before - self.taskstats.len()) as u64;
        }
        self.bpf_threads.retain(|_, v| !old(v));
        self.ts_threads.retain(|_, v| !old(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(c: &mut Coverage, pid: u32, btime: i64, etime_us: i64, group: bool, now: Instant) {
        c.record(pid, 16, group, btime * 1_000_000 + etime_us, now);
    }

    #[test]
    fn matches_in_either_order() {
        let now = Instant::now();
        let mut c = Coverage::default();
        // Started at 1000.7 s, ran 0.5 s: btime 1000, etime 500 000 µs.
        c.bpf_exit(42, 1_001_200_000, now);
        rec(&mut c, 42, 1000, 500_000, true, now);
        rec(&mut c, 43, 1000, 10, true, now);
        c.bpf_exit(43, 1_000_900_000, now);
        // A thread's end is not a process's.
        rec(&mut c, 44, 1000, 10, false, now);
        assert_eq!(c.stats.matched, 2);
        assert_eq!(c.stats.thread_records, 1);
        assert_eq!(c.pending(), 0);
    }

    /// Threads exiting together: BPF and taskstats may name different last threads.
    #[test]
    fn disagreeing_last_threads_still_match() {
        let now = Instant::now();
        let mut c = Coverage::default();
        // BPF: 7 is a thread end, 8 the process end. Taskstats: 7 got AGROUP, 8 did not.
        c.bpf_thread_exit(7, 5_000_000, now);
        c.bpf_exit(8, 5_000_000, now);
        rec(&mut c, 7, 5, 0, true, now);
        rec(&mut c, 8, 5, 0, false, now);
        c.expire(now, true);
        assert_eq!(
            (c.stats.matched, c.stats.bpf_only, c.stats.taskstats_only),
            (1, 0, 0)
        );
    }

    #[test]
    fn leftovers_expire() {
        let now = Instant::now();
        let mut c = Coverage::default();
        c.bpf_exit(1, 5_000_000, now);
        rec(&mut c, 2, 5, 0, true, now);
        // Same pid, far apart in time: a reused pid, not a match.
        rec(&mut c, 1, 100, 0, true, now);
        c.expire(now, false);
        assert_eq!(c.pending(), 3);
        c.expire(now + PATIENCE + Duration::from_millis(1), false);
        assert_eq!(c.pending(), 0);
        assert_eq!((c.stats.bpf_only, c.stats.taskstats_only), (1, 2));
    }
}
