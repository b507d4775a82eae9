//! The trace report: one model, serialized as JSON (`--json`) and rendered for people on
//! stderr ([`text`]). All times are nanoseconds since the root process started
//! (`start_unix_ns` says when that was); all sizes are bytes. docs/trace-report.schema.json
//! describes the JSON.

pub(crate) mod analysis;
pub(crate) mod bench_text;
pub(crate) mod chart;
pub(crate) mod export;
pub(crate) mod figures;
pub(crate) mod format;
pub(crate) mod html;
pub(crate) mod lossless;
pub(crate) mod metrics;
pub(crate) mod origin;
pub(crate) mod plot;
pub(crate) mod saved;
pub(crate) mod selfstats;
pub(crate) mod status;
pub(crate) mod svg;
pub(crate) mod text;
mod view;

pub use analysis::Analysis;
pub use origin::{Origin, SCHEMA_VERSION};
use view::Scale;
pub use view::{ImageReport, ProcessReport, Processes, State};

use serde::{Deserialize, Serialize};

use crate::kernel::taskstats::Unavailable;
use crate::{
    kernel::counters::KernelCounters,
    model::{
        crosscheck::Coverage,
        pss_sum::{MaxPss, MaxPssFigure},
        timeline::{Point, RssSource, Timeline, TimelineReport},
        tree::{ExitStatus, Key, Tree},
    },
    report::selfstats::OwnCost,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit(pub ExitStatus);

impl<'de> Deserialize<'de> for Exit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Exit, D::Error> {
        #[derive(Deserialize)]
        struct In {
            code: Option<i32>,
            signal: Option<i32>,
            #[serde(default)]
            core_dumped: bool,
        }
        let i = In::deserialize(d)?;
        match (i.code, i.signal) {
            (Some(c), None) => Ok(Exit(ExitStatus::Code(c))),
            (None, Some(signal)) => Ok(Exit(ExitStatus::Signal {
                signal,
                core_dumped: i.core_dumped,
            })),
            _ => Err(serde::de::Error::custom(
                "an exit has either a code or a signal",
            )),
        }
    }
}

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

#[derive(Debug)]
pub struct Report<'a> {
    /// Schema version, spacetime's version, host, kernel, absolute start time.
    pub origin: Origin,
    /// The command as given, exact bytes (strings in JSON, exact when UTF-8; `command_b64`
    /// holds each argument's bytes in base64 when one is not UTF-8).
    pub command: lossless::Args,
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
    /// from the timeline when the report is written (with CPU over time beside them).
    pub timeline: TimelineReport<'a>,
    /// The tree-wide RSS series the summary charts.
    pub memory: TreeRss,
    /// `--cgroup-peak`: the tree's distinct-page peak from its own memory cgroup (absent when
    /// not asked for). Set by the caller after [`Report::build`].
    pub cgroup_peak: Option<CgroupPeakReport>,
    /// Whose kernel programs traced the run. Set by the caller.
    pub programs: Option<crate::kernel::provenance::Provenance>,
    /// Failures, labels, CPU over time, the critical path, the programs.
    pub analysis: Analysis,
    /// What the model's times count from: a run's t0 (CLOCK_MONOTONIC); 0 for a saved
    /// report, whose times are since its start.
    pub base_ns: u64,
    /// The start on CLOCK_MONOTONIC, when known (a run's: a saved report does not say it).
    pub monotonic_t0_ns: Option<u64>,
}

/// The tree-wide RSS over time, for the summary's chart and the pictures (at most the
/// timeline's point limit).
#[derive(Debug)]
pub struct TreeRss {
    /// Times since the start.
    pub points: Vec<Point>,
    pub source: RssSource,
}

impl TreeRss {
    fn of(timeline: &Timeline, t0: u64) -> TreeRss {
        TreeRss {
            points: timeline
                .tree_rss()
                .points()
                .iter()
                .map(|p| Point::new(p.ts_ns.saturating_sub(t0), p.bytes))
                .collect(),
            source: timeline.rss_source,
        }
    }
}

