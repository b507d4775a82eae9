//! The bench's course, as hyperfine's: outputs checked, programs loaded once, the shell's
//! start-up measured; then for each benchmark its header, setup, warm-up runs, the measured
//! runs (each a full trace, between its prepare and conclude commands; as many as the run
//! bounds and the 3 s rule ask), cleanup and summary; the comparison and the exports at the
//! end, also after Ctrl-C or a failed command.

use std::{
    ffi::OsString,
    io::{IsTerminal, Write},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use super::{
    args::{BenchArgs, RunBounds},
    commands::Shell,
    compare::compare,
    export::{self, BenchReport, Files},
    markup,
    model::{BenchCommand, CommandResult, CommandRuns, RunFigures},
    progress::Progress,
    ranking,
    streams::Streams,
    summary::{self, Layout},
    untraced, warnings,
};
use crate::{
    cmd::cli::EXIT_OWN_FAILURE,
    kernel::provenance::Provenance,
    run::launch::{Credentials, Stdio},
};

/// Runs one command traced, through kernel programs loaded once for the whole bench.
pub trait Tracer {
    /// A stop signal came during the last run, or is waiting.
    fn interrupted(&self) -> bool;
    /// Where the next runs' standard streams go.
    fn streams(&mut self, _stdio: Stdio) {}
    /// Traces `argv` (`path`: its first word resolved) to its end; its figures.
    fn run(&mut self, path: &Path, argv: &[OsString]) -> anyhow::Result<RunFigures>;
    /// Whose kernel programs trace the runs.
    fn programs(&self) -> Provenance;
}

/// Exit status when a command failed and `--ignore-failure` was not given, as hyperfine.
pub const EXIT_COMMAND_FAILED: i32 = 1;
/// Exit status after Ctrl-C (or SIGTERM, SIGHUP): 128 + SIGINT, as a shell reports it.
pub const EXIT_INTERRUPTED: i32 = 128 + libc::SIGINT;
/// hyperfine's minimum benchmarking time: runs are added until the first run's estimate
/// says this much is spent (within the run bounds).
const MIN_BENCHMARKING: Duration = Duration::from_secs(3);
/// Runs of `SHELL -c ""` whose mean is the shell's start-up (hyperfine's 50).
pub(super) const CALIBRATION_RUNS: u32 = 50;

/// A signal that stops the bench (Ctrl-C, SIGTERM, SIGHUP) is waiting: the session blocks
/// them while it lives and reads them during a run; between runs (prepare and warm-up
/// commands) they stay pending.
pub fn stop_signal_pending() -> bool {
    // SAFETY: sigpending fills the set it is given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigpending(&mut set) == 0
            && [libc::SIGINT, libc::SIGTERM, libc::SIGHUP]
                .iter()
                .any(|&s| libc::sigismember(&set, s) == 1)
    }
}

/// How one command's runs ended: all done, or the bench stops here (with this message and
/// exit status), its results so far still reported.
pub(super) enum End {
    Done,
    Stopped { message: String, status: i32 },
}

impl End {
    fn failed(cmd: &BenchCommand, code: i32) -> End {
        End::Stopped {
            message: format!(
                "{} exited with status {code}; -i/--ignore-failure keeps benchmarking",
                cmd.shown()
            ),
            status: EXIT_COMMAND_FAILED,
        }
    }

    pub(super) fn interrupted() -> End {
        End::Stopped {
            message: "interrupted: reporting the runs that completed".into(),
            status: EXIT_INTERRUPTED,
        }
    }

    pub(super) fn error(e: anyhow::Error) -> End {
        // A launch error names its cause itself: the chain would say it twice.
        let (message, status) = match e.downcast_ref::<crate::run::launch::LaunchError>() {
            Some(l) => (l.to_string(), l.exit_code()),
            None => (format!("{e:#}"), EXIT_OWN_FAILURE),
        };
        End::Stopped { message, status }
    }
}

