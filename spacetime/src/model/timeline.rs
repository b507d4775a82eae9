//! Memory over time: tree-wide and per-process RSS and PSS series.
//!
//! RSS comes from the kernel (rss_stat events, the exact tree-wide peak) or, where that
//! tracepoint is missing, from sampling `/proc/PID/statm` ([`RssSource`]). PSS is read from
//! `/proc/PID/smaps_rollup` in rounds ([`crate::model::pss`]), the tree-wide PSS following the
//! exact RSS between them ([`crate::model::pss_sum`]). Every series is a step function:
//! a point holds until the next one. Consecutive equal values are coalesced, and a series that
//! grows past its limit is compacted keeping each bucket's minimum and maximum, so peaks
//! survive and memory stays bounded.
//!
//! Timestamps are CLOCK_MONOTONIC nanoseconds, like every event; [`Timeline::report`] turns
//! them into nanoseconds since the trace's t0 for the JSON report:
//!
//! ```text
//! "timeline": { "rss_source": "kernel" | "statm", "pss_sampled": true,
//!               "tree_rss": [[t_ns, bytes], ...], "tree_pss": [[t_ns, bytes], ...],
//!               "tree_peak_rss": {"t_ns": N, "bytes": N} | null,
//!               "max_pss": {"t_ns": N, "bytes": N, "unseen_bytes": N,
//!                           "over_rss_bytes": N, "trusted": B} | null,
//!               "pss_sampling": {"samples": N, "rounds": N, "early_rounds": N,
//!                                "read_ns": N, "max_round_read_ns": N,
//!                                "cpu_budget": F} | null,
//!               "processes": [ {"pid": N, "start_ns": N, "rss": [[t_ns, bytes], ...],
//!                               "pss": [[t_ns, bytes], ...], "max_pss_bytes": N | null} ] }
//! ```

use serde::{ser::SerializeSeq, Deserialize, Serialize, Serializer};

pub use super::series::{Point, ProcessSeries, Series};
use super::series::{Procs, PssSeries, Steps};
use super::series_packed::PackedSeries;
use super::{
    proc_read::Usage,
    pss::TreeNow,
    pss_sum::{MaxPss, MaxPssFigure, PssSum},
};
use crate::model::tree::Key;
use rustc_hash::FxHashMap;

/// Where the RSS figures come from; its name in the JSON report (`timeline.rss_source`) and
/// the HTML page's data is serde's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RssSource {
    /// kmem:rss_stat events counted in the kernel: exact (a saved report without a
    /// timeline's is read as such).
    #[default]
    Kernel,
    /// `/proc/PID/statm` sampled: the tracepoint is missing; peaks between samples are missed.
    Statm,
}

/// Limits on the number of points kept.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Points per tree-wide series.
    pub tree_points: usize,
    /// Points per process series (lowered when `total_process_points` is exceeded).
    pub process_points: usize,
    /// Points over all process series.
    pub total_process_points: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            tree_points: 1 << 16,
            process_points: 1 << 12,
            total_process_points: 1 << 21,
        }
    }
}

/// The tree-wide peak is dated when the tree first came within 1/256 (0.4 %) of it: finer
/// than the summary's three digits.
pub const PEAK_REACHED_SHIFT: u32 = 8;

/// Smallest per-process cap the global budget may push the per-process cap down to.
const MIN_PROCESS_POINTS: usize = 16;

/// Tree-wide and per-process memory series.
#[derive(Debug)]
pub struct Timeline {
    pub rss_source: RssSource,
    tree_rss: Series,
    procs: Procs,
    /// Latest statm samples of live processes, and their sum.
    live_rss: FxHashMap<Key, u64>,
    rss_sum: u64,
    /// The exact tree-wide RSS peak, from the kernel.
    tree_peak: Option<Point>,
    /// The tree-wide PSS.
    pss: PssSum,
    limits: Limits,
    process_cap: usize,
    process_points: usize,
    /// What PSS sampling did and cost, when it ran.
    pub pss_sampling: Option<PssSampling>,
    /// CPU over time: the threads' sampled run time.
    pub cpu: crate::model::cpu_ticks::CpuTicks,
}

