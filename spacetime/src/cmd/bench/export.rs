//! The bench's exports: JSON (hyperfine's keys and spacetime's, every per-run value), CSV
//! (hyperfine's columns first), and the tables of [`markup`](super::markup). Every file is
//! opened before any run ([`Files::open`]); `-` is standard output.

use std::{
    io::{self, Write},
    path::Path,
};

use serde::Serialize;

use super::{compare::Comparison, markup, model::CommandResult, summary::Layout};
use crate::{kernel::provenance::Provenance, run::outputs::Dest};

/// The layout's version: raised when a key is renamed or removed or changes meaning, not when
/// one is added (docs/bench.schema.json).
pub const SCHEMA_VERSION: u32 = 1;

/// The JSON export.
#[derive(Debug, Serialize)]
pub struct BenchReport<'a> {
    pub schema_version: u32,
    pub spacetime_version: &'static str,
    /// Whose kernel programs traced the runs: `"own"` or `"agent"`.
    pub programs: Provenance,
    /// Ctrl-C stopped the bench: the results hold the runs that completed.
    pub interrupted: bool,
    /// The shell the commands ran through, and its start-up subtracted from every run's
    /// times (null with `--shell none`).
    pub shell: Option<ShellReport>,
    pub results: &'a [CommandResult],
    /// Null with a single command.
    pub comparison: Option<&'a Comparison>,
}

/// The shell and its measured start-up.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ShellReport {
    pub command: Vec<String>,
    /// Mean over the calibration runs of `SHELL -c ""`, traced as the commands are.
    pub spawn_wall_ns: u64,
    pub spawn_user_ns: u64,
    pub spawn_sys_ns: u64,
    pub calibration_runs: u32,
}

pub fn json(report: &BenchReport, out: &mut dyn Write) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, report)?;
    out.write_all(b"\n")
}

/// The figures of spacetime's CSV columns, after hyperfine's: each gives `_mean`,
/// `_stddev`, `_median`, `_min`, `_max` columns.
const CSV_FIGURES: [&str; 7] = [
    "wall_ns",
    "user_ns",
    "sys_ns",
    "peak_rss_bytes",
    "tree_peak_rss_bytes",
    "processes",
    "cgroup_peak_bytes",
];

/// hyperfine's columns (`command,mean,stddev,median,user,system,min,max` in seconds, then
/// `parameter_NAME` for each parameter, sorted), then spacetime's.
pub fn csv(results: &[CommandResult], out: &mut dyn Write) -> io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    let params: Vec<&String> = results
        .first()
        .map(|r| r.hyperfine.parameters.keys().collect())
        .unwrap_or_default();
    let mut header: Vec<String> = [
        "command", "mean", "stddev", "median", "user", "system", "min", "max",
    ]
    .map(String::from)
    .into();
    header.extend(params.iter().map(|p| format!("parameter_{p}")));
    header.extend(["command_line".into(), "runs".into()]);
    for f in CSV_FIGURES {
        for s in ["mean", "stddev", "median", "min", "max"] {
            header.push(format!("{f}_{s}"));
        }
    }
    header.extend(["failed_runs".into(), "incomplete_runs".into()]);
    w.write_record(&header)?;
    for r in results {
        let h = &r.hyperfine;
        let mut row: Vec<Vec<u8>> = vec![r.command.clone().into_bytes()];
        for v in [
            h.mean,
            h.stddev.unwrap_or(0.0),
            h.median,
            h.user,
            h.system,
            h.min,
            h.max,
        ] {
            row.push(v.to_string().into_bytes());
        }
        for p in &params {
            row.push(
                h.parameters
                    .get(*p)
                    .cloned()
                    .unwrap_or_default()
                    .into_bytes(),
            );
        }
        // Bytes: a command line that is not UTF-8 stays exact.
        row.extend([r.text.clone(), r.runs.to_string().into_bytes()]);
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
    pub json: Option<Dest>,
    pub csv: Option<Dest>,
    /// Markdown, AsciiDoc, org-mode.
    pub tables: Vec<(markup::Dialect, Dest)>,
    /// `--html FILE`: the runs as a self-contained page.
    pub html: Option<Dest>,
    /// `--svg FILE`: the runs as one static picture.
    pub svg: Option<Dest>,
}

/// The paths asked for.
pub struct Paths<'a> {
    pub json: Option<&'a Path>,
    pub csv: Option<&'a Path>,
    pub markdown: Option<&'a Path>,
    pub asciidoc: Option<&'a Path>,
    pub orgmode: Option<&'a Path>,
    pub html: Option<&'a Path>,
    pub svg: Option<&'a Path>,
}

impl Files {
    pub fn open(p: &Paths) -> Result<Files, crate::run::outputs::OpenError> {
        let open = |p: Option<&Path>| p.map(|p| Dest::open(p, false, true)).transpose();
        let mut tables = Vec::new();
        for (d, path) in [
            (markup::Dialect::Markdown, p.markdown),
            (markup::Dialect::AsciiDoc, p.asciidoc),
            (markup::Dialect::OrgMode, p.orgmode),
        ] {
            if let Some(dest) = open(path)? {
                tables.push((d, dest));
            }
        }
        Ok(Files {
            json: open(p.json)?,
            csv: open(p.csv)?,
            tables,
            html: open(p.html)?,
            svg: open(p.svg)?,
        })
    }

    /// Whether an export goes to standard output (the summary then goes to stderr).
    pub fn uses_stdout(&self) -> bool {
        let std = |d: &Dest| matches!(d, Dest::Stdout);
        self.json.as_ref().is_some_and(std)
            || self.csv.as_ref().is_some_and(std)
            || self.tables.iter().any(|(_, d)| std(d))
            || self.html.as_ref().is_some_and(std)
            || self.svg.as_ref().is_some_and(std)
    }

    /// Writes every requested export; a failed one costs that file only, and says so.
    /// Returns false when one failed.
    pub fn write(self, report: &BenchReport, tables: &markup::Options, layout: &Layout) -> bool {
        let mut ok = true;
        let mut put = |d: Option<Dest>, w: &dyn Fn(&mut dyn Write) -> io::Result<()>| {
            if let Some(mut d) = d {
                if let Err(e) = d.write_with(w) {
                    crate::errln!("spacetime: writing {}: {e}", d.name());
                    ok = false;
                }
            }
        };
        put(self.json, &|w| json(report, w));
        put(self.csv, &|w| csv(report.results, w));
        for (dialect, dest) in self.tables {
            put(Some(dest), &|w| {
                let t = markup::table(dialect, report.results, report.comparison, tables, layout);
                w.write_all(t.as_bytes())
            });
        }
        // The page and the picture read the bench's JSON as text, as `spacetime report` reads
        // a saved one (floats parsed from text, the same page and picture from both).
        let saved = || -> io::Result<serde_json::Value> {
            Ok(serde_json::from_str(&serde_json::to_string(report)?)?)
        };
        put(self.html, &|w| {
            w.write_all(crate::report::html::bench(&saved()?).as_bytes())
        });
        put(self.svg, &|w| {
            w.write_all(crate::report::svg::bench(&saved()?).as_bytes())
        });
        ok
    }
}

#[cfg(test)]
#[path = "export_tests.rs"]
mod tests;
