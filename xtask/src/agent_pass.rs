//! The second pass of `cargo xtask test`: the trace-centred integration tests again, every
//! trace through a `spacetime agent` that xtask starts on a private socket. The harness
//! checks that each report says it came through the agent (`ST_EXPECT_PROGRAMS=agent`), so
//! a silent fallback to own programs fails the pass.

use std::{
    ffi::OsString,
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{Context, Result};

use crate::tally::Tally;

/// The test files run through the agent.
const FILES: [&str; 11] = [
    "memory",
    "processes",
    "cpu",
    "cpu_over_time",
    "exit",
    "bench",
    "attach",
    "safety",
    "stop",
    "pss",
    "peak_time",
];

/// Runs the pass; every file runs whatever failed before it. An error is a pass that could
/// not run (no agent); failed tests are in the tally.
pub fn run(cargo: Command, bin: &std::path::Path, args: &[OsString]) -> Result<Tally> {
    let dir = std::env::temp_dir().join(format!("spacetime-xtask-agent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // The agent refuses a socket directory others could write: root's, 0755 whatever the umask.
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .with_context(|| format!("chmod 0755 {}", dir.display()))?;
    let socket = dir.join("agent.sock");
    let notify = crate::ready::Notify::bind(&dir)?;
    let mut cmd = Command::new(bin);
    cmd.args(["-v", "agent", "--socket"])
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    notify.to(&mut cmd);
    let mut agent = cmd.spawn().context("starting spacetime agent")?;
    // Forward its stderr but for its INFO lines.
    let err = agent.stderr.take().context("agent stderr")?;
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if !line.contains("INFO") {
                eprintln!("agent: {line}");
            }
        }
    });
    if let Err(e) = notify.wait_ready("spacetime agent", &mut agent, Duration::from_secs(60)) {
        let _ = agent.kill();
        let _ = agent.wait();
        return Err(e);
    }
    eprintln!(
        "xtask: running {} again through spacetime agent ({})",
        FILES.join(", "),
        socket.display()
    );
    let mut cmd = cargo;
    cmd.env("SPACETIME_SOCKET", &socket)
        .env("ST_EXPECT_PROGRAMS", "agent")
        .args([
            "test",
            "--release",
            "--target",
            crate::release_target(),
            "-p",
            "spacetime-tests",
            "--no-fail-fast",
        ]);
    for f in FILES {
        cmd.args(["--test", f]);
    }
    cmd.arg("--").args(args);
    let result = crate::tally::run(&mut cmd);
    // SAFETY: our own unreaped child.
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let status = agent.wait().context("waiting for the agent")?;
    let _ = std::fs::remove_dir_all(&dir);
    let (mut tally, _) = result?;
    if !status.success() {
        tally.failed_targets.push(format!(
            "the agent pass's agent (it exited with {status} on SIGTERM)"
        ));
    }
    for t in &mut tally.durations {
        t.0 += " (through the agent)";
    }
    for t in &mut tally.failed_targets {
        *t += " (through the agent)";
    }
    Ok(tally)
}
