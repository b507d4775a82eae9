//! The picture of a trace: a headline, then the tree's memory (its peak marked) and the cores
//! in use over time, and the processes on the same time axis — one plot box and one scale
//! for all three, so a process lines up with its memory and CPU.

use std::fmt::Write;

use super::{cut, escape, Anchor, Doc, Scale, GRID, LEFT, MONO, MUTED, RIGHT, WIDTH};
use crate::{
    model::timeline::Point,
    report::{
        chart,
        plot::{trace::TraceData, FAILURE, NO_PROGRAM},
    },
    util::units::{bytes, duration_ns},
};

const MEM_H: f64 = 150.0;
const CPU_H: f64 = 70.0;
const PATH_H: f64 = 14.0;
const LANE_H: f64 = 12.0;
/// Lanes a depth of the tree gets at most (processes beyond share its last lane), depths
/// drawn apart at most, and rows in all: the picture stays a picture for any tree.
const LANES: usize = 16;
const MAX_DEPTH: usize = 24;
const MAX_ROWS: usize = 64;
/// Programs named in the legend.
const LEGEND: usize = 12;
const MEM_FILL: &str = "#2684a0";
const CPU_FILL: &str = "#cd7828";

/// Each process's row: its depth's band, and a lane within it where it overlaps no one
/// else of its depth (as the page lays them out).
struct Rows {
    row: Vec<usize>,
    count: usize,
}

fn rows(d: &TraceData, wall: u64) -> Rows {
    let p = &d.p;
    let n = p.pid.len();
    let mut depth = vec![0usize; n];
    let mut ends: Vec<Vec<u64>> = vec![Vec::new(); MAX_DEPTH + 1];
    let mut lane = vec![0usize; n];
    for i in 0..n {
        let parent = p.parent[i];
        depth[i] = match usize::try_from(parent) {
            Ok(q) if q < i => (depth[q] + 1).min(MAX_DEPTH),
            _ => 0,
        };
        let e = &mut ends[depth[i]];
        let k = match e.iter().position(|&end| end <= p.start[i]) {
            Some(k) => k,
            None if e.len() < LANES => {
                e.push(0);
                e.len() - 1
            }
            None => e.len() - 1,
        };
        e[k] = e[k].max(p.end[i].unwrap_or(wall));
        lane[i] = k;
    }
    let mut first = Vec::with_capacity(ends.len());
    let mut count = 0;
    for e in &ends {
        first.push(count);
        count += e.len();
    }
    let row = (0..n)
        .map(|i| (first[depth[i]] + lane[i]).min(MAX_ROWS - 1))
        .collect();
    Rows {
        row,
        count: count.clamp(1, MAX_ROWS),
    }
}

/// The picture of a trace report's projection.
pub(super) fn render(d: &TraceData) -> String {
    let wall = d.wall_ns.max(1);
    let x = Scale {
        x: LEFT,
        w: WIDTH - LEFT - RIGHT,
        lo: 0.0,
        hi: wall as f64,
    };
    let rows = rows(d, wall);
    let mut doc = Doc::default();
    let mut y = header(&mut doc, d);
    y = memory(&mut doc, d, &x, y);
    y = cpu(&mut doc, d, &x, y);
    y = processes(&mut doc, d, &x, &rows, y);
    y = legend(&mut doc, d, y);
    let foot = format!("spacetime {} · {} · started {}", d.version, d.host, d.start);
    doc.text(
        16.0,
        y + 14.0,
        Anchor::Start,
        &format!("font-size=\"10\" fill=\"{MUTED}\""),
        &foot,
    );
    doc.finish(
        (y + 26.0).ceil(),
        &format!("spacetime: {}", d.command),
        "trace",
    )
}

