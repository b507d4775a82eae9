//! What the report says about the run as a whole, beyond each process's figures: who started
//! whom, which processes failed, the label that tells each process apart, CPU over time and
//! parallelism, the critical path, and the programs that ran. Computed once per report, from
//! its processes (live or read back from a saved report, alike), for every renderer.

use std::borrow::Cow;

use serde::{ser::SerializeSeq, Serialize, Serializer};

use super::{
    figures::{Json, Place, Sums},
    lossless::Lossy,
    ProcessReport,
};
use crate::{
    model::{
        cores::{CpuSeries, Sampled, Use},
        critical_path::{critical_path, Node, Segment},
        labels::{basename, label_all, Label, Part, Run},
        timeline::Timeline,
    },
    util::term,
};
use rustc_hash::FxHashMap;

/// What the report derives from its processes.
#[derive(Debug, Default)]
pub struct Analysis {
    /// Each process's parent, as a position in the report's list.
    pub parents: Vec<Option<usize>>,
    /// Each process's label ([`crate::model::labels`]).
    pub labels: Vec<Label>,
    /// Positions of the processes that ended with a non-zero status or a signal, in start
    /// order.
    pub failures: Vec<usize>,
    /// Cores in use over time: sampled by the kernel's CPU clock tick where it ran, else
    /// each process's CPU spread over its life (approximate).
    pub cpu: CpuSeries,
    /// The critical path; segments name processes by position.
    pub critical_path: Vec<Segment>,
    /// The programs that ran, by peak RSS.
    pub programs: Vec<ProgramStat>,
    /// The critical path's time by program (a step's program is the last its process ran),
    /// the most first.
    pub path_programs: Vec<PathProgram>,
}

/// One program's part of the critical path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathProgram {
    /// Its name (empty: no traced process).
    pub name: Vec<u8>,
    pub steps: u64,
    pub ns: u64,
}

/// One program: its runs (each exec of it), the largest peak of those runs, and the CPU of
/// the processes it was the last program of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramStat {
    pub exe: Vec<u8>,
    /// The path that names it (the exe, or argv[0] where the kernel cut the exe).
    pub path: Vec<u8>,
    pub runs: u64,
    /// Processes whose last program this was that failed.
    pub failed: u64,
    pub peak_rss_bytes: u64,
    /// The process with that peak (its position).
    pub peak_pos: Option<usize>,
    pub cpu_ns: u64,
    /// The table's figures over the same processes as its CPU ([`super::figures`]).
    pub figures: Sums,
}

impl Analysis {
    /// `ticks`: the timeline with the threads' sampled run time, and the trace's start
    /// (CLOCK_MONOTONIC), when
    /// the kernel's CPU clock program ran; `cpus`: the online CPUs, which bound CPU over time.
    pub fn of(
        procs: &[ProcessReport],
        wall_ns: u64,
        ticks: Option<(&Timeline, u64)>,
        cpus: Option<u32>,
    ) -> Analysis {
        // Each label from the naming image's own bytes: nothing of argv is copied.
        let labels = label_all(procs.iter().map(|p| match p.naming_image() {
            Some(img) => Run {
                program: img.exe(),
                args: img.args(),
            },
            None => Run {
                program: b"",
                args: b"",
            },
        }));
        let end = |p: &ProcessReport| p.end_ns().unwrap_or(wall_ns).max(p.start_ns());
        let life = |p: &ProcessReport| Use {
            start_ns: p.start_ns(),
            end_ns: end(p),
            cpu_ns: p.cpu_ns(),
        };
        let cpu = match ticks {
            Some((ticks, t0_ns)) => CpuSeries {
                ticks_dropped: ticks.cpu.dropped,
                ..CpuSeries::sampled(
                    procs.iter().map(|p| Sampled {
                        life: life(p),
                        segments: p
                            .key()
                            .map_or(Cow::Borrowed(&[]), |k| ticks.cpu_segments(&k)),
                    }),
                    t0_ns,
                    wall_ns,
                    cpus,
                )
            },
            None => CpuSeries::of(procs.iter().map(life), wall_ns, cpus),
        };
        let parents = parents(procs);
        let node = |i: usize| Node {
            parent: parents[i],
            start_ns: procs[i].start_ns(),
            end_ns: end(&procs[i]),
        };
        let critical_path = critical_path(procs.len(), node, wall_ns);
        Analysis {
            path_programs: path_programs(procs, &critical_path),
            failures: procs
                .iter()
                .filter(|p| p.failed())
                .map(|p| p.pos())
                .collect(),
            critical_path,
            programs: programs(procs),
            parents,
            labels,
            cpu,
        }
    }

