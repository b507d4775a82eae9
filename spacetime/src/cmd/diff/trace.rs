//! Two trace reports: the totals (gated by `--fail-on`), then each program's peak RSS and CPU
//! (programs by exe; one that ran on one side only is `new` or `gone`).

use std::collections::BTreeMap;

use super::table::{Figure, Row, Section, Unit};
use crate::{
    model::labels::basename,
    report::{analysis::ProgramStat, saved::SavedReport, Report},
    util::term,
};

fn totals(a: &Report, b: &Report) -> Section {
    let row = |name: &str, f: Figure, get: &dyn Fn(&Report) -> Option<f64>| {
        Row::new(name, Some(f), f.unit()).values(get(a), get(b))
    };
    Section {
        title: "totals".into(),
        rows: vec![
            row("wall", Figure::Wall, &|r| Some(r.wall_ns as f64)),
            row("CPU", Figure::Cpu, &|r| Some((r.user_ns + r.sys_ns) as f64)),
            row("peak RSS (largest process)", Figure::Peak, &|r| {
                Some(r.totals.peak_rss_bytes as f64)
            }),
            row("tree-wide peak RSS", Figure::TreePeak, &|r| {
                r.totals.tree_peak_rss_bytes.map(|b| b as f64)
            }),
            row("processes", Figure::Processes, &|r| {
                Some(r.totals.processes as f64)
            }),
            row("failed", Figure::Failures, &|r| {
                Some(r.analysis.failures.len() as f64)
            }),
        ],
        gated: true,
        gate_prefix: String::new(),
    }
}

/// Each program's name (by exe): its path's last component, or its whole path where two share
/// a last component.
fn names<'a>(
    programs: impl Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
) -> BTreeMap<&'a [u8], String> {
    let mut count: BTreeMap<&[u8], usize> = BTreeMap::new();
    for (_, path) in programs.clone() {
        *count.entry(basename(path)).or_default() += 1;
    }
    programs
        .map(|(exe, path)| {
            let n = if count[basename(path)] > 1 {
                path
            } else {
                basename(path)
            };
            (exe, term::escape(n))
        })
        .collect()
}

fn programs(a: &Report, b: &Report) -> [Section; 2] {
    let by = |r: &Report| -> BTreeMap<Vec<u8>, ProgramStat> {
        r.analysis
            .programs
            .iter()
            .map(|g| (g.exe.clone(), g.clone()))
            .collect()
    };
    let (pa, pb) = (by(a), by(b));
    let mut exes: Vec<&[u8]> = pa.keys().chain(pb.keys()).map(Vec::as_slice).collect();
    exes.sort();
    exes.dedup();
    // The heaviest in B (or A) first.
    let peak = |e: &[u8]| {
        pb.get(e)
            .or_else(|| pa.get(e))
            .map_or(0, |g| g.peak_rss_bytes)
    };
    exes.sort_by(|x, y| peak(y).cmp(&peak(x)).then(x.cmp(y)));
    let path = |e: &[u8]| -> &[u8] {
        pb.get(e)
            .or_else(|| pa.get(e))
            .map_or(&[][..], |g| g.path.as_slice())
    };
    let names = names(exes.iter().map(|&e| (e, path(e))));
    let runs = |m: &BTreeMap<Vec<u8>, ProgramStat>, e: &[u8]| {
        m.get(e).map_or("–".to_string(), |g| g.runs.to_string())
    };
    let rows = |get: fn(&ProgramStat) -> u64, unit: Unit| -> Vec<Row> {
        exes.iter()
            .map(|&e| {
                let mut r = Row::new(names[e].clone(), None, unit).values(
                    pa.get(e).map(|g| get(g) as f64),
                    pb.get(e).map(|g| get(g) as f64),
                );
                r.note = format!("runs {} → {}", runs(&pa, e), runs(&pb, e));
                r
            })
            .collect()
    };
    [
        Section {
            title: "peak RSS by program (the largest run of each)".into(),
            rows: rows(|g| g.peak_rss_bytes, Unit::Bytes),
            gated: false,
            gate_prefix: String::new(),
        },
        Section {
            title: "CPU by program".into(),
            rows: rows(|g| g.cpu_ns, Unit::Ns),
            gated: false,
            gate_prefix: String::new(),
        },
    ]
}

/// The sections comparing two saved trace reports.
pub fn compare(a: &SavedReport, b: &SavedReport) -> Vec<Section> {
    let (a, b) = (Report::from_saved(a), Report::from_saved(b));
    let [peak, cpu] = programs(&a, &b);
    vec![totals(&a, &b), peak, cpu]
}
