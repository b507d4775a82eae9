//! A terminal chart of memory over time: a filled area, with bytes on the y axis and the time
//! since the start on the x axis, as wide as asked.
//!
//! Each column shows the largest value the series took during its slice of time, so a spike
//! shorter than a column is never lost. Eighth blocks (`▁▂▃▄▅▆▇█`) give each row eight
//! levels; without Unicode the area is drawn with `#` (and `_` for a cell filled less than
//! half), and without color there are no escape sequences at all.
//!
//! ```text
//! tree RSS
//!   1 GiB ┤                                         ▂▂▂▅▅▅████
//!         │                               ▁▁▁▁▄▄▄▇▇▇██████████
//!         │                         ▃▃▃▆▆▆████████████████████
//! 0.5 GiB ┤               ▂▂▂▂▅▅▅█████████████████████████████
//!         │      ▁▁▁▄▄▄▇▇▇████████████████████████████████████
//!         │▃▃▃▆▆▆█████████████████████████████████████████████
//!       0 └┬────────────────────┬────────────────────┬────────
//!          0                    0.5 s                1.0 s
//! ```

use std::fmt::Write;

use crate::model::timeline::Point;

/// How the chart may draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// ANSI colors.
    pub color: bool,
    /// Block and box-drawing characters (else ASCII).
    pub unicode: bool,
}

impl Style {
    /// What suits the output: color only on a terminal and without `NO_COLOR` (or
    /// `TERM=dumb`); Unicode unless the locale is not UTF-8 ([`crate::util::term::ascii`]).
    pub fn detect(is_terminal: bool) -> Style {
        Style {
            color: is_terminal && !crate::util::term::no_color(),
            unicode: !crate::util::term::ascii(),
        }
    }
}

/// What to draw and how big.
#[derive(Clone, Copy, Debug)]
pub struct Spec<'a> {
    pub title: &'a str,
    /// The time range shown (CLOCK_MONOTONIC ns; labels are relative to `t0_ns`).
    pub t0_ns: u64,
    pub end_ns: u64,
    /// Total width in columns, labels included.
    pub width: usize,
    /// Rows of the plot area.
    pub height: usize,
    pub style: Style,
    /// The peak the report states: the y axis reaches at least this high, so the chart never
    /// contradicts the headline (0: the series' own maximum).
    pub peak_bytes: u64,
    /// What the values are, for the y axis's labels.
    pub unit: Unit,
    /// Width of the y labels at least (charts stacked with the same value share their x axis).
    pub min_label_w: usize,
}

/// What a chart's values are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Bytes,
    /// Thousandths of a core (CPU time per unit of time).
    Millicores,
}

