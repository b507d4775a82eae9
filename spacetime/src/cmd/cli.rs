//! Command-line interface.

use std::{ffi::OsString, path::PathBuf};

use clap::{Args, Parser, Subcommand};

pub use crate::util::exit_code::EXIT_OWN_FAILURE;

#[derive(Debug, Parser)]
#[command(
    name = "spacetime",
    version,
    about = "Trace a process tree with eBPF: every fork, exec and exit, with exact peak memory per process and per program image",
    after_help = "Exit status: `trace` exits with CMD's status (128+N if CMD died of signal N, \
                  127 if CMD was not found, 126 if it could not be executed); 125 when spacetime \
                  itself fails."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// The options every subcommand takes.
#[derive(Debug, Args)]
pub struct Global {
    /// More detail: kernel mechanisms in use, per-image figures (-vv: debug logs, including
    /// the kernel programs' own)
    #[arg(short, long, action = clap::ArgAction::Count, global = true, display_order = 900)]
    pub verbose: u8,
}

impl Cli {
    /// The command line `args` (the program's name first). `trace`'s everyday lines are read
    /// without clap ([`super::quick_parse`]). clap builds every subcommand's arguments before
    /// it parses (about 0.4 ms of a traced `/bin/true` through the agent, a sixth of what
    /// spacetime adds to it), so `trace` and `bench` named first are parsed with their own
    /// alone; anything that does not parse so (`-v` first, `--help`, a mistake) goes through
    /// the whole command, for the same help, version and errors.
    pub fn from_args(args: Vec<OsString>) -> Result<Cli, clap::Error> {
        if let Some(cli) = super::quick_parse::trace(&args) {
            return Ok(cli);
        }
        Cli::alone(&args).map_or_else(|| Cli::try_parse_from(args), Ok)
    }

    fn alone(args: &[OsString]) -> Option<Cli> {
        use clap::FromArgMatches;
        let sub = match args.get(1)?.to_str()? {
            "trace" => TraceArgs::augment_args(clap::Command::new("trace")),
            "bench" => crate::cmd::bench::BenchArgs::augment_args(clap::Command::new("bench")),
            _ => return None,
        };
        let top = Global::augment_args(clap::Command::new("spacetime")).subcommand(sub);
        let mut matches = top.try_get_matches_from(args).ok()?;
        // Taken from, not copied (`from_arg_matches` clones every matched value first).
        Cli::from_arg_matches_mut(&mut matches).ok()
    }
}

const TRACE_EXAMPLES: &str = "\
Examples:
  sudo spacetime trace -- make -j8
      Build, then read the summary: every process, its time and its exact peak memory
  sudo spacetime trace --json report.json -q -- ./run-tests.sh
      No live status line; the whole report as JSON (see docs/trace-report.schema.json)
  sudo spacetime trace --perfetto build.pftrace -- cargo build
      A timeline to open in ui.perfetto.dev
  sudo spacetime trace --stop-on-root-exit -- sh -c 'sleep 100 & echo started'
      Stop when sh exits; report the sleep as still running
  sudo spacetime trace --cgroup-peak -- make -j8
      Also the tree's memory with shared pages counted once and page cache included
  sudo spacetime trace -p 4242
      Attach to a running process and its descendants; report when all have ended (or on Ctrl-C)";

const WATCH_EXAMPLES: &str = "\
Examples:
  sudo spacetime watch
      Every process exit on the system, one row each, until Ctrl-C
  sudo spacetime watch --failed --ancestry
      Only the processes that failed, with who started them
  sudo spacetime watch --cgroup /system.slice/cron.service --min-rss 100M
      Cron jobs that reached 100 MiB
  sudo spacetime watch --json -o exits.jsonl --duration 1h
      One JSON object per exit for an hour, appended to exits.jsonl
  sudo spacetime watch --metrics 9464 -o /dev/null
      Serve OpenMetrics for Prometheus on 127.0.0.1:9464";

