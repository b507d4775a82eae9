//! Two trace reports: the totals (gated by `--fail-on`), then each program's peak RSS and CPU
//! (programs by exe; one that ran on one side only is `new` or `gone`), then each figure of
//! the figures table that `diff` compares, the tree's among the totals and each program's.

use std::collections::BTreeMap;

use super::table::{Gated, Row, Section, Unit};
use crate::{
    model::labels::basename,
    report::{analysis::ProgramStat, figures, saved::SavedReport, Report},
    util::term,
};

/// How `diff` shows a figure of the table.
fn unit(f: &figures::Figure) -> Unit {
    match f.unit {
        figures::Unit::Bytes => Unit::Bytes,
        figures::Unit::Count => Unit::Count,
    }
}

/// The figures table's that `diff` compares ([`figures::FIGURES`]).
fn compared() -> impl Iterator<Item = &'static figures::Figure> {
    figures::FIGURES.iter().filter(|f| f.diff)
}

fn totals(a: &Report, b: &Report) -> Section {
    let row = |name: &str, f: Gated, get: &dyn Fn(&Report) -> Option<f64>| {
        Row::new(name, Some(f), f.unit()).values(get(a), get(b))
    };
    // Neither side's figure (reports written before it): no row.
    let table = compared()
        .map(|f| {
            let get = |r: &Report| figures::tree_value(r, f).ok().map(|v| v as f64);
            Row::new(f.title, None, unit(f)).values(get(a), get(b))
        })
        .filter(|r| r.a.is_some() || r.b.is_some());
    Section {
        title: "totals".into(),
        rows: [
            row("wall", Gated::Wall, &|r| Some(r.wall_ns as f64)),
            row("CPU", Gated::Cpu, &|r| Some((r.user_ns + r.sys_ns) as f64)),
            row("peak RSS (largest process)", Gated::Peak, &|r| {
                Some(r.totals.peak_rss_bytes as f64)
            }),
            row("tree-wide peak RSS", Gated::TreePeak, &|r| {
                r.totals.tree_peak_rss_bytes.map(|b| b as f64)
            }),
            row("processes", Gated::Processes, &|r| {
                Some(r.totals.processes as f64)
            }),
            row("failed", Gated::Failures, &|r| {
                Some(r.analysis.failures.len() as f64)
            }),
        ]
        .into_iter()
        .chain(table)
        .collect(),
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

fn programs(a: &Report, b: &Report) -> Vec<Section> {
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
    let rows = |get: &dyn Fn(&ProgramStat) -> Option<u64>, unit: Unit| -> Vec<Row> {
        exes.iter()
            .map(|&e| {
                let mut r = Row::new(names[e].clone(), None, unit).values(
                    pa.get(e).and_then(get).map(|v| v as f64),
                    pb.get(e).and_then(get).map(|v| v as f64),
                );
                r.note = format!("runs {} → {}", runs(&pa, e), runs(&pb, e));
                r
            })
            .collect()
    };
    let section = |title: String, rows: Vec<Row>| Section {
        title,
        rows,
        gated: false,
        gate_prefix: String::new(),
    };
    let mut list = vec![
        section(
            "peak RSS by program (the largest run of each)".into(),
            rows(&|g| Some(g.peak_rss_bytes), Unit::Bytes),
        ),
        section("CPU by program".into(), rows(&|g| Some(g.cpu_ns), Unit::Ns)),
    ];
    for f in compared() {
        let get = |g: &ProgramStat| g.figures.value(f).ok();
        let rows = rows(&get, unit(f));
        if rows.iter().any(|r| r.a.is_some() || r.b.is_some()) {
            list.push(section(format!("{} by program", f.title), rows));
        }
    }
    list
}

/// The sections comparing two saved trace reports.
pub fn compare(a: &SavedReport, b: &SavedReport) -> Vec<Section> {
    let (a, b) = (Report::from_saved(a), Report::from_saved(b));
    let mut sections = vec![totals(&a, &b)];
    sections.extend(programs(&a, &b));
    sections
}