const BLOCKS: [char; 9] = [' ', '▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
const COLOR: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

struct Glyphs {
    tick_row: char,
    row: char,
    corner: char,
    line: char,
    tick: char,
}

const UNICODE: Glyphs = Glyphs {
    tick_row: '┤',
    row: '│',
    corner: '└',
    line: '─',
    tick: '┬',
};
const ASCII: Glyphs = Glyphs {
    tick_row: '+',
    row: '|',
    corner: '+',
    line: '-',
    tick: '+',
};

/// The largest value of the step series during each of `cols` equal slices of
/// `[t0, end)`; 0 before the first point.
pub fn column_max(series: &[Point], t0: u64, end: u64, cols: usize) -> Vec<u64> {
    let span = end.saturating_sub(t0).max(1) as u128;
    let mut out = vec![0; cols];
    let mut i = 0;
    let mut cur = 0;
    while i < series.len() && series[i].ts_ns <= t0 {
        cur = series[i].bytes;
        i += 1;
    }
    for (c, slot) in out.iter_mut().enumerate() {
        let col_end = t0 + (span * (c as u128 + 1) / cols as u128) as u64;
        let mut m = cur;
        while i < series.len() && series[i].ts_ns < col_end {
            cur = series[i].bytes;
            m = m.max(cur);
            i += 1;
        }
        *slot = m;
    }
    out
}

/// Binary unit of a value, for labels.
fn unit_of(v: u64) -> (u64, &'static str) {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut u = 0;
    while u + 1 < UNITS.len() && v >= 1u64 << (10 * (u + 1)) {
        u += 1;
    }
    (1u64 << (10 * u), UNITS[u])
}

/// The smallest round number at or above `max`, in `max`'s binary unit.
pub fn nice_ceiling(max: u64) -> u64 {
    if max == 0 {
        return 0;
    }
    let (unit, _) = unit_of(max);
    let v = max as f64 / unit as f64;
    let mut scale = 1.0;
    while scale * 10.0 <= v {
        scale *= 10.0;
    }
    const STEPS: [f64; 11] = [1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0];
    let step = STEPS
        .iter()
        .map(|s| s * scale)
        .find(|&s| s >= v - 1e-9)
        .unwrap_or(10.0 * scale);
    ((step * unit as f64).ceil() as u64).max(max)
}

/// A y label in the unit of the top of the scale: "1.25 GiB", "0.6 GiB", "0".
pub(crate) fn y_label(v: u64, top: u64) -> String {
    if v == 0 {
        return "0".into();
    }
    let (unit, name) = unit_of(top);
    let x = v as f64 / unit as f64;
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} {name}")
}

/// Renders the chart of a step series: a title line, `height` rows, the time axis and its
/// labels. Each column shows the largest value of its slice of time.
pub fn render(series: &[Point], spec: &Spec) -> String {
    if series.is_empty() {
        return format!("{}\n  (no memory samples)\n", title(spec));
    }
    let max = series.iter().map(|p| p.bytes).max().unwrap_or(0);
    let cols = move |plot_w: usize| column_max(series, spec.t0_ns, spec.end_ns, plot_w);
    draw(max, &cols, spec)
}

/// Renders a chart whose column values are given (`values(plot_width)`), such as cores in
/// use averaged over each column.
pub fn render_columns(max: u64, values: &dyn Fn(usize) -> Vec<u64>, spec: &Spec) -> String {
    draw(max, values, spec)
}

fn title(spec: &Spec) -> String {
    let t = crate::util::term::fit(spec.title, spec.width);
    if spec.style.color {
        format!("{BOLD}{t}{RESET}")
    } else {
        t
    }
}

/// The top of the y axis and the label of a value, for the chart's unit.
fn scale(max: u64, unit: Unit) -> u64 {
    match unit {
        Unit::Bytes => nice_ceiling(max).max(1),
        // Whole cores.
        Unit::Millicores => max.div_ceil(1000).max(1) * 1000,
    }
}

fn label(v: u64, top: u64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => y_label(v, top),
        Unit::Millicores if v == 0 => "0".into(),
        Unit::Millicores => {
            let cores = v as f64 / 1000.0;
            let s = format!("{cores:.1}");
            let s = s.trim_end_matches('0').trim_end_matches('.');
            format!("{s} {}", if s == "1" { "core" } else { "cores" })
        }
    }
}