const BENCH_EXAMPLES: &str = "\
Examples:
  sudo spacetime bench 'gzip -k -f big.tar' 'zstd -k -f big.tar'
      At least 10 traced runs of each (and 3 s): time, peak memory of the largest process
      and of the whole tree, and which differences are significant
  sudo spacetime bench -N -r 30 -w 3 './old --input x' './new --input x'
      No shell: each command split like a shell and exec'd; 3 warm-up runs first
  sudo spacetime bench -P j 1 4 --prepare 'make clean' 'make -j{j}'
      A clean tree before every run of make -j1 to -j4: time and memory per -j
  sudo spacetime bench --export-json b.json 'sort big.txt' 'sort -S 1M big.txt'
      hyperfine's JSON (its scripts read it), with every run's figures";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run CMD and report its whole process tree on stderr
    #[command(after_help = TRACE_EXAMPLES)]
    Trace(TraceArgs),
    /// Run each command many times, every run fully traced (programs loaded once): time and
    /// exact peak memory with their spread, and the commands compared
    #[command(after_help = BENCH_EXAMPLES)]
    Bench(Box<crate::cmd::bench::BenchArgs>),
    /// Report every process exit on the system: runtime, CPU, peak memory, exit status, argv,
    /// ancestry; as a table, JSON lines or OpenMetrics
    #[command(after_help = WATCH_EXAMPLES)]
    Watch(crate::cmd::watch::WatchArgs),
    /// Serve trace and bench for any user: load the kernel programs once, as root, and trace
    /// what clients start, each in a session of its own, over a Unix socket
    #[command(after_help = "\
Examples:
  sudo spacetime agent
      Listen on /run/spacetime/agent.sock; then `spacetime trace -- make` works without sudo
  sudo spacetime agent --socket /tmp/st.sock
      Another socket; clients find it through SPACETIME_SOCKET=/tmp/st.sock")]
    Agent(crate::cmd::agent::AgentArgs),
    /// Draw a saved report again: a `trace --json` or `bench --json` file as its terminal
    /// summary, or with --html as a self-contained page, with --svg as one picture, with
    /// --perfetto (a trace's) as a Perfetto trace
    #[command(after_help = "\
Examples:
  spacetime report build.json
      The summary the trace printed, at this terminal's width
  spacetime report build.json --html build.html
      The process tree on a timeline, memory and CPU over time, the critical path
  spacetime report bench.json --html bench.html
      Each command's runs as distributions; a parameter scan as curves
  spacetime report build.json --svg build.svg
      One static picture: memory and CPU over time, the processes on the same axis
  spacetime report build.json --perfetto build.pftrace
      The trace as `trace --perfetto` wrote it, for ui.perfetto.dev")]
    Report(crate::cmd::report::ReportArgs),
    /// Compare two saved reports for CI: wall, CPU, peak RSS, tree peak, processes and
    /// failures, in total and per program (bench reports: each command's distributions, with
    /// their significance); exit 1 when B crossed a --fail-on threshold
    #[command(after_help = "\
Examples:
  spacetime diff main.json pr.json
      The two builds side by side, with each change
  spacetime diff --fail-on 'peak:+5%,cpu:+10%' main.json pr.json
      Exit 1 when the largest process's peak grew by more than 5 % or CPU by 10 %
  spacetime diff --format markdown main.json pr.json >> $GITHUB_STEP_SUMMARY
      A CI job summary")]
    Diff(crate::cmd::diff::DiffArgs),
    /// Say what works on this machine and why not: kernel and BTF, capabilities, the kernel
    /// hooks, taskstats, delay accounting, cgroups, the agent, the PID namespace; exit
    /// status 0 when `trace` can work here, 1 when it cannot
    #[command(after_help = "\
Examples:
  spacetime doctor
      As yourself: through the agent, or why not
  sudo spacetime doctor
      As root: the programs loaded and the kernel's hooks tried
  spacetime doctor --json | jq .trace
      For scripts: {\"works\": true, \"via\": \"agent\", ...}")]
    Doctor(crate::cmd::doctor::DoctorArgs),
    /// Print a shell completion script on stdout
    #[command(after_help = "\
Examples:
  spacetime completions bash > /usr/share/bash-completion/completions/spacetime
  spacetime completions zsh > /usr/share/zsh/vendor-completions/_spacetime
  spacetime completions fish > /usr/share/fish/vendor_completions.d/spacetime.fish")]
    Completions {
        /// The shell to complete for
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print a manual page (roff) on stdout: spacetime(1), which holds every subcommand, or
    /// one subcommand's spacetime-NAME(1); or write them all into a directory
    #[command(after_help = "\
Examples:
  spacetime man | man -l -
  spacetime man trace | man -l -
  spacetime man --dir /usr/share/man/man1")]
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print (spacetime-NAME(1)); none: spacetime(1)
    #[arg(value_name = "NAME", value_parser = crate::cmd::man::PAGES)]
    pub page: Option<String>,
    /// Write spacetime.1 and every spacetime-NAME.1 into DIR instead, naming each on stderr
    #[arg(long, value_name = "DIR", conflicts_with = "page", value_hint = clap::ValueHint::DirPath)]
    pub dir: Option<PathBuf>,
}

