use std::process::ExitCode;

use spacetime::cmd::cli::{Cli, Command, EXIT_OWN_FAILURE};

fn main() -> ExitCode {
    fixed_mmap_threshold();
    spacetime::util::term::init_locale();
    let cli = match Cli::from_args(std::env::args_os().collect()) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_OWN_FAILURE } else { 0 };
            let e = spacetime::cmd::cli::explain(e, std::env::args_os().skip(1));
            let _ = e.print();
            return ExitCode::from(code as u8);
        }
    };
    let level = match cli.global.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        .init();
    let code = match cli.command {
        Command::Trace(args) => spacetime::cmd::trace::main(args, cli.global.verbose),
        Command::Watch(args) => spacetime::cmd::watch::main(args, cli.global.verbose),
        Command::Bench(args) => spacetime::cmd::bench::main(*args, cli.global.verbose),
        Command::Agent(args) => spacetime::cmd::agent::main(args),
        Command::Report(args) => spacetime::cmd::report::main(args, cli.global.verbose),
        Command::Diff(args) => spacetime::cmd::diff::main(args),
        Command::Doctor(args) => spacetime::cmd::doctor::main(args),
        Command::Completions { shell } => written(spacetime::cmd::completions::write(
            shell,
            &mut std::io::stdout().lock(),
        )),
        Command::Man(args) => man(args),
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// Large blocks (128 KiB and up) always come from mmap. glibc's threshold otherwise rises to
/// the size of the largest mmap'd block freed (the kernel BTF read at start-up, 5.5 MB), and
/// from then on a growing table (one entry per traced process) is reallocated inside the heap,
/// leaving behind copies the heap never gives back: 86.7 MB against 77.3 MB of spacetime's own
/// peak RSS on a 100 000-process trace, at the same CPU time.
///
/// And no fast bins: a small block freed into one is never merged with its neighbours, and a
/// trace frees a few small blocks per process among those it keeps (each process's series,
/// its names), so on a 100 000-exec trace the heap grew 1.5 MB past what it held (7.3 MB for
/// 5.8 in use). Freed blocks now merge (the per-thread cache still takes the churn): peak RSS
/// 62.6-62.8 MiB there, was 63.5; the same wall and CPU there and on a traced /bin/true.
fn fixed_mmap_threshold() {
    #[cfg(target_env = "gnu")]
    // SAFETY: allocator settings, changed before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_MXFAST, 0);
    }
}

/// `spacetime man`: a page on stdout, or every page into a directory.
fn man(args: spacetime::cmd::cli::ManArgs) -> i32 {
    use spacetime::cmd::man;
    match (args.dir, args.page) {
        (Some(dir), _) => match man::write_dir(&dir) {
            Ok(paths) => {
                for p in paths {
                    eprintln!("{}", p.display());
                }
                0
            }
            Err(e) => {
                eprintln!(
                    "spacetime: writing the manual pages into {}: {e}",
                    dir.display()
                );
                EXIT_OWN_FAILURE
            }
        },
        (None, Some(page)) => written(man::write_sub(&page, &mut std::io::stdout().lock())),
        (None, None) => written(man::write_main(&mut std::io::stdout().lock())),
    }
}

/// Exit status of a command that only writes to stdout: a reader that went away is no failure.
fn written(r: std::io::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("spacetime: writing to stdout: {e}");
            EXIT_OWN_FAILURE
        }
    }
}
