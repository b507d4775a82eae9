//! `spacetime bench`'s options: hyperfine's, with its names and meanings, and spacetime's own.

use std::{ffi::OsString, path::PathBuf};

use clap::{Args, ValueEnum};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Runs of each command, exactly (by default at least 10, and as many more as fit in
    /// 3 s, as hyperfine)
    #[arg(short = 'r', long, value_name = "N", conflicts_with_all = ["min_runs", "max_runs"],
          value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: Option<u32>,
    /// At least N runs of each command (default 10)
    #[arg(short = 'm', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub min_runs: Option<u32>,
    /// At most N runs of each command (default: no limit)
    #[arg(short = 'M', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_runs: Option<u32>,
    /// Run each command for at least SECS (default 3, as hyperfine): the run count is what
    /// fits in it at the first run's cost, within -m and -M (-r overrides it)
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub min_benchmarking_time: Option<std::time::Duration>,
    /// Untraced runs of each command before the measured ones (to warm caches)
    #[arg(short = 'w', long, value_name = "N", default_value_t = 0)]
    pub warmup: u32,
    /// Run CMD before every run (warm-up and measured) of a command, untraced; given once,
    /// for every command; given once per command (the reference first), in order
    #[arg(short = 'p', long, value_name = "CMD")]
    pub prepare: Vec<OsString>,
    /// Run CMD after every run of a command, untraced; once, or once per command
    #[arg(short = 'C', long, value_name = "CMD")]
    pub conclude: Vec<OsString>,
    /// Run CMD once before each command's runs (its warm-up included), with its parameters
    #[arg(short = 's', long, value_name = "CMD")]
    pub setup: Option<OsString>,
    /// Run CMD once after each command's runs, with its parameters
    #[arg(short = 'c', long, value_name = "CMD")]
    pub cleanup: Option<OsString>,
    /// A benchmark for each value of VAR from MIN to MAX (step 1, or -D): `{VAR}` in the
    /// commands (and their names, setup, prepare, conclude, cleanup) is replaced by it;
    /// time and memory are reported per value
    #[arg(short = 'P', long, num_args = 3, value_names = ["VAR", "MIN", "MAX"],
          allow_hyphen_values = true, conflicts_with = "parameter_list")]
    pub parameter_scan: Option<Vec<String>>,
    /// The step of --parameter-scan (needed when MIN or MAX is not an integer)
    #[arg(short = 'D', long, value_name = "DELTA", requires = "parameter_scan")]
    pub parameter_step_size: Option<String>,
    /// A benchmark for each of the comma-separated VALUES of VAR (`\,` is a comma); given
    /// again, for every combination
    #[arg(short = 'L', long, num_args = 2, value_names = ["VAR", "VALUES"],
          action = clap::ArgAction::Append, allow_hyphen_values = true)]
    pub parameter_list: Vec<String>,
    /// The shell the commands (and setup, prepare, conclude, cleanup) run through: a name,
    /// a path or a command line (`bash --norc`); `default` is sh, `none` is -N. Its start-up,
    /// measured before the first command, is subtracted from every run's times
    #[arg(short = 'S', long, value_name = "SHELL")]
    pub shell: Option<String>,
    /// No shell (`--shell none`): each command split like a shell does (quotes, backslashes)
    /// and exec'd directly
    #[arg(short = 'N', long, conflicts_with = "shell")]
    pub no_shell: bool,
    /// A name for a command, shown and exported instead of its text; once per command, or
    /// once for all benchmarks of a parameter scan (with `{VAR}`)
    #[arg(short = 'n', long, value_name = "NAME")]
    pub command_name: Vec<String>,
    /// Benchmark CMD first and compare every command with it (instead of with the fastest)
    #[arg(long, value_name = "CMD")]
    pub reference: Option<OsString>,
    /// The reference command's name
    #[arg(long, value_name = "NAME", requires = "reference")]
    pub reference_name: Option<String>,
    /// The unit of times on the terminal and in the Markdown, AsciiDoc and org-mode tables
    /// (JSON and CSV are in seconds): by default the mean's
    #[arg(short = 'u', long, value_name = "UNIT", value_enum)]
    pub time_unit: Option<TimeUnit>,
    /// Order of the comparison and of the tables: auto (comparison by mean time, tables as
    /// given), command (as given), mean-time (both by mean time)
    #[arg(long, value_name = "METHOD", value_enum, default_value_t = Sort::Auto)]
    pub sort: Sort,
    /// Where the commands' standard output goes: null (/dev/null, the default), pipe (read
    /// and dropped), inherit (spacetime's), or a FILE (with a `/`); once, or once per command
    #[arg(long, value_name = "WHERE", conflicts_with = "show_output")]
    pub output: Vec<String>,
    /// Where the commands read standard input from: null (/dev/null, the default) or a FILE
    /// (read from its start by every run)
    #[arg(long, value_name = "WHERE")]
    pub input: Option<String>,
    /// Let the commands write to spacetime's stdout and stderr (`--output inherit`)
    #[arg(long)]
    pub show_output: bool,
    /// Load the kernel programs here (root) even when a `spacetime agent` answers
    #[arg(long)]
    pub no_agent: bool,
    /// Trace through the agent only: fail when none can serve the runs, rather than load the
    /// kernel programs here (root)
    #[arg(long, conflicts_with = "no_agent")]
    pub agent: bool,
    /// Keep benchmarking when a command exits non-zero (its exit codes are still reported)
    #[arg(short = 'i', long)]
    pub ignore_failure: bool,
    /// Every command's statistics and per-run values as JSON (hyperfine's keys in seconds,
    /// and spacetime's) to FILE (`-`: standard output)
    #[arg(long = "export-json", visible_alias = "json", value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The comparison as a Markdown table to FILE (`-`: standard output)
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// The comparison as an AsciiDoc table to FILE (`-`: standard output)
    #[arg(long, value_name = "FILE")]
    pub export_asciidoc: Option<PathBuf>,
    /// The comparison as an Emacs org-mode table to FILE (`-`: standard output)
    #[arg(long, value_name = "FILE")]
    pub export_orgmode: Option<PathBuf>,
    /// One CSV row per command, hyperfine's columns first (seconds), to FILE (`-`: standard
    /// output)
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// Write a self-contained HTML page to FILE: each command's runs as distributions of time
    /// and memory, a parameter scan's commands as curves
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write one static SVG picture to FILE: per command, each run's wall time, peak RSS and
    /// tree peak as dots, with the mean, standard deviation and median
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// No progress bar and no notices (the summary and errors are still shown)
    #[arg(short, long)]
    pub quiet: bool,
    /// Output style, as hyperfine's: auto (full when the summary goes to a terminal, else
    /// basic), basic (no colour, no progress bar), full (colour even off a terminal, the
    /// progress bar on one), nocolor (the progress bar without colour), color (colour
    /// without the progress bar), none (no summary nor progress: exports and errors only).
    /// auto has no colour when NO_COLOR is set or TERM is dumb
    #[arg(long, value_name = "TYPE", value_enum, default_value_t = Style::Auto)]
    pub style: Style,
    /// Run every measured run in a memory cgroup of its own and report the tree's
    /// distinct-page peak (pages shared after fork counted once, page cache included) beside
    /// the summed-RSS tree peak
    #[arg(long)]
    pub cgroup_peak: bool,
    /// Under sudo, run the commands as root instead of the invoking user
    #[arg(long)]
    pub keep_root: bool,
    /// The commands to compare, each one argument (quote it)
    #[arg(required = true, value_name = "CMD")]
    pub commands: Vec<OsString>,
}