/// What PSS sampling did and cost: how densely the PSS figures are backed by reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PssSampling {
    /// Processes read, over all rounds.
    pub samples: u64,
    pub rounds: u64,
    /// Rounds taken before the clock's: the exact RSS grew, or too much of the estimate was
    /// backed by no read.
    pub early_rounds: u64,
    /// Time spent reading smaps_rollup: the sampling's CPU; the costliest round's.
    pub read_ns: u64,
    #[serde(default)]
    pub max_round_read_ns: u64,
    /// The fraction of one CPU sampling may use.
    pub cpu_budget: f64,
}

impl Default for Timeline {
    fn default() -> Timeline {
        Timeline::new(RssSource::default())
    }
}

impl Timeline {
    pub fn new(rss_source: RssSource) -> Timeline {
        Timeline::with_limits(rss_source, Limits::default())
    }

    pub fn with_limits(rss_source: RssSource, limits: Limits) -> Timeline {
        Timeline {
            rss_source,
            tree_rss: Series::default(),
            procs: Procs::default(),
            live_rss: FxHashMap::default(),
            rss_sum: 0,
            tree_peak: None,
            pss: PssSum::new(limits.tree_points),
            limits,
            process_cap: limits.process_points,
            process_points: 0,
            pss_sampling: None,
            cpu: Default::default(),
        }
    }

    /// A thread's start, tick or exit, for CPU over time ([`Timeline::cpu`]).
    pub fn observe_cpu(&mut self, ev: &crate::kernel::events::Event) {
        self.cpu.observe(ev, &mut self.procs);
    }

