//! `--format FMT`: the summary as lines a script reads, with every letter of GNU time's
//! (`time -f`, GNU time 1.9) and spacetime's own. Parsed when the arguments are, so a bad
//! format stops spacetime before CMD runs. `verbose` is `time -v`'s layout (same labels, same
//! order), `posix` `time -p`'s and `default` GNU time's own when given no format, with
//! spacetime's figures. As GNU time, a line says first how CMD ended when it did not exit 0,
//! except in `posix` (`time -p` never prints it).
//!
//! Each letter means what it means in GNU time, printed as GNU time prints it (seconds
//! truncated to hundredths, not rounded; `%P` an integer). The differences are in where the
//! figures come from:
//! - `%U`, `%S`, `%P`: the whole tree's CPU time, as `wait4` counts reaped descendants.
//! - `%M`: the largest peak RSS of any one process of the tree, exact. GNU time prints
//!   `ru_maxrss`, which carries the pre-exec image's peak into a small program.
//! - `%F`, `%R` (major/minor faults), `%I`, `%O` (file system inputs/outputs, 512-byte blocks
//!   of storage I/O, as `getrusage` counts them) and `%c`, `%w` (context switches): summed
//!   over the processes whose taskstats record confirmed their exit (`?` without taskstats).
//! - `%Z`: the page size. `%x`: the exit code, 0 when CMD was killed by a signal (GNU time's
//!   WEXITSTATUS; the "Command terminated by signal N" line says which).
//! - `%t %K %D %p %X` (average sizes), `%W` (swaps), `%r %s` (socket messages), `%k` (signals):
//!   Linux's getrusage never fills them, and GNU time prints 0 for them there: so does this.
//!
//! spacetime's letters: `%T` tree-wide peak RSS in KiB, `%N` processes, `%Y` max PSS in KiB
//! (`?` when it is not a figure to print), `%L` events lost, and the letters of the figures
//! table ([`figures::FIGURES`]: the tree's figure, KiB for bytes, `?` when it is null).
//! `%%`, `\n`, `\t`, `\\`; another backslash is printed as GNU time prints it (`?\` and the
//! character).

use std::fmt::Write as _;

use crate::report::{
    figures::{self, Figure, Unit},
    Report,
};

/// One piece of a parsed format.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(char),
}

/// A parsed `--format`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pieces: Vec<Piece>,
    ending: Ending,
}

/// Whether the line about an abnormal end (`Command exited with non-zero status N`) comes
/// before the format, as GNU time decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// Every format but `time -p`'s.
    Said,
    /// `time -p` prints its three lines and nothing else.
    Unsaid,
}

/// GNU time's letters, then spacetime's; the figures table adds its own
/// ([`figures::FIGURES`]: `%F %R %I %O %c %w` are GNU time's among them).
const LETTERS: &str = "eEUSPMtKDpXZFRWIOrskCxcwTNYL";

/// `time -v`'s layout (GNU time 1.9): a tab, the label, the figure.
const VERBOSE: &str = "\tCommand being timed: \"%C\"\n\
\tUser time (seconds): %U\n\
\tSystem time (seconds): %S\n\
\tPercent of CPU this job got: %P\n\
\tElapsed (wall clock) time (h:mm:ss or m:ss): %E\n\
\tAverage shared text size (kbytes): %X\n\
\tAverage unshared data size (kbytes): %D\n\
\tAverage stack size (kbytes): %p\n\
\tAverage total size (kbytes): %K\n\
\tMaximum resident set size (kbytes): %M\n\
\tAverage resident set size (kbytes): %t\n\
\tMajor (requiring I/O) page faults: %F\n\
\tMinor (reclaiming a frame) page faults: %R\n\
\tVoluntary context switches: %w\n\
\tInvoluntary context switches: %c\n\
\tSwaps: %W\n\
\tFile system inputs: %I\n\
\tFile system outputs: %O\n\
\tSocket messages sent: %s\n\
\tSocket messages received: %r\n\
\tSignals delivered: %k\n\
\tPage size (bytes): %Z\n\
\tExit status: %x";