/// The command and the run's figures; returns where the next section starts.
fn header(doc: &mut Doc, d: &TraceData) -> f64 {
    doc.text(
        16.0,
        26.0,
        Anchor::Start,
        "font-size=\"16\" font-weight=\"bold\" fill=\"#1d232a\"",
        "spacetime",
    );
    doc.text(
        112.0,
        26.0,
        Anchor::Start,
        &format!("font-family=\"{MONO}\" font-size=\"12\" fill=\"{MUTED}\" id=\"command\""),
        &cut(&d.command, 145),
    );
    let peak = match (d.tree_peak_rss_bytes, d.tree_peak_at_ns) {
        (Some(b), Some(at)) => format!("tree peak {} at {}", bytes(b), duration_ns(at)),
        _ => "tree peak unknown".into(),
    };
    let largest = d.peak_index.map_or(String::new(), |i| {
        format!(
            " · largest process {} ({})",
            bytes(d.peak_rss_bytes),
            cut(&d.strings[d.p.label[i] as usize], 40)
        )
    });
    let cores = d
        .parallelism
        .map_or(String::new(), |c| format!(" · {c:.2} cores on average"));
    let line = format!(
        "{} · wall {} · CPU {}{cores} · {} processes · {peak}{largest}",
        d.status,
        duration_ns(d.wall_ns),
        duration_ns(d.cpu_ns),
        d.processes
    );
    let bad = d.exit_code.is_some_and(|c| c != 0);
    let colour = if bad { FAILURE } else { "#1d232a" };
    doc.text(
        16.0,
        48.0,
        Anchor::Start,
        &format!("fill=\"{colour}\" id=\"headline\""),
        &line,
    );
    let mut y = 48.0;
    if !d.failures.is_empty() {
        y += 18.0;
        let first = d.failures[0];
        let s = format!(
            "failed: {} of {} processes (first: pid {} {}, exit {})",
            d.failures.len(),
            d.p.pid.len(),
            d.p.pid[first],
            cut(&d.strings[d.p.label[first] as usize], 60),
            d.p.exit[first].map_or("?".into(), |c| c.to_string())
        );
        let a = format!(
            "fill=\"{FAILURE}\" id=\"failed\" data-count=\"{}\"",
            d.failures.len()
        );
        doc.text(16.0, y, Anchor::Start, &a, &s);
    }
    if !d.complete {
        y += 18.0;
        let s = format!(
            "INCOMPLETE: {} events lost; the figures cover what arrived",
            d.lost_events
        );
        doc.text(16.0, y, Anchor::Start, &format!("fill=\"{FAILURE}\""), &s);
    }
    y + 14.0
}

/// A section's title line; returns the plot's top.
fn title(doc: &mut Doc, y: f64, s: &str) -> f64 {
    doc.text(
        16.0,
        y + 14.0,
        Anchor::Start,
        "font-size=\"12\" font-weight=\"bold\" fill=\"#1d232a\"",
        s,
    );
    y + 24.0
}

/// Grid lines and y labels at `values` (fractions of the height), the time labels below.
fn frame(doc: &mut Doc, x: &Scale, top: f64, h: f64, ylabels: &[(f64, String)]) {
    for (f, s) in ylabels {
        let y = top + h * (1.0 - f);
        doc.line(x.x, y, x.x + x.w, y, GRID);
        doc.text(
            x.x - 6.0,
            y + 4.0,
            Anchor::End,
            &format!("font-size=\"11\" fill=\"{MUTED}\""),
            s,
        );
    }
    x.labels(doc, top + h + 14.0, &x.ticks(), &super::time);
}

/// The tree's RSS over time, each pixel column its highest value (a spike is never lost),
/// the peak marked where the report says it was.
fn memory(doc: &mut Doc, d: &TraceData, x: &Scale, y: f64) -> f64 {
    let top_y = title(doc, y, "Memory: the tree's RSS");
    let points: Vec<Point> = d.memory.iter().map(|&(t, b)| Point::new(t, b)).collect();
    let max = points.iter().map(|p| p.bytes).max().unwrap_or(0);
    let top = chart::nice_ceiling(max.max(d.tree_peak_rss_bytes.unwrap_or(0))).max(1);
    let half = top / 2;
    frame(
        doc,
        x,
        top_y,
        MEM_H,
        &[
            (0.0, "0".into()),
            (0.5, chart::y_label(half, top)),
            (1.0, chart::y_label(top, top)),
        ],
    );
    let yv = |v: u64| top_y + MEM_H * (1.0 - v as f64 / top as f64);
    let cols = x.w.round() as usize;
    let m = chart::column_max(&points, 0, d.wall_ns.max(1), cols);
    let base = yv(0);
    let mut path = format!("M{:.1},{base:.1}", x.x);
    let mut last = None;
    for (c, &v) in m.iter().enumerate() {
        if last != Some(v) {
            let _ = write!(path, "H{:.2}V{:.1}", x.x + c as f64, yv(v));
            last = Some(v);
        }
    }
    let _ = write!(path, "H{:.2}V{base:.1}Z", x.x + x.w);
    let _ = writeln!(
        doc.out,
        "<g id=\"memory\" data-top-bytes=\"{top}\"><path id=\"memory-area\" d=\"{path}\" \
         fill=\"{MEM_FILL}\" fill-opacity=\"0.35\" stroke=\"{MEM_FILL}\" stroke-width=\"1\"/></g>"
    );
    if let (Some(b), Some(at)) = (d.tree_peak_rss_bytes, d.tree_peak_at_ns) {
        let (px, py) = (x.at(at as f64), yv(b));
        let right = px > x.x + x.w * 0.7;
        let s = format!("peak {} at {}", bytes(b), duration_ns(at));
        let _ = write!(
            doc.out,
            "<g id=\"peak\" data-bytes=\"{b}\" data-at-ns=\"{at}\"><circle cx=\"{px:.2}\" \
             cy=\"{py:.1}\" r=\"4\" fill=\"{FAILURE}\"/>"
        );
        let (tx, anchor) = match right {
            true => (px - 7.0, Anchor::End),
            false => (px + 7.0, Anchor::Start),
        };
        doc.text(
            tx,
            (py - 4.0).max(top_y + 10.0),
            anchor,
            &format!("font-size=\"12\" fill=\"{FAILURE}\" id=\"peak-label\""),
            &s,
        );
        doc.raw("</g>\n");
    }
    top_y + MEM_H + 22.0
}

