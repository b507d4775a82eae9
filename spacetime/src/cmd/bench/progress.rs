//! The progress bar: one line on stderr, redrawn after each run, only on a terminal.

use std::io::{IsTerminal, Write};

pub struct Progress {
    on: bool,
    width: usize,
}

impl Progress {
    /// Shown when `--style` asks for it (auto: when stderr is a terminal), not `--quiet`.
    pub fn new(quiet: bool, style: super::args::Style) -> Progress {
        let on = !quiet && style.progress(std::io::stderr().is_terminal());
        let cols = crate::util::term::columns(Some(std::io::stderr()), false).unwrap_or(80);
        Progress {
            on,
            width: cols.saturating_sub(50).clamp(10, 40),
        }
    }

    /// `done` of `total` runs of the current phase (`Warm-up`, `Run`), `eta_ns` left.
    pub fn show(&self, phase: &str, done: u32, total: u32, eta_ns: Option<u64>) {
        if !self.on {
            return;
        }
        let line = bar(phase, done, total, eta_ns, self.width);
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r\x1b[K{}", crate::util::term::localize(&line));
        let _ = e.flush();
    }

    /// Erases the bar, before the summary is printed.
    pub fn clear(&self) {
        if self.on {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
        }
    }
}

fn bar(phase: &str, done: u32, total: u32, eta_ns: Option<u64>, width: usize) -> String {
    let filled = (done as usize * width)
        .checked_div(total as usize)
        .unwrap_or(0);
    let eta = eta_ns.map_or(String::new(), |e| {
        format!("  ETA {}", crate::util::units::duration_ns(e))
    });
    format!(
        "  {phase} {done}/{total} ▕{}{}▏{eta}",
        "█".repeat(filled),
        "░".repeat(width - filled.min(width))
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn bar_fills_in_proportion() {
        let b = super::bar("Run", 3, 10, Some(1_500_000_000), 10);
        assert_eq!(b, "  Run 3/10 ▕███░░░░░░░▏  ETA 1.50 s");
        assert_eq!(super::bar("Run", 0, 0, None, 4), "  Run 0/0 ▕░░░░▏");
    }
}
