//! The picture of a bench: what a benchmark is read for — for each figure (wall time, the
//! largest process's peak RSS, the tree's peak RSS) a row per command with every run as a
//! dot, its mean ± σ as a bar and its median as a tick, and the figures written beside it.
//! Runs are dots rather than a mean alone so that a bimodal command or one slow first run
//! shows; the rows of a figure share one scale so commands compare by eye.

use std::fmt::Write;

use super::{cut, escape, Anchor, Doc, Scale, GRID, MONO, MUTED, WIDTH};
use crate::{
    report::plot::{
        bench::{BenchData, Result, RunStats},
        FAILURE,
    },
    util::units::bytes,
};

const ROW_H: f64 = 34.0;
/// The median's tick (red is the failures').
const MEDIAN: &str = "#7b1fa2";
/// The strip's left edge: the command and its figures are written left of it.
const STRIP_X: f64 = 420.0;
const STRIP_RIGHT: f64 = 24.0;

/// The figures drawn, with their titles and units.
type Format = fn(f64) -> String;
const FIGURES: [(&str, &str, Format); 3] = [
    ("wall", "Wall time per run", fmt_ns),
    (
        "peak",
        "Peak RSS of the largest process, per run",
        fmt_bytes,
    ),
    (
        "tree",
        "Peak RSS of the whole tree (all processes at once), per run",
        fmt_bytes,
    ),
];

fn fmt_ns(v: f64) -> String {
    super::time(v)
}

fn fmt_bytes(v: f64) -> String {
    bytes(v.max(0.0).round() as u64)
}

fn figure<'a>(r: &'a Result, key: &str) -> Option<&'a RunStats> {
    match key {
        "wall" => r.wall.as_ref(),
        "peak" => r.peak.as_ref(),
        "tree" => r.tree.as_ref(),
        _ => None,
    }
    .filter(|f| !f.values.is_empty())
}

/// The picture of a bench report (its JSON, as `bench --json` writes it).
pub fn bench(report: &serde_json::Value) -> String {
    let d = BenchData::of(report);
    let mut doc = Doc::default();
    doc.text(
        16.0,
        26.0,
        Anchor::Start,
        "font-size=\"16\" font-weight=\"bold\" fill=\"#1d232a\"",
        "spacetime bench",
    );
    let what = format!(
        "{} commands{}; each dot a run, black: mean ± σ, purple tick: median",
        d.results.len(),
        if d.interrupted { " (interrupted)" } else { "" }
    );
    doc.text(
        180.0,
        26.0,
        Anchor::Start,
        &format!("fill=\"{MUTED}\" id=\"headline\""),
        &what,
    );
    let mut y = 40.0;
    for (key, title, fmt) in FIGURES {
        if d.results.iter().any(|r| figure(r, key).is_some()) {
            y = strip(&mut doc, &d, (key, title, fmt), y);
        }
    }
    doc.text(
        16.0,
        y + 12.0,
        Anchor::Start,
        &format!("font-size=\"10\" fill=\"{MUTED}\""),
        &format!("spacetime {}", d.version),
    );
    doc.finish((y + 24.0).ceil(), "spacetime bench", "bench")
}

/// The range every run of a figure falls in, with a margin so the extreme dots show whole.
fn range(d: &BenchData, key: &str) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in d
        .results
        .iter()
        .filter_map(|r| figure(r, key))
        .flat_map(|f| f.values.iter())
    {
        lo = lo.min(*v);
        hi = hi.max(*v);
    }
    if hi <= lo {
        return ((lo * 0.95 - 1.0).max(0.0), hi * 1.05 + 1.0);
    }
    let pad = (hi - lo) * 0.05;
    ((lo - pad).max(0.0), hi + pad)
}

