//! The live status line while a trace runs: `⏱ 12.3 s · 5 live · 120 processes · RSS 1.2 GiB`.
//!
//! CMD writes to the same terminal as spacetime, straight (its bytes and its isatty answers are
//! its own), so the line cannot share a row with CMD's output. spacetime keeps the terminal's
//! last row for itself, as apt's progress bar does: a scroll region (DECSTBM) over the rows
//! above makes CMD's output scroll there, into the scrollback, while the line is drawn on the
//! last row. Each redraw is one write(): the kernel does not interleave one write to a tty
//! with another process's, so a redraw never lands inside a write of CMD's; the cursor and
//! CMD's colours are saved and restored around it (DECSC/DECRC).
//!
//! Shown only on a terminal whose type is known (not `TERM=dumb`), not with `--quiet`, on a
//! screen of at least [`MIN_ROWS`] rows, and only once the trace has run for a second (a
//! short command's summary comes alone). While a program has the terminal out of canonical
//! mode (an editor, a pager, `top`) it owns the screen and the line waits; while spacetime is
//! in the background, the screen is the shell's and is given back. When the trace ends
//! (or spacetime leaves by an error or a panic: the line is dropped) the region is given back
//! and the last row cleared; the cursor stays where CMD's output ended.

use std::io::{self, IsTerminal, Write};

use crate::util::units::bytes;

/// The line appears once the trace has run this long.
pub const SHOW_AFTER_NS: u64 = 1_000_000_000;
/// Redraws are at least this far apart.
pub const REDRAW_NS: u64 = 100_000_000;
/// Smallest screen the line is drawn on: CMD keeps at least two rows.
pub const MIN_ROWS: u16 = 3;
/// Overrides [`SHOW_AFTER_NS`] (in ms): lets the terminal tests see the line on a short run.
const SHOW_AFTER_ENV: &str = "SPACETIME_STATUS_AFTER_MS";

/// What the terminal is like at a redraw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Screen {
    pub rows: u16,
    pub cols: u16,
    /// A program has the terminal out of canonical mode: it owns the screen.
    pub taken: bool,
    /// spacetime's process group is the terminal's foreground one (not sent to the
    /// background with Ctrl-Z and `bg`, or started with `&`).
    pub foreground: bool,
}

/// The terminal on stderr, asked afresh at each redraw (one ioctl and one tcgetattr every
/// 100 ms): a resize moves the line to the new last row without a SIGWINCH handler, which
/// would have to reach CMD's signal mask.
pub fn stderr_screen() -> Option<Screen> {
    use rustix::termios::{tcgetattr, tcgetpgrp, tcgetwinsize, LocalModes};
    let fd = std::io::stderr();
    let ws = tcgetwinsize(&fd).ok()?;
    let t = tcgetattr(&fd).ok()?;
    // Not the controlling terminal (an error): nothing says another job owns it.
    let foreground =
        tcgetpgrp(&fd).is_ok_and(|p| p == rustix::process::getpgrp()) || tcgetpgrp(&fd).is_err();
    Some(Screen {
        rows: ws.ws_row,
        cols: ws.ws_col,
        taken: !t.local_modes.contains(LocalModes::ICANON),
        foreground,
    })
}