/// Shells `spacetime completions` writes for.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}

/// A usage error made clearer where spacetime knows what was meant: a program named where a
/// subcommand goes (`spacetime make -j8`) gets the `spacetime trace -- make -j8` that traces
/// it, and `trace` with neither CMD nor -p says both ways.
pub fn explain(e: clap::Error, args: impl Iterator<Item = OsString>) -> clap::Error {
    use clap::error::ErrorKind;
    let args: Vec<OsString> = args.collect();
    // The first word that is not an option: where the subcommand goes.
    let at = args
        .iter()
        .position(|a| !a.as_encoded_bytes().starts_with(b"-"));
    let mut cmd = <Cli as clap::CommandFactory>::command();
    match (e.kind(), at) {
        (ErrorKind::InvalidSubcommand, Some(i))
            if crate::run::launch::resolve(&args[i]).is_ok() =>
        {
            let line = shell_line(&args[i..]);
            cmd.error(
                ErrorKind::InvalidSubcommand,
                format!(
                    "'{}' is not a spacetime command; to trace that program run:\n\n    \
                     spacetime trace -- {line}",
                    crate::util::term::escape(args[i].as_encoded_bytes())
                ),
            )
        }
        (ErrorKind::MissingRequiredArgument, Some(i)) if args[i] == "trace" => {
            let mut trace = cmd.find_subcommand_mut("trace").cloned().unwrap_or(cmd);
            trace.error(
                ErrorKind::MissingRequiredArgument,
                "give a command to run or processes to attach to:\n\n    \
                 spacetime trace [OPTIONS] -- CMD [ARGS...]\n    \
                 spacetime trace [OPTIONS] -p PID[,PID...]",
            )
        }
        _ => e,
    }
}

/// Arguments as a shell line to copy (quoted where a shell needs it), escaped for a terminal.
fn shell_line(args: &[OsString]) -> String {
    let words: Vec<String> = args
        .iter()
        .map(|a| {
            let s = a.to_string_lossy();
            shlex::try_quote(&s).map_or_else(|_| s.to_string(), |q| q.into_owned())
        })
        .collect();
    crate::util::term::escape(words.join(" ").as_bytes())
}

#[derive(Debug, Args)]
#[command(override_usage = "spacetime trace [OPTIONS] -- <CMD>...\n       \
                            spacetime trace [OPTIONS] -p <PID[,PID...]>")]