/// The report as the JSON contract spells it, built on the stack while it is written.
#[derive(Serialize)]
struct ReportJson<'r, 'a> {
    #[serde(flatten)]
    origin: &'r Origin,
    command: &'r lossless::Args,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "lossless::serialize_b64"
    )]
    command_b64: Option<lossless::Args>,
    exit: Option<Exit>,
    wall_ns: u64,
    user_ns: u64,
    sys_ns: u64,
    lost_events: u64,
    /// CPU over wall: the cores used on average.
    parallelism: Option<f64>,
    totals: figures::With<'r, Totals>,
    processes: analysis::ProcessesJson<'r, 'a>,
    failures: analysis::FailuresJson<'r, 'a>,
    critical_path: analysis::PathJson<'r, 'a>,
    critical_path_by_program: analysis::PathProgramsJson<'r>,
    by_program: analysis::ProgramsJson<'r, 'a>,
    kernel: &'r KernelReport,
    taskstats: &'r TaskstatsReport,
    spacetime: &'r OwnCost,
    timeline: &'r TimelineReport<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cgroup_peak: &'r Option<CgroupPeakReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    programs: Option<crate::kernel::provenance::Provenance>,
}

impl Serialize for Report<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let procs = &self.processes[..];
        let a = &self.analysis;
        ReportJson {
            origin: &self.origin,
            command: &self.command,
            command_b64: self.command.b64(),
            exit: self.exit,
            wall_ns: self.wall_ns,
            user_ns: self.user_ns,
            sys_ns: self.sys_ns,
            lost_events: self.lost_events,
            parallelism: a.parallelism(self.wall_ns),
            totals: figures::With {
                inner: &self.totals,
                figures: figures::Json {
                    sums: figures::tree(self),
                    place: figures::Place::Tree,
                },
            },
            processes: analysis::ProcessesJson {
                procs,
                labels: &a.labels,
            },
            failures: analysis::FailuresJson { procs, a },
            critical_path: analysis::PathJson {
                procs,
                path: &a.critical_path,
                wall_ns: self.wall_ns,
            },
            critical_path_by_program: analysis::PathProgramsJson {
                list: &a.path_programs,
                wall_ns: self.wall_ns,
            },
            by_program: analysis::ProgramsJson {
                procs,
                list: &a.programs,
            },
            kernel: &self.kernel,
            taskstats: &self.taskstats,
            spacetime: &self.spacetime,
            timeline: &self.timeline,
            cgroup_peak: &self.cgroup_peak,
            programs: self.programs,
        }
        .serialize(s)
    }
}

/// The memory cgroup's peak beside the summed-RSS tree peak.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CgroupPeakReport {
    pub available: bool,
    /// Every page charged to the run's cgroup counted once: anonymous memory (shared after
    /// fork or not), page cache the tree brought in, kernel memory. Null when unavailable.
    pub peak_bytes: Option<u64>,
    /// 1 or 2 (null when unavailable).
    pub cgroup_version: Option<u8>,
    /// The kernel file read: `memory.peak` (v2) or `memory.max_usage_in_bytes` (v1).
    pub source: Option<String>,
    /// Processes still running at the end, moved back to spacetime's own cgroup so the run's
    /// cgroup could be removed.
    #[serde(default)]
    pub moved_out: u64,
    /// The sentence saying why there is no figure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
}

/// Memory over time, taken from the [`Timeline`](crate::model::timeline::Timeline).
pub struct MemoryMeta<'a> {
    pub tree_peak: Option<crate::model::timeline::Point>,
    pub max_pss: MaxPssFigure,
    pub timeline: &'a crate::model::timeline::Timeline,
}