/// Whether a status line belongs on stderr: a terminal of a known type, and no `--quiet`.
pub fn enabled(quiet: bool) -> bool {
    let term = std::env::var_os("TERM").unwrap_or_default();
    !quiet && io::stderr().is_terminal() && !term.is_empty() && term != "dumb"
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

/// The escape sequences, one `Vec` per write().
mod seq {
    use std::io::Write as _;

    /// Keeps the last row for the line, sets the region above it, draws `text` there.
    ///
    /// Index then reverse index (ESC D, ESC M) leave the cursor on its own line and column,
    /// scrolling that line up first if it is on the bottom row or the region's last row: the
    /// region's setting would otherwise leave it outside (a newline there scrolls nothing).
    /// DECSTBM homes the cursor, hence the save and restore around it; the text is drawn
    /// with default colours, and the restore gives CMD back its own.
    pub fn draw(rows: u16, text: &str) -> Vec<u8> {
        let mut v = Vec::with_capacity(text.len() + 40);
        let _ = write!(
            v,
            "\x1bD\x1bM\x1b7\x1b[1;{}r\x1b[{rows};1H\x1b[m\x1b[2K{text}\x1b8",
            rows - 1
        );
        v
    }

    /// Gives the whole screen back and, given the line's row, clears it; the cursor stays
    /// put.
    pub fn release(line_row: Option<u16>) -> Vec<u8> {
        let mut v = b"\x1b7\x1b[r".to_vec();
        if let Some(r) = line_row {
            let _ = write!(v, "\x1b[{r};1H\x1b[2K");
        }
        v.extend_from_slice(b"\x1b8");
        v
    }
}

pub struct StatusLine<W: Write> {
    out: W,
    enabled: bool,
    screen: Box<dyn FnMut() -> Option<Screen>>,
    show_after_ns: u64,
    /// The rows of the screen the line was last drawn on, while the region is held.
    drawn_rows: Option<u16>,
    last_draw_ns: Option<u64>,
}

impl StatusLine<io::Stderr> {
    /// The status line on stderr, if [`enabled`].
    pub fn stderr(quiet: bool) -> StatusLine<io::Stderr> {
        let mut s = StatusLine::new(io::stderr(), enabled(quiet), Box::new(stderr_screen));
        if let Some(ms) = std::env::var(SHOW_AFTER_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
        {
            s.show_after_ns = ms.saturating_mul(1_000_000);
        }
        s
    }
}

impl<W: Write> StatusLine<W> {
    pub fn new(out: W, enabled: bool, screen: Box<dyn FnMut() -> Option<Screen>>) -> StatusLine<W> {
        StatusLine {
            out,
            enabled,
            screen,
            show_after_ns: SHOW_AFTER_NS,
            drawn_rows: None,
            last_draw_ns: None,
        }
    }

    /// Redraws the line (when enabled, past the first second, and not too soon after the
    /// last redraw).
    pub fn tick(&mut self, elapsed_ns: u64, live: usize, total: usize, tree_rss_bytes: u64) {
        if !self.enabled || elapsed_ns < self.show_after_ns {
            return;
        }
        if self
            .last_draw_ns
            .is_some_and(|t| elapsed_ns < t.saturating_add(REDRAW_NS))
        {
            return;
        }
        self.last_draw_ns = Some(elapsed_ns);
        let s = match (self.screen)() {
            Some(s) if s.rows >= MIN_ROWS && s.cols > 2 && s.foreground => s,
            // Too small, not a terminal any more, or the shell's again (the trace went on in
            // the background): give the screen back.
            _ => return self.finish(),
        };
        if s.taken {
            // Not a byte while a full-screen program draws; it may also have reset the
            // region, which the next draw sets again.
            return;
        }
        let text = format(elapsed_ns, live, total, tree_rss_bytes);
        // Cut by display width: one column spare so the cursor never wraps, one more for the
        // stopwatch, which some terminals draw two columns wide.
        let cut = crate::util::term::fit(&text, usize::from(s.cols).saturating_sub(2));
        let cut = crate::util::term::localize(&cut);
        // After a resize the old line stays wherever the terminal moved it (some pull the
        // scrollback in, some add rows at the bottom): erasing a row there might erase CMD's.
        self.write(seq::draw(s.rows, &cut));
        self.drawn_rows = Some(s.rows);
    }

    fn write(&mut self, bytes: Vec<u8>) {
        // One write_all of a few hundred bytes is one write() on a tty; a failed write costs
        // the line, never the trace.
        let _ = self.out.write_all(&bytes);
        let _ = self.out.flush();
    }

    /// Gives the screen back, if the line was drawn: the summary then follows CMD's output.
    pub fn finish(&mut self) {
        if let Some(drawn) = self.drawn_rows.take() {
            // The last row is cleared only when it is still the line's: on a screen resized
            // since the last redraw it may hold CMD's output.
            let same = (self.screen)().is_some_and(|s| s.rows == drawn);
            self.write(seq::release(same.then_some(drawn)));
        }
    }

    #[cfg(test)]
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
    use std::{cell::Cell, rc::Rc};

    use super::*;

    const S: u64 = 1_000_000_000;

    fn line(screen: Rc<Cell<Option<Screen>>>) -> StatusLine<Vec<u8>> {
        StatusLine::new(Vec::new(), true, Box::new(move || screen.get()))
    }

    fn screen(rows: u16, cols: u16) -> Option<Screen> {
        Some(Screen {
            rows,
            cols,
            taken: false,
            foreground: true,
        })
    }

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
    fn shown_after_a_second_on_the_last_row_throttled_cut_and_released() {
        let mut s = line(Rc::new(Cell::new(screen(24, 30))));
        s.tick(S / 2, 1, 1, 0);
        assert!(s.out.is_empty(), "nothing in the first second");
        s.tick(S, 2, 3, 4096);
        s.tick(S + 50_000_000, 2, 3, 4096);
        let first = String::from_utf8(s.out.clone()).expect("utf8");
        assert_eq!(
            first,
            "\x1bD\x1bM\x1b7\x1b[1;23r\x1b[24;1H\x1b[m\x1b[2K⏱ 1.0 s · 2 live · 3 proces…\x1b8"
        );
        assert!(!first.contains(['\r', '\n']), "never moves CMD's cursor");
        s.tick(S + REDRAW_NS, 2, 3, 4096);
        let out = String::from_utf8(s.into_inner()).expect("utf8");
        assert_eq!(out.matches("\x1b[1;23r").count(), 2, "throttled, redrawn");
        assert!(
            out.ends_with("\x1b7\x1b[r\x1b[24;1H\x1b[2K\x1b8"),
            "region given back, last row cleared, cursor restored: {out:?}"
        );
    }

    #[test]
    fn follows_a_resize_and_waits_for_full_screen_programs() {
        let term = Rc::new(Cell::new(screen(24, 80)));
        let mut s = line(term.clone());
        s.tick(S, 1, 1, 0);
        term.set(screen(30, 80));
        s.tick(2 * S, 1, 1, 0);
        let out = String::from_utf8(std::mem::take(&mut s.out)).expect("utf8");
        assert!(
            out.ends_with(
                "\x1b7\x1b[1;29r\x1b[30;1H\x1b[m\x1b[2K⏱ 2.0 s · 1 live · 1 process · RSS 0 B\x1b8"
            ),
            "region and line on the new last row: {out:?}"
        );
        term.set(Some(Screen {
            taken: true,
            ..screen(30, 80).expect("a screen")
        }));
        s.tick(3 * S, 1, 1, 0);
        assert!(s.out.is_empty(), "nothing while a program owns the screen");
        term.set(Some(Screen {
            foreground: false,
            ..screen(30, 80).expect("a screen")
        }));
        s.tick(3 * S + REDRAW_NS, 1, 1, 0);
        let out = String::from_utf8(std::mem::take(&mut s.out)).expect("utf8");
        assert_eq!(
            out, "\x1b7\x1b[r\x1b[30;1H\x1b[2K\x1b8",
            "sent to the background: the screen given back to the shell, the old line erased"
        );
        term.set(screen(30, 80));
        s.tick(3 * S + 2 * REDRAW_NS, 1, 1, 0);
        assert!(
            String::from_utf8(std::mem::take(&mut s.out))
                .expect("utf8")
                .contains("\x1b[1;29r"),
            "back in the foreground: drawn again"
        );
        term.set(screen(2, 80));
        s.tick(4 * S, 1, 1, 0);
        let out = String::from_utf8(std::mem::take(&mut s.out)).expect("utf8");
        assert_eq!(
            out, "\x1b7\x1b[r\x1b8",
            "too small: released, no row of CMD's erased"
        );
        s.tick(5 * S, 1, 1, 0);
        s.finish();
        assert!(
            s.out.is_empty(),
            "nothing drawn on 2 rows, nothing to release"
        );
    }

    #[test]
    fn disabled_writes_nothing() {
        let mut s = StatusLine::new(Vec::new(), false, Box::new(|| screen(24, 80)));
        s.tick(10 * S, 1, 1, 1);
        s.finish();
        assert!(s.into_inner().is_empty());
    }
}
