//! Cross-check of every traced exit against the kernel's taskstats exit records, and the
//! per-process taskstats sums.
//!
//! The kernel sends a taskstats record for every exiting task. Each process that BPF saw exit
//! is paired with the record of its group's last thread by the one streaming matcher
//! ([`crate::model::matcher`]: by thread id, exit time and elapsed time, closest fit), fed as
//! the exits are drained and the records read, so a reused pid never matches the wrong
//! process. The report then says how many exits both sides saw, how many only one did, and how
//! far the two peak figures are apart. On top of the pairs, per-thread records are summed into
//! per-process CPU, fault, context-switch, I/O and delay figures.

mod packed;
mod sums;

pub use sums::ProcessTaskstats;

use std::{collections::HashMap, time::Instant};

use serde::Serialize;
use spacetime_common::{flags, ExitEvent};

use crate::{
    kernel::taskstats::{flags as ac_flags, RecordKind, TaskstatsRecord, ThreadGroups},
    model::{
        matcher::{BpfEnd, Matcher},
        tree::{Key, Process, Tree},
    },
};
use rustc_hash::FxHashSet;

/// How the traced exits and the taskstats records compare.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Coverage {
    /// Exits seen by both.
    pub matched: u64,
    /// Exits BPF saw that taskstats did not confirm.
    pub bpf_only: u64,
    /// Group exits of traced processes that taskstats reported and BPF did not.
    pub taskstats_only: u64,
    /// Times the kernel dropped taskstats records (socket buffer full).
    pub enobufs: u64,
    /// Records that could not be parsed.
    pub parse_errors: u64,
    /// Largest |peak − taskstats hiwater_rss| over matched exits, both computed the kernel's
    /// way (from the RSS counters' shared parts), KiB.
    pub max_peak_diff_kib: u64,
    /// Largest |exact peak − taskstats hiwater_rss|, KiB: how much the kernel's own figure
    /// lags the exact one.
    pub max_exact_diff_kib: u64,
}

/// What the cross-check needs of one record: 16 bytes and its figures packed (~30 bytes)
/// instead of the decoded record's 744, which matters when a trace holds 100 000 of them.
#[derive(Clone, Debug)]
pub struct KeptRecord {
    /// Start, seconds since the epoch (a u32 holds them until 2106: 12 bytes a record).
    pub btime_s: u32,
    pub tgid: u32,
    /// Where its figures are in the collector's packed buffer (low 31 bits), and whether it
    /// is a thread group's record (the top bit).
    at_group: u32,
}

impl KeptRecord {
    const GROUP: u32 = 1 << 31;

    fn new(tgid: u32, group: bool, btime_s: u64, stats_at: usize) -> KeptRecord {
        KeptRecord {
            btime_s: u32::try_from(btime_s).unwrap_or(u32::MAX),
            tgid,
            at_group: stats_at as u32 & !KeptRecord::GROUP
                | if group { KeptRecord::GROUP } else { 0 },
        }
    }

    /// A thread group's record (not one thread's).
    pub fn group(&self) -> bool {
        self.at_group & KeptRecord::GROUP != 0
    }

    fn stats_at(&self) -> u32 {
        self.at_group & !KeptRecord::GROUP
    }
}

/// The records that concern a traced process, kept as they arrive, and the pairs the matcher
/// made of them with the exits.
pub struct Collector {
    records: Vec<KeptRecord>,
    packed: Vec<u8>,
    matcher: Matcher<Key, u32>,
    /// Each process whose end was matched, and the index of its record in `records`, in the
    /// order matched (sorted once, at the cross-check: 8 bytes a process instead of a map's
    /// 33 on a trace's largest structures' peak).
    matched: Vec<Pair>,
    clock: Clock,
    /// Records of a tgid the trace knows set aside by their start: other processes' on the
    /// machine that reused a traced pid.
    other_exits: u64,
    /// The thread group each record is about (before 5.19, from its thread's start).
    groups: ThreadGroups,
}

