//! The trace report: one model, serialized as JSON (`--json`) and rendered for people on
//! stderr ([`text`]). All times are nanoseconds since the root process started
//! (`start_unix_ns` says when that was); all sizes are bytes. docs/trace-report.schema.json
//! describes the JSON.

pub(crate) mod chart;
pub(crate) mod export;
pub(crate) mod format;
pub(crate) mod lossless;
pub(crate) mod origin;
pub(crate) mod selfstats;
pub(crate) mod status;
pub(crate) mod text;
mod view;

pub use origin::{Origin, SCHEMA_VERSION};
use view::Scale;
pub use view::{ImageReport, ProcessReport, State};

use serde::Serialize;

use crate::kernel::taskstats::Unavailable;
use crate::{
    kernel::counters::KernelCounters,
    model::{
        crosscheck::{Coverage, PerProcess},
        timeline::TimelineReport,
        tree::{ExitStatus, Key, Tree},
    },
    report::selfstats::OwnCost,
};
use rustc_hash::FxHashSet;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub ExitStatus);

impl Serialize for Exit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        match self.0 {
            ExitStatus::Code(c) => m.serialize_entry("code", &c)?,
            ExitStatus::Signal {
                signal,
                core_dumped,
            } => {
                m.serialize_entry("signal", &signal)?;
                if core_dumped {
                    m.serialize_entry("core_dumped", &true)?;
                }
            }
        }
        m.end()
    }
}

#[derive(Debug, Serialize)]
pub struct Report<'a> {
    /// Schema version, spacetime's version, host, kernel, absolute start time.
    #[serde(flatten)]
    pub origin: Origin,
    /// The command as given, exact bytes (strings in JSON, exact when UTF-8).
    pub command: lossless::Args,
    /// Each argument's exact bytes in base64, when one is not UTF-8.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "lossless::serialize_b64"
    )]
    pub command_b64: Option<lossless::Args>,
    pub exit: Option<Exit>,
    pub wall_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    /// Events that never reached userspace (ring buffer full, tracking map full).
    pub lost_events: u64,
    pub totals: Totals,
    /// Views over the tree's processes, in start order: the report copies none of them.
    pub processes: Vec<ProcessReport<'a>>,
    pub kernel: KernelReport,
    /// The cross-check of every exit against the kernel's taskstats records.
    pub taskstats: TaskstatsReport,
    /// What spacetime itself cost: its own CPU and peak RSS, its kernel programs' run time.
    pub spacetime: OwnCost,
    /// Memory over time: tree-wide and per-process RSS and PSS series, serialized straight
    /// from the timeline when the report is written.
    pub timeline: TimelineReport<'a>,
    /// `--cgroup-peak`: the tree's distinct-page peak from its own memory cgroup (absent when
    /// not asked for). Set by the caller after [`Report::build`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_peak: Option<CgroupPeakReport>,
    /// Whose kernel programs traced the run. Set by the caller.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub programs: Option<crate::kernel::provenance::Provenance>,
}

/// The memory cgroup's peak beside the summed-RSS tree peak.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupPeakReport {
    pub available: bool,
    /// Every page charged to the run's cgroup counted once: anonymous memory (shared after
    /// fork or not), page cache the tree brought in, kernel memory. Null when unavailable.
    pub peak_bytes: Option<u64>,
    /// 1 or 2 (null when unavailable).
    pub cgroup_version: Option<u8>,
    /// The kernel file read: `memory.peak` (v2) or `memory.max_usage_in_bytes` (v1).
    pub source: Option<&'static str>,
    /// Processes still running at the end, moved back to spacetime's own cgroup so the run's
    /// cgroup could be removed.
    pub moved_out: u64,
    /// The sentence saying why there is no figure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
}

/// Memory over time, taken from the [`Timeline`](crate::model::timeline::Timeline).
pub struct MemoryMeta<'a> {
    pub tree_peak: Option<crate::model::timeline::Point>,
    pub max_pss: Option<crate::model::timeline::Point>,
    pub max_pss_estimated: Option<crate::model::timeline::Point>,
    pub timeline: &'a crate::model::timeline::Timeline,
}

