//! `spacetime diff A.json B.json`: two saved reports side by side, for CI. Trace reports:
//! wall, CPU, the largest process's peak RSS, the tree-wide peak, processes and failures, in
//! total and per program. Bench reports: each command's distributions, with the bench's own
//! significance test. `--fail-on 'peak:+5%,cpu:+10%'` exits 1 when B crossed a threshold;
//! `--format markdown` writes a CI job summary.

mod bench;
mod table;
mod trace;

use std::{io::Write, path::PathBuf};

use clap::{Args, ValueEnum};

use crate::{report::saved, util::exit_code::EXIT_OWN_FAILURE};
pub use table::{Gated, Row, Section, Unit};

#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The reference report (`trace --json` or `bench --json`)
    #[arg(value_name = "A.json")]
    pub a: PathBuf,
    /// The report compared with it
    #[arg(value_name = "B.json")]
    pub b: PathBuf,
    /// Exit 1 when B grew past a threshold: comma-separated FIGURE:+N% or FIGURE:+N (N in
    /// the figure's unit: 10M, 250ms, a count). Figures: wall, cpu, peak (largest process),
    /// tree-peak, processes, failures. New failures fail without this option
    /// (failures:+0); `--fail-on failures:+N` loosens that. For bench reports, a change
    /// counts only when significant (Welch's t-test, p < 0.05)
    #[arg(long, value_name = "SPEC", value_parser = parse_thresholds)]
    pub fail_on: Option<Thresholds>,
    /// How to write the comparison
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Do not cut lines to the terminal's width
    #[arg(short = 'w', long)]
    pub wide: bool,
    /// Read at most SIZE of each report (K, M, G suffixes): a larger one is refused
    #[arg(long, value_name = "SIZE", default_value_t = crate::report::saved::MAX_INPUT_BYTES, value_parser = crate::util::parse::bytes)]
    pub max_input: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Markdown,
}

/// How much a figure may grow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    Percent(f64),
    /// In the figure's unit (bytes, ns, count).
    Absolute(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Thresholds(pub Vec<(Gated, Limit)>);

fn parse_thresholds(s: &str) -> Result<Thresholds, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, limit) = part
            .split_once(':')
            .ok_or_else(|| format!("{part:?}: expected FIGURE:+N% or FIGURE:+N"))?;
        let figure = Gated::named(name.trim()).ok_or_else(|| {
            format!("unknown figure {name:?} (wall, cpu, peak, tree-peak, processes, failures)")
        })?;
        let v = limit.trim().trim_start_matches('+');
        let limit = match v.strip_suffix('%') {
            Some(p) => Limit::Percent(
                p.trim()
                    .parse()
                    .map_err(|_| format!("{part:?}: bad percentage"))?,
            ),
            None => Limit::Absolute(match figure.unit() {
                Unit::Bytes => crate::util::parse::bytes(v)? as f64,
                Unit::Ns => crate::util::parse::duration(v)?.as_nanos() as f64,
                Unit::Count => v.parse().map_err(|_| format!("{part:?}: bad count"))?,
            }),
        };
        out.push((figure, limit));
    }
    if out.is_empty() {
        return Err("no threshold given".into());
    }
    Ok(Thresholds(out))
}

/// A threshold B crossed: which, by how much.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossed {
    pub what: String,
    pub change: String,
    pub limit: String,
}

impl Limit {
    /// Whether going from `a` to `b` crosses it.
    fn crossed(self, a: f64, b: f64) -> bool {
        match self {
            Limit::Percent(p) if a > 0.0 => (b - a) / a * 100.0 > p + 1e-9,
            Limit::Percent(_) => b > a,
            Limit::Absolute(n) => b - a > n,
        }
    }

    fn text(self, unit: Unit) -> String {
        match self {
            Limit::Percent(p) => format!("+{p}%"),
            Limit::Absolute(n) => format!("+{}", unit.show(n)),
        }
    }
}

/// The thresholds the rows cross. A row of a bench counts only when its change is
/// significant.
pub fn crossed(sections: &[Section], t: &Thresholds) -> Vec<Crossed> {
    let mut out = Vec::new();
    for s in sections.iter().filter(|s| s.gated) {
        for r in &s.rows {
            let (Some(fig), Some(a), Some(b)) = (r.figure, r.a, r.b) else {
                continue;
            };
            if r.significant == Some(false) {
                continue;
            }
            for &(f, limit) in &t.0 {
                if f == fig && limit.crossed(a, b) {
                    out.push(Crossed {
                        what: format!("{}{}", s.gate_prefix, r.name),
                        change: r.change(),
                        limit: format!("{}:{}", f.name(), limit.text(r.unit)),
                    });
                }
            }
        }
    }
    out
}

