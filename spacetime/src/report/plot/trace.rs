//! What the trace's pictures draw (the page and the SVG): a projection of the report model,
//! nothing computed anew. Per process the figures are columns (one array per figure, compact for 100 000 processes);
//! strings (argv words, labels, programs) are stored once in a table and named by index, as
//! a build passes the same flags to every compiler.

use serde::Serialize;

use crate::{
    model::{labels::basename, timeline::Point},
    report::{
        analysis::{label_text, Spelling},
        Report,
    },
};
use rustc_hash::FxHashMap;

/// Most points of the memory series on the page: finer than a screen, min and max of each
/// slice kept, so the peak is drawn where it was.
const MEM_POINTS: usize = 4000;

/// A table of strings, each stored once.
#[derive(Default)]
struct Strings {
    list: Vec<String>,
    at: FxHashMap<String, u32>,
}

impl Strings {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.at.get(s) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(s.to_string());
        self.at.insert(s.to_string(), i);
        i
    }

    fn bytes(&mut self, b: &[u8]) -> u32 {
        self.id(&String::from_utf8_lossy(b))
    }
}

/// The processes, one array per figure, in the report's order (start order).
#[derive(Serialize, Default)]
pub(crate) struct Columns {
    pub(crate) pid: Vec<u32>,
    /// The parent's index (-1: none).
    pub(crate) parent: Vec<i64>,
    pub(crate) start: Vec<u64>,
    /// Null: still running or unknown (drawn to the end).
    pub(crate) end: Vec<Option<u64>>,
    /// Null: unknown.
    pub(crate) peak: Vec<Option<u64>>,
    pub(crate) cpu: Vec<u64>,
    /// The status a shell reports (128+N for signal N); null while running or unknown.
    pub(crate) exit: Vec<Option<i32>>,
    /// Index into `programs` (-1: no program of its own).
    pub(crate) program: Vec<i64>,
    /// String indexes: its label, and its argv.
    pub(crate) label: Vec<u32>,
    pub(crate) argv: Vec<Vec<u32>>,
    pub(crate) exe: Vec<u32>,
}

#[derive(Serialize)]
pub(crate) struct Program {
    pub(crate) exe: String,
    pub(crate) name: String,
    pub(crate) runs: u64,
    pub(crate) failed: u64,
    pub(crate) peak_rss_bytes: u64,
    pub(crate) cpu_ns: u64,
    /// Its colour in every picture ([`super::colour`]).
    pub(crate) colour: String,
}

#[derive(Serialize)]
pub(crate) struct PathProgram {
    pub(crate) name: String,
    pub(crate) steps: u64,
    pub(crate) ns: u64,
}

#[derive(Serialize)]
pub(crate) struct Cpu {
    pub(crate) bucket_ns: u64,
    pub(crate) cpu_ns: Vec<u64>,
    pub(crate) total_ns: u64,
    /// How the series was made ([`crate::model::cores::CpuSeries::label`]).
    pub(crate) label: String,
}

/// The page's data.
#[derive(Serialize)]
pub struct TraceData {
    pub(crate) kind: &'static str,
    pub(crate) command: String,
    pub(crate) status: String,
    /// CMD's status as a shell reports it (null: still running).
    pub(crate) exit_code: Option<i32>,
    pub(crate) host: String,
    pub(crate) start: String,
    pub(crate) version: String,
    pub(crate) wall_ns: u64,
    pub(crate) cpu_ns: u64,
    pub(crate) parallelism: Option<f64>,
    pub(crate) processes: u64,
    pub(crate) tree_peak_rss_bytes: Option<u64>,
    pub(crate) tree_peak_at_ns: Option<u64>,
    /// The largest tree-wide PSS, when it is a figure (the JSON's `totals.max_pss_bytes`).
    pub(crate) max_pss_bytes: Option<u64>,
    /// Why there is no max PSS, in a few words (null when there is one).
    pub(crate) max_pss_note: Option<String>,
    pub(crate) peak_rss_bytes: u64,
    /// Index of the process with the largest peak.
    pub(crate) peak_index: Option<usize>,
    pub(crate) lost_events: u64,
    pub(crate) complete: bool,
    pub(crate) rss_source: crate::model::timeline::RssSource,
    pub(crate) strings: Vec<String>,
    pub(crate) p: Columns,
    pub(crate) programs: Vec<Program>,
    pub(crate) failures: Vec<usize>,
    /// `[index or -1, start_ns, end_ns]` per step.
    pub(crate) path: Vec<(i64, u64, u64)>,
    pub(crate) path_programs: Vec<PathProgram>,
    pub(crate) memory: Vec<(u64, u64)>,
    pub(crate) cpu: Cpu,
    /// The figures table's, each with its tree's, processes' and programs' values.
    pub(crate) figures: Vec<crate::report::figures::Page>,
}

/// At most `max` points of a step series, each slice of time keeping its lowest and highest
/// point in time order: the peak stays.
fn decimate(series: &[Point], max: usize) -> Vec<(u64, u64)> {
    if series.len() <= max {
        return series.iter().map(|p| (p.ts_ns, p.bytes)).collect();
    }
    let per = series.len().div_ceil(max / 2);
    let mut out = Vec::with_capacity(max + 2);
    for chunk in series.chunks(per) {
        let lo = chunk
            .iter()
            .min_by_key(|p| p.bytes)
            .copied()
            .unwrap_or_default();
        let hi = chunk
            .iter()
            .max_by_key(|p| p.bytes)
            .copied()
            .unwrap_or_default();
        let (a, b) = if lo.ts_ns <= hi.ts_ns {
            (lo, hi)
        } else {
            (hi, lo)
        };
        out.push((a.ts_ns, a.bytes));
        if b.ts_ns != a.ts_ns {
            out.push((b.ts_ns, b.bytes));
        }
    }
    out
}