    /// CPU over wall: the cores used on average.
    pub fn parallelism(&self, wall_ns: u64) -> Option<f64> {
        (wall_ns > 0).then(|| self.cpu.total_ns() as f64 / wall_ns as f64)
    }
}

/// Each process's parent: the latest process with its ppid that started at or before it
/// (pids are reused).
fn parents(procs: &[ProcessReport]) -> Vec<Option<usize>> {
    // (pid, position), sorted: each pid's processes in the report's order, which is start
    // order. A sorted list rather than a map of lists: no allocation per pid.
    let mut by_pid: Vec<(u32, u32)> = procs.iter().map(|p| (p.pid(), p.pos() as u32)).collect();
    by_pid.sort_unstable();
    procs
        .iter()
        .map(|p| {
            let from = by_pid.partition_point(|&(pid, _)| pid < p.ppid());
            let to = from + by_pid[from..].partition_point(|&(pid, _)| pid == p.ppid());
            let list = &by_pid[from..to];
            // The last one started at or before this process.
            let k = list.partition_point(|&(_, c)| procs[c as usize].start_ns() <= p.start_ns());
            k.checked_sub(1)
                .map(|k| list[k].1 as usize)
                .filter(|&c| c != p.pos())
        })
        .collect()
}

fn path_programs(procs: &[ProcessReport], path: &[Segment]) -> Vec<PathProgram> {
    let mut by: FxHashMap<&[u8], PathProgram> = FxHashMap::default();
    for s in path {
        let name = s
            .node()
            .and_then(|i| procs[i].naming_image())
            .map_or(&b""[..], |img| basename(img.program()));
        let e = by.entry(name).or_insert_with(|| PathProgram {
            name: name.to_vec(),
            steps: 0,
            ns: 0,
        });
        e.steps += 1;
        e.ns += s.len_ns();
    }
    let mut list: Vec<PathProgram> = by.into_values().collect();
    list.sort_by(|a, b| (b.ns, &a.name).cmp(&(a.ns, &b.name)));
    list
}

fn programs(procs: &[ProcessReport]) -> Vec<ProgramStat> {
    let mut by_exe: FxHashMap<&[u8], ProgramStat> = FxHashMap::default();
    for p in procs {
        let mut last = None;
        for img in p.own_images() {
            let e = by_exe.entry(img.exe()).or_insert_with(|| ProgramStat {
                exe: img.exe().to_vec(),
                path: img.program().to_vec(),
                runs: 0,
                failed: 0,
                peak_rss_bytes: 0,
                peak_pos: None,
                cpu_ns: 0,
                figures: Sums::default(),
            });
            e.runs += 1;
            let peak = img.peak_rss_bytes().unwrap_or(0);
            if e.peak_pos.is_none() || peak > e.peak_rss_bytes {
                e.peak_rss_bytes = peak;
                e.peak_pos = Some(p.pos());
            }
            last = Some(img.exe());
        }
        if let Some(e) = last.and_then(|exe| by_exe.get_mut(exe)) {
            e.cpu_ns += p.cpu_ns();
            e.figures.add(p.taskstats().as_ref());
            e.failed += u64::from(p.failed());
        }
    }
    let mut list: Vec<ProgramStat> = by_exe.into_values().collect();
    list.sort_by(|a, b| {
        (b.peak_rss_bytes, b.runs, &a.exe).cmp(&(a.peak_rss_bytes, a.runs, &b.exe))
    });
    list
}

/// How a label is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spelling {
    /// Escaped for a terminal ([`term::escape`]).
    Terminal,
    /// As the bytes are, invalid UTF-8 shown as U+FFFD (JSON, HTML).
    Lossy,
}

/// A process's label: `cc1 … main.c` (the program's name and the arguments that tell it
/// from the program's other runs); `(fork) ` before a process that ran no program of its own,
/// `[N execs] ` before one that ran several.
pub fn label_text(p: &ProcessReport, label: &Label, how: Spelling) -> String {
    let gap = match how {
        Spelling::Terminal if term::ascii() => "...",
        _ => "…",
    };
    let put = |out: &mut String, b: &[u8]| match how {
        Spelling::Terminal => term::push_escaped(out, b),
        Spelling::Lossy => out.push_str(&String::from_utf8_lossy(b)),
    };
    let mut out = String::new();
    let own = p.own_images().count();
    match own {
        0 => out.push_str("(fork) "),
        1 => {}
        n => out.push_str(&format!("[{n} execs] ")),
    }
    let Some(img) = p.naming_image() else {
        return format!("pid {}", p.pid());
    };
    let argv: Vec<&[u8]> = img.argv().collect();
    let name = match basename(img.program()) {
        b"" => argv.first().map_or(img.comm(), |a| basename(a)),
        n => n,
    };
    put(&mut out, name);
    for part in label.parts() {
        out.push(' ');
        match part {
            Part::Arg(i) => put(&mut out, argv.get(i).copied().unwrap_or_default()),
            Part::Gap => out.push_str(gap),
        }
    }
    out
}

