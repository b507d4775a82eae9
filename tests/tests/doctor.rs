//! `spacetime doctor` says the right thing as root, as an unprivileged user without and with
//! an agent, inside a PID namespace and inside a network namespace; each verdict is checked
//! against what `spacetime trace` then does in the same place.

use std::process::Command;

use serde_json::Value;
use spacetime_tests::{
    agent::Agent, kernel_at_least, kernel_has_fetch_atomics, spacetime_bin, Trace, NO_FETCH_ATOMICS,
};

/// No agent answers there (the machine's default socket is never used by the tests).
const NO_AGENT: &str = "/nonexistent/spacetime-doctor/agent.sock";

const NOBODY: [&str; 5] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--",
];

struct Doctor {
    code: i32,
    json: Value,
    text: String,
}

impl Doctor {
    /// `spacetime doctor --json FILE` under `prefix` (setpriv, unshare…): the table on stdout
    /// and the JSON in FILE from one examination (each loads the programs, waits for a
    /// taskstats record: seconds of an emulated CPU).
    fn run(prefix: &[&str], socket: &std::path::Path) -> Doctor {
        // World-writable: setpriv runs doctor as nobody.
        let dir = spacetime_tests::TempDir::new("doctor");
        let file = dir.path().join("doctor.json");
        let mut c = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(spacetime_bin());
                c
            }
            None => Command::new(spacetime_bin()),
        };
        let out = c
            .arg("doctor")
            .arg("--json")
            .arg(&file)
            .env("SPACETIME_SOCKET", socket)
            .output()
            .expect("running spacetime doctor");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let json = std::fs::read(&file).unwrap_or_else(|e| {
            panic!(
                "doctor --json {} under {prefix:?}: {e}: {text}{}",
                file.display(),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let json: Value = serde_json::from_slice(&json).unwrap_or_else(|e| {
            panic!(
                "doctor --json under {prefix:?}: {e}: {}",
                String::from_utf8_lossy(&json)
            )
        });
        Doctor {
            code: out.status.code().unwrap_or(-1),
            json,
            text,
        }
    }

    fn check(&self, id: &str) -> (&str, &str) {
        let c = self.json["checks"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["id"] == id))
            .unwrap_or_else(|| panic!("no {id} check: {}", self.json));
        (
            c["status"].as_str().unwrap_or_default(),
            c["summary"].as_str().unwrap_or_default(),
        )
    }

    fn assert_status(&self, id: &str, want: &str) {
        let (status, summary) = self.check(id);
        assert_eq!(status, want, "{id}: {summary}\n{}", self.text);
    }

    fn assert_verdict(&self, works: bool, via: Option<&str>) {
        let t = &self.json["trace"];
        assert_eq!(t["works"], works, "{}", self.text);
        assert_eq!(t["via"].as_str(), via, "{}", self.text);
        assert_eq!(self.code, if works { 0 } else { 1 }, "{}", self.text);
        let line = self
            .text
            .lines()
            .find(|l| l.starts_with("trace: "))
            .unwrap_or_else(|| panic!("no verdict line: {}", self.text));
        assert_eq!(line.contains("cannot work"), !works, "{}", self.text);
    }
}

#[test]
fn as_root_everything_is_tried_and_works() {
    let d = Doctor::run(&[], NO_AGENT.as_ref());
    d.assert_verdict(true, Some("own"));
    for id in ["kernel", "capabilities", "hooks", "taskstats"] {
        d.assert_status(id, "ok");
    }
    // Before 5.12 the programs built without fetch atomics load, and doctor says what that
    // costs. arm64 attaches fentry programs to kernel functions through ftrace direct calls,
    // from 6.4 on: before, the kernel refuses those 6.1 needs, and doctor says so in the
    // programs row and in the row of each hook refused (the BTF alone offers them).
    let fentry_refused = cfg!(target_arch = "aarch64") && !kernel_at_least(6, 4);
    if fentry_refused {
        d.assert_status("programs", "limited");
        let refused: Vec<&str> = ["exit_peaks", "exec_peaks", "last_thread"]
            .into_iter()
            .filter(|&id| {
                let (status, summary) = d.check(id);
                status == "limited" && summary.contains("refused by the kernel")
            })
            .collect();
        assert!(
            !refused.is_empty(),
            "no hook row says its fentry was refused:\n{}",
            d.text
        );
    } else if kernel_has_fetch_atomics() {
        d.assert_status("programs", "ok");
    } else {
        d.assert_status("programs", "limited");
        let (_, summary) = d.check("programs");
        assert!(
            summary.contains(NO_FETCH_ATOMICS) && summary.contains("tree_peak_rss) is approximate"),
            "programs: {summary}"
        );
    }
    d.assert_status("agent", "skipped");
    d.assert_status("pid_namespace", "ok");
    let held: Vec<&str> = d.json["capabilities"]
        .as_array()
        .expect("capabilities")
        .iter()
        .filter(|c| c["held"] == true)
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(
        held.contains(&"CAP_BPF") && held.contains(&"CAP_PERFMON"),
        "{held:?}"
    );
    assert!(
        d.text.lines().count() <= 30,
        "more than a screen:\n{}",
        d.text
    );
    // And a trace as root here does load its own programs.
    let out = Trace::new(["/bin/true"])
        .env("SPACETIME_SOCKET", NO_AGENT)
        .tag("doctor-root")
        .run();
    out.assert_code(0);
    assert_eq!(out.json_value()["programs"], "own");
}

