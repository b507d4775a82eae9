//! A saved bench report (`bench --json`) on the terminal, for `spacetime report`: each
//! command's time and memory as the bench computed them, from the JSON's own figures.

use std::fmt::Write;

use serde_json::Value;

use crate::util::{
    term,
    units::{bytes, duration_ns},
};

/// `mean ± σ` of one figure, written by `unit`; `–` when absent.
fn mean_sd(f: Option<&Value>, unit: fn(u64) -> String) -> String {
    let num = |k: &str| f.and_then(|f| f.get(k)).and_then(Value::as_f64);
    match (num("mean"), num("stddev")) {
        (Some(m), Some(s)) => format!("{} ± {}", unit(m as u64), unit(s as u64)),
        (Some(m), None) => unit(m as u64),
        _ => "–".into(),
    }
}

/// The summary, every line at most `width` columns.
pub fn render(v: &Value, width: usize) -> String {
    let mut out = String::new();
    let results = v.get("results").and_then(Value::as_array);
    for (i, r) in results.into_iter().flatten().enumerate() {
        let command = r.get("command").and_then(Value::as_str).unwrap_or_default();
        let runs = r.get("runs").and_then(Value::as_u64).unwrap_or(0);
        let head = format!("Benchmark {}: ", i + 1);
        let room = width.saturating_sub(term::width(&head)).max(8);
        let _ = writeln!(
            out,
            "{head}{}",
            term::fit_command(&term::escape(command.as_bytes()), room)
        );
        let lines = [
            format!(
                "  Time (mean ± σ):       {}    {runs} runs",
                mean_sd(r.get("wall_ns"), duration_ns)
            ),
            format!(
                "  Peak RSS (mean ± σ):   {}    largest process",
                mean_sd(r.get("peak_rss_bytes"), bytes)
            ),
            format!(
                "  Tree peak (mean ± σ):  {}    all processes at once",
                mean_sd(r.get("tree_peak_rss_bytes"), bytes)
            ),
        ];
        for l in lines {
            let _ = writeln!(out, "{}", term::fit(&l, width));
        }
        out.push('\n');
    }
    if out.is_empty() {
        out.push_str("no results\n");
    }
    term::localize(&out).into_owned()
}