/// Cores in use, as spoken: "1 core", "1.5 cores".
fn cores(v: f64) -> String {
    let s = format!("{v:.1}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "1" {
        "1 core".into()
    } else {
        format!("{s} cores")
    }
}

/// Cores in use over time: each bucket of the report's CPU series a bar.
fn cpu(doc: &mut Doc, d: &TraceData, x: &Scale, y: f64) -> f64 {
    let top_y = title(doc, y, &format!("CPU: cores in use ({})", d.cpu.label));
    let b = d.cpu.bucket_ns.max(1);
    let peak = d.cpu.cpu_ns.iter().copied().max().unwrap_or(0) as f64 / b as f64;
    let top = peak.ceil().max(1.0);
    frame(
        doc,
        x,
        top_y,
        CPU_H,
        &[
            (0.0, "0".into()),
            (0.5, cores(top / 2.0)),
            (1.0, cores(top)),
        ],
    );
    let base = top_y + CPU_H;
    let mut path = String::new();
    for (k, &ns) in d.cpu.cpu_ns.iter().enumerate() {
        if ns == 0 {
            continue;
        }
        let t0 = k as u64 * b;
        let t1 = ((k as u64 + 1) * b).min(d.wall_ns.max(1));
        let (a, z) = (x.at(t0 as f64), x.at(t1 as f64).max(x.at(t0 as f64) + 0.5));
        let h = CPU_H * (ns as f64 / b as f64) / top;
        let _ = write!(path, "M{a:.2},{base:.1}V{:.1}H{z:.2}V{base:.1}Z", base - h);
    }
    let _ = writeln!(
        doc.out,
        "<g id=\"cpu\" data-total-ns=\"{}\"><path d=\"{path}\" fill=\"{CPU_FILL}\" \
         fill-opacity=\"0.8\"/></g>",
        d.cpu.total_ns
    );
    top_y + CPU_H + 22.0
}

/// A process's colour: its program's, or the colour of none.
fn colour_of(d: &TraceData, i: usize) -> &str {
    usize::try_from(d.p.program[i])
        .ok()
        .and_then(|k| d.programs.get(k))
        .map_or(NO_PROGRAM, |g| g.colour.as_str())
}

/// What a bar's tooltip says.
fn bar_title(d: &TraceData, i: usize, wall: u64) -> String {
    let p = &d.p;
    let end = p.end[i].unwrap_or(wall);
    format!(
        "{} · pid {} · {} from {} to {} · peak RSS {} · CPU {} · exit {}",
        d.strings[p.label[i] as usize],
        p.pid[i],
        duration_ns(end.saturating_sub(p.start[i])),
        duration_ns(p.start[i]),
        p.end[i].map_or("the end".into(), duration_ns),
        p.peak[i].map_or("?".into(), bytes),
        duration_ns(p.cpu[i]),
        p.exit[i].map_or("?".into(), |c| c.to_string())
    )
}

