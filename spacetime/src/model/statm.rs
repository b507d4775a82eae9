//! RSS sampled from `/proc/PID/statm`, where the kernel's rss_stat tracepoint is missing
//! ([`StatmSampler`]): a few µs per read, so every process runs at the minimum interval unless
//! there are very many of them. The budget of sampling CPU is shared among the live
//! processes ([`intervals`]): the cheap ones at the minimum interval, the expensive ones
//! slowed down so the total stays within it. One call does a bounded amount of work; what is
//! left stays due for the next call.

use std::{
    collections::{HashMap, HashSet},
    io,
    time::Instant,
};

use super::proc_read::{parse_statm_resident, ProcReader};
use crate::model::{
    timeline::{Point, Timeline},
    tree::Key,
};

/// The measured cost of reading statm.
pub const STATM_NS: u64 = 4_000;

#[derive(Clone, Copy, Debug)]
pub struct SamplerConfig {
    /// The shortest interval between two samples of one process.
    pub min_interval_ns: u64,
    /// Fraction of one CPU that sampling may use, over all processes.
    pub cpu_budget: f64,
    /// Work done by one call before it returns, leaving the rest due.
    pub max_call_ns: u64,
    /// Check each process's start time before trusting what its pid's files say.
    pub verify_start: bool,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig {
            min_interval_ns: 50_000_000,
            cpu_budget: 0.02,
            max_call_ns: 10_000_000,
            verify_start: true,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Successful reads.
    pub samples: u64,
    /// Time spent reading, over all samples.
    pub read_ns: u64,
    /// The longest single read.
    pub max_read_ns: u64,
    /// Processes found gone (exited, zombie, or pid reused) when read.
    pub vanished: u64,
}

/// Per-process schedule.
#[derive(Debug)]
struct Tracked {
    /// Cost of one read (measured, averaged).
    cost_ns: u64,
    measured: bool,
    last_ns: Option<u64>,
    interval_ns: u64,
    generation: u64,
}

impl Tracked {
    fn due_ns(&self) -> u64 {
        self.last_ns
            .map_or(0, |l| l.saturating_add(self.interval_ns))
    }
}

/// Shares a CPU budget among processes: each gets `max(min, cost / share)`, where the share
/// is the budget left over by the cheaper processes (water-filling), so small processes run
/// at the minimum interval and only the expensive ones slow down.
pub fn intervals(costs_ns: &[u64], min_interval_ns: u64, budget: f64) -> Vec<u64> {
    let mut order: Vec<usize> = (0..costs_ns.len()).collect();
    order.sort_by_key(|&i| costs_ns[i]);
    let mut out = vec![min_interval_ns; costs_ns.len()];
    let mut left = budget.max(1e-6);
    let mut n = costs_ns.len();
    for i in order {
        let share = left / n as f64;
        let cost = costs_ns[i] as f64;
        let t = (cost / share).ceil().max(min_interval_ns as f64);
        out[i] = t.min(u64::MAX as f64 / 2.0) as u64;
        left = (left - cost / t).max(0.0);
        n -= 1;
    }
    out
}

/// The per-process schedule.
#[derive(Debug)]
struct Scheduler {
    cfg: SamplerConfig,
    procs: HashMap<Key, Tracked>,
    /// Found gone, still in the caller's live set.
    gone: HashSet<Key>,
    generation: u64,
    stats: SamplerStats,
}

impl Scheduler {
    fn new(cfg: SamplerConfig) -> Scheduler {
        Scheduler {
            cfg,
            procs: HashMap::new(),
            gone: HashSet::new(),
            generation: 0,
            stats: SamplerStats::default(),
        }
    }

    /// Brings the schedule in line with the live set.
    fn sync(&mut self, live: impl IntoIterator<Item = Key>) {
        self.generation += 1;
        let g = self.generation;
        let mut still_gone = HashSet::new();
        for key in live {
            if self.gone.contains(&key) {
                still_gone.insert(key);
                continue;
            }
            self.procs
                .entry(key)
                .or_insert_with(|| Tracked {
                    cost_ns: STATM_NS,
                    measured: false,
                    last_ns: None,
                    interval_ns: 0,
                    generation: g,
                })
                .generation = g;
        }
        self.gone = still_gone;
        self.procs.retain(|_, t| t.generation == g);
    }

    fn reschedule(&mut self) {
        let keys: Vec<Key> = self.procs.keys().copied().collect();
        let costs: Vec<u64> = keys.iter().map(|k| self.procs[k].cost_ns).collect();
        let iv = intervals(&costs, self.cfg.min_interval_ns, self.cfg.cpu_budget);
        for (k, i) in keys.iter().zip(iv) {
            if let Some(t) = self.procs.get_mut(k) {
                t.interval_ns = i;
            }
        }
    }