#[test]
fn as_nobody_without_an_agent_it_names_the_capabilities_and_fails() {
    let d = Doctor::run(&NOBODY, NO_AGENT.as_ref());
    d.assert_verdict(false, None);
    let (status, summary) = d.check("capabilities");
    assert!(
        status == "no" && summary.contains("CAP_BPF and CAP_PERFMON"),
        "{summary}"
    );
    d.assert_status("programs", "skipped");
    let (status, summary) = d.check("taskstats");
    assert!(
        status == "no" && summary.contains("CAP_NET_ADMIN"),
        "{summary}"
    );
    let (status, summary) = d.check("agent");
    assert!(
        status == "no" && summary.contains(NO_AGENT) && summary.contains("start one"),
        "{summary}"
    );
    // The BTF is world-readable: the hooks are told all the same.
    d.assert_status("hooks", "ok");
    // `--json` alone: the same report on stdout instead of the table (nothing loads as
    // nobody, so this examination is the cheap one to repeat).
    let out = Command::new("setpriv")
        .args(&NOBODY[1..])
        .arg(spacetime_bin())
        .args(["doctor", "--json"])
        .env("SPACETIME_SOCKET", NO_AGENT)
        .output()
        .expect("running spacetime doctor --json");
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "doctor --json: no JSON on stdout: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(
        out.status.code(),
        Some(d.code),
        "the exit status, both ways"
    );
    assert_eq!(stdout["trace"], d.json["trace"], "the verdict, both ways");
    assert_eq!(stdout["checks"], d.json["checks"], "the checks, both ways");
    // And a trace as nobody here does fail.
    let out = Trace::new(["/bin/true"])
        .env("SPACETIME_SOCKET", NO_AGENT)
        .as_nobody()
        .tag("doctor-nobody")
        .run();
    out.assert_code(125);
}

#[test]
fn as_nobody_with_an_agent_it_goes_through_it() {
    let agent = Agent::start("doctor");
    let d = Doctor::run(&NOBODY, agent.socket());
    d.assert_verdict(true, Some("agent"));
    let (status, summary) = d.check("agent");
    assert!(
        status == "ok"
            && summary.contains("answers at")
            && summary.contains("who may connect: every local user"),
        "{summary}"
    );
    let out = Trace::new(["/bin/true"])
        .through(&agent)
        .as_nobody()
        .tag("doctor-nobody-agent")
        .run();
    out.assert_code(0);
    assert_eq!(out.json_value()["programs"], "agent");
    // Root too: its trace goes through an agent that answers, and doctor says so.
    let d = Doctor::run(&[], agent.socket());
    d.assert_verdict(true, Some("agent"));
    let out = Trace::new(["/bin/true"])
        .through(&agent)
        .tag("doctor-root-agent")
        .run();
    out.assert_code(0);
    assert_eq!(out.json_value()["programs"], "agent");
}

#[test]
fn in_a_pid_namespace_taskstats_is_refused_and_trace_works() {
    let under = ["unshare", "--pid", "--fork", "--mount-proc"];
    let d = Doctor::run(&under, NO_AGENT.as_ref());
    d.assert_verdict(true, Some("own"));
    d.assert_status("pid_namespace", "limited");
    d.assert_status("taskstats", "no");
    let out = Trace::new(["/bin/true"])
        .under(under)
        .env("SPACETIME_SOCKET", NO_AGENT)
        .tag("doctor-pidns")
        .run();
    out.assert_code(0);
    assert_eq!(out.json_value()["taskstats"]["available"], false);
}

#[test]
fn in_a_network_namespace_no_taskstats_record_arrives_and_trace_works() {
    let under = ["unshare", "--net"];
    let d = Doctor::run(&under, NO_AGENT.as_ref());
    d.assert_verdict(true, Some("own"));
    d.assert_status("pid_namespace", "ok");
    let (status, summary) = d.check("taskstats");
    assert!(
        status == "no" && summary.contains("network namespace"),
        "{summary}"
    );
    let out = Trace::new(["/bin/true"])
        .under(under)
        .env("SPACETIME_SOCKET", NO_AGENT)
        .tag("doctor-netns")
        .run();
    out.assert_code(0);
    assert_eq!(out.json_value()["taskstats"]["available"], false);
}