/// Why the page shows no max PSS: the summary's few words when the estimate is withheld,
/// the report's reason when nothing was read.
fn max_pss_note(r: &Report) -> Option<String> {
    use crate::model::pss_sum::MaxPssFigure;
    match r.totals.max_pss {
        MaxPssFigure::Trusted(_) => None,
        MaxPssFigure::Uncertain(m) => Some(crate::report::max_pss_withheld_words(&m)),
        MaxPssFigure::NotSampled => r.totals.max_pss_unknown_reason.clone(),
    }
}

/// One column per process field, strings interned in `strings`.
fn columns(r: &Report, strings: &mut Strings) -> Columns {
    let a = &r.analysis;
    let program_of: FxHashMap<&[u8], usize> = a
        .programs
        .iter()
        .enumerate()
        .map(|(i, g)| (g.exe.as_slice(), i))
        .collect();
    let mut c = Columns::default();
    for (i, p) in r.processes.iter().enumerate() {
        c.pid.push(p.pid());
        c.parent.push(a.parents[i].map_or(-1, |x| x as i64));
        c.start.push(p.start_ns());
        c.end.push(p.end_ns());
        c.peak
            .push(p.peak_rss_unknown().is_none().then(|| p.peak_rss_bytes()));
        c.cpu.push(p.cpu_ns());
        c.exit.push(p.exit().map(|e| e.0.shell_code()));
        let own = p.own_images().next_back();
        c.program.push(
            own.and_then(|img| program_of.get(img.exe()))
                .map_or(-1, |&g| g as i64),
        );
        let label = label_text(p, &a.labels[i], Spelling::Lossy);
        c.label.push(strings.id(&label));
        let img = p.naming_image();
        c.argv.push(
            img.map(|img| img.argv().map(|w| strings.bytes(w)).collect())
                .unwrap_or_default(),
        );
        c.exe.push(strings.bytes(img.map_or(&b""[..], |i| i.exe())));
    }
    c
}

impl TraceData {
    pub fn of(r: &Report) -> TraceData {
        let a = &r.analysis;
        let mut strings = Strings::default();
        let c = columns(r, &mut strings);
        let peak_index = r
            .totals
            .peak_rss_pid
            .and_then(|pid| r.processes.iter().position(|p| p.pid() == pid));
        let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        TraceData {
            kind: "trace",
            command: r.command.lossy_line(),
            status: match r.exit {
                None => "still running".into(),
                Some(e) => match e.0 {
                    crate::model::tree::ExitStatus::Code(c) => format!("exit {c}"),
                    crate::model::tree::ExitStatus::Signal { signal, .. } => {
                        format!("killed by {}", crate::util::signals::name(signal))
                    }
                },
            },
            exit_code: r.exit.map(|e| e.0.shell_code()),
            host: r.origin.host.clone(),
            start: r.origin.start_rfc3339.clone(),
            version: r.origin.spacetime_version.clone(),
            wall_ns: r.wall_ns,
            cpu_ns: r.user_ns + r.sys_ns,
            parallelism: a.parallelism(r.wall_ns),
            processes: r.totals.processes,
            tree_peak_rss_bytes: r.totals.tree_peak_rss_bytes,
            tree_peak_at_ns: r.totals.tree_peak_at_ns,
            max_pss_bytes: r.totals.max_pss_bytes,
            max_pss_note: max_pss_note(r),
            peak_rss_bytes: r.totals.peak_rss_bytes,
            peak_index,
            lost_events: r.lost_events,
            complete: r.complete(),
            rss_source: r.memory.source,
            strings: strings.list,
            p: c,
            programs: a
                .programs
                .iter()
                .enumerate()
                .map(|(k, g)| Program {
                    exe: lossy(&g.path),
                    name: lossy(basename(&g.path)),
                    runs: g.runs,
                    failed: g.failed,
                    peak_rss_bytes: g.peak_rss_bytes,
                    cpu_ns: g.cpu_ns,
                    colour: super::colour(k),
                })
                .collect(),
            failures: a.failures.clone(),
            path: a
                .critical_path
                .iter()
                .map(|s| (s.node().map_or(-1, |i| i as i64), s.start_ns, s.end_ns))
                .collect(),
            path_programs: a
                .path_programs
                .iter()
                .map(|g| PathProgram {
                    name: lossy(&g.name),
                    steps: g.steps,
                    ns: g.ns,
                })
                .collect(),
            memory: decimate(&r.memory.points, MEM_POINTS),
            cpu: Cpu {
                bucket_ns: a.cpu.bucket_ns,
                cpu_ns: a.cpu.cpu_ns.clone(),
                total_ns: a.cpu.total_ns(),
                label: a.cpu.label(),
            },
            figures: crate::report::figures::Page::of(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimation_keeps_the_peak_and_bounds_the_points() {
        let series: Vec<Point> = (0..100_000u64)
            .map(|i| Point::new(i, if i == 77_777 { 1 << 30 } else { i % 1000 }))
            .collect();
        let d = decimate(&series, MEM_POINTS);
        assert!(d.len() <= MEM_POINTS + 2, "{}", d.len());
        assert!(d.contains(&(77_777, 1 << 30)));
        assert!(d.windows(2).all(|w| w[0].0 < w[1].0));
        let few = [Point::new(1, 2), Point::new(3, 4)];
        assert_eq!(decimate(&few, MEM_POINTS), [(1, 2), (3, 4)]);
    }
}