pub struct Plan<'a> {
    pub args: &'a BenchArgs,
    /// Every benchmark, the reference first when there is one.
    pub commands: Vec<BenchCommand>,
    /// Each command's program, resolved like execvp.
    pub paths: Vec<PathBuf>,
    pub creds: Option<Credentials>,
    pub files: Files,
    pub streams: Streams,
    pub shell: Shell,
    pub bounds: RunBounds,
    /// `--reference`: the first command is the one every other is compared with.
    pub has_reference: bool,
}

/// What the shell's start-up costs a run, subtracted from each run's times.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Correction {
    pub wall_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
}

impl Correction {
    fn apply(&self, f: &mut RunFigures) {
        f.wall_ns = f.wall_ns.saturating_sub(self.wall_ns);
        f.user_ns = f.user_ns.saturating_sub(self.user_ns);
        f.sys_ns = f.sys_ns.saturating_sub(self.sys_ns);
    }
}

/// Where the summary goes: stdout, or stderr when an export is written to stdout; nowhere
/// with `--style none`.
struct Out {
    stderr: bool,
    shown: bool,
    layout: Layout,
}

impl Out {
    fn new(plan: &Plan) -> Out {
        let stderr = plan.files.uses_stdout();
        let (terminal, cols) = match stderr {
            true => {
                let e = std::io::stderr();
                (e.is_terminal(), crate::util::term::columns(Some(e), false))
            }
            false => {
                let o = std::io::stdout();
                (o.is_terminal(), crate::util::term::columns(Some(o), false))
            }
        };
        let width = match terminal {
            true => cols.unwrap_or(80),
            false => 80,
        };
        Out {
            stderr,
            shown: plan.args.style.summary(),
            layout: Layout {
                width,
                cut: terminal,
                unit: plan.args.time_unit,
                color: plan.args.style.color(terminal),
            },
        }
    }

    fn print(&self, text: &str) {
        if !self.shown {
            return;
        }
        let text = crate::util::term::localize(text);
        let _ = match self.stderr {
            true => write_all(&mut std::io::stderr().lock(), &text),
            false => write_all(&mut std::io::stdout().lock(), &text),
        };
    }
}

fn write_all(w: &mut dyn Write, text: &str) -> std::io::Result<()> {
    w.write_all(text.as_bytes())?;
    w.flush()
}

/// Runs the plan through `tracer`; returns spacetime's exit status.
pub fn run(mut plan: Plan, tracer: &mut dyn Tracer) -> i32 {
    let out = Out::new(&plan);
    let progress = Progress::new(plan.args.quiet, plan.args.style);
    let mut results: Vec<CommandResult> = Vec::new();
    let mut status = 0;
    let correction = match super::calibrate::shell(&mut plan, tracer, &progress) {
        Ok(c) => c,
        Err(End::Stopped { message, status }) => {
            crate::errln!("spacetime: {message}");
            return status;
        }
        Err(End::Done) => None,
    };
    let fix = correction.as_ref().map_or(Correction::default(), |c| c.1);
    for i in 0..plan.commands.len() {
        let cmd = plan.commands[i].clone();
        out.print(&format!(
            "{}\n",
            summary::header(i + 1, &cmd.shown(), &out.layout)
        ));
        let mut runs = CommandRuns {
            command: cmd,
            runs: Vec::new(),
        };
        let end = command_runs(&mut plan, i, &mut runs, tracer, &progress, &fix);
        progress.clear();
        if let Some(r) = CommandResult::of(&runs) {
            let walls: Vec<u64> = runs.runs.iter().map(|f| f.wall_ns).collect();
            let w = warnings::of(
                &walls,
                matches!(plan.shell, Shell::Words(_)),
                plan.args.warmup > 0,
                runs.command.hooks.prepare.is_some(),
            );
            out.print(&format!("{}\n", summary::block(&r, &w, &out.layout)));
            results.push(r);
        }
        if let End::Stopped { message, status: s } = end {
            crate::errln!("spacetime: {message}");
            status = s;
            break;
        }
    }
    let reference = (plan.has_reference && !results.is_empty()).then_some(0);
    let cmp = compare(&results, reference);
    if let Some(c) = &cmp {
        let by_time = plan.args.sort.comparison_by_time();
        out.print(&format!(
            "{}\n",
            ranking::render(&results, c, by_time, &out.layout)
        ));
    }
    if let Some(t) = summary::parameter_table(&results, &out.layout) {
        out.print(&format!("{t}\n"));
    }
    let report = BenchReport {
        schema_version: export::SCHEMA_VERSION,
        spacetime_version: env!("CARGO_PKG_VERSION"),
        programs: tracer.programs(),
        interrupted: status == EXIT_INTERRUPTED,
        shell: correction.map(|c| c.0),
        results: &results,
        comparison: cmp.as_ref(),
    };
    let tables = markup::Options {
        by_time: plan.args.sort.tables_by_time(),
    };
    let files = std::mem::take(&mut plan.files);
    if !files.write(&report, &tables, &out.layout) && status == 0 {
        status = EXIT_OWN_FAILURE;
    }
    status
}

