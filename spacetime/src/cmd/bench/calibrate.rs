//! The shell's start-up, as hyperfine measures it: `SHELL -c ""` run 50 times (here traced,
//! as the commands are, so the measurement costs what theirs does), its mean wall, user and
//! system time then subtracted from every measured run of every command.

use super::{
    driver::{Correction, End, Plan, Tracer, CALIBRATION_RUNS},
    export::ShellReport,
    progress::Progress,
};

/// The shell and the correction; None with `--shell none`.
pub(super) fn shell(
    plan: &mut Plan,
    tracer: &mut dyn Tracer,
    progress: &Progress,
) -> Result<Option<(ShellReport, Correction)>, End> {
    let Some(argv) = plan.shell.empty() else {
        return Ok(None);
    };
    let shown = crate::util::term::join(argv.iter().map(|a| a.as_encoded_bytes()));
    let path = crate::run::launch::resolve(&argv[0]).map_err(|e| End::error(e.into()))?;
    let (mut wall, mut user, mut sys) = (0u64, 0u64, 0u64);
    tracer.streams(plan.streams.null());
    for i in 0..CALIBRATION_RUNS {
        progress.show("Shell start-up", i, CALIBRATION_RUNS, None);
        let fig = match tracer.run(&path, &argv) {
            _ if tracer.interrupted() => return Err(End::interrupted()),
            Ok(f) => f,
            Err(e) => return Err(End::error(e.context(format!("measuring {shown}")))),
        };
        if fig.exit_code != 0 {
            return Err(End::Stopped {
                message: format!(
                    "could not measure the shell's start-up: {shown} exited with status {}",
                    fig.exit_code
                ),
                status: crate::cmd::cli::EXIT_OWN_FAILURE,
            });
        }
        wall += fig.wall_ns;
        user += fig.user_ns;
        sys += fig.sys_ns;
    }
    progress.clear();
    let n = u64::from(CALIBRATION_RUNS);
    let c = Correction {
        wall_ns: wall / n,
        user_ns: user / n,
        sys_ns: sys / n,
    };
    let report = ShellReport {
        // Its words, without the `-c ""` measured.
        command: argv[..argv.len() - 2]
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        spawn_wall_ns: c.wall_ns,
        spawn_user_ns: c.user_ns,
        spawn_sys_ns: c.sys_ns,
        calibration_runs: CALIBRATION_RUNS,
    };
    Ok(Some((report, c)))
}
