//! The doctor's report as a table for people (wrapped to the terminal) or one JSON object.

use std::io::Write;

use super::Report;
use crate::util::term;

/// Width of the status and name columns (the summary starts after them).
const LEAD: usize = 2 + 8 + 14;

pub fn text(r: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    let cols = term::columns(Some(std::io::stdout()), false)
        .unwrap_or(80)
        .clamp(LEAD + 30, 120);
    let mut s = format!(
        "spacetime {} doctor · Linux {} · uid {}\n\n",
        r.spacetime_version, r.kernel_release, r.uid
    );
    for c in &r.checks {
        let line = format!("  {:<8}{:<14}{}", c.status.label(), c.id, c.summary);
        for l in term::wrap(&line, cols, LEAD) {
            s.push_str(&l);
            s.push('\n');
        }
    }
    s.push('\n');
    let verdict = format!("trace: {}", r.trace.summary);
    for l in term::wrap(&verdict, cols, 7) {
        s.push_str(&l);
        s.push('\n');
    }
    out.write_all(term::localize(&s).as_bytes())?;
    out.flush()
}

pub fn json(r: &Report, out: &mut dyn Write) -> std::io::Result<()> {
    // An I/O error keeps its kind: a reader gone (`| head`) is not a failure to report.
    serde_json::to_writer_pretty(&mut *out, r).map_err(|e| match e.io_error_kind() {
        Some(kind) => std::io::Error::new(kind, e),
        None => std::io::Error::other(e),
    })?;
    out.write_all(b"\n")?;
    out.flush()
}