impl<'a> MemoryMeta<'a> {
    pub fn of(timeline: &'a crate::model::timeline::Timeline) -> MemoryMeta<'a> {
        MemoryMeta {
            tree_peak: timeline.tree_peak(),
            max_pss: timeline.max_pss(),
            timeline,
        }
    }

    /// The maximum PSS when it is a figure to print, else why not.
    fn max_pss(&self) -> (Option<u64>, Option<String>) {
        let why = match self.max_pss {
            MaxPssFigure::Trusted(m) => return (Some(m.bytes), None),
            MaxPssFigure::NotSampled if self.timeline.pss_sampling.is_none() => {
                "PSS sampling is off (--pss-interval 0)".to_string()
            }
            MaxPssFigure::NotSampled => "the run ended before its first PSS round".to_string(),
            MaxPssFigure::Uncertain(m) => max_pss_uncertain(&m),
        };
        (None, Some(why))
    }
}

/// Why a maximum PSS is not a figure: the truth may be more than 5 % away from it.
pub fn max_pss_uncertain(m: &MaxPss) -> String {
    use crate::model::pss_sum::Withheld;
    let bytes = crate::util::units::bytes;
    match m.withheld() {
        Some(Withheld::Unseen) => format!(
            "the tree may have held up to {} more than the {} estimated, unseen by any PSS round (pages of programs no round read, pages written after a fork, or left by a process that exited, before the next round): over 5 %; denser rounds narrow it (--pss-budget, --pss-interval)",
            bytes(m.unseen_bytes),
            bytes(m.bytes)
        ),
        Some(Withheld::OverRss) | None => format!(
            "the estimate ran {} above the tree's exact RSS of the same moment ({}): memory changed faster than the PSS rounds followed it, over 5 %",
            bytes(m.over_rss_bytes),
            bytes(m.bytes)
        ),
    }
}

/// The summary's words for a maximum PSS that is not a figure: why, in a few words.
pub fn max_pss_withheld_short(m: &MaxPss) -> String {
    format!("max PSS {}", max_pss_withheld_words(m))
}

/// Why a maximum PSS is not a figure, in a few words, after the words "max PSS" (the
/// summary's line and the page's chip).
pub fn max_pss_withheld_words(m: &MaxPss) -> String {
    use crate::model::pss_sum::Withheld;
    let bytes = crate::util::units::bytes;
    let why = match m.withheld() {
        Some(Withheld::Unseen) => format!(
            "up to {} more unseen between PSS reads",
            bytes(m.unseen_bytes)
        ),
        Some(Withheld::OverRss) | None => "memory changed faster than PSS reads".to_string(),
    };
    format!("unknown: about {} estimated, {why}", bytes(m.bytes))
}

#[derive(Debug, Serialize)]
pub struct TaskstatsReport {
    pub available: bool,
    /// Why there is no cross-check, when there is none: the sentence the kernel side's reason
    /// renders to (a saved report's as it was written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
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

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
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
    /// The largest tree-wide PSS: rounds of reads taken together, the exact RSS between
    /// them (see `timeline.max_pss`). Null, with the reason next to it, when the truth may be
    /// more than 5 % away from it, or nothing was read.
    pub max_pss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_pss_unknown_reason: Option<String>,
    /// The same, as the summary decides on it (a saved report's: from its timeline).
    #[serde(skip)]
    pub max_pss: MaxPssFigure,
    /// Processes whose CPU time is not wait4's final figure (`cpu_final: false`): not released
    /// when the trace ended, so summed at their threads' exits.
    pub cpu_not_final: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct KernelReport {
    pub counters: KernelCounters,
    /// Records that could not be decoded.
    pub decode_errors: u64,
    /// argv continuations that did not follow on.
    pub args_gaps: u64,
    /// Images' memory figures too large to keep (above 2^40 pages): shown as unknown.
    #[serde(skip_serializing_if = "is_zero")]
    pub figures_out_of_range: u64,
    pub page_size: u64,
    pub ring_buffer_bytes: u32,
    pub mechanisms: Vec<String>,
    /// For an attach (`trace -p`): whether the kernel followed the RSS of the processes
    /// attached to from the attach on. Said in `mechanisms` in words; this is the fact.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attach_memory_followed: Option<bool>,
    /// Why the `spacetime agent` the trace went through went away before the trace ended
    /// (null: it did not, or no agent): what it had not sent then is missing.
    pub agent_gone: Option<String>,
}

/// What a run states beyond its tree: the command, how it ended, the kernel's counters and
/// mechanisms, the cross-check, spacetime's own cost. Held by the run
/// ([`crate::run::session::Run`]) and read by [`Report::build`], so each is declared here once.
#[derive(Clone)]
pub struct Meta {
    /// The command as given (exact bytes).
    pub command: lossless::Args,
    /// The root's exit status (None: it was not seen to exit).
    pub root_exit: Option<ExitStatus>,
    /// CLOCK_MONOTONIC when the trace ended (when the root started is the [`Processes`]'s).
    pub end_ns: u64,
    /// Loss and failure counters of this run alone.
    pub counters: KernelCounters,
    pub decode_errors: u64,
    pub ring_buffer_bytes: u32,
    pub mechanisms: Vec<String>,
    /// See [`KernelReport::attach_memory_followed`].
    pub attach_memory_followed: Option<bool>,
    pub taskstats: TaskstatsMeta,
    /// spacetime's own cost when the run ended (cumulative since its start).
    pub own_cost: OwnCost,
    /// See [`KernelReport::agent_gone`].
    pub agent_gone: Option<String>,
    /// The run's memory cgroup peak, or why there is none (None: not asked for).
    pub cgroup_peak: Option<CgroupPeakReport>,
    /// Whose kernel programs traced the run.
    pub programs: crate::kernel::provenance::Provenance,
}

impl<'a> Report<'a> {
    /// The report over `tree`'s processes as `live` holds them (with their taskstats sums,
    /// the scale, which are gone).
    pub fn build(
        tree: &'a Tree,
        live: &'a Processes<'a>,
        meta: &Meta,
        memory: MemoryMeta<'a>,
    ) -> Report<'a> {
        let Scale { t0, page } = live.scale;
        let procs = live.processes();
        let mut order: Vec<u32> = (0..procs.len() as u32).collect();
        order.sort_by_key(|&i| (procs[i as usize].start_ns, procs[i as usize].pid));
        let processes: Vec<ProcessReport> = order
            .into_iter()
            .enumerate()
            .map(|(pos, index)| live.view(index, pos as u32))
            .collect();
        let totals = totals(&processes, &memory, t0);
        let wall_ns = meta.end_ns.saturating_sub(t0);
        let cpu = &memory.timeline.cpu;
        let analysis = Analysis::of(
            &processes,
            wall_ns,
            cpu.enabled.then_some((memory.timeline, t0)),
            cpu.online_cpus,
        );
        // The timeline lists the processes in the report's order.
        let timeline = memory
            .timeline
            .report(t0, keys(&processes))
            // Numbered as the report numbers them (spacetime's PID namespace).
            .with_pids(
                processes
                    .iter()
                    .filter(|p| p.key().is_some())
                    .map(|p| p.pid())
                    .collect(),
            )
            .with_cpu(analysis.cpu.clone());
        Report {
            origin: Origin::now(t0),
            command: meta.command.clone(),
            exit: meta.root_exit.map(Exit),
            wall_ns,
            user_ns: processes.iter().map(|p| p.user_ns()).sum(),
            sys_ns: processes.iter().map(|p| p.sys_ns()).sum(),
            lost_events: meta.counters.lost(),
            totals,
            processes,
            kernel: KernelReport {
                counters: meta.counters,
                decode_errors: meta.decode_errors,
                args_gaps: tree.stats.args_gaps,
                figures_out_of_range: tree.stats.figures_out_of_range,
                page_size: page,
                ring_buffer_bytes: meta.ring_buffer_bytes,
                mechanisms: meta.mechanisms.clone(),
                attach_memory_followed: meta.attach_memory_followed,
                agent_gone: meta.agent_gone.clone(),
            },
            taskstats: taskstats_report(meta.taskstats.clone()),
            spacetime: meta.own_cost.clone(),
            timeline,
            memory: TreeRss::of(memory.timeline, t0),
            cgroup_peak: meta.cgroup_peak.clone(),
            programs: Some(meta.programs),
            analysis,
            base_ns: t0,
            monotonic_t0_ns: Some(t0),
        }
    }

