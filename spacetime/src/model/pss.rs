//! Sampling PSS from `/proc/PID/smaps_rollup`, in rounds: every live process of the tree is
//! read in one go, so the tree-wide sum is made of reads taken together (see
//! [`super::pss_sum`], which follows the exact RSS between rounds).
//!
//! The kernel computes PSS only by walking the page tables under the target's mmap lock:
//! reading smaps_rollup costs about 7 ms per GiB of 4 KiB pages. Rounds are paid from a budget
//! of sampling CPU (2 % of one CPU by default, the first 5 ms of it at once): one is due by the clock every
//! `max(min interval, round cost / budget)`, and earlier, as far as the unspent budget pays
//! for it, when the tree's exact RSS grew past the last round's by 1/8 (the moments a new
//! maximum is near) or when too much of the estimate is backed by no read (forks, new images);
//! never while a round that cost more than it was priced is not paid back.

use std::{io, time::Instant};

use super::{
    proc_read::{parse_smaps_rollup, parse_statm_resident, parse_statm_size, ProcReader, Usage},
    timeline::Timeline,
};
use crate::model::tree::Key;
use crate::util::clock::thread_cpu_ns;
use rustc_hash::{FxHashMap, FxHashSet};

/// The share of one CPU the rounds may use unless told otherwise (`trace --pss-budget`).
pub const DEFAULT_CPU_BUDGET: f64 = 0.02;
/// The measured cost of reading smaps_rollup: nanoseconds per KiB of RSS (≈ 7 ms per GiB).
pub const SMAPS_NS_PER_KIB: u64 = 7;
/// What a read costs besides the page walk: opening the files, checking the start time.
pub const READ_BASE_NS: u64 = 20_000;
/// Growth of the tree's exact RSS since the last round that makes a round due early: 1/8
/// of it, and at least [`GROWTH_MIN_BYTES`].
pub const GROWTH_SHIFT: u32 = 3;
pub const GROWTH_MIN_BYTES: u64 = 4 << 20;
/// An uncertain part above 1/40 of the estimate (and above [`UNCERTAIN_MIN_BYTES`]) makes a
/// round due early: the maximum is trusted up to 1/20.
pub const UNCERTAIN_DIV: u64 = 40;
pub const UNCERTAIN_MIN_BYTES: u64 = 1 << 20;
/// Unspent budget kept for early rounds, at most this much time's worth.
const CREDIT_WINDOW_NS: f64 = 10e9;
/// Reading a run may spend at once from its start, before the budget has earned it: a
/// process that reaches its peak within its first 100-200 ms (a JVM pretouching its heap)
/// is read while it grows, not only after it (at 2 %, a 2 ms read is earned in 100 ms).
const FIRST_CREDIT_NS: f64 = 5e6;

#[derive(Clone, Copy, Debug)]
pub struct PssConfig {
    /// The shortest interval between two rounds.
    pub min_interval_ns: u64,
    /// Fraction of one CPU that sampling may use.
    pub cpu_budget: f64,
    /// Check each process's start time before trusting what its pid's files say.
    pub verify_start: bool,
    /// The kernel follows the exact RSS: its growth makes a round due early.
    pub follow_rss: bool,
}