/// `time -p`'s.
const POSIX: &str = "real %e\nuser %U\nsys %S";

/// GNU time's (1.9) when given no format.
const DEFAULT: &str = "%Uuser %Ssystem %Eelapsed %PCPU (%Xavgtext+%Davgdata %Mmaxresident)k\n\
%Iinputs+%Ooutputs (%Fmajor+%Rminor)pagefaults %Wswaps";

/// Parses FMT (for clap): `verbose`, `posix`, `default`, or a format of letters. Unknown
/// letters and a dangling `%` are errors.
pub fn parse(s: &str) -> Result<Format, String> {
    let (letters, ending) = match s {
        "verbose" => (VERBOSE, Ending::Said),
        "posix" => (POSIX, Ending::Unsaid),
        "default" => (DEFAULT, Ending::Said),
        _ => (s, Ending::Said),
    };
    Ok(Format {
        pieces: parse_letters(letters)?,
        ending,
    })
}

fn parse_letters(s: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('%') => text.push('%'),
                Some(l) if known(l) => {
                    if !text.is_empty() {
                        pieces.push(Piece::Text(std::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Field(l));
                }
                Some(l) => {
                    return Err(format!(
                        "unknown format letter %{l} (known: %{}; or `verbose`, `posix`, `default`)",
                        letters().map(String::from).collect::<Vec<_>>().join(" %")
                    ))
                }
                None => return Err("the format ends with a lone %".into()),
            },
            '\\' => match chars.next() {
                Some('n') => text.push('\n'),
                Some('t') => text.push('\t'),
                Some('\\') => text.push('\\'),
                // As GNU time prints an escape it does not know.
                Some(o) => {
                    text.push_str("?\\");
                    text.push(o);
                }
                None => text.push_str("?\\"),
            },
            c => text.push(c),
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// Seconds as GNU time prints them: whole hundredths, truncated.
fn secs(ns: u64) -> String {
    let cs = ns / 10_000_000;
    format!("{}.{:02}", cs / 100, cs % 100)
}

/// GNU time's %E: `m:ss.cc`, or `h:mm:ss` from an hour on (truncated, as %e).
fn elapsed(ns: u64) -> String {
    let cs = ns / 10_000_000;
    let (h, m, s, c) = (cs / 360_000, cs / 6000 % 60, cs / 100 % 60, cs % 100);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}.{c:02}")
    }
}

/// GNU time's %P: CPU over wall, both in whole milliseconds, as an integer percentage.
fn percent(r: &Report) -> String {
    let ms = |ns: u64| ns / 1_000_000;
    let wall = ms(r.wall_ns);
    if wall == 0 {
        return "?%".into();
    }
    format!("{}%", (ms(r.user_ns) + ms(r.sys_ns)) * 100 / wall)
}

/// A letter of the figures table: the tree's figure, KiB for bytes, `?` when it is null.
fn table_figure(r: &Report, f: &Figure) -> String {
    match (figures::tree_value(r, f), f.unit) {
        (Ok(v), Unit::Bytes) => (v / 1024).to_string(),
        (Ok(v), Unit::Count) => v.to_string(),
        (Err(_), _) => "?".into(),
    }
}

