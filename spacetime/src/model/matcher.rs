//! The one taskstats matcher of `trace` and `watch`: every exit the BPF programs report
//! should have a taskstats record, and the other way round. Each side's ends carry a payload
//! (`watch`: nothing; `trace`: the process and the kept record, for per-process sums).
//!
//! A process's end has a taskstats "pid" record for its last thread, flagged `AGROUP`
//! (taskstats version 12+). It is matched to the BPF exit record of the same thread id:
//! taskstats has no timestamps of its own clock, but its elapsed time (`ac_etime`, µs since the
//! thread started, CLOCK_MONOTONIC like the records) is the BPF record's run time when the
//! last thread is the group leader, and its start in wall-clock seconds (`ac_btime64`) is the
//! start to within a second. A pid can come back within seconds (pid_max 32768 cycles in 3 s
//! at 12 000 forks/s, and a pid held by a long-lived process is reused as soon as it is
//! freed), so several ends may wait under one thread id: the closest fit wins. Records left
//! unmatched for a few seconds count as `bpf_only` / `taskstats_only`.
//!
//! `do_exit` fills the taskstats record (`taskstats_exit`) before the tracepoint fires, and
//! before 6.16 the address space is torn down between the two (`exit_mm`; Linux 6.16's
//! "exit: move trace_sched_process_exit() earlier in do_exit()" moved the tracepoint up). So
//! the BPF end is never earlier than the taskstats one, and may be later by however long a
//! big address space takes to free: seconds for a large process on a slow or starved
//! machine. The two starts are compared (they do not move with the teardown), and the BPF
//! elapsed time may exceed taskstats' by up to [`TEARDOWN_US`].
//!
//! When threads exit together the two sides can name different last threads (taskstats sets
//! `AGROUP` when the thread list looks empty, the kernel's `group_dead` comes from a counter),
//! so thread ends are kept briefly too: a process end may match the other side's thread end.
//! Unmatched thread ends are not gaps.

//!
//! Unmatched ends wait [`PATIENCE`] (`watch` expires them as it goes; `trace` keeps them all
//! until its end).

use std::time::{Duration, Instant};

use crate::kernel::taskstats::{flags, RecordKind, TaskstatsRecord};
use rustc_hash::FxHashMap;

/// How far the two starts (or, without an elapsed time, the two ends less the teardown) may
/// be apart: btime has a resolution of one second and is rounded down, etime is truncated,
/// and the wall clock may have been slewed between the two readings.
const WINDOW_US: i64 = 2_500_000;
/// How much earlier than taskstats' the BPF elapsed time may be: never by the kernel's order
/// (see the module's note); kept as slack against a clock's granularity.
const ETIME_WINDOW_US: i64 = 1_000_000;
/// How much later than taskstats' the BPF end may come: the teardown of the address space
/// between the two before 6.16, which no kernel bounds; 30 s frees terabytes on a slow machine.
const TEARDOWN_US: i64 = 30_000_000;
/// How long a record waits for its counterpart.
pub const PATIENCE: Duration = Duration::from_secs(3);
/// First taskstats version with `AGROUP` (the end of a thread group).
const AGROUP_VERSION: u16 = 12;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CoverageStats {
    pub matched: u64,
    pub bpf_only: u64,
    pub taskstats_only: u64,
    /// Taskstats records that end a thread, not a process.
    pub thread_records: u64,
}

/// When a thread ended, as one side saw it.
#[derive(Debug, Clone, Copy)]
pub struct End {
    /// Wall-clock exit time, µs.
    pub wall_us: i64,
    /// Time since the thread started, µs, when known.
    pub etime_us: Option<i64>,
    pub at: Instant,
}

/// A BPF exit record's end.
#[derive(Debug, Clone, Copy)]
pub struct BpfEnd(pub End);

/// A taskstats record's end.
#[derive(Debug, Clone, Copy)]
pub struct TsEnd(pub End);

impl BpfEnd {
    /// `tid` ended at `ts_ns` (CLOCK_MONOTONIC) in a process whose leader started at
    /// `leader_start_ns`; the elapsed time is known when the leader ended.
    pub fn of_exit(
        tgid: u32,
        tid: u32,
        leader_start_ns: u64,
        ts_ns: u64,
        wall_offset_ns: i64,
        now: Instant,
    ) -> BpfEnd {
        BpfEnd(End {
            wall_us: (ts_ns as i64 + wall_offset_ns) / 1000,
            etime_us: (tid == tgid).then(|| (ts_ns.saturating_sub(leader_start_ns) / 1000) as i64),
            at: now,
        })
    }