    /// A process's CPU segments (absolute times).
    pub fn cpu_segments(
        &self,
        key: &Key,
    ) -> std::borrow::Cow<'_, [crate::model::cpu_ticks::Segment]> {
        self.procs.cpu(key)
    }

    pub fn tree_rss(&self) -> &Series {
        &self.tree_rss
    }

    /// The tree-wide PSS: the rounds' sums, and the exact RSS between them.
    pub fn tree_pss(&self) -> &Series {
        self.pss.series()
    }

    pub fn process(&self, key: &Key) -> Option<&ProcessSeries> {
        self.procs.get(key)
    }

    pub fn processes(&self) -> impl Iterator<Item = (&Key, &ProcessSeries)> {
        self.procs.iter()
    }

    /// The tree-wide RSS peak: the kernel's exact one when set, else the series' maximum
    /// (statm sampling); dated when the tree first came within [`PEAK_REACHED_SHIFT`] of it.
    /// A tree that reached its size and held it, then faulted in a few pages as it exited
    /// (64 KiB of text at a time), peaked at its exit by those pages: its peak is when it got
    /// there, not the last pages.
    pub fn tree_peak(&self) -> Option<Point> {
        let exact = self.tree_peak.or_else(|| self.tree_rss.max())?;
        let near = exact.bytes - (exact.bytes >> PEAK_REACHED_SHIFT);
        let reached = self
            .tree_rss
            .points()
            .iter()
            .take_while(|p| p.ts_ns <= exact.ts_ns)
            .find(|p| p.bytes >= near)
            .map_or(exact.ts_ns, |p| p.ts_ns);
        Some(Point::new(reached, exact.bytes))
    }

    /// The largest tree-wide PSS, and what it is worth.
    pub fn max_pss(&self) -> MaxPssFigure {
        self.pss.figure()
    }

    /// What deciding on a PSS round looks at.
    pub fn pss_tree_now(&self) -> TreeNow {
        let (estimate_bytes, uncertain_bytes) = self.pss.now();
        TreeNow {
            rss_bytes: self.current_rss(),
            estimate_bytes,
            uncertain_bytes,
        }
    }

    /// A process's RSS now: its last point (0 when it has none).
    pub fn rss_now(&self, key: &Key) -> u64 {
        self.procs
            .get(key)
            .and_then(|s| s.rss.last(key.start_ns))
            .map_or(0, |p| p.bytes)
    }

    /// The current tree-wide RSS: the last kernel value, or the sum of the latest samples.
    pub fn current_rss(&self) -> u64 {
        match self.rss_source {
            RssSource::Kernel => self.tree_rss.last().map_or(0, |p| p.bytes),
            RssSource::Statm => self.rss_sum,
        }
    }

    /// Records the kernel's exact tree-wide peak. The series gets it too when it has not
    /// reached it: a run stopped while a process grew reads the peak after the last point.
    pub fn set_tree_peak(&mut self, p: Point) {
        self.tree_peak = Some(p);
        if self.tree_rss.max().is_none_or(|m| m.bytes < p.bytes) {
            self.tree_rss.insert(p, self.limits.tree_points);
        }
    }

    /// A tree-wide RSS value from the kernel, exact at its time (which may be earlier than
    /// the last point's: a point the kernel held back).
    pub fn record_tree_rss(&mut self, p: Point) {
        self.tree_rss.insert(p, self.limits.tree_points);
    }

    /// A process's RSS from the kernel, exact at its time. Unlike statm samples it is not
    /// summed (the kernel sums the tree), and it may arrive after the process's exit record:
    /// the kernel sends a held-back point and the last value as it stops following the mm.
    /// Without `anon_bytes`: the exact RSS an image ended with, from its exit record.
    pub fn record_kernel_rss(&mut self, key: Key, p: Point, anon_bytes: Option<u64>) {
        match anon_bytes {
            Some(anon) if !self.procs.is_gone(&key) => self.pss.rss(key, p.ts_ns, p.bytes, anon),
            // An image's last figures, after it left the tree-wide PSS sum.
            _ => self.pss.late_rss(key, p.ts_ns, p.bytes),
        }
        let cap = self.process_cap;
        let series = &mut self.procs.entry(key).rss;
        let before = series.len();
        series.insert(p, cap, key.start_ns);
        self.process_points = self.process_points - before + series.len();
        if self.process_points > self.limits.total_process_points
            && self.process_cap > MIN_PROCESS_POINTS
        {
            self.shrink();
        }
    }

    /// A process's RSS (kernel event or statm sample). With statm sampling, the tree-wide
    /// series follows the sum of the latest samples.
    pub fn record_rss(&mut self, key: Key, p: Point) {
        update_sum(&mut self.live_rss, &mut self.rss_sum, key, p.bytes);
        self.push_process(key, p, |s| &mut s.rss);
        if self.rss_source == RssSource::Statm {
            self.tree_rss
                .push(Point::new(p.ts_ns, self.rss_sum), self.limits.tree_points);
        }
    }

    /// A process read in a PSS round that began at `read.0` and ended at `read.1`: a point of
    /// its PSS series, and its part of the tree-wide sum. The point is dated at the read's
    /// start: the walk saw the mm alive at some instant of the read, so before the process's
    /// exit, which the read's end may follow (a read preempted as the process exits).
    pub fn record_pss_read(&mut self, key: Key, read: (u64, u64), u: Usage) {
        let (started_ns, ts_ns) = read;
        let p = Point::new(started_ns, u.pss_bytes);
        self.push_process(key, p, |s| &mut s.sampled().pss);
        let s = self.procs.entry(key).sampled();
        if s.max_pss.is_none_or(|m| p.bytes > m.bytes) {
            s.max_pss = Some(p);
        }
        self.pss.read(key, ts_ns, u);
    }

    /// Every live process was read: the tree-wide PSS is the round's sum.
    pub fn pss_round_done(&mut self, ts_ns: u64) {
        self.pss.round_done(ts_ns);
    }

    /// A round found the process gone (exited, a zombie): its part of the tree-wide PSS
    /// leaves the sum before its exit record comes.
    /// `faulted`: its final minor faults' bytes, when known.
    pub fn pss_read_gone(&mut self, key: Key, faulted: Option<u64>) {
        self.pss.read_gone(key, faulted);
        self.procs.set_gone(key);
    }

    /// A round could not read the process (not known gone): its part of the tree-wide PSS
    /// is uncertain until a read succeeds.
    pub fn pss_read_failed(&mut self, key: Key, ts_ns: u64) {
        self.pss.read_failed(key, ts_ns);
    }

    /// A process's image ended at `ts_ns` (exec replaced its mm): its PSS so far leaves the
    /// sum, its next image counts from its start.
    pub fn image_ended(&mut self, key: Key, ts_ns: u64) {
        self.pss.ended(key, ts_ns);
    }

    /// A process's minor faults as it exited, in bytes of as many pages (before
    /// [`Timeline::process_exited`]): at most what it copied on write since its last read.
    pub fn exit_faults(&mut self, key: Key, bytes: u64) {
        self.pss.exit_faults(key, bytes);
    }

    /// A process exited (or was found gone): its series drop to 0 and it leaves the sums.
    pub fn process_exited(&mut self, key: Key, ts_ns: u64) {
        let had_rss = self.live_rss.remove(&key).inspect(|b| self.rss_sum -= b);
        self.pss.ended(key, ts_ns);
        self.pss.exited(key);
        let sampled = self.procs.get(&key).is_some_and(|s| s.sampled.is_some());
        let end = Point::new(ts_ns, 0);
        let followed = self.rss_source == RssSource::Kernel
            && self.procs.get(&key).is_some_and(|s| !s.rss.is_empty());
        if had_rss.is_some() || followed {
            self.push_process(key, end, |s| &mut s.rss);
            if self.rss_source == RssSource::Statm {
                self.tree_rss
                    .push(Point::new(ts_ns, self.rss_sum), self.limits.tree_points);
            }
        }
        if sampled {
            self.push_process(key, end, |s| &mut s.sampled().pss);
        }
        self.procs.set_gone(key);
    }

    fn push_process(
        &mut self,
        key: Key,
        p: Point,
        which: fn(&mut ProcessSeries) -> &mut dyn Steps,
    ) {
        let series = which(self.procs.entry(key));
        let before = series.len();
        series.push(p, self.process_cap, key.start_ns);
        let after = series.len();
        // This series' points are part of the total.
        self.process_points = self.process_points - before + after;
        if self.process_points > self.limits.total_process_points
            && self.process_cap > MIN_PROCESS_POINTS
        {
            self.shrink();
        }
    }

    /// Over the global budget: halve the per-process cap and compact every series above it.
    fn shrink(&mut self) {
        while self.process_points > self.limits.total_process_points
            && self.process_cap > MIN_PROCESS_POINTS
        {
            self.process_cap = (self.process_cap / 2).max(MIN_PROCESS_POINTS);
            let cap = self.process_cap;
            let mut total = 0;
            for (key, s) in self.procs.iter_mut() {
                let pss = s
                    .sampled
                    .as_deref_mut()
                    .map(|p| &mut p.pss as &mut dyn Steps);
                for series in std::iter::once(&mut s.rss as &mut dyn Steps).chain(pss) {
                    while series.len() > cap {
                        series.compact(key.start_ns);
                    }
                    total += series.len();
                }
            }
            self.process_points = total;
        }
    }

    /// No record comes any more: what taking them needed goes before the report is built.
    pub fn settle(&mut self) {
        self.procs.settle();
        if self.rss_source == RssSource::Kernel {
            self.pss.settle(&self.tree_rss);
        }
    }

    /// A saved report's timeline, as [`TimelineReport`] wrote it (times since the start,
    /// processes by their written pid and start): written again, it is the same text.
    pub fn restore(json: &str) -> Result<Timeline, serde_json::Error> {
        let w: Written = serde_json::from_str(json)?;
        let mut t = Timeline::new(w.rss_source);
        let cap = t.limits.tree_points;
        t.tree_rss = Series::written(&w.tree_rss.0, cap);
        t.tree_peak = w.tree_peak_rss.map(|a| Point::new(a.t_ns, a.bytes));
        let max_pss = w.max_pss.map_or(MaxPssFigure::NotSampled, |m| {
            let max = MaxPss {
                ts_ns: m.t_ns,
                bytes: m.bytes,
                unseen_bytes: m.unseen_bytes,
                over_rss_bytes: m.over_rss_bytes,
            };
            match m.trusted {
                true => MaxPssFigure::Trusted(max),
                false => MaxPssFigure::Uncertain(max),
            }
        });
        t.pss = PssSum::restored(Series::written(&w.tree_pss.0, cap), max_pss);
        t.pss_sampling = w.pss_sampling;
        let cap = t.limits.process_points;
        for e in w.processes {
            let key = Key {
                tgid: e.pid,
                start_ns: e.start_ns,
            };
            let s = t.procs.entry(key);
            s.rss = PackedSeries::of_points(&e.rss.0, cap, key.start_ns);
            if !e.pss.0.is_empty() || e.max_pss_bytes.is_some() {
                let pss = Series::written(&e.pss.0, cap);
                let max_pss = e.max_pss_bytes.map(|bytes| {
                    let at = pss.points().iter().find(|p| p.bytes == bytes);
                    Point::new(at.map_or(key.start_ns, |p| p.ts_ns), bytes)
                });
                *s.sampled() = PssSeries { pss, max_pss };
            }
        }
        Ok(t)
    }

    /// The JSON view, with times relative to `t0_ns`. `order` lists the processes in report
    /// order (others are left out); pass every key of the tree.
    pub fn report(&self, t0_ns: u64, order: Vec<Key>) -> TimelineReport<'_> {
        TimelineReport {
            timeline: self,
            t0_ns,
            order,
            pids: Vec::new(),
            cpu: None,
        }
    }
}