impl<'a> MemoryMeta<'a> {
    pub fn of(timeline: &'a crate::model::timeline::Timeline) -> MemoryMeta<'a> {
        MemoryMeta {
            tree_peak: timeline.tree_peak(),
            max_pss: timeline.max_pss(),
            max_pss_estimated: timeline.max_pss_estimated(),
            timeline,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct TaskstatsReport {
    pub available: bool,
    /// Why there is no cross-check, when there is none (its sentence in JSON).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "sentence")]
    pub unavailable_reason: Option<Unavailable>,
    #[serde(flatten)]
    pub coverage: Coverage,
    /// Delay accounting was on: the per-process delays are meaningful.
    pub delayacct: bool,
    pub rcvbuf_bytes: u64,
}

/// What the taskstats listener produced (the per-process sums are passed on their own).
#[derive(Clone, Debug)]
pub enum TaskstatsMeta {
    Available {
        coverage: Coverage,
        delayacct: bool,
        rcvbuf_bytes: u64,
    },
    Unavailable(Unavailable),
}

/// A reason, serialized as the sentence it renders to.
fn sentence<S: serde::Serializer>(r: &Option<Unavailable>, s: S) -> Result<S::Ok, S::Error> {
    match r {
        Some(r) => s.collect_str(r),
        None => s.serialize_none(),
    }
}

#[derive(Debug, Serialize)]
pub struct Totals {
    pub processes: u64,
    pub threads: u64,
    /// The largest single-process peak.
    pub peak_rss_bytes: u64,
    pub peak_rss_pid: Option<u32>,
    pub execs: u64,
    /// Processes still running when the trace stopped.
    pub still_running: u64,
    /// Processes whose exit was never seen (record lost) and that were gone at the end.
    pub unknown: u64,
    /// The tree-wide concurrent RSS peak (the sum over live processes), from the kernel, and
    /// when it happened (ns since the root started). Null without kernel RSS tracking data.
    pub tree_peak_rss_bytes: Option<u64>,
    pub tree_peak_at_ns: Option<u64>,
    /// The largest tree-wide PSS seen (sampled).
    pub max_pss_bytes: Option<u64>,
    /// Processes whose CPU time is not wait4's final figure (`cpu_final: false`): not released
    /// when the trace ended, so summed at their threads' exits.
    pub cpu_not_final: u64,
    /// The largest tree-wide PSS estimated between samples from the exact RSS (estimated).
    pub max_pss_estimated_bytes: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct KernelReport {
    pub counters: KernelCounters,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// argv continuations that did not follow on.
    pub args_gaps: u64,
    pub page_size: u64,
    pub ring_buffer_bytes: u32,
    pub mechanisms: Vec<String>,
    /// For an attach (`trace -p`): whether the kernel followed the RSS of the processes
    /// attached to from the attach on. Said in `mechanisms` in words; this is the fact.
    #[serde(skip)]
    pub attach_memory_followed: Option<bool>,
    /// Why the `spacetime agent` the trace went through went away before the trace ended
    /// (null: it did not, or no agent): what it had not sent then is missing.
    pub agent_gone: Option<String>,
}

/// What the trace knows beyond the tree.
pub struct Meta<'a> {
    pub command: lossless::Args,
    pub root_exit: Option<ExitStatus>,
    /// CLOCK_MONOTONIC when the root started and when the trace ended.
    pub t0_ns: u64,
    pub end_ns: u64,
    pub page_size: u64,
    pub counters: KernelCounters,
    pub decode_errors: u64,
    pub ring_buffer_bytes: u32,
    pub mechanisms: Vec<String>,
    /// See [`KernelReport::attach_memory_followed`].
    pub attach_memory_followed: Option<bool>,
    pub taskstats: TaskstatsMeta,
    pub memory: MemoryMeta<'a>,
    pub own_cost: OwnCost,
    /// Processes whose exit was never seen and that were gone when the trace ended.
    pub gone: &'a FxHashSet<Key>,
    /// See [`KernelReport::agent_gone`].
    pub agent_gone: Option<String>,
}

impl<'a> Report<'a> {
    /// The report over `tree`, with the taskstats sums of its processes.
    pub fn build(tree: &'a Tree, per_process: &'a PerProcess, meta: Meta<'a>) -> Report<'a> {
        let t0 = meta.t0_ns;
        let page = meta.page_size;
        let scale = Scale { t0, page };
        let procs = tree.processes();
        let mut order: Vec<usize> = (0..procs.len()).collect();
        order.sort_by_key(|&i| (procs[i].start_ns, procs[i].pid));
        let processes: Vec<ProcessReport> = order
            .into_iter()
            .map(|i| ProcessReport {
                p: &procs[i],
                sums: per_process,
                index: i,
                scale,
                gone: meta.gone,
            })
            .collect();
        let heaviest = processes.iter().max_by_key(|p| p.peak_rss_bytes());
        let totals = Totals {
            processes: processes.len() as u64,
            threads: processes.iter().map(|p| p.threads() as u64).sum(),
            peak_rss_bytes: heaviest.map_or(0, |p| p.peak_rss_bytes()),
            peak_rss_pid: heaviest.map(|p| p.pid()),
            execs: processes
                .iter()
                .flat_map(|p| p.images())
                .filter(|i| !i.inherited() && !i.read_at_attach())
                .count() as u64,
            still_running: processes
                .iter()
                .filter(|p| p.state() == State::Running)
                .count() as u64,
            unknown: processes
                .iter()
                .filter(|p| p.state() == State::Unknown)
                .count() as u64,
            tree_peak_rss_bytes: meta.memory.tree_peak.map(|p| p.bytes),
            tree_peak_at_ns: meta.memory.tree_peak.map(|p| p.ts_ns.saturating_sub(t0)),
            max_pss_bytes: meta.memory.max_pss.map(|p| p.bytes),
            cpu_not_final: processes.iter().filter(|p| !p.cpu_final()).count() as u64,
            max_pss_estimated_bytes: meta.memory.max_pss_estimated.map(|p| p.bytes),
        };
        // The timeline lists the processes in the report's order.
        let timeline = meta
            .memory
            .timeline
            .report(t0, processes.iter().filter_map(|p| p.p.key).collect())
            // Numbered as the report numbers them (spacetime's PID namespace).
            .with_pids(
                processes
                    .iter()
                    .filter(|p| p.p.key.is_some())
                    .map(|p| p.p.pid)
                    .collect(),
            );
        Report {
            command_b64: meta.command.b64(),
            origin: Origin::now(t0),
            command: meta.command,
            exit: meta.root_exit.map(Exit),
            wall_ns: meta.end_ns.saturating_sub(t0),
            user_ns: processes.iter().map(|p| p.user_ns()).sum(),
            sys_ns: processes.iter().map(|p| p.sys_ns()).sum(),
            lost_events: meta.counters.lost(),
            totals,
            processes,
            kernel: KernelReport {
                counters: meta.counters,
                decode_errors: meta.decode_errors,
                args_gaps: tree.stats.args_gaps,
                page_size: page,
                ring_buffer_bytes: meta.ring_buffer_bytes,
                mechanisms: meta.mechanisms,
                attach_memory_followed: meta.attach_memory_followed,
                agent_gone: meta.agent_gone,
            },
            taskstats: match meta.taskstats {
                TaskstatsMeta::Available {
                    coverage,
                    delayacct,
                    rcvbuf_bytes,
                    ..
                } => TaskstatsReport {
                    available: true,
                    unavailable_reason: None,
                    coverage,
                    delayacct,
                    rcvbuf_bytes,
                },
                TaskstatsMeta::Unavailable(reason) => TaskstatsReport {
                    available: false,
                    unavailable_reason: Some(reason),
                    coverage: Coverage::default(),
                    delayacct: false,
                    rcvbuf_bytes: 0,
                },
            },
            spacetime: meta.own_cost,
            // The timeline lists the processes in the report's order.
            timeline,
            cgroup_peak: None,
            programs: None,
        }
    }

    /// Whether every figure is complete: nothing lost, nothing undecodable.
    pub fn complete(&self) -> bool {
        self.lost_events == 0 && self.kernel.decode_errors == 0 && self.kernel.args_gaps == 0
    }
}