impl Collector {
    pub fn new(clock: Clock) -> Collector {
        Collector {
            records: Vec::new(),
            packed: Vec::new(),
            matcher: Matcher::default(),
            matched: Vec::new(),
            clock,
            other_exits: 0,
            groups: ThreadGroups::default(),
        }
    }

    /// A traced thread `tid` of `tgid` started (its BPF fork record, always in the ring
    /// before the thread's exit record is sent).
    pub fn thread_started(&mut self, tid: u32, tgid: u32) {
        self.groups.started(tid, tgid);
    }

    /// Keeps the records that can be a traced process's; call after draining the ring buffer
    /// (a process's fork is always in the ring before its exit record is sent).
    pub fn keep(&mut self, tree: &Tree, batch: &mut Vec<TaskstatsRecord>) {
        let now = Instant::now();
        for r in batch.drain(..) {
            if r.kind != RecordKind::Pid {
                continue;
            }
            let tgid = self.groups.of(&r);
            if !tree.knows_tgid(tgid) {
                continue;
            }
            if !started_in_time(tree, tgid, &r, self.clock) {
                self.other_exits += 1;
                continue;
            }
            let i = self.push(tgid, &r);
            if let Some((key, i)) = self.matcher.taskstats(&r, now, i) {
                self.pair(tree, key, i);
            }
        }
        self.matcher.expire_threads(now);
    }

    /// A traced thread or process ended (its BPF exit record, once `tree` applied it).
    pub fn exit(&mut self, x: &ExitEvent, tree: &Tree) {
        let h = &x.hdr;
        let wall_offset_ns = self.clock.realtime_offset_ns as i64;
        let e = BpfEnd::of_exit(
            h.tgid,
            h.pid,
            h.leader_start_ns,
            h.ts_ns,
            wall_offset_ns,
            Instant::now(),
        );
        if h.flags & flags::EXIT_GROUP_DEAD == 0 {
            self.matcher.bpf_thread_exit(h.pid, e);
            return;
        }
        if let Some((key, i)) = self.matcher.bpf_exit(h.pid, e, Key::of(h)) {
            self.pair(tree, key, i);
        }
    }

    /// The process `key` ended and record `i` is its group's: kept by the process's place in
    /// `tree` (a process the tree does not hold has no figures to carry).
    fn pair(&mut self, tree: &Tree, key: Key, record: u32) {
        if let Some(process) = tree.index_of(&key) {
            self.matched.push(Pair {
                process: process as u32,
                record,
            });
        }
    }

    /// Keeps one record; returns its index.
    fn push(&mut self, tgid: u32, r: &TaskstatsRecord) -> u32 {
        let at = packed::pack(&mut self.packed, &ProcessTaskstats::of(r));
        self.records.push(KeptRecord::new(
            tgid,
            r.ac_flag & ac_flags::AGROUP != 0,
            r.ac_btime64.unwrap_or(r.ac_btime as u64),
            at,
        ));
        (self.records.len() - 1) as u32
    }

    /// Records of known tgids set aside as other processes' (see [`started_in_time`]).
    pub fn other_exits(&self) -> u64 {
        self.other_exits
    }

    pub fn records(&self) -> &[KeptRecord] {
        &self.records
    }

    /// The figures of one of [`records`](Collector::records).
    pub fn stats(&self, k: &KeptRecord) -> ProcessTaskstats {
        packed::unpack(&self.packed, k.stats_at() as usize)
    }
}

/// A process whose end was matched (its place in the tree) and the index of its record: 8
/// bytes where its key and the index took 16.
struct Pair {
    process: u32,
    record: u32,
}

/// The matched processes' taskstats sums, indexed like the tree's processes: packed (~30
/// bytes a process instead of a 184-byte struct in a map), found through a 4-byte index.
#[derive(Clone, Debug, Default)]
pub struct PerProcess {
    packed: Vec<u8>,
    /// Per tree process: where its sums start in `packed`, or `NONE`.
    of_process: Vec<u32>,
}

