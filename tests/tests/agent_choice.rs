//! Whose programs trace a run: an agent's when one answers, else programs loaded here (root
//! only; others are told what to do); `--no-agent` loads them here beside a live agent,
//! `--agent` refuses to.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use spacetime_tests::agent::Agent;
use spacetime_tests::attack::Client;
use spacetime_tests::{assert_world_executable, spacetime_bin, TempDir, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");
const CLIENT: &str = env!("CARGO_BIN_EXE_st-agent-client");

#[test]
fn without_an_agent_root_loads_its_own_and_others_are_told() {
    let out = Trace::new([WL, "touch", "8"])
        .env("SPACETIME_SOCKET", "/nonexistent/agent.sock")
        .tag("agent-none-root")
        .run();
    out.assert_code(0);
    assert_eq!(out.json_value()["programs"], "own", "{}", out.context());

    assert_world_executable(Path::new(WL));
    assert_world_executable(&spacetime_bin());
    let out = Trace::new([WL, "touch", "8"])
        .env("SPACETIME_SOCKET", "/nonexistent/agent.sock")
        .as_nobody()
        .tag("agent-none-nobody")
        .run();
    out.assert_code(125);
    let err = out.stderr.trim();
    assert!(
        err.contains("no spacetime agent answers")
            && err.contains("sudo")
            && err.contains("CAP_BPF and CAP_PERFMON")
            && err.lines().count() == 1,
        "one sentence naming the capabilities: start an agent or use sudo; got:\n{err}"
    );
    assert!(out.truth.is_empty(), "nothing ran");
}

/// Beside a live agent: `--no-agent` loads programs here, no flag and `--agent` go through it.
#[test]
fn beside_a_live_agent_the_flags_choose_whose_programs_trace() {
    let agent = Agent::start("choice");
    for (flag, want) in [
        (Some("--no-agent"), "own"),
        (None, "agent"),
        (Some("--agent"), "agent"),
    ] {
        let mut t = Trace::new([WL, "touch", "8"])
            .through(&agent)
            .tag("agent-choice");
        if let Some(f) = flag {
            t = t.flag(f);
        }
        let out = t.run();
        out.assert_code(0);
        assert_eq!(
            out.json_value()["programs"],
            want,
            "{flag:?}: whose programs traced\n{}",
            out.context()
        );
    }
    agent.stop();
}

/// `--agent`: root too is refused when no agent answers (it would otherwise load programs of
/// its own), before the command runs.
#[test]
fn agent_flag_refuses_to_load_own_programs() {
    let out = Trace::new([WL, "touch", "8"])
        .env("SPACETIME_SOCKET", "/nonexistent/agent.sock")
        .flag("--agent")
        .tag("agent-only-none")
        .run();
    out.assert_code(125);
    let err = out.stderr.trim();
    assert!(
        err.contains("--agent") && err.contains("/nonexistent/agent.sock"),
        "says that --agent found no agent, and where it looked; got:\n{err}"
    );
    assert!(out.truth.is_empty(), "nothing ran");
    let dir = TempDir::new("agent-only-bench");
    let truth = dir.path().join("truth.jsonl");
    let bench = Command::new(spacetime_bin())
        .args([
            "bench",
            "--agent",
            "-N",
            "-r",
            "2",
            &format!("{WL} touch 1"),
        ])
        .env("SPACETIME_SOCKET", "/nonexistent/agent.sock")
        .env("ST_TRUTH", &truth)
        .output()
        .expect("run spacetime bench");
    let err = String::from_utf8_lossy(&bench.stderr);
    assert_eq!(bench.status.code(), Some(125), "bench --agent: {err}");
    assert!(err.contains("--agent"), "bench --agent: {err}");
    assert!(!truth.exists(), "bench --agent ran nothing");
}

/// A trace starts its command (held) while the agent works on its hello; when the agent then
/// refuses (here: every session slot taken), root loads programs here and the command runs
/// once: the child held for the agent is killed and reaped, never let go.
#[test]
fn a_refused_hello_runs_the_command_once_under_programs_loaded_here() {
    let agent = Agent::start("choice-refused");
    let mut holder = Client::start(CLIENT, agent.socket(), 0, &["sessions", "63", "hold"]);
    let said = holder.until("", Duration::from_secs(60));
    assert_eq!(said, "welcome", "63 sessions held open");
    let out = Trace::new([WL, "touch", "8"])
        .through(&agent)
        .tag("agent-refused")
        .run();
    out.assert_code(0);
    let json = out.json_value();
    assert_eq!(json["programs"], "own", "{}", out.context());
    assert_eq!(
        out.truth.len(),
        1,
        "the command ran once\n{}",
        out.context()
    );
    let processes = json["processes"].as_array().map_or(0, Vec::len);
    assert_eq!(processes, 1, "one process traced\n{}", out.context());
    holder.end();
    agent.stop();
}