/// `--format`'s help: GNU time's letters, spacetime's, and the figures table's, each with
/// what it prints.
pub fn help() -> String {
    let mut own =
        String::from("%T tree-wide peak RSS KiB, %N processes, %Y max PSS KiB, %L events lost");
    for f in figures::FIGURES {
        if let Some(l) = f.letter.filter(|&l| !LETTERS.contains(l)) {
            let unit = if f.unit == Unit::Bytes { " KiB" } else { "" };
            let _ = write!(own, ", %{l} {}{unit}", f.title);
        }
    }
    format!(
        "Print this instead of the summary, with every letter of GNU time's (`time -f`: %e %E \
         %U %S %P %M %t %K %D %p %X %Z %F %R %W %I %O %r %s %k %C %x %c %w, %%, \\n, \\t) and \
         spacetime's: {own}. `verbose` prints `time -v`'s layout, `posix` `time -p`'s, \
         `default` GNU time's own (without -f). As GNU time, a line says first when CMD exited \
         non-zero or was killed (not with -q, nor with `posix`, as `time -p`)"
    )
}

/// Every letter, GNU time's first.
fn letters() -> impl Iterator<Item = char> {
    let table = figures::FIGURES.iter().filter_map(|f| f.letter);
    LETTERS
        .chars()
        .chain(table.filter(|&l| !LETTERS.contains(l)))
}

/// Whether `l` is a letter: GNU time's, spacetime's, or one of the figures table's.
fn known(l: char) -> bool {
    LETTERS.contains(l) || Figure::by_letter(l).is_some()
}

fn field(out: &mut String, l: char, r: &Report) {
    let kib = |b: Option<u64>| b.map_or("?".into(), |b| (b / 1024).to_string());
    let s = match l {
        'e' => secs(r.wall_ns),
        'E' => elapsed(r.wall_ns),
        'U' => secs(r.user_ns),
        'S' => secs(r.sys_ns),
        'P' => percent(r),
        'M' => kib(Some(r.totals.peak_rss_bytes)),
        // Linux's getrusage never fills these; GNU time prints 0 for them there.
        't' | 'K' | 'D' | 'p' | 'X' | 'W' | 'r' | 's' | 'k' => "0".into(),
        'Z' => r.kernel.page_size.to_string(),
        'x' => r.exit.map_or("?".into(), |e| match e.0 {
            crate::model::tree::ExitStatus::Code(c) => c.to_string(),
            crate::model::tree::ExitStatus::Signal { .. } => "0".into(),
        }),
        'C' => crate::util::term::join(r.command.iter()),
        'T' => kib(r.totals.tree_peak_rss_bytes),
        'N' => r.totals.processes.to_string(),
        'Y' => kib(r.totals.max_pss_bytes),
        'L' => r.lost_events.to_string(),
        _ => match Figure::by_letter(l) {
            Some(f) => table_figure(r, f),
            None => format!("%{l}"),
        },
    };
    out.push_str(&s);
}

impl Format {
    /// GNU time's line before the format when CMD did not exit 0: `Command exited with
    /// non-zero status N` or `Command terminated by signal N` (None when it exited 0, with no
    /// status (an attached trace), or for `posix`, as `time -p`).
    pub fn status_line(&self, r: &Report) -> Option<String> {
        if self.ending == Ending::Unsaid {
            return None;
        }
        match r.exit?.0 {
            crate::model::tree::ExitStatus::Code(0) => None,
            crate::model::tree::ExitStatus::Code(c) => {
                Some(format!("Command exited with non-zero status {c}\n"))
            }
            crate::model::tree::ExitStatus::Signal { signal, .. } => {
                Some(format!("Command terminated by signal {signal}\n"))
            }
        }
    }

    /// Whether a letter needs the tree-wide RSS over time (`%T`), which the kernel follows
    /// with its rss_stat programs.
    pub fn needs_rss_over_time(&self) -> bool {
        self.pieces.contains(&Piece::Field('T'))
    }

    /// Whether a letter needs PSS (`%Y`), which only sampled rounds read.
    pub fn needs_pss(&self) -> bool {
        self.pieces.contains(&Piece::Field('Y'))
    }

    /// The lines for this report, ending with a newline as `time -f` does.
    pub fn render(&self, r: &Report) -> String {
        let mut out = String::new();
        for p in &self.pieces {
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
#[path = "format_tests.rs"]
mod tests;