/// How many runs: hyperfine's rule from the first run's cost (the command, its prepare and
/// conclude): enough to fill `min_time` (`--min-benchmarking-time`, 3 s), within the bounds.
fn run_count(bounds: &RunBounds, first: Duration, min_time: Duration) -> u32 {
    let fit = (min_time.as_nanos() / first.as_nanos().max(1)).min(u32::MAX as u128);
    let n = (fit as u32).max(bounds.min);
    bounds.max.map_or(n, |m| n.min(m))
}

fn command_runs(
    plan: &mut Plan,
    index: usize,
    runs: &mut CommandRuns,
    tracer: &mut dyn Tracer,
    progress: &Progress,
    fix: &Correction,
) -> End {
    let cmd = plan.commands[index].clone();
    let hooks = &cmd.hooks;
    if let Some(end) = hook(plan, index, hooks.setup.as_deref(), "--setup", &*tracer) {
        return end;
    }
    let warmup = plan.args.warmup;
    for w in 0..warmup {
        progress.show("Warm-up", w, warmup, None);
        if let Some(end) = warmup_run(plan, index, &cmd, &*tracer) {
            return end;
        }
    }
    let started = Instant::now();
    let mut count: Option<u32> = None;
    let mut n = 0;
    while n < count.unwrap_or(u32::MAX) {
        let total = count.unwrap_or(plan.bounds.min);
        let eta = (n > 0).then(|| {
            let per = started.elapsed().as_nanos() as u64 / n as u64;
            per * total.saturating_sub(n) as u64
        });
        progress.show("Run", n, total, eta);
        if tracer.interrupted() {
            return End::interrupted();
        }
        let t = Instant::now();
        if let Some(end) = hook(plan, index, hooks.prepare.as_deref(), "--prepare", &*tracer) {
            return end;
        }
        let mut fig = match measured_run(plan, index, tracer) {
            Ok(f) => f,
            Err(end) => return end,
        };
        // Kept before anything else can stop the bench: the run is measured.
        fix.apply(&mut fig);
        runs.runs.push(fig);
        if fig.exit_code != 0 && !plan.args.ignore_failure {
            return End::failed(&cmd, fig.exit_code);
        }
        let conclude = hooks.conclude.as_deref();
        if let Some(end) = hook(plan, index, conclude, "--conclude", &*tracer) {
            return end;
        }
        if count.is_none() {
            let min_time = plan.args.min_benchmarking_time.unwrap_or(MIN_BENCHMARKING);
            count = Some(run_count(&plan.bounds, t.elapsed(), min_time));
        }
        n += 1;
    }
    progress.show("Run", n, n, None);
    hook(plan, index, hooks.cleanup.as_deref(), "--cleanup", &*tracer).unwrap_or(End::Done)
}