impl Default for PssConfig {
    fn default() -> PssConfig {
        PssConfig {
            min_interval_ns: 50_000_000,
            cpu_budget: DEFAULT_CPU_BUDGET,
            verify_start: true,
            follow_rss: false,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PssStats {
    /// Processes read.
    pub samples: u64,
    pub rounds: u64,
    /// Rounds taken before the clock's: growth, or an uncertain estimate.
    pub early_rounds: u64,
    /// CPU time spent reading, over all rounds; the costliest round's; the longest round, in
    /// wall time (the event loop waits that long).
    pub read_ns: u64,
    pub max_round_read_ns: u64,
    pub max_round_ns: u64,
    /// Processes found gone (exited, zombie, or pid reused) when read.
    pub vanished: u64,
    /// Reads that failed otherwise: the process's part of the sum became uncertain.
    pub failed: u64,
    /// Of `vanished`, processes read in a round whose mm was gone by its end.
    pub left_in_round: u64,
}

/// What the tree looks like when deciding on a round.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TreeNow {
    /// The exact tree-wide RSS.
    pub rss_bytes: u64,
    /// The PSS estimate and what of it no read backs.
    pub estimate_bytes: u64,
    pub uncertain_bytes: u64,
}

/// When rounds are due: the clock, the budget, and what makes one due early. No I/O and no
/// clock of its own, so every decision can be replayed.
#[derive(Debug)]
struct Policy {
    cfg: PssConfig,
    /// When processes were first there to read, and the last round.
    started: Option<u64>,
    last_round: Option<u64>,
    rss_at_round: u64,
    /// Budget not spent yet (ns of reading), as of `credit_at`.
    credit_ns: f64,
    credit_at: Option<u64>,
}

impl Policy {
    fn new(cfg: PssConfig) -> Policy {
        Policy {
            cfg,
            started: None,
            last_round: None,
            rss_at_round: 0,
            credit_ns: FIRST_CREDIT_NS,
            credit_at: None,
        }
    }

    /// The budget earned since the last call, kept up to [`CREDIT_WINDOW_NS`]'s worth.
    fn earn(&mut self, now_ns: u64) {
        let budget = self.cfg.cpu_budget;
        if let Some(at) = self.credit_at {
            let earned = now_ns.saturating_sub(at) as f64 * budget;
            self.credit_ns = (self.credit_ns + earned).min(CREDIT_WINDOW_NS * budget);
        }
        self.credit_at = Some(self.credit_at.map_or(now_ns, |at| at.max(now_ns)));
        self.started.get_or_insert(now_ns);
    }

    /// The clock's next round for a round costing `cost_ns`.
    fn clock_due(&self, cost_ns: u64) -> Option<u64> {
        let interval = (cost_ns as f64 / self.cfg.cpu_budget.max(1e-6))
            .max(self.cfg.min_interval_ns as f64)
            .min(u64::MAX as f64 / 4.0) as u64;
        self.last_round
            .or(self.started)
            .map(|at| at.saturating_add(interval))
    }

    /// Whether the tree calls for a round before the clock's.
    fn early(&self, tree: TreeNow) -> bool {
        let grown = self.cfg.follow_rss
            && self.last_round.is_some()
            && tree.rss_bytes
                >= self.rss_at_round + (self.rss_at_round >> GROWTH_SHIFT).max(GROWTH_MIN_BYTES);
        let uncertain =
            tree.uncertain_bytes > (tree.estimate_bytes / UNCERTAIN_DIV).max(UNCERTAIN_MIN_BYTES);
        grown || uncertain
    }

    /// When the next round is due: the clock's, or earlier once the budget pays for it; never
    /// while the budget is overdrawn. A round costs what it costs, not what it was priced
    /// (a busy CPU, a grown tree): the next waits until the budget has paid it back, so the
    /// reads never spend more than the first credit, the budget since the start, and the
    /// last round.
    fn due(&self, cost_ns: u64, tree: TreeNow) -> Option<u64> {
        let clock = self.clock_due(cost_ns);
        let early = self
            .early(tree)
            .then(|| self.credit_reaches(cost_ns as f64));
        let due = match (clock, early) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        due.map(|at| at.max(self.credit_reaches(0.0)))
    }

    /// When the unspent budget reaches `ns`.
    fn credit_reaches(&self, ns: f64) -> u64 {
        let short = (ns - self.credit_ns).max(0.0);
        let at = self.credit_at.unwrap_or(0);
        at.saturating_add((short / self.cfg.cpu_budget.max(1e-6)).ceil() as u64)
    }

    /// A round began at `now_ns`, took `took_ns`, with the tree's RSS at `rss_bytes`.
    fn ran(&mut self, now_ns: u64, took_ns: u64, rss_bytes: u64) {
        self.last_round = Some(now_ns);
        self.rss_at_round = rss_bytes;
        self.credit_ns -= took_ns as f64;
    }
}

/// Reads the tree's processes in rounds.
#[derive(Debug)]
pub struct PssSampler {
    policy: Policy,
    reader: ProcReader,
    page: u64,
    /// What reading each process cost (ns, averaged) and per KiB of its RSS then.
    costs: FxHashMap<Key, (u64, u64)>,
    /// Found gone, still in the caller's live set.
    gone: FxHashSet<Key>,
    /// The last round's cost as priced, for [`PssSampler::next_due`].
    last_cost: u64,
    stats: PssStats,
}

impl PssSampler {
    pub fn new(cfg: PssConfig) -> PssSampler {
        PssSampler {
            policy: Policy::new(cfg),
            reader: ProcReader::new(cfg.verify_start),
            page: crate::util::clock::page_size(),
            costs: FxHashMap::default(),
            gone: FxHashSet::default(),
            last_cost: 0,
            stats: PssStats::default(),
        }
    }

    /// Reads the process the kernel numbers `kernel` as `/proc/<proc>` (see
    /// [`crate::model::memory::Memory::proc_by_shown_pids`]).
    pub fn set_proc_pid(&mut self, kernel: u32, proc: u32) {
        self.reader.set_proc_pid(kernel, proc);
    }

    /// Reads one process now: None when it is gone.
    pub fn read(&mut self, key: Key) -> io::Result<Option<Usage>> {
        if !self.reader.read_between_stats(key, c"smaps_rollup")? {
            return Ok(None);
        }
        let faulted = self.reader.minor_faults().map(|n| n * self.page);
        // A fault counts once its page is in place: one in flight per thread as the walk
        // ends may be in the walk and not yet in the count.
        let page = self.page;
        let after = self
            .reader
            .faults_after()
            .map(|(faults, threads)| (faults + threads) * page);
        Ok(parse_smaps_rollup(&self.reader.buf).map(|u| Usage {
            faulted_bytes: faulted,
            read_faulted_bytes: after,
            ..u
        }))
    }

    /// What reading `key` costs now: what its reads cost, and no less than the page walk of
    /// its RSS now (it may have grown a lot since).
    fn cost(&mut self, key: Key, rss_bytes: u64) -> u64 {
        let kib = rss_bytes / 1024;
        let known = match self.costs.get(&key) {
            Some(&(ns, per_kib)) => ns.max(kib * per_kib.max(SMAPS_NS_PER_KIB)),
            None if rss_bytes > 0 => READ_BASE_NS + kib * SMAPS_NS_PER_KIB,
            // Not followed by the kernel: statm says how big it is (a few µs).
            None => {
                let resident = (self.reader.read(key, c"statm").ok() == Some(true))
                    .then(|| parse_statm_resident(&self.reader.buf))
                    .flatten()
                    .unwrap_or(0);
                let cost = READ_BASE_NS + resident * self.page / 1024 * SMAPS_NS_PER_KIB;
                self.costs.insert(key, (cost, 0));
                cost
            }
        };
        known.max(READ_BASE_NS)
    }

    /// Reads every process of `live` in one round if one is due at `now_ns`
    /// (CLOCK_MONOTONIC); returns how many were read.
    pub fn sample_due(
        &mut self,
        now_ns: u64,
        live: impl IntoIterator<Item = Key>,
        out: &mut Timeline,
    ) -> usize {
        let listed: FxHashSet<Key> = live.into_iter().collect();
        // Processes found gone stay so while the caller lists them.
        self.gone.retain(|k| listed.contains(k));
        self.costs.retain(|k, _| listed.contains(k));
        let mut live: Vec<Key> = listed
            .into_iter()
            .filter(|k| !self.gone.contains(k))
            .collect();
        live.sort_unstable();
        if live.is_empty() {
            return 0;
        }
        self.policy.earn(now_ns);
        let cost: u64 = live.iter().map(|&k| self.cost(k, out.rss_now(&k))).sum();
        self.last_cost = cost;
        let tree = out.pss_tree_now();
        if self.policy.due(cost, tree).is_none_or(|d| d > now_ns) {
            return 0;
        }
        let early = self.policy.clock_due(cost).is_none_or(|c| c > now_ns);
        let (started, cpu) = (Instant::now(), self.stats.read_ns);
        let n = self.round(&live, out);
        let took = self.stats.read_ns - cpu;
        self.policy.ran(now_ns, took, tree.rss_bytes);
        self.stats.max_round_read_ns = self.stats.max_round_read_ns.max(took);
        self.stats.rounds += 1;
        self.stats.early_rounds += early as u64;
        let wall = started.elapsed().as_nanos() as u64;
        self.stats.max_round_ns = self.stats.max_round_ns.max(wall);
        n
    }

    /// Reads every process of `live` into `out`; returns how many were read.
    fn round(&mut self, live: &[Key], out: &mut Timeline) -> usize {
        let mut read = Vec::with_capacity(live.len());
        let faults = self.faults_before(live);
        for (&key, (before, stat_ns)) in live.iter().zip(faults) {
            // The budget is CPU: on a busy machine a read waits for the CPU (and for the
            // target's mmap lock) far longer than it works.
            let (cpu, started) = (thread_cpu_ns(), crate::util::clock::monotonic_ns());
            let got = self.read(key);
            // Its `stat` read before the round is part of its price.
            let took = thread_cpu_ns().saturating_sub(cpu) + stat_ns;
            let ts = crate::util::clock::monotonic_ns();
            self.stats.read_ns += took;
            match got {
                Ok(Some(u)) => {
                    // Faults since the round began: see `faults_before`.
                    let u = Usage {
                        faulted_bytes: before,
                        ..u
                    };
                    out.record_pss_read(key, (started, ts), u);
                    let per_kib = match u.rss_bytes >= 16 << 20 {
                        true => took / (u.rss_bytes / 1024),
                        false => 0,
                    };
                    let avg = self.costs.get(&key).map_or(took, |c| (3 * c.0 + took) / 4);
                    self.costs.insert(key, (avg, per_kib));
                    self.stats.samples += 1;
                    read.push(key);
                }
                Ok(None) => self.found_gone(key, out),
                Err(e) => {
                    // Not known gone (EACCES, EIO…): its last read backs nothing now; read
                    // again next round.
                    log::debug!("PSS read of {key:?} failed: {e}");
                    out.pss_read_failed(key, ts);
                    self.stats.failed += 1;
                }
            }
        }
        self.recheck(&read, out);
        out.pss_round_done(crate::util::clock::monotonic_ns());
        read.len()
    }

    /// Each process's minor faults' bytes as the round begins (None: not known). A page one
    /// sharer copies after another sharer's read and before its own is seen by its own read
    /// alone, while the other's share of it grows unseen: the copies that bound what a window
    /// may hold unseen are counted from before the round's first read, not from each read
    /// (a child writing its parent's 160 MiB between their reads left 2.7 MB out).
    /// Returns them with what reading each cost (CPU ns).
    fn faults_before(&mut self, live: &[Key]) -> Vec<(Option<u64>, u64)> {
        live.iter()
            .map(|&key| {
                let cpu = thread_cpu_ns();
                let faults = match self.reader.read_stat(key) {
                    Ok(true) => self.reader.minor_faults().map(|n| n * self.page),
                    _ => None,
                };
                (faults, thread_cpu_ns().saturating_sub(cpu))
            })
            .collect()
    }

    /// A process read early in a round may exit before a process it shared pages with is
    /// read: that read counts the pages as the survivor's alone, beside the share the first
    /// read found (a child's 80 MiB of its parent's 160, then the parent's 160: 240). So every
    /// process read but the last is checked once more at the round's end (statm, a few µs):
    /// one whose mm is gone leaves the round as found gone, the pages it shared uncertain.
    fn recheck(&mut self, read: &[Key], out: &mut Timeline) {
        let Some((_, earlier)) = read.split_last() else {
            return;
        };
        let cpu = thread_cpu_ns();
        for &key in earlier {
            if !self.has_mm(key) {
                self.found_gone(key, out);
                self.stats.left_in_round += 1;
            }
        }
        self.stats.read_ns += thread_cpu_ns().saturating_sub(cpu);
    }

    /// A process found gone: it leaves the sum now and is not read again while listed.
    fn found_gone(&mut self, key: Key, out: &mut Timeline) {
        let faulted = self.final_faults(key);
        out.pss_read_gone(key, faulted);
        self.stats.vanished += 1;
        self.gone.insert(key);
    }

    /// The minor faults' bytes of a process whose mm is gone, read after that was seen (a
    /// zombie's stat still says them): final, no fault can follow. None once it is reaped.
    fn final_faults(&mut self, key: Key) -> Option<u64> {
        match self.reader.read_after_stat(key, c"statm") {
            Ok(true) if parse_statm_size(&self.reader.buf) == Some(0) => {
                self.reader.minor_faults().map(|n| n * self.page)
            }
            _ => None,
        }
    }

    /// Whether the process still has its mm: statm's size is 0 once exit released it (and
    /// the read fails once it is reaped). A read that fails otherwise counts as alive.
    fn has_mm(&mut self, key: Key) -> bool {
        match self.reader.read(key, c"statm") {
            Ok(true) => parse_statm_size(&self.reader.buf) != Some(0),
            Ok(false) => false,
            Err(_) => true,
        }
    }

    /// When the next round is due (CLOCK_MONOTONIC), as of the last call.
    pub fn next_due(&self, out: &Timeline) -> Option<u64> {
        if self.costs.is_empty() {
            return None;
        }
        self.policy.due(self.last_cost, out.pss_tree_now())
    }

    pub fn stats(&self) -> PssStats {
        self.stats
    }

    pub fn cpu_budget(&self) -> f64 {
        self.policy.cfg.cpu_budget
    }
}

#[cfg(test)]
#[path = "pss_tests.rs"]
mod tests;
