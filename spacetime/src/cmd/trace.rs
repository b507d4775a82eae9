//! `spacetime trace -- CMD`: one run of a [`Session`]: load the programs, run CMD until every
//! traced process has exited (or the root, on request), then render and write the report.

use std::io::{self, IsTerminal};

use crate::{
    cmd::cli::TraceArgs,
    kernel::loader::{CpuClock, LoadOptions},
    report::{self, chart},
    run::{
        launch,
        outputs::{Outputs, Requested},
        Programs, RunError, RunOptions, Session, SessionOptions, Spawn, Start,
    },
    util::exit_code::EXIT_OWN_FAILURE,
};

/// Entry point of the subcommand: returns the process exit status.
pub fn main(args: TraceArgs, verbose: u8) -> i32 {
    match run(args, verbose) {
        Ok(code) => code,
        Err(RunError::Launch(e)) => {
            crate::errln!("spacetime: {e}");
            e.exit_code()
        }
        Err(RunError::Other(e)) => {
            crate::errln!("spacetime: {e:#}");
            EXIT_OWN_FAILURE
        }
    }
}

/// What starts the run: CMD, resolved, and who it runs as; or the pids to attach to.
enum What {
    Spawn(std::path::PathBuf, Option<launch::Credentials>),
    Attach(Vec<u32>),
}

fn what(args: &TraceArgs) -> Result<What, RunError> {
    if let Some(pids) = &args.pid {
        // Refused before anything loads: a pid that is gone, or another user's.
        let caller = crate::kernel::attach::caller();
        for &pid in &pids.0 {
            crate::kernel::attach::Target::hold(pid, caller).map_err(anyhow::Error::from)?;
        }
        return Ok(What::Attach(pids.0.clone()));
    }
    let path = launch::resolve(&args.command[0])?;
    let creds = match args.keep_root {
        true => None,
        false => launch::sudo_credentials(),
    };
    Ok(What::Spawn(path, creds))
}

fn run(args: TraceArgs, verbose: u8) -> Result<i32, RunError> {
    let what = what(&args)?;
    // Before anything runs: a path that cannot be written must not cost a whole run.
    let mut outputs = Outputs::open(&Requested {
        json: args.json.as_deref(),
        perfetto: args.perfetto.as_deref(),
        html: args.html.as_deref(),
        svg: args.svg.as_deref(),
        summary: args.output.as_deref(),
        append: args.append,
    })
    .map_err(anyhow::Error::from)?;
    let start = match &what {
        What::Spawn(path, creds) => Start::Spawn(Spawn {
            path,
            argv: &args.command,
            creds: creds.as_ref(),
        }),
        What::Attach(pids) => Start::Attach(pids),
    };
    let first = match &start {
        Start::Spawn(s) => Some(s),
        Start::Attach(_) => None,
    };
    let mut session = Session::open_any(
        &session_options(&args, verbose),
        Programs::from_flags(args.agent, args.no_agent),
        first,
    )?;
    if verbose > 0 {
        session.tell_loaded();
    }
    let run = session.run(
        start,
        &RunOptions {
            stop_on_root_exit: args.stop_on_root_exit,
            pss_interval_ns: match pss_shown(&args) {
                true => args.pss_interval.saturating_mul(1_000_000),
                false => 0,
            },
            pss_cpu_budget: Some(args.pss_budget / 100.0),
            memory_over_time: memory_over_time(&args),
            quiet: args.quiet,
            cgroup_peak: args.cgroup_peak,
        },
    )?;
    // Nothing comes from the kernel any more: its programs, maps and ring buffer (mapped,
    // so resident: 16 MiB by default) go before the report is built, not on top of it.
    drop(session);
    let live = run.processes();
    let report = run.report(&live);
    let summary = render(&report, &args, outputs.summary.as_ref(), verbose);
    outputs.write(&report, &summary);
    Ok(run.exit_code())
}

/// Whether anything asks for memory over time: the summary (its tree-wide peak and chart),
/// the JSON's and Perfetto's timelines, the HTML page's chart, `%T`. A `--format` without
/// them (`time -f`'s use) leaves the kmem:rss_stat programs unloaded: less to verify at
/// start-up, nothing run on every RSS change. Each image's peak then comes from its end, as
/// the kernel's own (`max(hiwater_rss, rss)`, VmHWM's figure).
fn memory_over_time(args: &TraceArgs) -> bool {
    args.format
        .as_ref()
        .is_none_or(|f| f.needs_rss_over_time() || writes_timelines(args))
}

/// Whether anything shows PSS: the summary's max PSS, `%Y`, the JSON, Perfetto, the HTML
/// page. A `--format` without `%Y` reads no smaps_rollup.
fn pss_shown(args: &TraceArgs) -> bool {
    args.format
        .as_ref()
        .is_none_or(|f| f.needs_pss() || writes_timelines(args))
}

/// Whether anything shows CPU over time: the summary's chart, the JSON's and Perfetto's
/// timelines, the HTML page. Otherwise (`--format`, `--no-chart` without them) the CPU clock
/// program stays unloaded: nothing to verify at start-up, nothing run on every tick.
fn cpu_over_time(args: &TraceArgs) -> bool {
    let chart = args.format.is_none() && !args.no_chart;
    chart || writes_timelines(args)
}

