//! The attack suite, part three: what a client is told when the agent fails, and the state
//! spacetime leaves behind when it is killed. An agent gone mid-run ends a trace and a watch
//! with a non-zero status and a loss count (the audit: "loss: none", exit 0); a stopped agent
//! is told at once (not "answered something unexpected" after 5 s); a trace's wall time is its
//! command's; delay accounting is put back after a SIGKILL; one file given for two outputs is
//! refused before anything runs.

use std::time::{Duration, Instant};

use spacetime_tests::agent::Agent;
use spacetime_tests::gate::Gate;
use spacetime_tests::watch::Watch;
use spacetime_tests::{spacetime_bin, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// The agent killed while the command runs: the command exits 0, the trace exits 69 (the
/// report is not whole), the JSON says why and counts what was lost, the wall time is the
/// command's own.
#[test]
fn an_agent_killed_mid_run_ends_the_trace_incomplete() {
    let agent = Agent::start("fail-killed");
    // The command outlasts the kill at any speed: it ends once the test opens the gate.
    let gate = Gate::new("fail-killed-gate");
    let mut running = Trace::new(["sh", "-c", &format!("{WL} sleep 1500; {}", gate.wait())])
        .through(&agent)
        .as_nobody()
        .tag("fail-killed")
        .spawn();
    running.wait_for_descendant(&[WL, "sleep", "1500"], Duration::from_secs(30));
    agent.kill(libc::SIGKILL);
    gate.open();
    let out = running.wait();
    out.assert_code(69);
    let v = out.json_value();
    let why = v["kernel"]["agent_gone"].as_str().unwrap_or("");
    assert!(
        !why.is_empty(),
        "kernel.agent_gone says why\n{}",
        out.context()
    );
    assert!(
        v["lost_events"].as_u64() >= Some(1)
            && v["kernel"]["counters"]["agent_gone"].as_u64() >= Some(1),
        "a loss count\n{}",
        out.context()
    );
    assert!(
        out.stderr.contains("INCOMPLETE: the agent went away"),
        "{}",
        out.context()
    );
    // The command's own: at least its sleep, and no more than the whole trace took.
    let wall = v["wall_ns"].as_u64().unwrap_or(0);
    assert!(
        wall >= 1_500_000_000 && u128::from(wall) <= out.elapsed.as_nanos(),
        "wall {wall} ns for a 1.5 s command, the trace took {:?}\n{}",
        out.elapsed,
        out.context()
    );
}

/// A stopped agent (SIGSTOP) is said to be stopped at once, by a client starting and by one
/// whose run ends while it is stopped; neither waits 5 s for it.
#[test]
fn a_stopped_agent_is_told_at_once() {
    let agent = Agent::start("fail-stopped");
    // Mid-run: stopped while the command runs (until the gate opens); the trace ends with
    // the command.
    let gate = Gate::new("fail-stopped-gate");
    let mut running = Trace::new(["sh", "-c", &format!("{WL} sleep 1000; {}", gate.wait())])
        .through(&agent)
        .as_nobody()
        .tag("fail-stopped-run")
        .spawn();
    running.wait_for_descendant(&[WL, "sleep", "1000"], Duration::from_secs(30));
    // SAFETY: our own child.
    unsafe { libc::kill(agent.pid(), libc::SIGSTOP) };
    gate.open();
    let out = running.wait();
    out.assert_code(69);
    assert!(out.stderr.contains("it is stopped"), "{}", out.context());
    // Told by the look at its state, not by the 5 s answer timeout (whose words differ).
    assert!(
        !out.stderr.contains("did not answer within"),
        "{}",
        out.context()
    );
    // At the start: refused at once.
    let t = Instant::now();
    let start = Trace::new([WL, "touch", "1"])
        .through(&agent)
        .as_nobody()
        .tag("fail-stopped-start")
        .run();
    let took = t.elapsed();
    // SAFETY: our own child.
    unsafe { libc::kill(agent.pid(), libc::SIGCONT) };
    start.assert_code(125);
    assert!(start.stderr.contains("is stopped"), "{}", start.context());
    assert!(
        !start.stderr.contains("did not answer within"),
        "told by the timeout after {took:?}, not at once\n{}",
        start.context()
    );
    assert!(start.truth.is_empty(), "nothing ran");
    agent.stop();
}

/// A watch through an agent that is killed stops at once, says so, exits 69 and its summary
/// names the cause (the audit: it ran on with no data, then "loss: none", exit 0).
#[test]
fn a_watch_through_a_killed_agent_ends_non_zero() {
    let agent = Agent::start("fail-watch");
    let dir = spacetime_tests::TempDir::new("fail-watch");
    let summary = dir.path().join("summary.json");
    let w = Watch::new()
        .env("SPACETIME_SOCKET", agent.socket())
        .flag("--json")
        .flag("--summary-json")
        .flag(summary.to_str().expect("utf-8"))
        .under(
            [
                "setpriv",
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
            ]
            .iter(),
        )
        .start();
    w.wait_for_stderr("spacetime: watching", Duration::from_secs(30));
    agent.kill(libc::SIGKILL);
    let out = w.wait();
    assert_eq!(out.status.code(), Some(69), "{}", out.context());
    assert!(
        out.stderr.contains("the agent went away"),
        "{}",
        out.context()
    );
    // A watch's words, not a trace's (the audit saw "the command keeps running" here).
    assert!(
        out.stderr.contains("the watch stops") && !out.stderr.contains("the command"),
        "{}",
        out.context()
    );
    let s: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&summary).expect("the summary")).expect("JSON");
    assert_eq!(s["stopped_by"], "agent_gone", "{s}");
    assert!(s["loss"]["agent_gone"].is_string(), "{s}");
}

