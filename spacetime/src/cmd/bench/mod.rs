//! `spacetime bench CMD...`: hyperfine's benchmark, every run a full trace through one load
//! of the kernel programs, reporting time and exact memory with their spread ([`stats`]),
//! the commands against each other ([`compare`]), on the terminal ([`summary`], [`ranking`],
//! [`progress`]) and as JSON, CSV and tables ([`export`], [`markup`]). hyperfine's options
//! mean what they mean there: parameters ([`params`], [`commands`]), hooks, run counts, the
//! shell and its start-up ([`calibrate`]), streams ([`streams`]), warnings ([`warnings`]).

pub(crate) mod args;
mod calibrate;
pub(crate) mod commands;
pub(crate) mod compare;
pub(crate) mod export;
pub(crate) mod markup;
pub(crate) mod model;
pub(crate) mod params;
pub(crate) mod progress;
pub(crate) mod ranking;
pub(crate) mod stats;
pub(crate) mod streams;
pub(crate) mod summary;
pub(crate) mod warnings;

pub use args::BenchArgs;
pub(crate) mod driver;
mod tracer;
mod untraced;

use crate::cmd::cli::EXIT_OWN_FAILURE;
use crate::run::Programs;

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
        args.cgroup_peak,
        Programs::from_flags(args.agent, args.no_agent),
    ) {
        Ok(mut t) => driver::run(plan, &mut t),
        Err(e) => {
            crate::errln!("spacetime: {e:#}");
            EXIT_OWN_FAILURE
        }
    }
}

/// Everything checked before the programs load and anything runs: the benchmarks expanded,
/// their programs found, the streams and export files opened, the user the commands run as.
fn plan(args: &BenchArgs) -> anyhow::Result<driver::Plan<'_>> {
    let shell = commands::Shell::of(args)?;
    let bounds = args.run_bounds()?;
    let commands = commands::plan(args, &shell)?;
    streams::check(&args.output, args.input.as_deref(), commands.len())?;
    // A command that cannot be found fails before anything runs.
    let paths = commands
        .iter()
        .map(|c| crate::run::launch::resolve(&c.argv[0]))
        .collect::<Result<Vec<_>, _>>()?;
    let streams = streams::Streams::open(
        &args.output,
        args.show_output,
        args.input.as_deref(),
        commands.len(),
    )?;
    let files = export::Files::open(&export::Paths {
        json: args.json.as_deref(),
        csv: args.export_csv.as_deref(),
        markdown: args.export_markdown.as_deref(),
        asciidoc: args.export_asciidoc.as_deref(),
        orgmode: args.export_orgmode.as_deref(),
        html: args.html.as_deref(),
        svg: args.svg.as_deref(),
    })?;
    let creds = match args.keep_root {
        true => None,
        false => crate::run::launch::sudo_credentials(),
    };
    Ok(driver::Plan {
        has_reference: args.reference.is_some(),
        args,
        commands,
        paths,
        creds,
        files,
        streams,
        shell,
        bounds,
    })
}