    /// How well this end and a taskstats end fit (lower is better); `None` when they cannot
    /// be the same thread's.
    fn fit(&self, t: &TsEnd) -> Option<i64> {
        let (b, t) = (&self.0, &t.0);
        let late = |d: i64, slack: i64| (-slack..=TEARDOWN_US + slack).contains(&d);
        match (b.etime_us, t.etime_us) {
            (Some(be), Some(te)) => {
                let starts = ((b.wall_us - be) - (t.wall_us - te)).abs();
                let d = be - te;
                (starts <= WINDOW_US && late(d, ETIME_WINDOW_US)).then_some(d.abs())
            }
            _ => {
                let d = b.wall_us - t.wall_us;
                late(d, WINDOW_US).then_some(d.abs())
            }
        }
    }
}

impl TsEnd {
    /// A pid record's end: its start in wall-clock seconds plus its elapsed time.
    pub fn of_record(r: &TaskstatsRecord, now: Instant) -> TsEnd {
        let btime = r.ac_btime64.unwrap_or(r.ac_btime as u64) as i64;
        let etime = r.ac_etime_us as i64;
        TsEnd(End {
            wall_us: btime * 1_000_000 + etime,
            etime_us: Some(etime),
            at: now,
        })
    }
}

/// Either side's end.
trait Ended {
    fn end(&self) -> &End;
}

/// An end that waits for one of the other side: how well `other` fits it.
trait Fits<O> {
    fn fits(&self, other: &O) -> Option<i64>;
}

impl Ended for BpfEnd {
    fn end(&self) -> &End {
        &self.0
    }
}

impl Ended for TsEnd {
    fn end(&self) -> &End {
        &self.0
    }
}

impl Fits<TsEnd> for BpfEnd {
    fn fits(&self, t: &TsEnd) -> Option<i64> {
        self.fit(t)
    }
}

impl Fits<BpfEnd> for TsEnd {
    fn fits(&self, b: &BpfEnd) -> Option<i64> {
        b.fit(self)
    }
}

/// Ends waiting for their counterpart, by thread id; a second end under the same id (the pid
/// came back) waits in `more`.
#[derive(Debug)]
struct Pending<E, T> {
    first: FxHashMap<u32, (E, T)>,
    more: Vec<(u32, E, T)>,
}

impl<E, T> Default for Pending<E, T> {
    fn default() -> Self {
        Pending {
            first: FxHashMap::default(),
            more: Vec::new(),
        }
    }
}

impl<E, T> Pending<E, T> {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.first.len() + self.more.len()
    }

    fn insert(&mut self, tid: u32, e: E, t: T) {
        if let Some((old, ot)) = self.first.insert(tid, (e, t)) {
            self.more.push((tid, old, ot));
        }
    }

    /// Removes the end of `tid` that fits `e` best, and returns its payload.
    fn take<O>(&mut self, tid: u32, e: &O) -> Option<T>
    where
        E: Fits<O>,
    {
        let in_first = self.first.get(&tid).and_then(|(f, _)| f.fits(e));
        let in_more = self
            .more
            .iter()
            .enumerate()
            .filter(|(_, (t, _, _))| *t == tid)
            .filter_map(|(i, (_, m, _))| m.fits(e).map(|d| (d, i)))
            .min();
        let from_more = match (in_first, in_more) {
            (_, None) => None,
            (None, Some((_, i))) => Some(i),
            (Some(f), Some((m, i))) => (m < f).then_some(i),
        };
        if let Some(i) = from_more {
            return Some(self.more.swap_remove(i).2);
        }
        in_first?;
        let (_, t) = self.first.remove(&tid)?;
        if let Some(i) = self.more.iter().position(|(t, _, _)| *t == tid) {
            let (_, m, mt) = self.more.swap_remove(i);
            self.first.insert(tid, (m, mt));
        }
        Some(t)
    }

    /// Drops the ends that waited too long (all with `flush_all`) and returns their payloads.
    fn expire(&mut self, now: Instant, flush_all: bool, what: &str) -> Vec<T>
    where
        E: Ended,
    {
        let old = |e: &E| flush_all || now.duration_since(e.end().at) > PATIENCE;
        let log = |tid: &u32, e: &E| log::debug!("{what}: thread {tid} at {} µs", e.end().wall_us);
        let mut out = Vec::new();
        let keys: Vec<u32> = self
            .first
            .iter()
            .filter(|(_, (e, _))| old(e))
            .map(|(k, _)| *k)
            .collect();
        for k in keys {
            if let Some((e, t)) = self.first.remove(&k) {
                log(&k, &e);
                out.push(t);
            }
        }
        let mut i = 0;
        while i < self.more.len() {
            if old(&self.more[i].1) {
                let (tid, e, t) = self.more.swap_remove(i);
                log(&tid, &e);
                out.push(t);
            } else {
                i += 1;
            }
        }
        out
    }
}