    /// The report a saved one was: its figures as written, what it derives derived again.
    pub fn from_saved(doc: &'a saved::SavedReport) -> Report<'a> {
        let processes: Vec<ProcessReport> = (0..doc.processes.processes().len() as u32)
            .map(|i| doc.processes.view(i, i))
            .collect();
        let t = &doc.taskstats;
        let cpus = doc.cpu.as_ref().and_then(|c| c.cpus);
        let mut analysis = Analysis::of(&processes, doc.wall_ns, None, cpus);
        // A series the kernel sampled cannot be derived again: it is kept as written.
        let total = doc.user_ns.saturating_add(doc.sys_ns);
        if let Some(cpu) = doc.cpu.as_ref().filter(|c| c.sampled_to(total)) {
            analysis.cpu = cpu.clone();
        }
        // Its times are since the start already, its processes keyed by their pids.
        let timeline = doc
            .timeline
            .report(0, keys(&processes))
            .with_cpu(analysis.cpu.clone());
        Report {
            origin: Origin {
                schema_version: doc.schema_version,
                spacetime_version: doc.spacetime_version.clone(),
                host: doc.host.clone(),
                kernel_release: doc.kernel_release.clone(),
                start_unix_ns: doc.start_unix_ns,
                start_rfc3339: doc.start_rfc3339.clone(),
            },
            command: lossless::Args(saved::exact_args(&doc.command, doc.command_b64.as_deref())),
            exit: doc.exit,
            wall_ns: doc.wall_ns,
            user_ns: doc.user_ns,
            sys_ns: doc.sys_ns,
            lost_events: doc.lost_events,
            totals: Totals {
                max_pss: doc.timeline.max_pss(),
                max_pss_unknown_reason: doc.totals.max_pss_unknown_reason.clone(),
                ..doc.totals
            },
            processes,
            kernel: KernelReport {
                mechanisms: doc.kernel.mechanisms.clone(),
                agent_gone: doc.kernel.agent_gone.clone(),
                ..doc.kernel
            },
            taskstats: TaskstatsReport {
                available: t.available,
                unavailable_reason: t.unavailable_reason.clone(),
                coverage: t.coverage.clone(),
                delayacct: t.delayacct,
                rcvbuf_bytes: t.rcvbuf_bytes,
            },
            spacetime: doc.spacetime.clone(),
            timeline,
            memory: TreeRss::of(&doc.timeline, 0),
            cgroup_peak: doc.cgroup_peak.clone(),
            programs: doc.programs,
            analysis,
            base_ns: 0,
            monotonic_t0_ns: None,
        }
    }

    /// Up to `n` processes with the largest `key`, the earliest first among equals.
    pub fn top_by(&self, n: usize, key: impl Fn(&ProcessReport) -> u64) -> Vec<&ProcessReport<'a>> {
        let mut order: Vec<&ProcessReport> = self.processes.iter().collect();
        order.sort_by(|a, b| key(b).cmp(&key(a)).then(a.start_ns().cmp(&b.start_ns())));
        order.truncate(n);
        order
    }