/// One traced run of benchmark `index`; Err when the bench must stop.
fn measured_run(plan: &mut Plan, index: usize, tracer: &mut dyn Tracer) -> Result<RunFigures, End> {
    let stdio = plan
        .streams
        .for_run(index)
        .map_err(|e| End::error(anyhow::Error::new(e).context("preparing the streams")))?;
    tracer.streams(stdio);
    let fig = match tracer.run(&plan.paths[index], &plan.commands[index].argv) {
        Ok(f) => f,
        // Ctrl-C reaches the held command too: it dies before it is let go.
        Err(_) if tracer.interrupted() => return Err(End::interrupted()),
        Err(e) => return Err(End::error(e)),
    };
    // A run the signal cut short is not a measurement of the command.
    if tracer.interrupted() {
        return Err(End::interrupted());
    }
    Ok(fig)
}

/// A warm-up run (untraced) between its prepare and conclude commands; Some to stop.
fn warmup_run(
    plan: &mut Plan,
    index: usize,
    cmd: &BenchCommand,
    tracer: &dyn Tracer,
) -> Option<End> {
    let hooks = &cmd.hooks;
    if let Some(end) = hook(plan, index, hooks.prepare.as_deref(), "--prepare", tracer) {
        return Some(end);
    }
    let code = plan
        .streams
        .for_run(index)
        .and_then(|s| untraced::run(&cmd.argv, plan.creds.as_ref(), s));
    let code = match code {
        Ok(c) => c,
        Err(e) => {
            let e = anyhow::Error::new(e).context(format!("starting {}", cmd.shown()));
            return Some(End::error(e));
        }
    };
    if tracer.interrupted() {
        return Some(End::interrupted());
    }
    if code != 0 && !plan.args.ignore_failure {
        return Some(End::failed(cmd, code));
    }
    hook(plan, index, hooks.conclude.as_deref(), "--conclude", tracer)
}

/// Runs a setup, prepare, conclude or cleanup command, if any; Some when the bench must stop.
fn hook(
    plan: &mut Plan,
    index: usize,
    argv: Option<&[OsString]>,
    option: &str,
    tracer: &dyn Tracer,
) -> Option<End> {
    let argv = argv?;
    let shown = crate::util::term::join(argv.iter().map(|a| a.as_encoded_bytes()));
    let code = plan
        .streams
        .for_run(index)
        .and_then(|s| untraced::run(argv, plan.creds.as_ref(), s));
    match code {
        _ if tracer.interrupted() => Some(End::interrupted()),
        Ok(0) => None,
        Ok(code) => Some(End::Stopped {
            message: format!(
                "the {option} command {shown} exited with status {code}; append ' || true' \
                 to it if that can be ignored"
            ),
            status: EXIT_COMMAND_FAILED,
        }),
        Err(e) => Some(End::error(
            anyhow::Error::new(e).context(format!("starting the {option} command {shown}")),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_second_rule_within_bounds() {
        let b = RunBounds { min: 10, max: None };
        let ms = Duration::from_millis;
        let three = MIN_BENCHMARKING;
        assert_eq!(run_count(&b, ms(1), three), 3000);
        assert_eq!(run_count(&b, ms(1000), three), 10, "at least 10");
        assert_eq!(run_count(&b, ms(100), three), 30);
        let capped = RunBounds {
            min: 2,
            max: Some(5),
        };
        assert_eq!(run_count(&capped, ms(1), three), 5);
        assert_eq!(run_count(&capped, Duration::from_secs(10), three), 2);
        // --min-benchmarking-time 0.5: what fits in half a second.
        assert_eq!(run_count(&b, ms(10), ms(500)), 50);
        assert_eq!(run_count(&capped, ms(200), ms(500)), 2);
    }
}