fn update_sum(map: &mut FxHashMap<Key, u64>, sum: &mut u64, key: Key, bytes: u64) {
    let old = map.insert(key, bytes).unwrap_or(0);
    *sum = *sum - old + bytes;
}

/// Serializes a timeline for the JSON report, straight from its series: nothing is copied.
#[derive(Debug)]
pub struct TimelineReport<'a> {
    timeline: &'a Timeline,
    t0_ns: u64,
    order: Vec<Key>,
    /// The pid shown for each of `order` (inside a PID namespace, not the kernel's); the
    /// kernel's when empty.
    pids: Vec<u32>,
    /// CPU over time, written beside memory (`"cpu"`).
    cpu: Option<crate::model::cores::CpuSeries>,
}

impl<'a> TimelineReport<'a> {
    /// The timeline it writes.
    pub fn timeline(&self) -> &'a Timeline {
        self.timeline
    }

    /// The pids to show for the processes of `order`, in the same order.
    pub fn with_pids(mut self, pids: Vec<u32>) -> Self {
        self.pids = pids;
        self
    }

    /// CPU over time, to write beside memory.
    pub fn with_cpu(mut self, cpu: crate::model::cores::CpuSeries) -> Self {
        self.cpu = Some(cpu);
        self
    }
}

struct Points<'a>(std::borrow::Cow<'a, [Point]>, u64);