const SYSCTL: &str = "/proc/sys/kernel/task_delayacct";

fn delayacct() -> String {
    std::fs::read_to_string(SYSCTL)
        .expect("the sysctl")
        .trim()
        .to_string()
}

/// `--delayacct` of a trace killed outright: the next one puts the sysctl back; two at once
/// do not switch it off under each other.
#[test]
fn delay_accounting_is_put_back_after_a_sigkill() {
    let before = delayacct();
    // Its command runs until the gate opens, after the kill (the drop opens it on a panic).
    let gate = Gate::new("fail-delayacct-gate");
    let script = gate.wait();
    let mut killed = Trace::new(["sh", "-c", &script])
        .flag("--delayacct")
        .flag("--no-agent")
        .tag("fail-delayacct-killed")
        .spawn();
    killed.wait_for_descendant(&["sh", "-c", &script], Duration::from_secs(30));
    assert_eq!(delayacct(), "1", "on while the trace runs");
    // SAFETY: our own child: spacetime.
    unsafe { libc::kill(killed.pid(), libc::SIGKILL) };
    let _ = killed.wait();
    gate.open();
    // Two at once: the long one keeps it on past the short one's end. It runs until the test
    // lets it go (a FIFO), so it outlasts the short one at any speed.
    let dir = spacetime_tests::TempDir::new("fail-delayacct");
    let fifo = dir.path().join("release");
    let c_fifo = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a NUL-terminated path, alive for the call.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o600) }, 0, "mkfifo");
    let fifo_arg = fifo.to_str().expect("a UTF-8 temporary path");
    let mut long = Trace::new(["cat", fifo_arg])
        .flag("--delayacct")
        .flag("--no-agent")
        .tag("fail-delayacct-long")
        .spawn();
    long.wait_for_descendant(&["cat", fifo_arg], Duration::from_secs(30));
    let short = Trace::new([WL, "touch", "1"])
        .flag("--delayacct")
        .flag("--no-agent")
        .tag("fail-delayacct-short")
        .run();
    short.assert_code(0);
    assert_eq!(delayacct(), "1", "still on: the long trace holds it");
    std::fs::write(&fifo, b"go\n").expect("releasing the long trace's cat");
    long.wait().assert_code(0);
    assert_eq!(
        delayacct(),
        before,
        "put back as it was before the killed trace"
    );
}

/// `--json F -o F`: each would overwrite the other; refused before the command runs.
#[test]
fn one_file_for_two_outputs_is_refused() {
    let dir = spacetime_tests::TempDir::new("fail-same-file");
    let f = dir.path().join("out");
    let out = std::process::Command::new(spacetime_bin())
        .args(["trace", "--no-agent", "--json"])
        .arg(&f)
        .arg("-o")
        .arg(&f)
        .args(["--", WL, "touch", "1"])
        .env("ST_TRUTH", dir.path().join("truth.jsonl"))
        .output()
        .expect("run spacetime");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("name the same file"), "{err}");
    assert!(!dir.path().join("truth.jsonl").exists(), "nothing ran");
}
