//! `spacetime bench CMD...`: runs each command many times, every run a full trace through
//! one load of the kernel programs, and reports time and exact memory with their spread
//! ([`stats`]), the commands against each other ([`compare`]), on the terminal ([`summary`],
//! [`progress`]) and as JSON, Markdown and CSV ([`export`]).

pub(crate) mod args;
pub(crate) mod compare;
pub(crate) mod export;
pub(crate) mod model;
pub(crate) mod progress;
pub(crate) mod stats;
pub(crate) mod summary;

pub use args::BenchArgs;
pub(crate) mod driver;
mod tracer;
mod untraced;

use crate::cmd::cli::EXIT_OWN_FAILURE;

/// Entry point of the subcommand: returns the process exit status (0; 1 when a command
/// failed without `--ignore-failure`; 130 after Ctrl-C; 125 when spacetime itself failed).
pub fn main(args: BenchArgs, verbose: u8) -> i32 {
    let plan = match plan(&args) {
        Ok(p) => p,
        Err(e) => {
            crate::errln!("spacetime: {e:#}");
            return e
                .downcast_ref::<crate::run::launch::LaunchError>()
                .map_or(EXIT_OWN_FAILURE, |l| l.exit_code());
        }
    };
    match tracer::SessionTracer::open(
        verbose,
        plan.creds.clone(),
        args.show_output,
        args.cgroup_peak,
        args.no_agent,
    ) {
        Ok(mut t) => driver::run(plan, &mut t),
        Err(e) => {
            crate::errln!("spacetime: {e:#}");
            EXIT_OWN_FAILURE
        }
    }
}

/// Everything checked before the programs load and anything runs: the commands split, the
/// export paths writable, the user the commands run as.
fn plan(args: &BenchArgs) -> anyhow::Result<driver::Plan<'_>> {
    let commands = args.commands()?;
    // A command that cannot be found fails before anything runs.
    let paths = commands
        .iter()
        .map(|c| crate::run::launch::resolve(&c.argv[0]))
        .collect::<Result<Vec<_>, _>>()?;
    let prepares = args.prepares()?;
    let files = export::Files::open(
        args.json.as_deref(),
        args.export_markdown.as_deref(),
        args.export_csv.as_deref(),
    )?;
    let creds = match args.keep_root {
        true => None,
        false => crate::run::launch::sudo_credentials()?,
    };
    Ok(driver::Plan {
        args,
        commands,
        paths,
        prepares,
        creds,
        files,
    })
}