/// Processes serialized with their labels (`"label"` after the JSON contract's keys).
pub(super) struct ProcessesJson<'r, 'a> {
    pub procs: &'r [ProcessReport<'a>],
    pub labels: &'r [Label],
}

#[derive(Serialize)]
struct WithLabel<'r, 'a> {
    #[serde(flatten)]
    p: &'r ProcessReport<'a>,
    label: String,
}

impl Serialize for ProcessesJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.procs.len()))?;
        for (p, l) in self.procs.iter().zip(self.labels) {
            seq.serialize_element(&WithLabel {
                p,
                label: label_text(p, l, Spelling::Lossy),
            })?;
        }
        seq.end()
    }
}

/// The failed processes, each with what a reader needs to find it.
pub(super) struct FailuresJson<'r, 'a> {
    pub procs: &'r [ProcessReport<'a>],
    pub a: &'r Analysis,
}

#[derive(Serialize)]
struct Failure {
    pid: u32,
    ppid: u32,
    exit: Option<super::Exit>,
    start_ns: u64,
    end_ns: Option<u64>,
    label: String,
    parent_label: Option<String>,
}

impl Serialize for FailuresJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let text = |i: usize| label_text(&self.procs[i], &self.a.labels[i], Spelling::Lossy);
        s.collect_seq(self.a.failures.iter().map(|&i| {
            let p = &self.procs[i];
            Failure {
                pid: p.pid(),
                ppid: p.ppid(),
                exit: p.exit(),
                start_ns: p.start_ns(),
                end_ns: p.end_ns(),
                label: text(i),
                parent_label: self.a.parents[i].map(text),
            }
        }))
    }
}

/// The critical path's steps: the process (its pid; null for none), the stretch, its share.
pub(super) struct PathJson<'r, 'a> {
    pub procs: &'r [ProcessReport<'a>],
    pub path: &'r [Segment],
    pub wall_ns: u64,
}

#[derive(Serialize)]
struct Step {
    pid: Option<u32>,
    start_ns: u64,
    end_ns: u64,
    share: f64,
}

impl Serialize for PathJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let wall = self.wall_ns.max(1) as f64;
        s.collect_seq(self.path.iter().map(|seg| Step {
            pid: seg.node().map(|i| self.procs[i].pid()),
            start_ns: seg.start_ns,
            end_ns: seg.end_ns,
            share: seg.len_ns() as f64 / wall,
        }))
    }
}

/// The critical path by program.
pub(super) struct PathProgramsJson<'r> {
    pub list: &'r [PathProgram],
    pub wall_ns: u64,
}

#[derive(Serialize)]
struct PathProgramJson<'r> {
    name: Option<Lossy<'r>>,
    steps: u64,
    ns: u64,
    share: f64,
}

impl Serialize for PathProgramsJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let wall = self.wall_ns.max(1) as f64;
        s.collect_seq(self.list.iter().map(|g| PathProgramJson {
            name: (!g.name.is_empty()).then_some(Lossy(&g.name)),
            steps: g.steps,
            ns: g.ns,
            share: g.ns as f64 / wall,
        }))
    }
}

/// The programs table.
pub(super) struct ProgramsJson<'r, 'a> {
    pub procs: &'r [ProcessReport<'a>],
    pub list: &'r [ProgramStat],
}

#[derive(Serialize)]
struct ProgramJson<'r> {
    exe: Lossy<'r>,
    name: Lossy<'r>,
    runs: u64,
    failed: u64,
    peak_rss_bytes: u64,
    peak_pid: Option<u32>,
    cpu_ns: u64,
    #[serde(flatten)]
    figures: Json,
}

impl Serialize for ProgramsJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.list.iter().map(|g| ProgramJson {
            exe: Lossy(&g.exe),
            name: Lossy(basename(&g.path)),
            runs: g.runs,
            failed: g.failed,
            peak_rss_bytes: g.peak_rss_bytes,
            peak_pid: g.peak_pos.map(|i| self.procs[i].pid()),
            cpu_ns: g.cpu_ns,
            figures: Json {
                sums: Ok(g.figures.clone()),
                place: Place::Program,
            },
        }))
    }
}
