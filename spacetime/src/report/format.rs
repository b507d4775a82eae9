//! `--format FMT`: the summary as one line a script reads, with GNU time's letters (`time -f`)
//! and spacetime's own. Parsed when the arguments are, so a bad format stops spacetime before
//! CMD runs.
//!
//! GNU time's: `%e` wall seconds, `%E` wall as [h:]mm:ss.cc, `%U`/`%S` user/system seconds
//! (the whole tree, as `wait4` counts descendants), `%M` the largest peak RSS of any one process
//! in the tree in KiB (exact; GNU time reads `ru_maxrss`, which exec can inflate), `%x` CMD's
//! exit status (128+N for signal N), `%C` the command line (escaped for a terminal), `%c`/`%w`
//! involuntary/voluntary context switches summed over the processes taskstats confirmed (`?`
//! without taskstats). spacetime's: `%T` tree-wide peak RSS in KiB, `%N` processes, `%Y` max
//! PSS in KiB (sampled), `%L` events lost (`?` when unknown). `%%`, `\n`, `\t`, `\\`.

use std::fmt::Write as _;

use crate::report::Report;

/// One piece of a parsed format.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(char),
}

/// A parsed `--format`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format(Vec<Piece>);

const LETTERS: &str = "eEUSMxCcwTNYL";

/// Parses FMT (for clap): unknown letters and a dangling `%` are errors.
pub fn parse(s: &str) -> Result<Format, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('%') => text.push('%'),
                Some(l) if LETTERS.contains(l) => {
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Field(l));
                }
                Some(l) => {
                    return Err(format!(
                        "unknown format letter %{l} (known: %{})",
                        LETTERS
                            .chars()
                            .map(String::from)
                            .collect::<Vec<_>>()
                            .join(" %")
                    ))
                }
                None => return Err("the format ends with a lone %".into()),
            },
            '\\' => match chars.next() {
                Some('n') => text.push('\n'),
                Some('t') => text.push('\t'),
                Some('\\') => text.push('\\'),
                Some(o) => {
                    text.push('\\');
                    text.push(o);
                }
                None => text.push('\\'),
            },
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(Format(pieces))
}

fn secs(ns: u64) -> String {
    format!("{:.2}", ns as f64 / 1e9)
}

/// GNU time's %E: `m:ss.cc`, or `h:mm:ss` from an hour on.
fn elapsed(ns: u64) -> String {
    let cs = ns / 10_000_000;
    let (h, m, s, c) = (cs / 360_000, cs / 6000 % 60, cs / 100 % 60, cs % 100);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}.{c:02}")
    }
}

/// Sum of a taskstats figure over the confirmed processes (None without taskstats).
fn switches(
    r: &Report,
    f: impl Fn(&crate::model::crosscheck::ProcessTaskstats) -> u64,
) -> Option<u64> {
    r.taskstats.available.then(|| {
        r.processes
            .iter()
            .filter_map(|p| p.taskstats())
            .map(|t| f(&t))
            .sum()
    })
}

fn field(out: &mut String, l: char, r: &Report) {
    let kib = |b: Option<u64>| b.map_or("?".into(), |b| (b / 1024).to_string());
    let opt = |v: Option<u64>| v.map_or("?".into(), |v| v.to_string());
    let s = match l {
        'e' => secs(r.wall_ns),
        'E' => elapsed(r.wall_ns),
        'U' => secs(r.user_ns),
        'S' => secs(r.sys_ns),
        'M' => kib(Some(r.totals.peak_rss_bytes)),
        'x' => r.exit.map_or("?".into(), |e| e.0.shell_code().to_string()),
        'C' => crate::util::term::join(r.command.iter()),
        'c' => opt(switches(r, |t| t.nivcsw)),
        'w' => opt(switches(r, |t| t.nvcsw)),
        'T' => kib(r.totals.tree_peak_rss_bytes),
        'N' => r.totals.processes.to_string(),
        'Y' => kib(r.totals.max_pss_bytes),
        'L' => r.lost_events.to_string(),
        _ => format!("%{l}"),
    };
    out.push_str(&s);
}

impl Format {
    /// The line for this report, ending with a newline as `time -f` does.
    pub fn render(&self, r: &Report) -> String {
        let mut out = String::new();
        for p in &self.0 {
            match p {
                Piece::Text(t) => {
                    let _ = write!(out, "{t}");
                }
                Piece::Field(l) => field(&mut out, *l, r),
            }
        }
        out.push('\n');
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing() {
        let f = parse("%e s\\t%M%%\\n").expect("valid");
        assert_eq!(
            f.0,
            [
                Piece::Field('e'),
                Piece::Text(" s\t".into()),
                Piece::Field('M'),
                Piece::Text("%\n".into())
            ]
        );
        assert!(parse("%q").is_err());
        assert!(parse("50%").is_err());
    }

    #[test]
    fn elapsed_like_gnu_time() {
        assert_eq!(elapsed(1_234_000_000), "0:01.23");
        assert_eq!(elapsed(61_500_000_000), "1:01.50");
        assert_eq!(elapsed(3_723_000_000_000), "1:02:03");
    }
}