impl Default for Points<'_> {
    fn default() -> Self {
        Points(Vec::new().into(), 0)
    }
}

/// A series read back: `[[t_ns, bytes], ...]`, times since the start.
impl<'de> Deserialize<'de> for Points<'_> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs = Vec::<(u64, u64)>::deserialize(d)?;
        let points: Vec<Point> = pairs.into_iter().map(|(t, b)| Point::new(t, b)).collect();
        Ok(Points(points.into(), 0))
    }
}

impl Serialize for Points<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for p in self.0.iter() {
            seq.serialize_element(&[p.ts_ns.saturating_sub(self.1), p.bytes])?;
        }
        seq.end()
    }
}

#[derive(Serialize, Deserialize)]
struct At {
    t_ns: u64,
    bytes: u64,
}

/// The tree-wide PSS maximum: how far the truth may be from it, and whether that is little
/// enough.
#[derive(Serialize, Deserialize)]
struct MaxPssAt {
    t_ns: u64,
    bytes: u64,
    unseen_bytes: u64,
    over_rss_bytes: u64,
    trusted: bool,
}

fn at(p: Option<Point>, t0: u64) -> Option<At> {
    p.map(|p| At {
        t_ns: p.ts_ns.saturating_sub(t0),
        bytes: p.bytes,
    })
}