    /// Whether every figure is complete: nothing lost, nothing undecodable.
    pub fn complete(&self) -> bool {
        self.lost_events == 0 && self.kernel.decode_errors == 0 && self.kernel.args_gaps == 0
    }
}

/// The totals over the report's processes.
/// The live processes' keys, in the report's order: allocated once at their count (collected
/// through a filter, the list doubled its way up to 2 MiB on a 100 000-process trace).
fn keys(processes: &[ProcessReport]) -> Vec<Key> {
    let mut keys = Vec::with_capacity(processes.len());
    keys.extend(processes.iter().filter_map(|p| p.key()));
    keys
}

fn totals(processes: &[ProcessReport], memory: &MemoryMeta, t0: u64) -> Totals {
    let heaviest = processes.iter().max_by_key(|p| p.peak_rss_bytes());
    let (max_pss_bytes, max_pss_unknown_reason) = memory.max_pss();
    Totals {
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
        tree_peak_rss_bytes: memory.tree_peak.map(|p| p.bytes),
        tree_peak_at_ns: memory.tree_peak.map(|p| p.ts_ns.saturating_sub(t0)),
        max_pss_bytes,
        max_pss_unknown_reason,
        max_pss: memory.max_pss,
        cpu_not_final: processes.iter().filter(|p| !p.cpu_final()).count() as u64,
    }
}

fn taskstats_report(meta: TaskstatsMeta) -> TaskstatsReport {
    match meta {
        TaskstatsMeta::Available {
            coverage,
            delayacct,
            rcvbuf_bytes,
        } => TaskstatsReport {
            available: true,
            unavailable_reason: None,
            coverage,
            delayacct,
            rcvbuf_bytes,
        },
        TaskstatsMeta::Unavailable(reason) => TaskstatsReport {
            available: false,
            unavailable_reason: Some(reason.to_string()),
            coverage: Coverage::default(),
            delayacct: false,
            rcvbuf_bytes: 0,
        },
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
