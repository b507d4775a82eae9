//! `--svg FILE`: the report as one static picture, for a CI artefact or a chat — a trace's
//! memory and CPU over time (the peak marked) and its processes on one time axis; a bench's
//! runs per command. It draws the same projection of the model as the HTML page
//! ([`super::plot`]), with another renderer.
//!
//! The file stands alone and renders alike in a browser and an image viewer: no script, no
//! style sheet, no external font or image (generic font families only), an explicit
//! `width`, `height` and `viewBox`, an opaque background, colours as `#rrggbb`. Every string
//! (argv, labels, paths) is escaped for XML text and attributes, and the characters XML 1.0
//! cannot hold (C0 controls, U+FFFE, U+FFFF) become U+FFFD, so any byte a traced process
//! chose leaves the file well-formed. Hovering a bar or a run in a browser shows its
//! figures through SVG's own `<title>` tooltips.

mod bench;
mod trace;

use std::fmt::Write;

use super::Report;

pub use bench::bench;

/// The picture of a trace report.
pub fn trace(r: &Report) -> String {
    trace::render(&super::plot::trace::TraceData::of(r))
}

/// Width of every picture, in px.
const WIDTH: f64 = 1200.0;
/// The plot's left edge (room for the y labels) and its margin on the right.
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const FONT: &str = "DejaVu Sans, Liberation Sans, Arial, Helvetica, sans-serif";
const MONO: &str = "DejaVu Sans Mono, Liberation Mono, Menlo, monospace";
const MUTED: &str = "#5d6975";
const GRID: &str = "#d5d9de";

/// Text made safe for XML content and attribute values.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // What XML 1.0 cannot hold at all, and what would reflow or hide text.
            '\t' | '\n' | '\r' => out.push(' '),
            c if c.is_control() || c == '\u{fffe}' || c == '\u{ffff}' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// A time label, in the summary's units ("0" at the origin).
fn time(ns: f64) -> String {
    match ns.max(0.0).round() as u64 {
        0 => "0".into(),
        n => crate::util::units::duration_ns(n),
    }
}

/// At most `max` characters of `s`, an ellipsis marking a cut.
fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
    t.push('…');
    t
}

/// An SVG document being written: elements appended as text, the root element put around
/// them at the end (its height known then).
#[derive(Default)]
struct Doc {
    out: String,
}

/// How a text is anchored at its x.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Anchor {
    Start,
    Middle,
    End,
}

impl Anchor {
    fn name(self) -> &'static str {
        match self {
            Anchor::Start => "start",
            Anchor::Middle => "middle",
            Anchor::End => "end",
        }
    }
}

impl Doc {
    fn raw(&mut self, s: &str) {
        self.out.push_str(s);
    }

    /// A text element; `attrs` are written as they are (the caller's own, never user bytes).
    fn text(&mut self, x: f64, y: f64, anchor: Anchor, attrs: &str, s: &str) {
        let _ = writeln!(
            self.out,
            "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"{}\" {attrs}>{}</text>",
            anchor.name(),
            escape(s)
        );
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str) {
        let _ = writeln!(
            self.out,
            "<line x1=\"{x1:.1}\" y1=\"{y1:.1}\" x2=\"{x2:.1}\" y2=\"{y2:.1}\" stroke=\"{stroke}\" stroke-width=\"1\"/>"
        );
    }

    /// The whole document, `height` px tall.
    fn finish(self, height: f64, title: &str, kind: &str) -> String {
        let mut out = String::with_capacity(self.out.len() + 512);
        let _ = write!(
            out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
             <svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{WIDTH}\" \
             height=\"{height}\" viewBox=\"0 0 {WIDTH} {height}\" font-family=\"{FONT}\" \
             font-size=\"12\" data-kind=\"{kind}\">\n<title>{}</title>\n\
             <rect x=\"0\" y=\"0\" width=\"{WIDTH}\" height=\"{height}\" fill=\"#ffffff\"/>\n",
            escape(title)
        );
        out.push_str(&self.out);
        out.push_str("</svg>\n");
        out
    }
}

/// A horizontal scale: values `lo..hi` onto pixels `x..x + w`.
#[derive(Clone, Copy)]
struct Scale {
    x: f64,
    w: f64,
    lo: f64,
    hi: f64,
}

impl Scale {
    fn at(&self, v: f64) -> f64 {
        self.x + (v - self.lo) / (self.hi - self.lo).max(1e-9) * self.w
    }

    /// Round values (1, 2 or 5 × 10^k) within the range, about one per 110 px.
    fn ticks(&self) -> Vec<f64> {
        let want = (self.w / 110.0).floor().max(2.0);
        let raw = (self.hi - self.lo) / want;
        let mut p = 10f64.powf(raw.max(1e-12).log10().floor());
        for m in [1.0, 2.0, 5.0, 10.0] {
            if p * m >= raw {
                p *= m;
                break;
            }
        }
        let first = (self.lo / p - 1e-9).ceil() as i64;
        (first..)
            .map(|k| k as f64 * p)
            .take_while(|&v| v <= self.hi + p * 1e-9)
            .take(64)
            .collect()
    }

    /// Labels under the axis at `y`: centred on their ticks, except that a first or last one
    /// that would pass the picture's edge is anchored at its tick instead (never cut).
    fn labels(&self, doc: &mut Doc, y: f64, values: &[f64], fmt: &dyn Fn(f64) -> String) {
        for &v in values {
            let s = fmt(v);
            let x = self.at(v);
            // A generous estimate of the text's width at 11 px.
            let half = s.chars().count() as f64 * 3.6;
            let anchor = if x + half > WIDTH - 4.0 {
                Anchor::End
            } else if x - half < 4.0 {
                Anchor::Start
            } else {
                Anchor::Middle
            };
            doc.text(
                x,
                y,
                anchor,
                &format!("font-size=\"11\" fill=\"{MUTED}\" class=\"x-label\""),
                &s,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_a_process_chose_stays_text() {
        let hostile = "</text><script>alert(1)</script>&amp;\"'\u{1}\u{1b}[31m\u{7f}\u{fffe}\n";
        let e = escape(hostile);
        assert!(
            !e.contains('<') && !e.contains('>') && !e.contains('"'),
            "{e}"
        );
        assert!(
            !e.chars().any(|c| c.is_control() || c == '\u{fffe}'),
            "{e:?}"
        );
        assert!(e.starts_with("&lt;/text&gt;&lt;script&gt;"), "{e}");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
    }

    #[test]
    fn ticks_are_round_and_inside() {
        let s = Scale {
            x: 72.0,
            w: 1104.0,
            lo: 0.0,
            hi: 1e9,
        };
        let t = s.ticks();
        assert_eq!(t.first().copied(), Some(0.0));
        assert_eq!(t.last().copied(), Some(1e9));
        assert!(t.len() >= 5 && t.len() <= 11, "{t:?}");
        assert!((s.at(1e9) - (72.0 + 1104.0)).abs() < 1e-9);
    }
}