/// The thresholds a comparison is gated by: those asked for, and new failures unless they name
/// failures themselves (a CI gate that passed a build that newly fails was the defect).
pub fn gates(asked: Option<Thresholds>) -> Thresholds {
    let mut t = asked.map(|t| t.0).unwrap_or_default();
    if !t.iter().any(|&(f, _)| f == Gated::Failures) {
        t.push((Gated::Failures, Limit::Absolute(0.0)));
    }
    Thresholds(t)
}

/// Entry point: 0, 1 when a threshold was crossed, 125 when a report cannot be read.
pub fn main(args: DiffArgs) -> i32 {
    let read = |p: &PathBuf| {
        saved::read(p, args.max_input).map_err(|e| crate::errln!("spacetime: {}: {e}", p.display()))
    };
    let (Ok(a), Ok(b)) = (read(&args.a), read(&args.b)) else {
        return EXIT_OWN_FAILURE;
    };
    let sections = match (&a, &b) {
        (saved::Saved::Trace(a), saved::Saved::Trace(b)) => trace::compare(a, b),
        (saved::Saved::Bench(a), saved::Saved::Bench(b)) => bench::compare(a, b),
        _ => {
            crate::errln!(
                "spacetime: {} and {} are not the same kind of report (one trace, one bench)",
                args.a.display(),
                args.b.display()
            );
            return EXIT_OWN_FAILURE;
        }
    };
    let crossed = crossed(&sections, &gates(args.fail_on));
    let names = (args.a.display().to_string(), args.b.display().to_string());
    let text = match args.format {
        Format::Markdown => table::markdown(&sections, &names, &crossed),
        Format::Text => {
            use std::io::IsTerminal;
            let stdout = std::io::stdout();
            let fd = stdout
                .is_terminal()
                .then(|| std::os::fd::AsFd::as_fd(&stdout));
            let width = crate::util::term::columns(fd, args.wide).unwrap_or(usize::MAX / 4);
            table::text(&sections, &names, &crossed, width)
        }
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            crate::errln!("spacetime: writing to stdout: {e}");
            return EXIT_OWN_FAILURE;
        }
    }
    i32::from(!crossed.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_and_cross() {
        let t = parse_thresholds("peak:+5%, cpu:+10%,tree-peak:+1M,failures:+0,wall:250ms")
            .expect("parse");
        assert_eq!(t.0[0], (Gated::Peak, Limit::Percent(5.0)));
        assert_eq!(t.0[2], (Gated::TreePeak, Limit::Absolute((1 << 20) as f64)));
        assert_eq!(t.0[3], (Gated::Failures, Limit::Absolute(0.0)));
        assert_eq!(t.0[4], (Gated::Wall, Limit::Absolute(250e6)));
        assert!(parse_thresholds("size:+5%").is_err());
        assert!(parse_thresholds("peak").is_err());
        assert!(parse_thresholds("").is_err());
        // 10 % over a 5 % gate crosses it; 4 % does not; from nothing, any growth does.
        assert!(Limit::Percent(5.0).crossed(100.0, 110.0));
        assert!(!Limit::Percent(5.0).crossed(100.0, 104.0));
        assert!(!Limit::Percent(5.0).crossed(100.0, 105.0));
        assert!(Limit::Percent(5.0).crossed(0.0, 1.0));
        assert!(Limit::Absolute(0.0).crossed(0.0, 1.0));
        assert!(!Limit::Absolute(0.0).crossed(1.0, 1.0));
    }

    #[test]
    fn new_failures_gate_unless_failures_are_named() {
        let zero = (Gated::Failures, Limit::Absolute(0.0));
        assert_eq!(gates(None).0, [zero]);
        let peak = parse_thresholds("peak:+5%").expect("parse");
        assert_eq!(
            gates(Some(peak)).0,
            [(Gated::Peak, Limit::Percent(5.0)), zero]
        );
        let loose = parse_thresholds("failures:+3").expect("parse");
        assert_eq!(
            gates(Some(loose)).0,
            [(Gated::Failures, Limit::Absolute(3.0))]
        );
    }
}
