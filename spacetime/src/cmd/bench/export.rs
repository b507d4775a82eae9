//! The bench's exports: JSON (every statistic and per-run value), Markdown (a table to paste)
//! and CSV (one row per command). Files are opened before any run ([`Files::open`]).

use crate::kernel::provenance::Provenance;
use std::{
    fs::File,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

use serde::Serialize;

use super::{
    compare::{Comparison, Metric},
    model::CommandResult,
    stats::Stats,
};

/// The JSON export.
#[derive(Debug, Serialize)]
pub struct BenchReport<'a> {
    pub spacetime_version: &'static str,
    /// Whose kernel programs traced the runs: `"own"` or `"agent"`.
    pub programs: Provenance,
    /// Ctrl-C stopped the bench: the results hold the runs that completed.
    pub interrupted: bool,
    pub results: &'a [CommandResult],
    /// Null with a single command.
    pub comparison: Option<&'a Comparison>,
}

pub fn json(report: &BenchReport, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    out.write_all(b"\n")
}

/// Markdown: what hyperfine's table has, and memory beside time.
pub fn markdown(
    results: &[CommandResult],
    cmp: Option<&Comparison>,
    out: &mut dyn Write,
) -> io::Result<()> {
    writeln!(
        out,
        "| Command | Mean [ms] | Min [ms] | Max [ms] | Relative time | Peak RSS [MiB] | Tree peak [MiB] | Relative memory | Processes |"
    )?;
    writeln!(out, "|:---|---:|---:|---:|---:|---:|---:|---:|---:|")?;
    for (i, r) in results.iter().enumerate() {
        let ms = |v: f64| format!("{:.1}", v / 1e6);
        let mib = |v: f64| format!("{:.2}", v / (1u64 << 20) as f64);
        let tree = r.tree_peak_rss_bytes.as_ref().map_or("–".into(), |t| {
            format!("{} ± {}", mib(t.mean), mib(t.sd()))
        });
        writeln!(
            out,
            "| {} | {} ± {} | {} | {} | {} | {} ± {} | {} | {} | {} |",
            md_code(&r.shown),
            ms(r.wall_ns.mean),
            ms(r.wall_ns.sd()),
            ms(r.wall_ns.min as f64),
            ms(r.wall_ns.max as f64),
            relative(cmp.map(|c| &c.wall_ns), i),
            mib(r.peak_rss_bytes.mean),
            mib(r.peak_rss_bytes.sd()),
            tree,
            relative(cmp.map(|c| &c.peak_rss_bytes), i),
            fmt_mean(&r.processes),
        )?;
    }
    Ok(())
}

/// `1.00` for the reference, `2.31 ± 0.05` otherwise; `1.00` without a comparison.
fn relative(m: Option<&Metric>, i: usize) -> String {
    let Some(rel) = m.and_then(|m| m.relative.get(i)) else {
        return "1.00".into();
    };
    match (rel.ratio, rel.uncertainty) {
        (Some(r), Some(u)) if m.is_some_and(|m| m.reference != i) => format!("{r:.2} ± {u:.2}"),
        (Some(r), _) => format!("{r:.2}"),
        _ => "–".into(),
    }
}

fn fmt_mean(s: &Stats) -> String {
    if s.min == s.max {
        s.min.to_string()
    } else {
        format!("{:.1}", s.mean)
    }
}

/// A command as inline code in a table cell: already escaped for a terminal; `|` would end
/// the cell, and a backtick the code span.
fn md_code(shown: &str) -> String {
    let cell = shown.replace('|', "\\|");
    if cell.contains('`') {
        format!("`` {cell} ``")
    } else {
        format!("`{cell}`")
    }
}

/// The figures of the CSV, in column order: each gives `_mean`, `_stddev`, `_median`,
/// `_min`, `_max` columns.
const CSV_FIGURES: [&str; 7] = [
    "wall_ns",
    "user_ns",
    "sys_ns",
    "peak_rss_bytes",
    "tree_peak_rss_bytes",
    "processes",
    "cgroup_peak_bytes",
];

pub fn csv(results: &[CommandResult], out: &mut dyn Write) -> io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let mut header = vec!["command".to_string(), "runs".into()];
    for f in CSV_FIGURES {
        for s in ["mean", "stddev", "median", "min", "max"] {
            header.push(format!("{f}_{s}"));
        }
    }
    header.extend(["failed_runs".into(), "incomplete_runs".into()]);
    w.write_record(&header)?;
    for r in results {
        // Bytes: a command that is not UTF-8 stays exact.
        let mut row: Vec<Vec<u8>> = vec![r.text.clone(), r.runs.to_string().into_bytes()];
        for s in [
            Some(&r.wall_ns),
            Some(&r.user_ns),
            Some(&r.sys_ns),
            Some(&r.peak_rss_bytes),
            r.tree_peak_rss_bytes.as_ref(),
            Some(&r.processes),
            r.cgroup_peak_bytes.as_ref(),
        ] {
            let cells = match s {
                Some(s) => [
                    s.mean.to_string(),
                    s.stddev.map_or(String::new(), |d| d.to_string()),
                    s.median.to_string(),
                    s.min.to_string(),
                    s.max.to_string(),
                ],
                None => Default::default(),
            };
            row.extend(cells.map(String::into_bytes));
        }
        row.push(r.failed_runs().to_string().into_bytes());
        row.push(r.incomplete_runs.len().to_string().into_bytes());
        w.write_record(&row)?;
    }
    w.flush()
}

/// The export files, created before the first run so a path that cannot be written costs no
/// run.
#[derive(Default)]
pub struct Files {
    pub json: Option<(PathBuf, File)>,
    pub markdown: Option<(PathBuf, File)>,
    pub csv: Option<(PathBuf, File)>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write {}: {source}", path.display())]
pub struct OpenError {
    pub path: PathBuf,
    pub source: io::Error,
}

impl Files {
    pub fn open(
        json: Option<&Path>,
        markdown: Option<&Path>,
        csv: Option<&Path>,
    ) -> Result<Files, OpenError> {
        let open = |p: Option<&Path>| -> Result<Option<(PathBuf, File)>, OpenError> {
            p.map(|p| {
                File::create(p)
                    .map(|f| (p.to_path_buf(), f))
                    .map_err(|source| OpenError {
                        path: p.to_path_buf(),
                        source,
                    })
            })
            .transpose()
        };
        Ok(Files {
            json: open(json)?,
            markdown: open(markdown)?,
            csv: open(csv)?,
        })
    }

    /// Writes every requested export; a failed one costs that file only, and says so.
    /// Returns false when one failed.
    pub fn write(self, report: &BenchReport) -> bool {
        let mut ok = true;
        let mut put = |f: Option<(PathBuf, File)>, w: &dyn Fn(&mut dyn Write) -> io::Result<()>| {
            if let Some((path, file)) = f {
                let mut b = BufWriter::new(file);
                if let Err(e) = w(&mut b).and_then(|_| b.flush()) {
                    crate::errln!("spacetime: writing {}: {e}", path.display());
                    ok = false;
                }
            }
        };
        put(self.json, &|w| json(report, w));
        put(self.markdown, &|w| {
            markdown(report.results, report.comparison, w)
        });
        put(self.csv, &|w| csv(report.results, w));
        ok
    }
}

#[cfg(test)]
#[path = "export_tests.rs"]
mod tests;