/// Process ends (counted when unmatched) and thread ends (not counted: they only resolve
/// cases where the two sides disagree on which thread was the last), on each side. `B` is
/// what a BPF process end carries, `S` what a taskstats record carries; a match returns both.
#[derive(Debug)]
pub struct Matcher<B, S> {
    bpf: Pending<BpfEnd, B>,
    bpf_threads: Pending<BpfEnd, ()>,
    taskstats: Pending<TsEnd, S>,
    ts_threads: Pending<TsEnd, S>,
    pub stats: CoverageStats,
    /// The kernel's taskstats version (0 until a record arrived).
    pub version: u16,
}

impl<B, S> Default for Matcher<B, S> {
    fn default() -> Self {
        Matcher {
            bpf: Pending::default(),
            bpf_threads: Pending::default(),
            taskstats: Pending::default(),
            ts_threads: Pending::default(),
            stats: CoverageStats::default(),
            version: 0,
        }
    }
}

/// `watch`'s matcher: counts only.
pub type Coverage = Matcher<(), ()>;

impl<B, S> Matcher<B, S> {
    /// Records waiting for their counterpart.
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.bpf.len() + self.taskstats.len()
    }

    /// A process ended (BPF): `tid` is its last thread. Returns the pair when its taskstats
    /// record was waiting.
    pub fn bpf_exit(&mut self, tid: u32, e: BpfEnd, b: B) -> Option<(B, S)> {
        if let Some(s) = self
            .taskstats
            .take(tid, &e)
            .or_else(|| self.ts_threads.take(tid, &e))
        {
            self.stats.matched += 1;
            return Some((b, s));
        }
        self.bpf.insert(tid, e, b);
        None
    }

    /// A thread (not the last of its process, for BPF) ended.
    pub fn bpf_thread_exit(&mut self, tid: u32, e: BpfEnd) {
        if self.taskstats.take(tid, &e).is_some() || self.ts_threads.take(tid, &e).is_some() {
            return;
        }
        self.bpf_threads.insert(tid, e, ());
    }

    /// A taskstats record arrived; returns the pair when it ends a BPF process end waiting.
    pub fn taskstats(&mut self, r: &TaskstatsRecord, now: Instant, s: S) -> Option<(B, S)> {
        if r.kind != RecordKind::Pid {
            return None;
        }
        let e = TsEnd::of_record(r, now);
        self.record(r.ac_pid, r.version, r.ac_flag & flags::AGROUP != 0, e, s)
    }

    /// A taskstats pid record: thread `tid`, ending its group or not.
    fn record(&mut self, tid: u32, version: u16, group: bool, e: TsEnd, s: S) -> Option<(B, S)> {
        self.version = self.version.max(version);
        // Before version 12 a process's end cannot be told from a thread's.
        let group = group || version < AGROUP_VERSION;
        if let Some(b) = self.bpf.take(tid, &e) {
            self.stats.matched += 1;
            return Some((b, s));
        }
        if self.bpf_threads.take(tid, &e).is_some() {
            return None;
        }
        if group {
            self.taskstats.insert(tid, e, s);
        } else {
            self.stats.thread_records += 1;
            self.ts_threads.insert(tid, e, s);
        }
        None
    }

    /// A process ended after the watch stopped: its taskstats record, if it already
    /// arrived, is neither a match nor a gap.
    pub fn late_bpf_exit(&mut self, tid: u32, e: BpfEnd) {
        if self.taskstats.take(tid, &e).is_none() {
            self.ts_threads.take(tid, &e);
        }
    }

    /// Lets go of thread ends that waited too long: they only resolve disagreements about a
    /// process's last thread, which are settled within [`PATIENCE`]. For a caller that keeps
    /// process ends to its end (`trace`).
    pub fn expire_threads(&mut self, now: Instant) {
        self.bpf_threads.expire(now, false, "BPF thread end");
        self.ts_threads.expire(now, false, "taskstats thread end");
    }

    /// Counts the records that waited too long (all of them with `flush_all`); returns the
    /// payloads of the taskstats process ends among them.
    pub fn expire(&mut self, now: Instant, flush_all: bool) -> Vec<S> {
        self.stats.bpf_only += self.bpf.expire(now, flush_all, "no taskstats record").len() as u64;
        let ends = self
            .taskstats
            .expire(now, flush_all, "taskstats record without a BPF end");
        // Before version 12 thread ends cannot be told apart: unmatched ones are not counted.
        if self.version >= AGROUP_VERSION {
            self.stats.taskstats_only += ends.len() as u64;
        }
        self.bpf_threads.expire(now, flush_all, "BPF thread end");
        self.ts_threads
            .expire(now, flush_all, "taskstats thread end");
        ends
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BPF end.
    fn end(wall_us: i64, etime_us: Option<i64>, at: Instant) -> BpfEnd {
        BpfEnd(End {
            wall_us,
            etime_us,
            at,
        })
    }

    impl Coverage {
        fn bpf_exit_(&mut self, tid: u32, e: BpfEnd) {
            self.bpf_exit(tid, e, ());
        }
    }

    /// A taskstats record of a thread started at `btime` s that ran `etime_us`.
    fn rec(c: &mut Coverage, pid: u32, btime: i64, etime_us: i64, group: bool, now: Instant) {
        let e = TsEnd(end(btime * 1_000_000 + etime_us, Some(etime_us), now).0);
        c.record(pid, 16, group, e, ());
    }

    #[test]
    fn matches_in_either_order() {
        let now = Instant::now();
        let mut c = Coverage::default();
        // Started at 1000.7 s, ran 0.5 s: btime 1000, etime 500 000 µs.
        c.bpf_exit_(42, end(1_001_200_000, Some(500_000), now));
        rec(&mut c, 42, 1000, 500_000, true, now);
        rec(&mut c, 43, 1000, 10, true, now);
        c.bpf_exit_(43, end(1_000_900_000, None, now));
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
        c.bpf_thread_exit(7, end(5_000_000, None, now));
        c.bpf_exit_(8, end(5_000_000, None, now));
        rec(&mut c, 7, 5, 0, true, now);
        rec(&mut c, 8, 5, 0, false, now);
        c.expire(now, true);
        assert_eq!(
            (c.stats.matched, c.stats.bpf_only, c.stats.taskstats_only),
            (1, 0, 0)
        );
    }

    /// A pid held by a long process comes back at once: both ends wait under one id, and
    /// each taskstats record finds its own by elapsed time, whatever the order.
    #[test]
    fn a_reused_pid_pairs_by_elapsed_time() {
        let now = Instant::now();
        let mut c = Coverage::default();
        // `sleep 6` ends at 973.640 s, its pid is reused by a 27 µs child ending at 974.117 s.
        c.bpf_exit_(5266, end(973_640_162, Some(6_002_078), now));
        c.bpf_exit_(5266, end(974_117_151, Some(27), now));
        rec(&mut c, 5266, 967, 6_002_078, true, now);
        rec(&mut c, 5266, 974, 27, true, now);
        c.expire(now, true);
        assert_eq!(
            (c.stats.matched, c.stats.bpf_only, c.stats.taskstats_only),
            (2, 0, 0)
        );
    }

    /// Before 6.16 a big process's address space is freed between its taskstats record and
    /// its exit tracepoint: the BPF end comes seconds later on a slow machine, and still
    /// pairs, beside a pid reused at once by a short process.
    #[test]
    fn a_long_teardown_still_pairs() {
        let now = Instant::now();
        let mut c = Coverage::default();
        // Started at 100.4 s; taskstats filled at 101.9 s (etime 1.5 s), the tracepoint
        // fired 4 s later; the pid came back at 106.0 s for 1 ms.
        rec(&mut c, 9, 100, 1_500_000, true, now);
        c.bpf_exit_(9, end(105_900_000, Some(5_500_000), now));
        rec(&mut c, 9, 106, 1_000, true, now);
        c.bpf_exit_(9, end(106_001_000, Some(1_000), now));
        c.expire(now, true);
        assert_eq!(
            (c.stats.matched, c.stats.bpf_only, c.stats.taskstats_only),
            (2, 0, 0)
        );
    }

    /// The taskstats record is filled before the tracepoint fires: a BPF end well before it,
    /// or one that started elsewhere, is another process's.
    #[test]
    fn ends_in_the_wrong_order_or_of_other_starts_do_not_pair() {
        let now = Instant::now();
        let mut c = Coverage::default();
        rec(&mut c, 3, 100, 5_000_000, true, now);
        c.bpf_exit_(3, end(102_000_000, Some(2_000_000), now));
        rec(&mut c, 4, 100, 1_000_000, true, now);
        c.bpf_exit_(4, end(111_000_000, Some(6_000_000), now));
        c.expire(now, true);
        assert_eq!(
            (c.stats.matched, c.stats.bpf_only, c.stats.taskstats_only),
            (0, 2, 2)
        );
    }

    #[test]
    fn leftovers_expire() {
        let now = Instant::now();
        let mut c = Coverage::default();
        c.bpf_exit_(1, end(5_000_000, None, now));
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