pub struct TraceArgs {
    /// Write the full report as JSON to FILE (`-`: standard output)
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the summary to FILE instead of stderr (`-`: standard output), like `time -o`
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// With -o, append to FILE instead of overwriting it
    #[arg(short = 'a', long, requires = "output")]
    pub append: bool,
    /// The summary as GNU time's `-f` prints it (its help names every letter, the figures
    /// table's too: [`crate::report::format::help`])
    #[arg(
        short = 'f',
        long,
        value_name = "FMT",
        value_parser = crate::report::format::parse,
        help = crate::report::format::help()
    )]
    pub format: Option<crate::report::format::Format>,
    /// Stop when CMD exits; report descendants still running instead of waiting for them
    #[arg(long)]
    pub stop_on_root_exit: bool,
    /// Also run CMD in a memory cgroup of its own and report its peak (cgroup v2 memory.peak,
    /// v1 memory.max_usage_in_bytes): each page once, page cache included, beside the
    /// tree-wide peak RSS that sums the processes' RSS
    #[arg(long)]
    pub cgroup_peak: bool,
    /// Under sudo, run CMD as root instead of the invoking user
    #[arg(long)]
    pub keep_root: bool,
    /// Size of the kernel's ring buffer (bytes; K, M, G suffixes; rounded up to a power of two)
    #[arg(long, value_name = "SIZE", default_value = RING_BUFFER_DEFAULT, value_parser = parse_size)]
    pub ring_buffer: u32,
    /// Most processes tracked at once (the kernel's pid_max bounds it too)
    #[arg(long, value_name = "N", default_value_t = MAX_PROCESSES_DEFAULT)]
    pub max_processes: u32,
    /// Receive buffer for the kernel's taskstats exit records (K, M, G suffixes)
    #[arg(long, value_name = "SIZE", default_value = TASKSTATS_BUFFER_DEFAULT, value_parser = parse_size)]
    pub taskstats_buffer: u32,
    /// Switch delay accounting on (sysctl kernel.task_delayacct) for the trace, restoring the
    /// old value afterwards
    #[arg(long)]
    pub delayacct: bool,
    /// Do not cut the summary's lines to the terminal's width
    #[arg(short = 'w', long)]
    pub wide: bool,
    /// Skip the memory-over-time chart in the summary
    #[arg(long)]
    pub no_chart: bool,
    /// Write a Perfetto trace (open it in ui.perfetto.dev): a track per process nested by the
    /// tree, a slice per image, RSS and PSS counters (`-`: standard output)
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,
    /// Write the report as a self-contained HTML page to FILE (opens offline in any browser):
    /// the process tree on a timeline, memory and CPU over time, the critical path, the
    /// programs (`-`: standard output)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the report as one static SVG picture to FILE (for a CI artefact or a chat):
    /// memory and CPU over time with the peak marked, and the processes on the same time axis
    /// (`-`: standard output)
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Quiet: no live status line and no notices (errors are still shown); with --format,
    /// no line about how CMD ended (as `time -q`)
    #[arg(short, long)]
    pub quiet: bool,
    /// Least time between two RSS points of one process, in ms (new tree-wide peaks always
    /// count)
    #[arg(long, value_name = "MS", default_value_t = RSS_INTERVAL_DEFAULT)]
    pub rss_interval: u32,
    /// Shortest interval between two PSS rounds (every live process read together), in ms
    /// (bigger trees are read less often so sampling stays under 2% of a CPU); 0 turns PSS
    /// sampling off
    #[arg(long, value_name = "MS", default_value_t = PSS_INTERVAL_DEFAULT)]
    pub pss_interval: u64,
    /// Share of one CPU the PSS rounds may use, in %: denser rounds narrow what short
    /// processes may have held between two of them (a build's compilers)
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = PSS_BUDGET_DEFAULT,
        value_parser = parse_percent
    )]
    pub pss_budget: f64,
    /// List at most N processes in the summary tree (0: all)
    #[arg(long, value_name = "N", default_value_t = TOP_DEFAULT)]
    pub top: usize,
    /// Load the kernel programs here (root) even when a `spacetime agent` answers on its
    /// socket (SPACETIME_SOCKET, default /run/spacetime/agent.sock)
    #[arg(long)]
    pub no_agent: bool,
    /// Trace through the agent only: fail when none can serve the run, rather than load the
    /// kernel programs here (root)
    #[arg(long, conflicts_with = "no_agent")]
    pub agent: bool,
    /// Attach to these running processes (comma-separated) instead of running CMD: each, its
    /// descendants and every later fork, until all have ended or Ctrl-C
    #[arg(short = 'p', long = "pid", value_name = "PID[,PID...]", value_parser = parse_pids, conflicts_with_all = ["command", "cgroup_peak", "keep_root"])]
    pub pid: Option<Pids>,
    /// The command to run, and its arguments
    #[arg(
        required_unless_present = "pid",
        trailing_var_arg = true,
        value_name = "CMD",
        value_hint = clap::ValueHint::CommandWithArguments
    )]
    pub command: Vec<OsString>,
}

/// `trace`'s defaults, which [`super::quick_parse`] gives too.
pub const RING_BUFFER_DEFAULT: &str = "16M";
pub const MAX_PROCESSES_DEFAULT: u32 = 65536;
pub const TASKSTATS_BUFFER_DEFAULT: &str = "8M";
pub const RSS_INTERVAL_DEFAULT: u32 = 5;
pub const PSS_INTERVAL_DEFAULT: u64 = 50;
pub const PSS_BUDGET_DEFAULT: f64 = crate::model::pss::DEFAULT_CPU_BUDGET * 100.0;
pub const TOP_DEFAULT: usize = 40;

/// The pids of `trace -p`, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pids(pub Vec<u32>);

/// A share of one CPU, in %: more than 0, at most 100.
fn parse_percent(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p),
        _ => Err(format!(
            "{s:?} is not a share of a CPU (a percentage above 0, up to 100)"
        )),
    }
}

