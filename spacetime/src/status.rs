//! The live status line on stderr while a trace runs:
//! `⏱ 12.3 s · 5 live · 120 processes · RSS 1.2 GiB`.
//!
//! Shown only on a terminal, not with `--quiet`, and only once the trace has run for a second
//! (a short command's summary comes alone). It is redrawn in place (carriage return, then
//! erase to the end of the line), cut to the terminal's width so it never wraps, and erased
//! when the trace ends.

use std::io::{self, IsTerminal, Write};

use crate::units::bytes;

/// The line appears once the trace has run this long.
pub const SHOW_AFTER_NS: u64 = 1_000_000_000;
/// Redraws are at least this far apart.
pub const REDRAW_NS: u64 = 100_000_000;

/// Whether a status line belongs on stderr: it is a terminal and `--quiet` was not given.
pub fn enabled(quiet: bool) -> bool {
    !quiet && io::stderr().is_terminal()
}

/// The text of the line.
pub fn format(elapsed_ns: u64, live: usize, total: usize, tree_rss_bytes: u64) -> String {
    let secs = elapsed_ns / 1_000_000_000;
    let elapsed = if secs >= 60 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{:.1} s", elapsed_ns as f64 / 1e9)
    };
    let plural = if total == 1 { "process" } else { "processes" };
    format!(
        "⏱ {elapsed} · {live} live · {total} {plural} · RSS {}",
        bytes(tree_rss_bytes)
    )
}

pub struct StatusLine<W: Write> {
    out: W,
    enabled: bool,
    /// Columns available; the line is cut short of them so the cursor never wraps.
    width: usize,
    shown: bool,
    last_draw_ns: Option<u64>,
}

impl StatusLine<io::Stderr> {
    /// The status line on stderr, if [`enabled`].
    pub fn stderr(quiet: bool, width: usize) -> StatusLine<io::Stderr> {
        StatusLine::new(io::stderr(), enabled(quiet), width)
    }
}

impl<W: Write> StatusLine<W> {
    pub fn new(out: W, enabled: bool, width: usize) -> StatusLine<W> {
        StatusLine {
            out,
            enabled,
            width,
            shown: false,
            last_draw_ns: None,
        }
    }

    /// Redraws the line (when enabled, past the first second, and not too soon after the
    /// last redraw).
    pub fn tick(&mut self, elapsed_ns: u64, live: usize, total: usize, tree_rss_bytes: u64) {
        if !self.enabled || elapsed_ns < SHOW_AFTER_NS {
            return;
        }
        if self
            .last_draw_ns
            .is_some_and(|t| elapsed_ns < t.saturating_add(REDRAW_NS))
        {
            return;
        }
        self.last_draw_ns = Some(elapsed_ns);
        let text = format(elapsed_ns, live, total, tree_rss_bytes);
        // Cut by display width: one column spare so the cursor never wraps, one more for the
        // stopwatch, which some terminals draw two columns wide.
        let cut = crate::term::fit(&text, self.width.saturating_sub(2));
        let cut = crate::term::localize(&cut);
        let _ = write!(self.out, "\r{cut}\x1b[K");
        let _ = self.out.flush();
        self.shown = true;
    }

    /// Erases the line, if it was shown: the summary then starts on a clean line.
    pub fn finish(&mut self) {
        if self.shown {
            let _ = write!(self.out, "\r\x1b[K");
            let _ = self.out.flush();
            self.shown = false;
        }
    }

    pub fn into_inner(mut self) -> W
    where
        W: Default,
    {
        self.finish();
        std::mem::take(&mut self.out)
    }
}

impl<W: Write> Drop for StatusLine<W> {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn formatting() {
        assert_eq!(
            format(12_345_000_000, 5, 120, 1288490189),
            "⏱ 12.3 s · 5 live · 120 processes · RSS 1.2 GiB"
        );
        assert_eq!(
            format(125 * S, 0, 1, 512),
            "⏱ 2m05s · 0 live · 1 process · RSS 512 B"
        );
    }

    #[test]
    fn shown_after_a_second_throttled_cut_and_erased() {
        let mut s = StatusLine::new(Vec::new(), true, 30);
        s.tick(S / 2, 1, 1, 0);
        assert!(s.out.is_empty(), "nothing in the first second");
        s.tick(S, 2, 3, 4096);
        s.tick(S + 50_000_000, 2, 3, 4096);
        let first = String::from_utf8(s.out.clone()).expect("utf8");
        assert_eq!(first, "\r⏱ 1.0 s · 2 live · 3 proces…\x1b[K");
        assert_eq!(first.matches('\r').count(), 1, "throttled");
        s.tick(S + REDRAW_NS, 2, 3, 4096);
        let out = String::from_utf8(s.into_inner()).expect("utf8");
        assert_eq!(out.matches('\r').count(), 3, "redrawn, then erased");
        assert!(out.ends_with("\r\x1b[K"));
    }

    #[test]
    fn disabled_writes_nothing() {
        let mut s = StatusLine::new(Vec::new(), false, 80);
        s.tick(10 * S, 1, 1, 1);
        s.finish();
        assert!(s.into_inner().is_empty());
    }
}