/// One figure: a title, a row per command, the scale's labels below.
fn strip(doc: &mut Doc, d: &BenchData, (key, title, fmt): (&str, &str, Format), y: f64) -> f64 {
    doc.text(
        16.0,
        y + 20.0,
        Anchor::Start,
        "font-size=\"13\" font-weight=\"bold\" fill=\"#1d232a\"",
        title,
    );
    let (lo, hi) = range(d, key);
    let x = Scale {
        x: STRIP_X,
        w: WIDTH - STRIP_X - STRIP_RIGHT,
        lo,
        hi,
    };
    let _ = writeln!(doc.out, "<g class=\"figure\" data-figure=\"{key}\">");
    let top = y + 30.0;
    for (k, r) in d.results.iter().enumerate() {
        let row_y = top + k as f64 * ROW_H;
        doc.line(
            x.x,
            row_y + ROW_H / 2.0,
            x.x + x.w,
            row_y + ROW_H / 2.0,
            GRID,
        );
        command_row(doc, r, k, figure(r, key), (&x, row_y, fmt));
    }
    doc.raw("</g>\n");
    let bottom = top + d.results.len() as f64 * ROW_H;
    let ticks: Vec<f64> = (0..=4).map(|k| lo + (hi - lo) * k as f64 / 4.0).collect();
    x.labels(doc, bottom + 12.0, &ticks, &fmt);
    bottom + 18.0
}

/// A command's row: its name and figures on the left, its runs on the strip.
fn command_row(
    doc: &mut Doc,
    r: &Result,
    k: usize,
    f: Option<&RunStats>,
    (x, y, fmt): (&Scale, f64, Format),
) {
    let failed = r.failed_runs > 0;
    let name_fill = if failed { FAILURE } else { "#1d232a" };
    doc.text(
        16.0,
        y + 14.0,
        Anchor::Start,
        &format!("font-family=\"{MONO}\" font-size=\"11\" fill=\"{name_fill}\""),
        &cut(&r.command, 56),
    );
    let Some(f) = f else {
        doc.text(
            16.0,
            y + 28.0,
            Anchor::Start,
            &format!("font-size=\"11\" fill=\"{MUTED}\""),
            "no figure",
        );
        return;
    };
    let mut s = match (f.mean, f.stddev) {
        (Some(m), Some(sd)) => format!("{} ± {}", fmt(m), fmt(sd)),
        (Some(m), None) => fmt(m),
        _ => "?".into(),
    };
    if let Some(med) = f.median {
        let _ = write!(s, " · median {}", fmt(med));
    }
    let n = f.values.len();
    let _ = write!(s, " · {n} {}", if n == 1 { "run" } else { "runs" });
    if failed {
        let _ = write!(s, " · {} failed", r.failed_runs);
    }
    let mean_attr = f
        .mean
        .map_or(String::new(), |m| format!(" data-mean=\"{m}\""));
    doc.text(
        16.0,
        y + 28.0,
        Anchor::Start,
        &format!(
            "font-size=\"11\" fill=\"{MUTED}\" class=\"stats\" data-command=\"{k}\"{mean_attr}"
        ),
        &s,
    );
    let mid = y + ROW_H / 2.0;
    for (j, v) in f.values.iter().enumerate() {
        // Spread vertically so equal values still show as many dots.
        let jitter = ((j * 7919) % 13) as f64 - 6.0;
        let _ = writeln!(
            doc.out,
            "<circle class=\"run\" data-value=\"{v}\" cx=\"{:.2}\" cy=\"{:.1}\" r=\"3\" fill=\"{}\" \
             fill-opacity=\"0.75\"><title>{} run {}: {}</title></circle>",
            x.at(*v),
            mid + jitter * 1.2,
            r.colour,
            escape(&cut(&r.command, 80)),
            j + 1,
            fmt(*v)
        );
    }
    if let Some(m) = f.mean {
        let sd = f.stddev.unwrap_or(0.0);
        let (a, b) = (x.at((m - sd).max(x.lo)), x.at((m + sd).min(x.hi)));
        let line = |x1: f64, y1: f64, x2: f64, y2: f64| {
            format!(
                "<line x1=\"{x1:.2}\" y1=\"{y1:.1}\" x2=\"{x2:.2}\" y2=\"{y2:.1}\" stroke=\"#111111\" stroke-width=\"2\"/>"
            )
        };
        doc.raw(&line(a, mid, b, mid));
        doc.raw(&line(x.at(m), mid - 9.0, x.at(m), mid + 9.0));
        doc.raw("\n");
    }
    if let Some(med) = f.median {
        let _ = writeln!(
            doc.out,
            "<line class=\"median\" x1=\"{0:.2}\" y1=\"{1:.1}\" x2=\"{0:.2}\" y2=\"{2:.1}\" stroke=\"{MEDIAN}\" stroke-width=\"1.5\"/>",
            x.at(med),
            mid - 7.0,
            mid + 7.0
        );
    }
}