/// One bar: a rect with its tooltip, its label inside when it fits.
fn bar(doc: &mut Doc, d: &TraceData, i: usize, (a, b, y): (f64, f64, f64), failed: bool) {
    let stroke = match failed {
        true => format!(" stroke=\"{FAILURE}\" stroke-width=\"1.5\""),
        false => String::new(),
    };
    let _ = write!(
        doc.out,
        "<rect class=\"p\" data-i=\"{i}\" x=\"{a:.2}\" y=\"{y:.1}\" width=\"{:.2}\" \
         height=\"{:.1}\" fill=\"{}\"{stroke}><title>{}</title></rect>",
        b - a,
        LANE_H - 2.0,
        colour_of(d, i),
        escape(&bar_title(d, i, d.wall_ns))
    );
    if b - a > 60.0 {
        let fit = ((b - a - 6.0) / 6.2) as usize;
        doc.text(
            a + 3.0,
            y + LANE_H - 4.0,
            Anchor::Start,
            "font-size=\"9\" fill=\"#111111\"",
            &cut(&d.strings[d.p.label[i] as usize], fit),
        );
    } else {
        doc.raw("\n");
    }
}

/// The processes on the time axis: the critical path's lane on top, then each depth of the
/// tree a band. Bars that fall inside a pixel already drawn in their row are merged into it
/// (failures always drawn).
fn processes(doc: &mut Doc, d: &TraceData, x: &Scale, rows: &Rows, y: f64) -> f64 {
    let top_y = title(
        doc,
        y,
        "Processes: a band per depth of the tree, coloured by program; red outline: failed; top lane: the critical path",
    );
    let wall = d.wall_ns.max(1);
    doc.text(
        x.x - 6.0,
        top_y + PATH_H - 3.0,
        Anchor::End,
        &format!("font-size=\"10\" fill=\"{MUTED}\""),
        "critical path",
    );
    let _ = writeln!(doc.out, "<g id=\"critical-path\">");
    for &(i, s, e) in &d.path {
        let (a, b) = (x.at(s as f64), x.at(e as f64));
        let fill = usize::try_from(i).map_or("#dddddd", |i| colour_of(d, i));
        let _ = writeln!(
            doc.out,
            "<rect x=\"{a:.2}\" y=\"{top_y:.1}\" width=\"{:.2}\" height=\"{PATH_H}\" fill=\"{fill}\"/>",
            (b - a).max(0.5)
        );
    }
    doc.raw("</g>\n");
    let band_y = top_y + PATH_H + 6.0;
    let failed: rustc_hash::FxHashSet<usize> = d.failures.iter().copied().collect();
    let mut drawn = 0usize;
    let mut last_px = vec![f64::NEG_INFINITY; rows.count];
    let _ = writeln!(
        doc.out,
        "<g id=\"processes\" data-processes=\"{}\">",
        d.p.pid.len()
    );
    for (i, &r) in rows.row.iter().enumerate() {
        let a = x.at(d.p.start[i] as f64);
        let b = x.at(d.p.end[i].unwrap_or(wall) as f64).max(a + 0.5);
        let bad = failed.contains(&i);
        if b <= last_px[r] && !bad {
            continue;
        }
        last_px[r] = last_px[r].max(b.ceil());
        bar(doc, d, i, (a, b, band_y + r as f64 * LANE_H), bad);
        drawn += 1;
    }
    doc.raw("</g>\n");
    let _ = writeln!(doc.out, "<desc id=\"bars\">{drawn}</desc>");
    let bottom = band_y + rows.count as f64 * LANE_H + 4.0;
    x.labels(doc, bottom + 12.0, &x.ticks(), &super::time);
    bottom + 20.0
}

/// A swatch and a name for the programs that ran most (by the report's order: peak RSS).
fn legend(doc: &mut Doc, d: &TraceData, y: f64) -> f64 {
    let (mut lx, mut ly) = (16.0, y + 6.0);
    for g in d.programs.iter().take(LEGEND) {
        let s = format!("{} ×{}", cut(&g.name, 40), g.runs);
        let w = 18.0 + s.chars().count() as f64 * 6.6 + 14.0;
        if lx + w > WIDTH - 16.0 && lx > 16.0 {
            lx = 16.0;
            ly += 18.0;
        }
        let _ = writeln!(
            doc.out,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/>",
            ly - 9.0,
            g.colour
        );
        doc.text(
            lx + 14.0,
            ly,
            Anchor::Start,
            "font-size=\"11\" fill=\"#1d232a\"",
            &s,
        );
        lx += w;
    }
    if d.programs.len() > LEGEND {
        let s = format!("and {} more programs", d.programs.len() - LEGEND);
        doc.text(
            lx,
            ly,
            Anchor::Start,
            &format!("font-size=\"11\" fill=\"{MUTED}\""),
            &s,
        );
    }
    ly + 8.0
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