/// The files that carry every timeline whatever the summary shows: the JSON, Perfetto's
/// trace, the HTML page, the SVG picture.
fn writes_timelines(args: &TraceArgs) -> bool {
    args.json.is_some() || args.perfetto.is_some() || args.html.is_some() || args.svg.is_some()
}

fn session_options(args: &TraceArgs, verbose: u8) -> SessionOptions {
    SessionOptions {
        load: LoadOptions {
            ring_buffer_bytes: args.ring_buffer,
            max_tracked: args.max_processes,
            track_rss: memory_over_time(args),
            cpu_clock: match cpu_over_time(args) {
                true => CpuClock::Attached,
                false => CpuClock::Off,
            },
            rss_interval_ns: args.rss_interval.saturating_mul(1_000_000),
            ..LoadOptions::default()
        },
        taskstats_buffer: args.taskstats_buffer,
        delayacct: args.delayacct,
        delayacct_notice: verbose > 0 && !args.quiet,
    }
}

/// The summary: `--format`'s, or the text report with its charts.
fn render(
    report: &report::Report,
    args: &TraceArgs,
    summary_dest: Option<&crate::run::outputs::Dest>,
    verbose: u8,
) -> String {
    if let Some(f) = &args.format {
        // GNU time's line about an abnormal end comes first, unless -q (as `time -q`).
        let status = (!args.quiet).then(|| f.status_line(report)).flatten();
        return status.unwrap_or_default() + &f.render(report);
    }
    // Colours only on a terminal: not in a file of `-o`.
    let terminal = summary_dest.is_none() && io::stderr().is_terminal();
    let cols = summary_width(summary_dest, args.wide);
    let width = cols.or_else(|| Some(terminal_width(&io::stderr())));
    report::text::render(
        report,
        &report::text::Options {
            width: cols,
            top: args.top,
            verbose: verbose > 0,
            charts: !args.no_chart,
            style: chart::Style::detect(terminal),
            chart_width: width,
        },
    )
}

/// stderr's width when it is a terminal, else `COLUMNS`, else 120.
fn terminal_width(stderr: &io::Stderr) -> usize {
    let fd = stderr.is_terminal().then_some(stderr);
    crate::util::term::columns(fd, false).unwrap_or(120)
}

/// The summary's width: its terminal's (stderr, or stdout for `-o -`), else `COLUMNS`, else
/// 120; a file is not cut to a terminal it is not on. None (no cut) with `--wide`.
fn summary_width(summary: Option<&crate::run::outputs::Dest>, wide: bool) -> Option<usize> {
    use std::os::fd::AsFd;
    let (stderr, stdout) = (io::stderr(), io::stdout());
    let fd = match summary {
        None => stderr.is_terminal().then(|| stderr.as_fd()),
        Some(crate::run::outputs::Dest::Stdout) => stdout.is_terminal().then(|| stdout.as_fd()),
        Some(_) => None,
    };
    crate::util::term::columns(fd, wide)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{cpu_over_time, memory_over_time, pss_shown};
    use crate::cmd::cli::{Cli, Command};

    fn args(argv: &[&str]) -> super::TraceArgs {
        let mut full = vec!["spacetime", "trace"];
        full.extend_from_slice(argv);
        full.extend_from_slice(&["--", "true"]);
        match Cli::try_parse_from(full).expect("parse").command {
            Command::Trace(t) => t,
            _ => panic!("not parsed as trace"),
        }
    }

    #[test]
    fn memory_over_time_only_when_something_shows_it() {
        assert!(
            memory_over_time(&args(&[])),
            "the summary shows the tree-wide peak"
        );
        assert!(!memory_over_time(&args(&["-f", "%e %M"])), "time -f's use");
        assert!(!memory_over_time(&args(&["-f", "verbose"])));
        assert!(
            memory_over_time(&args(&["-f", "%e %T"])),
            "%T is the tree-wide peak"
        );
        assert!(memory_over_time(&args(&["-f", "%M", "--json", "r.json"])));
        assert!(memory_over_time(&args(&["-f", "%M", "--perfetto", "t.pb"])));
        assert!(memory_over_time(&args(&["-f", "%M", "--html", "r.html"])));
    }

    #[test]
    fn pss_only_when_something_shows_it() {
        assert!(pss_shown(&args(&[])), "the summary's max PSS");
        assert!(!pss_shown(&args(&["-f", "%e %M"])), "time -f's use");
        assert!(pss_shown(&args(&["-f", "%e %Y"])), "%Y is the max PSS");
        assert!(pss_shown(&args(&["-f", "%e", "--json", "r.json"])));
        assert!(pss_shown(&args(&["-f", "%e", "--html", "r.html"])));
    }

    #[test]
    fn cpu_over_time_only_when_something_shows_it() {
        assert!(cpu_over_time(&args(&[])), "the summary's chart");
        assert!(!cpu_over_time(&args(&["--no-chart"])));
        assert!(!cpu_over_time(&args(&["-f", "%e %U"])), "time -f's use");
        assert!(cpu_over_time(&args(&["--no-chart", "--json", "r.json"])));
        assert!(cpu_over_time(&args(&["-f", "%e", "--html", "r.html"])));
        assert!(cpu_over_time(&args(&["-f", "%e", "--perfetto", "t.pb"])));
    }
}