fn draw(max: u64, values: &dyn Fn(usize) -> Vec<u64>, spec: &Spec) -> String {
    let mut out = String::new();
    let style = spec.style;
    let g = if style.unicode { &UNICODE } else { &ASCII };
    let _ = writeln!(out, "{}", title(spec));
    let height = spec.height.max(2);
    let max = max.max(spec.peak_bytes);
    let top = scale(max, spec.unit);
    // Labels on the top row, the middle one, and the axis line.
    let mid_row = height / 2;
    let row_top = |r: usize| (top as u128 * (height - r) as u128 / height as u128) as u64;
    let labels: Vec<Option<String>> = (0..height)
        .map(|r| (r == 0 || r == mid_row).then(|| label(row_top(r), top, spec.unit)))
        .collect();
    let label_w = labels
        .iter()
        .flatten()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(1)
        .max(spec.min_label_w);
    let plot_w = spec.width.saturating_sub(label_w + 2).max(10);
    let cols = values(plot_w);
    // Heights in eighths of a row, rounded up so that any memory at all shows.
    let eighths: Vec<u64> = cols
        .iter()
        .map(|&v| (v as u128 * height as u128 * 8).div_ceil(top as u128) as u64)
        .collect();
    for (r, label) in labels.iter().enumerate() {
        let axis = if label.is_some() { g.tick_row } else { g.row };
        let _ = write!(out, "{:>label_w$} {axis}", label.as_deref().unwrap_or(""));
        let base = (height - 1 - r) as u64 * 8;
        let row: String = eighths
            .iter()
            .map(|&h| {
                let fill = h.saturating_sub(base).min(8) as usize;
                match (style.unicode, fill) {
                    (true, f) => BLOCKS[f],
                    (false, 0) => ' ',
                    (false, 1..=3) => '_',
                    (false, _) => '#',
                }
            })
            .collect();
        let row = row.trim_end();
        if style.color && !row.is_empty() {
            let _ = writeln!(out, "{COLOR}{row}{RESET}");
        } else {
            let _ = writeln!(out, "{row}");
        }
    }
    render_time_axis(&mut out, spec, g, label_w, plot_w);
    out
}

/// A round time step giving about `want` ticks over `span`: 1, 2 or 5 × 10^k ns.
fn time_step(span: u64, want: u64) -> u64 {
    let raw = (span / want.max(1)).max(1);
    let mut p = 1u64;
    loop {
        for m in [1, 2, 5] {
            if p * m >= raw {
                return p * m;
            }
        }
        p = p.saturating_mul(10);
    }
}

/// A tick label in the unit of the step: "0", "200 ms", "1.5 s".
fn tick_label(ns: u64, step: u64) -> String {
    if ns == 0 {
        return "0".into();
    }
    let (unit, name) = match step {
        s if s >= 1_000_000_000 / 10 => (1e9, "s"),
        s if s >= 1_000_000 / 10 => (1e6, "ms"),
        s if s >= 1_000 / 10 => (1e3, "µs"),
        _ => (1.0, "ns"),
    };
    let x = ns as f64 / unit;
    let decimals = if step as f64 >= unit { 0 } else { 1 };
    format!("{x:.decimals$} {name}")
}