/// `--style`, hyperfine's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Style {
    Auto,
    Basic,
    Full,
    Nocolor,
    Color,
    None,
}

impl Style {
    /// Whether the summary is coloured; `terminal`: it goes to a terminal.
    pub fn color(self, terminal: bool) -> bool {
        match self {
            Style::Auto => terminal && !crate::util::term::no_color(),
            Style::Full | Style::Color => true,
            Style::Basic | Style::Nocolor | Style::None => false,
        }
    }

    /// Whether the progress bar is drawn; `terminal`: stderr is a terminal (off one, it
    /// would be lines of carriage returns: hyperfine draws none there either).
    pub fn progress(self, terminal: bool) -> bool {
        match self {
            Style::Auto | Style::Full | Style::Nocolor => terminal,
            Style::Basic | Style::Color | Style::None => false,
        }
    }

    /// Whether the summary is printed at all.
    pub fn summary(self) -> bool {
        self != Style::None
    }
}

/// `--min-benchmarking-time`: seconds, a decimal number above 0.
fn parse_seconds(s: &str) -> Result<std::time::Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    std::time::Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s}: the time must be above 0 s"))
}

/// `-u/--time-unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimeUnit {
    Microsecond,
    Millisecond,
    Second,
}

impl TimeUnit {
    /// hyperfine's choice for a mean of `secs`: µs under 1 ms, ms under 1 s, else s.
    pub fn auto(secs: f64) -> TimeUnit {
        if secs < 0.001 {
            TimeUnit::Microsecond
        } else if secs < 1.0 {
            TimeUnit::Millisecond
        } else {
            TimeUnit::Second
        }
    }

    pub fn short(self) -> &'static str {
        match self {
            TimeUnit::Microsecond => "µs",
            TimeUnit::Millisecond => "ms",
            TimeUnit::Second => "s",
        }
    }

    /// `secs` in this unit, as hyperfine prints it (3 decimals in seconds, else 1).
    pub fn value(self, secs: f64) -> String {
        match self {
            TimeUnit::Microsecond => format!("{:.1}", secs * 1e6),
            TimeUnit::Millisecond => format!("{:.1}", secs * 1e3),
            TimeUnit::Second => format!("{secs:.3}"),
        }
    }

    pub fn show(self, secs: f64) -> String {
        format!("{} {}", self.value(secs), self.short())
    }
}

/// `--sort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Sort {
    Auto,
    Command,
    MeanTime,
}

impl Sort {
    /// Whether the comparison is ordered by mean time.
    pub fn comparison_by_time(self) -> bool {
        self != Sort::Command
    }

    /// Whether the exported tables are.
    pub fn tables_by_time(self) -> bool {
        self == Sort::MeanTime
    }
}

/// How many runs: at least `min`, at most `max`, and as many as fit in `min_seconds`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunBounds {
    pub min: u32,
    pub max: Option<u32>,
}

impl BenchArgs {
    /// hyperfine's rules: -r is both bounds; -M alone lowers the default minimum to it.
    pub fn run_bounds(&self) -> Result<RunBounds, super::commands::PlanError> {
        const DEFAULT_MIN: u32 = 10;
        match (self.runs, self.min_runs, self.max_runs) {
            (Some(r), _, _) => Ok(RunBounds {
                min: r,
                max: Some(r),
            }),
            (None, Some(min), Some(max)) if min > max => {
                Err(super::commands::PlanError::EmptyRunsRange)
            }
            (None, min, max) => Ok(RunBounds {
                min: min.unwrap_or(max.map_or(DEFAULT_MIN, |m| m.min(DEFAULT_MIN))),
                max,
            }),
        }
    }
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
