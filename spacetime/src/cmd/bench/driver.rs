//! The bench's course: outputs checked, programs loaded once, then for each command its
//! warm-up runs, its measured runs (each a full trace) and its summary; the comparison and
//! the exports at the end, also after Ctrl-C or a failed command.

use crate::kernel::provenance::Provenance;
use std::{
    ffi::OsString,
    io::Write,
    path::{Path, PathBuf},
    time::Instant,
};

use super::{
    compare::compare,
    export::{BenchReport, Files},
    model::{BenchCommand, CommandResult, CommandRuns, RunFigures},
    progress::Progress,
    summary, untraced, BenchArgs,
};
use crate::{cmd::cli::EXIT_OWN_FAILURE, run::launch::Credentials};

/// Runs one command traced, through kernel programs loaded once for the whole bench.
pub trait Tracer {
    /// A stop signal came during the last run, or is waiting.
    fn interrupted(&self) -> bool;
    /// Traces `argv` (`path`: its first word resolved) to its end; its figures.
    fn run(&mut self, path: &Path, argv: &[OsString]) -> anyhow::Result<RunFigures>;
    /// Whose kernel programs trace the runs.
    fn programs(&self) -> Provenance;
}

/// Exit status when a command failed and `--ignore-failure` was not given, as hyperfine.
pub const EXIT_COMMAND_FAILED: i32 = 1;
/// Exit status after Ctrl-C (or SIGTERM, SIGHUP): 128 + SIGINT, as a shell reports it.
pub const EXIT_INTERRUPTED: i32 = 128 + libc::SIGINT;

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
enum End {
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

    fn interrupted() -> End {
        End::Stopped {
            message: "interrupted: reporting the runs that completed".into(),
            status: EXIT_INTERRUPTED,
        }
    }

    fn error(e: anyhow::Error) -> End {
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
    pub commands: Vec<BenchCommand>,
    /// Each command's program, resolved like execvp.
    pub paths: Vec<PathBuf>,
    pub prepares: Vec<Option<Vec<OsString>>>,
    pub creds: Option<Credentials>,
    pub files: Files,
}

/// Runs the plan through `tracer`; returns spacetime's exit status.
pub fn run(plan: Plan, tracer: &mut dyn Tracer) -> i32 {
    let progress = Progress::new(plan.args.quiet);
    let mut results: Vec<CommandResult> = Vec::new();
    let mut status = 0;
    for (i, cmd) in plan.commands.iter().enumerate() {
        let mut runs = CommandRuns {
            command: cmd.clone(),
            runs: Vec::new(),
        };
        let end = command_runs(&plan, i, &mut runs, tracer, &progress);
        progress.clear();
        if let Some(r) = CommandResult::of(&runs) {
            print(&summary::command_block(i + 1, &r));
            results.push(r);
        }
        if let End::Stopped { message, status: s } = end {
            crate::errln!("spacetime: {message}");
            status = s;
            break;
        }
    }
    let cmp = compare(&results);
    if let Some(c) = &cmp {
        print(&summary::comparison(&results, c));
    }
    let report = BenchReport {
        spacetime_version: env!("CARGO_PKG_VERSION"),
        programs: tracer.programs(),
        interrupted: status == EXIT_INTERRUPTED,
        results: &results,
        comparison: cmp.as_ref(),
    };
    if !plan.files.write(&report) && status == 0 {
        status = EXIT_OWN_FAILURE;
    }
    status
}

/// The summary on stdout, as hyperfine (the commands' own output goes to /dev/null).
fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(crate::util::term::localize(text).as_bytes());
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn command_runs(
    plan: &Plan,
    index: usize,
    runs: &mut CommandRuns,
    tracer: &mut dyn Tracer,
    progress: &Progress,
) -> End {
    let args = plan.args;
    let cmd = &plan.commands[index];
    let prepare = plan.prepares[index].as_deref();
    let creds = plan.creds.as_ref();
    for w in 0..args.warmup {
        progress.show("Warm-up", w, args.warmup, None);
        if let Some(end) = prepare_run(prepare, creds, args.show_output, &*tracer) {
            return end;
        }
        let code = match untraced::run(&cmd.argv, creds, args.show_output) {
            Ok(c) => c,
            Err(e) => {
                return End::error(
                    anyhow::Error::new(e).context(format!("starting {}", cmd.shown())),
                )
            }
        };
        if tracer.interrupted() {
            return End::interrupted();
        }
        if code != 0 && !args.ignore_failure {
            return End::failed(cmd, code);
        }
    }
    let started = Instant::now();
    for n in 0..args.runs {
        let eta = (n > 0).then(|| {
            let per = started.elapsed().as_nanos() as u64 / n as u64;
            per * (args.runs - n) as u64
        });
        progress.show("Run", n, args.runs, eta);
        if tracer.interrupted() {
            return End::interrupted();
        }
        if let Some(end) = prepare_run(prepare, creds, args.show_output, &*tracer) {
            return end;
        }
        let fig = match tracer.run(&plan.paths[index], &cmd.argv) {
            Ok(f) => f,
            // Ctrl-C reaches the held command too: it dies before it is let go.
            Err(_) if tracer.interrupted() => return End::interrupted(),
            Err(e) => return End::error(e),
        };
        // A run the signal cut short is not a measurement of the command.
        if tracer.interrupted() {
            return End::interrupted();
        }
        runs.runs.push(fig);
        if fig.exit_code != 0 && !args.ignore_failure {
            return End::failed(cmd, fig.exit_code);
        }
    }
    progress.show("Run", args.runs, args.runs, None);
    End::Done
}

/// Runs the `--prepare` command, if any; Some when the bench must stop.
fn prepare_run(
    prepare: Option<&[OsString]>,
    creds: Option<&Credentials>,
    show_output: bool,
    tracer: &dyn Tracer,
) -> Option<End> {
    let argv = prepare?;
    let shown = crate::util::term::escape(argv[2].as_encoded_bytes());
    match untraced::run(argv, creds, show_output) {
        _ if tracer.interrupted() => Some(End::interrupted()),
        Ok(0) => None,
        Ok(code) => Some(End::Stopped {
            message: format!("the --prepare command {shown} exited with status {code}"),
            status: EXIT_COMMAND_FAILED,
        }),
        Err(e) => Some(End::error(
            anyhow::Error::new(e).context(format!("starting the --prepare command {shown}")),
        )),
    }
}