fn parse_pids(s: &str) -> Result<Pids, String> {
    crate::kernel::attach::parse_pids(s).map(Pids)
}

/// A buffer size from 4 KiB to 1 GiB, spelt as every size is ([`crate::util::parse`]).
pub use crate::util::parse::buffer_size as parse_size;

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// `spacetime` followed by `words`, as a command line.
    pub(in crate::cmd) fn argv(words: &[&str]) -> Vec<OsString> {
        std::iter::once("spacetime")
            .chain(words.iter().copied())
            .map(OsString::from)
            .collect()
    }

    /// `trace` and `bench` parsed alone give what the whole command gives, and what does not
    /// parse alone is left to it.
    #[test]
    fn a_subcommand_parsed_alone_is_parsed_as_by_the_whole_command() {
        let same = [
            &["trace", "--", "make", "-j8"][..],
            &[
                "trace",
                "-v",
                "-vv",
                "-f",
                "%e %M",
                "-q",
                "--no-chart",
                "--",
                "true",
            ],
            &[
                "trace",
                "--json",
                "r.json",
                "--pss-interval",
                "20",
                "ls",
                "-l",
            ],
            &["trace", "-p", "1,2", "--agent"],
            &["trace", "--ring-buffer", "4M", "--", "sh", "-c", "exit 3"],
            &["bench", "-r", "30", "-N", "true"],
            &["bench", "--json", "b.json", "sleep 0.1", "sleep 0.2"],
        ];
        for words in same {
            let alone = Cli::alone(&argv(words)).unwrap_or_else(|| panic!("{words:?} alone"));
            let whole = Cli::try_parse_from(argv(words)).expect("the whole command parses it");
            assert_eq!(format!("{alone:?}"), format!("{whole:?}"), "{words:?}");
        }
        let left = [
            &["-v", "trace", "--", "true"][..],
            &["trace", "--help"],
            &["trace", "--no-such-option", "--", "true"],
            &["trace"],
            &["watch"],
            &["help", "trace"],
            &[],
        ];
        for words in left {
            assert!(Cli::alone(&argv(words)).is_none(), "{words:?} parsed alone");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("8192"), Ok(8192));
        assert!(parse_size("1").is_err());
        assert!(parse_size("2X").is_err());
        assert!(parse_size("9G").is_err());
    }

    #[test]
    fn trailing_command_keeps_its_flags() {
        let cli = Cli::try_parse_from(["spacetime", "trace", "--", "ls", "-l", "--color"])
            .expect("parse");
        let Command::Trace(t) = cli.command else {
            panic!("not parsed as trace")
        };
        assert_eq!(t.command, ["ls", "-l", "--color"]);
    }

    #[test]
    fn output_options() {
        let cli = Cli::try_parse_from([
            "spacetime",
            "trace",
            "-o",
            "t.txt",
            "--append",
            "-f",
            "%e %M",
            "--json",
            "-",
            "--",
            "true",
        ])
        .expect("parse");
        let Command::Trace(t) = cli.command else {
            panic!("not parsed as trace")
        };
        assert_eq!(t.output.as_deref(), Some(std::path::Path::new("t.txt")));
        assert!(t.append && t.format.is_some());
        assert_eq!(t.json.as_deref(), Some(std::path::Path::new("-")));
        // --append needs -o; a bad format letter is refused before anything runs.
        assert!(Cli::try_parse_from(["spacetime", "trace", "--append", "--", "true"]).is_err());
        assert!(Cli::try_parse_from(["spacetime", "trace", "-f", "%q", "--", "true"]).is_err());
    }

    #[test]
    fn attach_takes_pids_instead_of_a_command() {
        let cli = Cli::try_parse_from(["spacetime", "trace", "-p", "12,34"]).expect("parse");
        let Command::Trace(t) = cli.command else {
            panic!("not parsed as trace")
        };
        assert_eq!(t.pid, Some(Pids(vec![12, 34])));
        assert!(t.command.is_empty());
        assert!(
            Cli::try_parse_from(["spacetime", "trace"]).is_err(),
            "neither"
        );
        assert!(
            Cli::try_parse_from(["spacetime", "trace", "-p", "1", "--", "true"]).is_err(),
            "both"
        );
        assert!(Cli::try_parse_from(["spacetime", "trace", "-p", "x"]).is_err());
    }
}