impl PerProcess {
    const NONE: u32 = u32::MAX;

    /// The sums of the tree's `i`th process, when its exit was confirmed.
    pub fn get(&self, i: usize) -> Option<ProcessTaskstats> {
        let at = *self.of_process.get(i)?;
        (at != Self::NONE).then(|| packed::unpack(&self.packed, at as usize))
    }

    /// Sums given process by process, in order: a saved report's, read back.
    pub fn of_sums(sums: impl IntoIterator<Item = Option<ProcessTaskstats>>) -> PerProcess {
        let mut out = PerProcess::default();
        for s in sums {
            let at = s.map_or(Self::NONE, |s| packed::pack(&mut out.packed, &s) as u32);
            out.of_process.push(at);
        }
        out
    }

    /// How many processes have sums.
    pub fn len(&self) -> usize {
        self.of_process.iter().filter(|&&r| r != Self::NONE).count()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Converts CLOCK_MONOTONIC to wall-clock time: taskstats dates tasks in wall-clock seconds.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    /// CLOCK_REALTIME − CLOCK_MONOTONIC, ns.
    pub realtime_offset_ns: i128,
}

impl Clock {
    fn wall_s(&self, monotonic_ns: u64) -> i128 {
        (monotonic_ns as i128 + self.realtime_offset_ns).div_euclid(1_000_000_000)
    }
}

/// How many seconds after the end of its tgid's latest traced process a task may have started
/// and its record still be of use: the matcher pairs ends up to 2.5 s apart, and `btime` is
/// rounded down to a second (so 3 s), as [`belongs`] takes threads up to a second after.
const AFTER_END_S: i128 = 3;

/// Can record `r`, of a tgid the tree knows, be of a traced process (or one of its threads)?
/// When that tgid's latest traced process ended, the task must have started by then (within
/// [`AFTER_END_S`]). Once pids wrap (pid_max is often 32 768) every pid is a tgid the trace
/// has seen, and without this test every exit on the machine was kept until the trace's end
/// (about 100 bytes each, and a linear scan in the matcher's list of a reused pid's ends). A
/// task that started before that latest process is an earlier holder's, its record late:
/// kept, as the filter by tgid alone did.
fn started_in_time(tree: &Tree, tgid: u32, r: &TaskstatsRecord, clock: Clock) -> bool {
    let Some(latest) = tree.latest_with_tgid(tgid) else {
        return true;
    };
    let b = r.ac_btime64.unwrap_or(r.ac_btime as u64) as i128;
    match latest.end_ns.get() {
        Some(end) if b + 1 >= clock.wall_s(latest.start_ns) => b <= clock.wall_s(end) + AFTER_END_S,
        _ => true,
    }
}

/// Does record `r` describe a thread of process `p`? Start within a second of the process's
/// start or later, and not after its end.
fn belongs(r: &KeptRecord, p: &Process, clock: Clock) -> bool {
    let Some(end) = p.end_ns.get() else {
        return false;
    };
    let b = r.btime_s as i128;
    b + 1 >= clock.wall_s(p.start_ns) && b <= clock.wall_s(end) + 1
}

/// The coverage and the per-process sums of `tree`'s exits, from the pairs the collector's
/// matcher made; records still unpaired are let go.
pub fn cross_check(
    tree: &Tree,
    mut collector: Collector,
    page_size: u64,
) -> (Coverage, PerProcess) {
    let clock = collector.clock;
    log::debug!(
        "taskstats: {} records of other processes set aside",
        collector.other_exits()
    );
    let unpaired = collector.matcher.expire(Instant::now(), true);
    // One pair per process: a key matched again keeps its latest record, as a map would.
    let mut matched = std::mem::take(&mut collector.matched);
    let records = collector.records();
    // Record indexes sorted by tgid: a process's records are one range. (A map of one vector
    // per tgid was 5 MB of small allocations at the end of a 100 000-process trace, on top of
    // everything else at its peak.)
    let mut by_tgid: Vec<(u32, u32)> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.tgid, i as u32))
        .collect();
    by_tgid.sort_unstable();
    let mut used = vec![false; records.len()];
    matched.reverse();
    matched.sort_by_key(|p| p.process);
    matched.dedup_by_key(|p| p.process);
    let matched_of = |pi: usize| {
        matched
            .binary_search_by_key(&(pi as u32), |p| p.process)
            .ok()
            .map(|at| matched[at].record)
    };
    for p in &matched {
        used[p.record as usize] = true;
    }
    let mut cov = Coverage::default();
    let mut of_process = vec![PerProcess::NONE; tree.processes().len()];
    // A process with one record has that record's figures as its sums: they are not packed
    // again (a second 4 MB copy at the peak of a 100 000-process trace); only merged sums
    // are, after the collector's own, in its buffer.
    let mut merged_sums = Vec::new();
    for (pi, p) in tree.processes().iter().enumerate() {
        let (Some(key), Some(_)) = (p.key.get(), p.end_ns.get()) else {
            continue;
        };
        let Some(g) = matched_of(pi) else {
            cov.bpf_only += 1;
            continue;
        };
        cov.matched += 1;
        let g = g as usize;
        let mut sum = collector.stats(&records[g]);
        let mut merged = false;
        // The other threads' records: of this process's time, not paired with an end.
        let from = by_tgid.partition_point(|&(t, _)| t < key.tgid);
        for &(_, i) in by_tgid[from..].iter().take_while(|&&(t, _)| t == key.tgid) {
            let i = i as usize;
            if !used[i] && !records[i].group() && belongs(&records[i], p, clock) {
                used[i] = true;
                merged = true;
                sum.merge(&collector.stats(&records[i]));
            }
        }
        let group_stats = collector.stats(&records[g]);
        let ts_kib = group_stats.hiwater_rss_kib;
        sum.hiwater_rss_kib = ts_kib;
        sum.hiwater_vm_kib = group_stats.hiwater_vm_kib;
        if let Some(mem) = p.images.last().and_then(|i| i.mem.end()) {
            let kib = |pages: u64| pages * page_size / 1024;
            cov.max_peak_diff_kib = cov
                .max_peak_diff_kib
                .max(kib(mem.kernel_peak_rss_pages).abs_diff(ts_kib));
            cov.max_exact_diff_kib = cov
                .max_exact_diff_kib
                .max(kib(mem.peak_rss_pages).abs_diff(ts_kib));
        }
        if merged {
            merged_sums.push((pi, sum));
        } else {
            of_process[pi] = records[g].stats_at();
        }
    }
    cov.taskstats_only = missed_exits(tree, records, &unpaired, clock);
    let mut packed = collector.packed;
    for (pi, sum) in &merged_sums {
        of_process[*pi] = packed::pack(&mut packed, sum) as u32;
    }
    packed.shrink_to_fit();
    (cov, PerProcess { packed, of_process })
}

/// Unpaired group records that are traced exits BPF missed: a traced process with that tgid
/// has no exit and started then. Any other is a process that reused the pid (pids wrap: a
/// 100k-process trace reuses each one several times).
fn missed_exits(tree: &Tree, records: &[KeptRecord], unpaired: &[u32], clock: Clock) -> u64 {
    let mut open: HashMap<u32, Vec<u64>> = HashMap::new();
    for p in tree.processes().iter().filter(|p| p.end_ns.is_none()) {
        if let Some(key) = p.key.get() {
            open.entry(key.tgid).or_default().push(p.start_ns);
        }
    }
    let unpaired: FxHashSet<u32> = unpaired.iter().copied().collect();
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            unpaired.contains(&(*i as u32))
                && r.group()
                && open.get(&r.tgid).is_some_and(|starts| {
                    starts
                        .iter()
                        .any(|&s| (r.btime_s as i128) + 1 >= clock.wall_s(s))
                })
        })
        .count() as u64
}

#[cfg(test)]
mod tests;