    /// Samples what is due with `read`, within the per-call work limit.
    fn run(&mut self, now_ns: u64, mut read: impl FnMut(Key) -> io::Result<Option<u64>>) -> usize {
        self.reschedule();
        let mut due: Vec<(u64, Key)> = self
            .procs
            .iter()
            .filter(|(_, t)| t.due_ns() <= now_ns)
            .map(|(k, t)| (t.due_ns(), *k))
            .collect();
        due.sort_unstable();
        let started = Instant::now();
        let mut n = 0;
        for (_, key) in due {
            if started.elapsed().as_nanos() as u64 >= self.cfg.max_call_ns {
                break;
            }
            let t0 = Instant::now();
            let got = read(key);
            let took = t0.elapsed().as_nanos() as u64;
            match got {
                Ok(Some(_)) => {
                    self.stats.samples += 1;
                    self.stats.read_ns += took;
                    self.stats.max_read_ns = self.stats.max_read_ns.max(took);
                    if let Some(t) = self.procs.get_mut(&key) {
                        t.cost_ns = if t.measured {
                            (3 * t.cost_ns + took) / 4
                        } else {
                            took
                        };
                        t.measured = true;
                        t.last_ns = Some(now_ns);
                    }
                    n += 1;
                }
                Ok(None) | Err(_) => {
                    self.stats.vanished += 1;
                    self.procs.remove(&key);
                    self.gone.insert(key);
                }
            }
        }
        self.reschedule();
        n
    }

    fn next_due(&self) -> Option<u64> {
        self.procs.values().map(Tracked::due_ns).min()
    }
}

/// Samples RSS from statm: the tree-wide series is the sum of the latest samples.
#[derive(Debug)]
pub struct StatmSampler {
    sched: Scheduler,
    reader: ProcReader,
    page: u64,
}

impl StatmSampler {
    pub fn new(cfg: SamplerConfig) -> StatmSampler {
        StatmSampler {
            sched: Scheduler::new(cfg),
            reader: ProcReader::new(cfg.verify_start),
            page: crate::util::clock::page_size(),
        }
    }

    /// Reads the process the kernel numbers `kernel` as `/proc/<proc>` (see
    /// [`crate::model::memory::Memory::proc_by_shown_pids`]).
    pub fn set_proc_pid(&mut self, kernel: u32, proc: u32) {
        self.reader.set_proc_pid(kernel, proc);
    }

    /// Samples the due processes' RSS into `out` (which sums them when its source is statm).
    pub fn sample_due(
        &mut self,
        now_ns: u64,
        live: impl IntoIterator<Item = Key>,
        out: &mut Timeline,
    ) -> usize {
        self.sched.sync(live);
        let (reader, page) = (&mut self.reader, self.page);
        let mut read = |key: Key| -> io::Result<Option<u64>> {
            if !reader.read(key, c"statm")? {
                return Ok(None);
            }
            let Some(pages) = parse_statm_resident(&reader.buf) else {
                return Ok(None);
            };
            out.record_rss(key, Point::new(now_ns, pages * page));
            Ok(Some(pages * page))
        };
        self.sched.run(now_ns, &mut read)
    }

    pub fn next_due(&self) -> Option<u64> {
        self.sched.next_due()
    }

    pub fn stats(&self) -> SamplerStats {
        self.sched.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_is_shared_and_small_processes_stay_fast() {
        let min = 50_000_000;
        // 10 small processes (10 MiB: 70 µs) and one of 4 GiB (28 ms).
        let mut costs = vec![70_000u64; 10];
        costs.push(28_000_000);
        let iv = intervals(&costs, min, 0.02);
        let used = |costs: &[u64], iv: &[u64]| -> f64 {
            costs
                .iter()
                .zip(iv)
                .map(|(&c, &t)| c as f64 / t as f64)
                .sum()
        };
        assert!(used(&costs, &iv) <= 0.0201, "{}", used(&costs, &iv));
        assert!(
            iv[..10].iter().all(|&t| t == min),
            "small ones at the minimum"
        );
        // The big one gets what the small ones leave: 2 % − 10 × 70 µs / 50 ms = 0.6 %.
        assert!(
            (4_600_000_000..4_700_000_000).contains(&iv[10]),
            "{}",
            iv[10]
        );
        // 1000 small ones alone would need 140 %: they slow down evenly to fit.
        let many = vec![70_000u64; 1000];
        let iv = intervals(&many, min, 0.02);
        assert!(
            iv.iter().all(|&t| t.abs_diff(3_500_000_000) <= 1),
            "{:?}",
            &iv[..3]
        );
        assert!(used(&many, &iv) <= 0.0201);
        assert_eq!(intervals(&[7_000_000], min, 0.02), [350_000_000]);
        assert_eq!(intervals(&[], min, 0.02), Vec::<u64>::new());
    }
}