/// The axis line with ticks at round times, and their labels under it.
fn render_time_axis(out: &mut String, spec: &Spec, g: &Glyphs, label_w: usize, plot_w: usize) {
    let span = spec.end_ns.saturating_sub(spec.t0_ns).max(1);
    let step = time_step(span, (plot_w / 12).max(2) as u64);
    let ticks: Vec<(usize, u64)> = (0..)
        .map(|k| k * step)
        .take_while(|&t| t <= span)
        .map(|t| ((t as u128 * plot_w as u128 / span as u128) as usize, t))
        .filter(|&(c, _)| c < plot_w)
        .collect();
    let mut axis: Vec<char> = vec![g.line; plot_w];
    for &(c, _) in &ticks {
        axis[c] = g.tick;
    }
    let axis: String = axis.into_iter().collect();
    let _ = writeln!(out, "{:>label_w$} {}{axis}", "0", g.corner);
    // Labels start under their tick; one that would run into the previous one, or past the
    // end, is left out.
    let mut line: Vec<char> = vec![' '; plot_w];
    let mut free_from = 0;
    for &(c, t) in &ticks {
        let text: Vec<char> = tick_label(t, step).chars().collect();
        if c < free_from || c + text.len() > plot_w {
            continue;
        }
        line[c..c + text.len()].copy_from_slice(&text);
        free_from = c + text.len() + 2;
    }
    let line: String = line.into_iter().collect();
    let _ = writeln!(out, "{:label_w$}  {}", "", line.trim_end());
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;
    const MS: u64 = 1_000_000;

    fn plain(unicode: bool) -> Style {
        Style {
            color: false,
            unicode,
        }
    }

    fn spec(width: usize, height: usize, end_ns: u64, style: Style) -> Spec<'static> {
        Spec {
            title: "tree RSS",
            t0_ns: 0,
            end_ns,
            width,
            height,
            style,
            peak_bytes: 0,
            unit: Unit::Bytes,
            min_label_w: 0,
        }
    }

    /// 16 steps from 64 MiB to 1 GiB over 1.2 s.
    fn staircase() -> Vec<Point> {
        (0..16u64)
            .map(|i| Point::new(i * 75 * MS, (i + 1) * GIB / 16))
            .collect()
    }

    #[test]
    fn every_line_fits_the_width() {
        let long = "memory (tree RSS, sampled from statm) · peak 1.2 GiB at 2m05s";
        for width in [120, 80, 60, 40, 30] {
            for end in [1_200 * MS, 7_530_000 * MS] {
                let sp = Spec {
                    title: long,
                    ..spec(width, 6, end, plain(true))
                };
                let s = render(&staircase(), &sp);
                for l in s.lines() {
                    let w = crate::util::term::width(l);
                    assert!(w <= width, "{w} over {width}: {l:?}\n{s}");
                }
            }
        }
    }

    #[test]
    fn staircase_rises_left_to_right() {
        let s = render(&staircase(), &spec(60, 6, 1_200 * MS, plain(true)));
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 1 + 6 + 2, "{s}");
        assert_eq!(lines[0], "tree RSS");
        assert!(lines[1].starts_with("  1 GiB ┤"), "{s}");
        assert!(lines[4].starts_with("0.5 GiB ┤"), "{s}");
        assert!(lines[7].starts_with("      0 └┬"), "{s}");
        assert_eq!(
            lines[8].split_whitespace().collect::<Vec<_>>(),
            ["0", "0.5", "s", "1.0", "s"]
        );
        // Each row is blank on the left and full on the right.
        for row in &lines[1..7] {
            let plot: Vec<char> = row.chars().skip(9).collect();
            assert_eq!(plot.last(), Some(&'█'), "{s}");
            let first = plot.iter().position(|&c| c != ' ').expect("filled");
            assert!(plot[first..].iter().all(|&c| c != ' '), "{s}");
        }
        // Higher rows start further right.
        let starts: Vec<usize> = lines[1..7]
            .iter()
            .map(|r| r.chars().skip(9).position(|c| c != ' ').unwrap_or(0))
            .collect();
        assert!(starts.windows(2).all(|w| w[0] > w[1]), "{starts:?}\n{s}");
    }

    #[test]
    fn snapshot() {
        let expected = "\
tree RSS
  1 GiB ┤                    ▂▄▄▆▆██
        │             ▂▂▄▆▆█████████
0.5 GiB ┤      ▂▂▄▄▆████████████████
        │▂▄▄▆▆██████████████████████
      0 └┬─────────────────────┬────
         0                     1 s
";
        let s = render(&staircase(), &spec(36, 4, 1_200 * MS, plain(true)));
        assert_eq!(s, expected, "\n{s}");
        let ascii = "\
tree RSS
  1 GiB +                    _######
        |             __############
0.5 GiB +      __###################
        |_##########################
      0 ++---------------------+----
         0                     1 s
";
        let s = render(&staircase(), &spec(36, 4, 1_200 * MS, plain(false)));
        assert_eq!(s, ascii, "\n{s}");
    }

    #[test]
    fn a_one_sample_spike_is_never_lost() {
        // 10 MiB for 10 s, with 1 GiB for 1 µs in the middle.
        let base = 10 << 20;
        let series = [
            Point::new(0, base),
            Point::new(5_000 * MS, GIB),
            Point::new(5_000 * MS + 1_000, base),
        ];
        for width in [40, 200] {
            let s = render(&series, &spec(width, 8, 10_000 * MS, plain(true)));
            let lines: Vec<&str> = s.lines().collect();
            assert_eq!(lines[1].matches('█').count(), 1, "width {width}\n{s}");
            // The spike is in the middle.
            let at = lines[1].chars().position(|c| c == '█').expect("spike");
            let plot_start = lines[1].chars().position(|c| c == '┤').expect("axis") + 1;
            let frac = (at - plot_start) as f64 / (width - plot_start) as f64;
            assert!((0.45..0.55).contains(&frac), "{frac}\n{s}");
            // The 10 MiB base shows on the bottom row.
            assert!(!lines[8].contains("  ") || lines[8].contains('▁'), "{s}");
            for l in &lines[1..] {
                assert!(l.chars().count() <= width, "{l}");
            }
            assert_eq!(lines[9].chars().count(), width, "the axis spans the width");
        }
    }

    #[test]
    fn the_axis_reaches_the_stated_peak() {
        // A series that stops below the peak the report states (1 GiB).
        let series = [Point::new(0, 100 << 20), Point::new(500 * MS, 300 << 20)];
        let mut sp = spec(40, 4, 1_000 * MS, plain(true));
        sp.peak_bytes = GIB;
        let s = render(&series, &sp);
        assert!(
            s.lines()
                .nth(1)
                .is_some_and(|l| l.trim_start().starts_with("1 GiB ┤")),
            "{s}"
        );
    }

    #[test]
    fn color_only_when_asked_and_empty_series() {
        let on = render(
            &staircase(),
            &spec(
                40,
                4,
                1_200 * MS,
                Style {
                    color: true,
                    unicode: true,
                },
            ),
        );
        assert!(on.contains("\x1b[36m") && on.contains(RESET));
        let off = render(&staircase(), &spec(40, 4, 1_200 * MS, plain(true)));
        assert!(!off.contains('\x1b'));
        let empty = render(&[], &spec(40, 4, 1, plain(true)));
        // Cores: whole cores at the top.
        let cores = render_columns(
            1500,
            &|w| vec![1500; w],
            &Spec {
                unit: Unit::Millicores,
                ..spec(40, 4, 1_000 * MS, plain(true))
            },
        );
        assert!(
            cores
                .lines()
                .nth(1)
                .is_some_and(|l| l.starts_with("2 cores ┤")),
            "{cores}"
        );
        assert!(
            cores
                .lines()
                .nth(3)
                .is_some_and(|l| l.starts_with(" 1 core ┤")),
            "{cores}"
        );
        assert_eq!(empty, "tree RSS\n  (no memory samples)\n");
    }

    #[test]
    fn scale_and_columns() {
        assert_eq!(nice_ceiling(1_000), 1_000);
        assert_eq!(
            nice_ceiling(GIB + GIB / 10),
            (1.2 * GIB as f64).ceil() as u64
        );
        assert_eq!(nice_ceiling(700 << 20), 800 << 20);
        assert_eq!(
            y_label(GIB * 6 / 10, nice_ceiling(GIB + GIB / 10)),
            "0.6 GiB"
        );
        assert_eq!(time_step(1_200 * MS, 2), 1_000 * MS);
        assert_eq!(time_step(10_000 * MS, 10), 1_000 * MS);
        assert_eq!(tick_label(1_500 * MS, 500 * MS), "1.5 s");
        assert_eq!(tick_label(40 * MS, 20 * MS), "40 ms");
        let pts = [Point::new(10, 5), Point::new(25, 9), Point::new(26, 1)];
        assert_eq!(column_max(&pts, 0, 40, 4), [0, 5, 9, 1]);
        assert_eq!(column_max(&pts, 30, 40, 2), [1, 1]);
    }
}
