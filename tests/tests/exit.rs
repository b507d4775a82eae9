//! spacetime's own exit status, stdout/stderr, and signal forwarding.

use std::time::Duration;

use spacetime_tests::{find_process, Exit, TempDir, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

#[test]
fn exit_code_is_passed_through() {
    let out = Trace::new([WL, "exit", "3"]).tag("exit3").run();
    out.assert_code(3);
    let report = out.report();
    assert_eq!(report.exit, Exit::Code(3), "report exit");
    let t = out.truth_one("exit");
    let p = find_process(&report, t.pid());
    assert_eq!(p.exit, Some(Exit::Code(3)), "pid {}: exit", p.pid);
}

fn killed_by(sig: i32) {
    let out = Trace::new([WL, "kill", &sig.to_string()])
        .tag(&format!("kill{sig}"))
        .run();
    out.assert_code(128 + sig);
    let report = out.report();
    assert_eq!(report.exit, Exit::Signal(sig), "report exit");
    let t = out.truth_one("kill");
    let p = find_process(&report, t.pid());
    assert_eq!(p.exit, Some(Exit::Signal(sig)), "pid {}: exit", p.pid);
    assert!(p.end_ns.is_some(), "pid {}: end_ns", p.pid);
}

#[test]
fn killed_by_sigkill_exits_137() {
    killed_by(libc::SIGKILL);
}

#[test]
fn killed_by_sigterm_exits_143() {
    killed_by(libc::SIGTERM);
}

#[test]
fn missing_command_exits_127() {
    for cmd in ["/nonexistent/cmd", "st-no-such-command-on-path"] {
        let out = Trace::new([cmd]).tag("missing").run();
        out.assert_code(127);
        assert!(
            out.stderr.contains(cmd),
            "stderr must name the missing command {cmd:?}\n{}",
            out.context()
        );
    }
}

#[test]
fn non_executable_command_exits_126() {
    let dir = TempDir::new("noexec");
    let script = dir.path().join("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").expect("write script");
    // 0644: exists, not executable (root can't exec it either: no x bit at all).
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let out = Trace::new([&script]).tag("noexec").run();
    out.assert_code(126);
    let name = script.to_str().expect("utf-8 temp path");
    assert!(
        out.stderr.contains(name),
        "stderr must name {name:?}\n{}",
        out.context()
    );
}

#[test]
fn bad_option_is_a_usage_error() {
    let out = Trace::new(["true"])
        .no_json()
        .flag("--no-such-flag")
        .tag("badopt")
        .run();
    let code = out.status.code().unwrap_or_else(|| {
        panic!(
            "spacetime died of a signal on a bad option\n{}",
            out.context()
        )
    });
    assert!(
        ![0, 126, 127].contains(&code),
        "bad option: exit code {code} must be a usage error (not 0/126/127)\n{}",
        out.context()
    );
    let mentions = out
        .stderr
        .lines()
        .filter(|l| l.contains("--no-such-flag"))
        .count();
    assert!(
        mentions >= 1,
        "stderr must have a line naming --no-such-flag\n{}",
        out.context()
    );
    assert!(
        out.stdout.is_empty(),
        "nothing on stdout: {:?}",
        out.stdout_str()
    );
}

#[test]
fn stdout_belongs_to_the_command() {
    let out = Trace::new(["/bin/echo", "hello"]).tag("echo").run();
    out.assert_code(0);
    assert_eq!(
        out.stdout_str(),
        "hello\n",
        "stdout must be exactly the command's\n{}",
        out.context()
    );
    assert!(
        !out.stderr.is_empty(),
        "the human summary goes to stderr, which is empty"
    );
    let report = out.report();
    let root = report.root();
    assert_eq!(root.images.len(), 1, "echo: images {:?}", root.images);
    assert_eq!(
        root.images[0].exe, "/bin/echo",
        "echo: exe as passed to execve"
    );
    assert_eq!(root.images[0].argv, ["/bin/echo", "hello"]);
    assert_eq!(report.command, ["/bin/echo", "hello"]);
}

/// SIGTERM/SIGINT/SIGHUP sent to spacetime are forwarded to the command.
fn forwards(sig: i32) {
    let argv = [WL, "sleep", "10000"];
    let mut run = Trace::new(argv)
        .tag(&format!("fwd{sig}"))
        .timeout(Duration::from_secs(60))
        .spawn();
    let pid = run.wait_for_descendant(&argv, Duration::from_secs(30));
    // The command has exec'd; the signal must find it in its sleep (not still starting).
    spacetime_tests::poll::wait_for("sleep of the command", Duration::from_secs(30), || {
        spacetime_tests::poll::is_sleeping(pid).then_some(())
    });
    run.signal(sig);
    let out = run.wait();
    out.assert_code(128 + sig);
    // Forwarded, not waited out: the sleeper died of the signal (its truth line comes only
    // after the whole sleep), whatever the machine's speed.
    assert!(
        out.truth_of("sleep").is_empty(),
        "the sleeper finished its 10 s sleep instead of dying of signal {sig}"
    );
    let report = out.report();
    assert_eq!(report.exit, Exit::Signal(sig), "report exit");
    let p = find_process(&report, pid);
    assert_eq!(report.root().pid, pid);
    assert_eq!(p.exit, Some(Exit::Signal(sig)), "pid {pid}: exit");
}

#[test]
fn forwards_sigterm() {
    forwards(libc::SIGTERM);
}

#[test]
fn forwards_sigint() {
    forwards(libc::SIGINT);
}

#[test]
fn forwards_sighup() {
    forwards(libc::SIGHUP);
}

/// Processes whose threads all leave at the same moment end once each: before 6.16 two of
/// them can both see `signal->live == 0`, and a second group exit would report the process
/// twice (watch) or overwrite it (trace).
#[test]
fn threads_leaving_together_end_their_process_once() {
    use spacetime_tests::watch::{run, token, Watch};
    const PROCESSES: usize = 20;
    let tok = token("together");
    let w = Watch::new().flag("--json").start();
    let mut pids = Vec::new();
    for _ in 0..PROCESSES {
        pids.push(run(std::process::Command::new(WL).args([
            "exit-together",
            "8",
            &tok,
        ])));
    }
    let last = pids.last().expect("processes");
    w.wait_for_stdout(&format!("\"pid\":{last},"), Duration::from_secs(60));
    let out = w.interrupt();
    out.assert_clean();
    let rows = out.exits_with(&tok);
    for pid in &pids {
        let mine: Vec<_> = rows
            .iter()
            .filter(|r| r["pid"].as_u64() == Some(u64::from(*pid)))
            .collect();
        assert_eq!(
            mine.len(),
            1,
            "pid {pid}: one exit row, got {mine:?}\n{}",
            out.context()
        );
        assert_eq!(mine[0]["exit"]["code"], 0, "pid {pid}: {}", mine[0]);
    }
}

/// Started with its standard streams closed, spacetime opens /dev/null in their place before
/// anything else (as std's start-up did before spacetime took over its entry): a kernel object
/// or file it opens later never takes the number its messages are written to (a BPF map on fd
/// 2), nor 0 (an fd 0 in a BPF request means "none").
#[test]
fn closed_standard_streams_are_not_taken_by_files_spacetime_opens() {
    use std::os::unix::process::CommandExt;
    let dir = TempDir::new("closed-fds");
    let json = dir.path().join("report.json");
    let links = dir.path().join("links");
    // CMD's parent is spacetime: what its descriptors 0-2 are, from CMD.
    let script = format!(
        "readlink /proc/$PPID/fd/0 /proc/$PPID/fd/1 /proc/$PPID/fd/2 > {}; exit 3",
        links.display()
    );
    let mut cmd = std::process::Command::new(spacetime_tests::spacetime_bin());
    cmd.args(["trace", "--no-chart", "--json"])
        .arg(&json)
        .args(["--", "sh", "-c", &script]);
    // SAFETY: close(2) only, between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            for fd in 0..3 {
                libc::close(fd);
            }
            Ok(())
        });
    }
    let status = cmd.status().expect("run spacetime with fds 0-2 closed");
    assert_eq!(status.code(), Some(3), "CMD's exit status kept: {status:?}");
    let links = std::fs::read_to_string(&links).expect("CMD wrote what it saw");
    assert_eq!(
        links.lines().collect::<Vec<_>>(),
        ["/dev/null"; 3],
        "spacetime's descriptors 0-2"
    );
    let text = std::fs::read_to_string(&json).expect("the report written");
    let v: serde_json::Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the report is JSON and nothing else ({e}): {text}"));
    assert_eq!(v["exit"]["code"], 3, "report's exit: {}", v["exit"]);
}
