use std::process::ExitCode;

use clap::Parser;
use spacetime::cli::{Cli, Command, EXIT_OWN_FAILURE};

fn main() -> ExitCode {
    spacetime::term::init_locale();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_OWN_FAILURE } else { 0 };
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        .init();
    let code = match cli.command {
        Command::Trace(args) => spacetime::trace::main(args, cli.verbose),
        Command::Watch(args) => spacetime::watch::main(args, cli.verbose),
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}
