//! `--html FILE`: the report as one self-contained page that opens offline in any browser.
//!
//! The page is drawn by a small script of spacetime's own on `<canvas>` and with DOM text
//! (no library, no network): a library would have to be vendored, kept and licensed, and a
//! 100 000-process timeline is too many elements for SVG, while a canvas draws it in one pass.
//! The data is a projection of the report model ([`super::plot`], which the SVG draws too)
//! embedded as JSON in a `<script type="application/json">` element with every `<`, `>` and
//! `&` escaped, so no byte of a traced process's argv can close the element or start markup;
//! the script reads it with `JSON.parse` and puts every string into the page with
//! `textContent`, never as HTML.

use serde::Serialize;

use super::{plot, Report};

const CSS: &str = include_str!("page.css");
const COMMON_JS: &str = include_str!("common.js");
const TRACE_JS: &str = include_str!("trace.js");
const BENCH_JS: &str = include_str!("bench.js");

/// JSON that is safe inside a `<script>` element: `<`, `>` and `&` (found only inside
/// strings) become `\u003c`, `\u003e`, `\u0026`; U+2028 and U+2029 are escaped as well.
fn script_json(v: &impl Serialize) -> String {
    let json = serde_json::to_string(v).unwrap_or_else(|_| "null".into());
    let mut out = String::with_capacity(json.len() + 64);
    for c in json.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Text for the page's `<title>`: HTML-escaped.
fn escape_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

fn page(title: &str, data: &str, script: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\
         <title>{}</title><style>{CSS}</style></head>\n<body data-rendered=\"0\" data-errors=\"0\">\
         <noscript>This report is drawn by its own script: allow scripts for this file.</noscript>\
         <main id=\"app\"></main>\n<script type=\"application/json\" id=\"data\">{data}</script>\n\
         <script>{COMMON_JS}\n{script}</script>\n</body></html>\n",
        escape_html(title)
    )
}

/// The page of a trace report.
pub fn trace(r: &Report) -> String {
    let d = plot::trace::TraceData::of(r);
    page(
        &format!("spacetime: {}", r.command.lossy_line()),
        &script_json(&d),
        TRACE_JS,
    )
}

/// The page of a bench report (its JSON, as `bench --json` writes it).
pub fn bench(report: &serde_json::Value) -> String {
    let d = plot::bench::BenchData::of(report);
    page("spacetime bench", &script_json(&d), BENCH_JS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_in_the_data_can_end_the_script_element() {
        let hostile = serde_json::json!({"argv": ["</script><script>alert(1)</script>", "a&b", "<!--", "\u{2028}"]});
        let s = script_json(&hostile);
        assert!(
            !s.contains('<') && !s.contains('>') && !s.contains('&'),
            "{s}"
        );
        assert!(!s.contains('\u{2028}'), "{s}");
        let back: serde_json::Value = serde_json::from_str(&s).expect("still JSON");
        assert_eq!(back, hostile);
        assert_eq!(
            escape_html("<b>&\"x'\u{1b}"),
            "&lt;b&gt;&amp;&quot;x&#39;\u{fffd}"
        );
    }
}