#[derive(Serialize, Deserialize)]
struct ProcessEntry<'a> {
    pid: u32,
    start_ns: u64,
    rss: Points<'a>,
    pss: Points<'a>,
    max_pss_bytes: Option<u64>,
}

/// What [`TimelineReport`] writes, as it is read back (an older report may lack any part).
#[derive(Default, Deserialize)]
#[serde(default)]
struct Written<'a> {
    rss_source: RssSource,
    tree_rss: Points<'a>,
    tree_pss: Points<'a>,
    tree_peak_rss: Option<At>,
    max_pss: Option<MaxPssAt>,
    pss_sampling: Option<PssSampling>,
    processes: Vec<ProcessEntry<'a>>,
}

impl Serialize for TimelineReport<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let t = self.timeline;
        let t0 = self.t0_ns;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("rss_source", &t.rss_source)?;
        m.serialize_entry("pss_sampled", &true)?;
        m.serialize_entry("tree_rss", &Points(t.tree_rss.points().into(), t0))?;
        m.serialize_entry("tree_pss", &Points(t.tree_pss().points().into(), t0))?;
        m.serialize_entry("tree_peak_rss", &at(t.tree_peak(), t0))?;
        let max_pss = match t.max_pss() {
            MaxPssFigure::NotSampled => None,
            MaxPssFigure::Trusted(m) => Some((m, true)),
            MaxPssFigure::Uncertain(m) => Some((m, false)),
        }
        .map(|(m, trusted)| MaxPssAt {
            t_ns: m.ts_ns.saturating_sub(t0),
            bytes: m.bytes,
            unseen_bytes: m.unseen_bytes,
            over_rss_bytes: m.over_rss_bytes,
            trusted,
        });
        m.serialize_entry("max_pss", &max_pss)?;
        m.serialize_entry("pss_sampling", &t.pss_sampling)?;
        m.serialize_entry("processes", &ProcessEntries(self))?;
        if let Some(cpu) = &self.cpu {
            m.serialize_entry("cpu", cpu)?;
        }
        m.end()
    }
}

/// The per-process entries, each made as it is written.
struct ProcessEntries<'r, 'a>(&'r TimelineReport<'a>);

impl Serialize for ProcessEntries<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let (t, t0) = (self.0.timeline, self.0.t0_ns);
        s.collect_seq(self.0.order.iter().enumerate().filter_map(|(i, k)| {
            let s = t.procs.get(k)?;
            Some(ProcessEntry {
                pid: self.0.pids.get(i).copied().unwrap_or(k.tgid),
                start_ns: k.start_ns.saturating_sub(t0),
                rss: Points(s.rss.points(k.start_ns), t0),
                pss: Points(s.pss().points().into(), t0),
                max_pss_bytes: s.max_pss().map(|p| p.bytes),
            })
        }))
    }
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
