//! `spacetime agent`: traces for an unprivileged user with the same figures as root's, several
//! traces at once each with its own figures, the refusals of its security model, a client
//! that outlives the agent, and the fallbacks when there is no agent.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use spacetime_tests::agent::Agent;
use spacetime_tests::gate::Gate;
use spacetime_tests::watch::{token, Watch};
use spacetime_tests::{
    assert_rss, assert_world_executable, find_process, spacetime_bin, Outcome, TempDir, Trace, MIB,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");
const CLIENT: &str = env!("CARGO_BIN_EXE_st-agent-client");

fn programs(report: &Value) -> &str {
    report["programs"].as_str().unwrap_or("(missing)")
}

fn tree_peak(report: &Value) -> u64 {
    report["totals"]["tree_peak_rss_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no totals.tree_peak_rss_bytes in {}", report["totals"]))
}

fn nobody_can_run_the_binaries() {
    assert_world_executable(std::path::Path::new(WL));
    assert_world_executable(&spacetime_bin());
}

#[test]
fn unprivileged_trace_has_root_figures() {
    nobody_can_run_the_binaries();
    let agent = Agent::start("nobody");
    let out = Trace::new([WL, "touch", "64"])
        .through(&agent)
        .as_nobody()
        .tag("agent-nobody")
        .run();
    out.assert_code(0);
    let v = out.json_value();
    assert_eq!(programs(&v), "agent", "{}", out.context());
    let report = out.report();
    let truth = out.truth_one("touch");
    assert!(truth.vmhwm_bytes() >= 64 * MIB, "truth: VmHWM below 64 MiB");
    let p = find_process(&report, truth.pid());
    assert_rss(
        "non-root trace: peak_rss_bytes",
        p.peak_rss_bytes,
        truth.vmhwm_bytes(),
    );
    assert_rss(
        "non-root trace: tree peak",
        tree_peak(&v),
        truth.vmhwm_bytes(),
    );
    assert!(
        v["taskstats"]["matched"].as_u64() == Some(1),
        "the agent's taskstats record reached the client: {}",
        v["taskstats"]
    );

    // Root's own programs on the same workload: the same figures, each against its truth.
    let own = Trace::new([WL, "touch", "64"])
        .flag("--no-agent")
        .tag("agent-root-own")
        .run();
    own.assert_code(0);
    let ov = own.json_value();
    assert_eq!(programs(&ov), "own");
    let ot = own.truth_one("touch");
    let op = find_process(&own.report(), ot.pid()).peak_rss_bytes;
    assert_rss("root's own trace: peak_rss_bytes", op, ot.vmhwm_bytes());
    // The two processes differ a little (root's has more to map), and the two reports differ
    // by what their truths differ by.
    let reports = p.peak_rss_bytes as i64 - op as i64;
    let truths = truth.vmhwm_bytes() as i64 - ot.vmhwm_bytes() as i64;
    assert!(
        (reports - truths).abs() <= 8 * 4096,
        "non-root minus root: reports {reports} bytes, truths {truths} bytes"
    );
    agent.stop();
}

/// `--delayacct` needs a root-only sysctl: through the agent, the agent switches it on for the
/// session and puts it back after. A kernel before 5.14 has no sysctl and accounts delays
/// unless booted with `nodelayacct` (the guest's 5.10 is not): on for the run all the same.
#[test]
fn unprivileged_delayacct_is_switched_by_the_agent() {
    nobody_can_run_the_binaries();
    let before = spacetime_tests::sysctl::task_delayacct();
    let agent = Agent::start("delayacct");
    let out = Trace::new([WL, "touch", "8"])
        .flag("--delayacct")
        .through(&agent)
        .as_nobody()
        .tag("agent-delayacct")
        .run();
    out.assert_code(0);
    let v = out.json_value();
    assert_eq!(programs(&v), "agent");
    assert_eq!(
        v["taskstats"]["delayacct"],
        Value::Bool(true),
        "delay accounting was on for the run: {}",
        v["taskstats"]
    );
    agent.stop();
    assert_eq!(
        spacetime_tests::sysctl::task_delayacct(),
        before,
        "kernel.task_delayacct put back as it was"
    );
}

/// CPU through the agent, checked as tests/tests/cpu.rs checks it: what wait4 returned.
#[test]
fn unprivileged_cpu_is_what_wait4_returned() {
    nobody_can_run_the_binaries();
    let agent = Agent::start("cpu");
    let spins = ["0", "700", "3000", "15000"];
    let mut argv = vec![WL, "rusage"];
    argv.extend(spins);
    let out = Trace::new(argv)
        .through(&agent)
        .as_nobody()
        .tag("agent-cpu")
        .run();
    out.assert_code(0);
    let v = out.json_value();
    assert_eq!(programs(&v), "agent");
    let t = out.truth_one("rusage");
    let (pids, user, sys) = (t.ints("pids"), t.ints("user_us"), t.ints("sys_us"));
    let reaped = t.ints("reaped_ns");
    assert_eq!(pids.len(), spins.len(), "children");
    for (i, &pid) in pids.iter().enumerate() {
        let p = v["processes"]
            .as_array()
            .and_then(|a| a.iter().find(|p| p["pid"].as_i64() == Some(pid)))
            .unwrap_or_else(|| panic!("pid {pid} missing from the report"));
        spacetime_tests::cputime::assert_wait4(
            &format!("pid {pid} ({} µs burnt): {p}", spins[i]),
            p,
            (user[i], sys[i]),
            reaped[i],
        );
    }
    spacetime_tests::cputime::assert_not_final_counted(&v);
}

/// Two traces through one agent at once, both processes at their peak at the same moment:
/// each tree's peak is its own process's, not the sum.
#[test]
fn two_traces_at_once_each_exact() {
    nobody_can_run_the_binaries();
    let agent = Agent::start("two");
    let meet = TempDir::new("agent-meet");
    let dir = meet.path().to_str().expect("utf-8 temp dir").to_string();
    let small = Trace::new([WL, "hold-together", "2", &dir, "40", "0"])
        .through(&agent)
        .as_nobody()
        .tag("agent-small")
        .spawn();
    let big = Trace::new([WL, "hold-together", "2", &dir, "120", "0"])
        .through(&agent)
        .tag("agent-big")
        .spawn();
    for (out, mib) in [(small.wait(), 40), (big.wait(), 120)] {
        out.assert_code(0);
        let v = out.json_value();
        assert_eq!(programs(&v), "agent", "{}", out.context());
        let t = out.truth_one("hold-together");
        assert!(t.vmhwm_bytes() >= mib * MIB, "truth below {mib} MiB");
        let report = out.report();
        assert_eq!(
            report.processes.len(),
            1,
            "{mib} MiB trace: only its own process"
        );
        let p = find_process(&report, t.pid());
        assert_rss(
            &format!("{mib} MiB trace: peak"),
            p.peak_rss_bytes,
            t.vmhwm_bytes(),
        );
        assert_rss(
            &format!("{mib} MiB trace: tree peak"),
            tree_peak(&v),
            t.vmhwm_bytes(),
        );
    }
}

fn client(agent: &Agent, case: &str) -> String {
    client_as(agent, &[case], false)
}

fn client_as(agent: &Agent, args: &[&str], nobody: bool) -> String {
    let mut cmd = match nobody {
        true => {
            let mut c = Command::new("setpriv");
            c.args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "--",
                CLIENT,
            ]);
            c
        }
        false => Command::new(CLIENT),
    };
    let case = args.join(" ");
    let out = cmd
        .arg(agent.socket())
        .args(args)
        .output()
        .expect("run st-agent-client");
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "st-agent-client {case}: {out:?}");
    text
}

#[test]
fn refuses_what_is_not_the_clients_own_held_child() {
    let agent = Agent::start("refuse");
    let own = client(&agent, "own-child");
    assert!(own.starts_with("tracked "), "own held child: {own}");
    for (case, want) in [
        ("not-child", "is not a child of the client"),
        (
            "other-uid",
            "may not be traced by the client: it runs as uid 0",
        ),
        ("execd", "has already exec'd"),
        ("not-pidfd", "not a process descriptor"),
    ] {
        let got = client(&agent, case);
        assert!(
            got.starts_with("refused ") && got.contains(want),
            "{case}: want a refusal saying {want:?}, got {got:?}"
        );
    }
    // The agent still serves after refusing.
    let again = client(&agent, "own-child");
    assert!(again.starts_with("tracked "), "after refusals: {again}");
    agent.stop();
}

/// A non-root user holds at most 8 sessions at once; root is not limited so.
#[test]
fn sessions_per_user_are_limited() {
    assert_world_executable(std::path::Path::new(CLIENT));
    let agent = Agent::start("limits");
    assert_eq!(
        client_as(&agent, &["sessions", "8"], true),
        "welcome",
        "8 sessions"
    );
    let ninth = client_as(&agent, &["sessions", "9"], true);
    assert!(
        ninth.starts_with("refused ") && ninth.contains("already has 8 sessions"),
        "the 9th session of one user: {ninth}"
    );
    assert_eq!(
        client_as(&agent, &["sessions", "12"], false),
        "welcome",
        "root"
    );
    agent.stop();
}

/// Five holders alive at once (each waits until all five are there) under one shell, traced
/// through `agent`: the run's output and its count of forks refused by the session's limit.
fn five_holders(
    agent: &Agent,
    tag: &str,
    setup: impl FnOnce(Trace) -> Trace,
) -> (Outcome, Option<u64>) {
    let meet = TempDir::new(&format!("{tag}-meet"));
    let script = format!(
        "for i in 1 2 3 4 5; do {WL} hold-together 5 {} 1 0 & done; wait",
        meet.path().display()
    );
    let out = setup(Trace::new(["sh", "-c", &script]))
        .through(agent)
        .tag(tag)
        .run();
    out.assert_code(0);
    let refused = out.json_value()["kernel"]["counters"]["session_limit"].as_u64();
    (out, refused)
}

/// A non-root session's process limit: the forks beyond it are not traced, and the report
/// counts them and says it is incomplete.
#[test]
fn a_non_root_session_stops_at_its_process_limit() {
    nobody_can_run_the_binaries();
    let agent = Agent::start_with("limit", &["--session-limit", "3"]);
    let (out, refused) = five_holders(&agent, "agent-limit", Trace::as_nobody);
    // The shell and two holders fill the limit of 3: three of the five holders are refused.
    assert_eq!(
        refused,
        Some(3),
        "forks refused by the limit\n{}",
        out.context()
    );
    assert!(
        out.stderr.contains("over the session's process limit"),
        "the summary says why it is incomplete\n{}",
        out.context()
    );
    agent.stop();
}

/// The client's own `--max-processes` limits its session as it sizes its own programs'
/// tracking map, below the agent's limit (none for root).
#[test]
fn the_clients_max_processes_limits_its_session() {
    let agent = Agent::start("maxproc");
    let (out, refused) = five_holders(&agent, "agent-maxproc", |t| {
        t.flag("--max-processes").flag("2")
    });
    // The shell and one holder fill the limit of 2: four of the five holders are refused.
    assert_eq!(
        refused,
        Some(4),
        "forks refused by --max-processes 2\n{}",
        out.context()
    );
    agent.stop();
}

#[test]
fn non_root_attach_to_another_users_process_is_refused() {
    nobody_can_run_the_binaries();
    let agent = Agent::start("attach");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(spacetime_bin())
        .args(["trace", "-p", "1"])
        .env("SPACETIME_SOCKET", agent.socket())
        .output()
        .expect("setpriv runs spacetime");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    assert!(err.contains("is not uid 65534's to trace"), "stderr: {err}");
}

/// A non-root `trace -p` of its own process goes through the agent: the process is followed
/// to its end and its exit status is the kernel's.
#[test]
fn unprivileged_attach_through_the_agent() {
    nobody_can_run_the_binaries();
    let agent = Agent::start("attach-own");
    let dir = TempDir::new("agent-attach");
    // The target waits for a byte on its stdin, sent once spacetime says it attached: it
    // outlives the attach at any speed.
    let mut target = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args([WL, "attach-grow", "1", "1"])
        .env("ST_TRUTH", dir.path().join("truth.jsonl"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("start the target as nobody");
    let pid = target.id() as i32;
    // setpriv execs the workload: attach once the process runs it.
    spacetime_tests::attack::wait_exec(pid as u32, WL);
    let report = dir.path().join("report.json");
    let mut trace = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(spacetime_bin())
        .args(["trace", "--json"])
        .arg(&report)
        .args(["-p", &pid.to_string()])
        .env("SPACETIME_SOCKET", agent.socket())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv runs spacetime");
    let mut err = BufReader::new(trace.stderr.take().expect("piped stderr"));
    let mut said = String::new();
    while !said.contains("spacetime: attached to pid") {
        let mut line = String::new();
        if err.read_line(&mut line).expect("read spacetime's stderr") == 0 {
            let _ = target.kill();
            let _ = target.wait();
            panic!("spacetime ended before attaching: {said}");
        }
        said.push_str(&line);
    }
    target
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(b"x")
        .expect("release the target");
    let status = target.wait().expect("reap the target");
    assert_eq!(status.code(), Some(0), "the target's own status");
    err.read_to_string(&mut said)
        .expect("the rest of spacetime's stderr");
    let st = trace.wait().expect("wait for spacetime");
    assert_eq!(
        st.code(),
        Some(0),
        "trace -p exits with the root's status: {said}"
    );
    let v: Value =
        serde_json::from_slice(&std::fs::read(&report).expect("the report")).expect("JSON report");
    assert_eq!(programs(&v), "agent", "{said}");
    let p = v["processes"]
        .as_array()
        .and_then(|a| a.iter().find(|p| p["pid"].as_i64() == Some(pid as i64)))
        .unwrap_or_else(|| panic!("pid {pid} missing: {v}"));
    assert_eq!(p["exit"]["code"].as_i64(), Some(0), "{p}");
    agent.stop();
}

/// The agent ends (`sig`) while the command runs: the client says so, keeps waiting for its
/// command, and exits with the command's status; the command runs to its end.
fn agent_ends_mid_trace(sig: i32, tag: &str) -> (String, String) {
    nobody_can_run_the_binaries();
    let agent = Agent::start(tag);
    // The command runs on until the client has said so (the gate), at any speed.
    let gate = Gate::new(&format!("{tag}-gate"));
    let script = format!("{WL} sleep 1500; {}; exit 7", gate.wait());
    let mut running = Trace::new(["sh", "-c", &script])
        .through(&agent)
        .as_nobody()
        .tag(tag)
        .spawn();
    running.wait_for_descendant(&[WL, "sleep", "1500"], Duration::from_secs(30));
    let agent_err = agent.kill(sig);
    running.wait_stderr("the agent went away");
    gate.open();
    let out = running.wait();
    out.assert_code(7);
    assert!(
        out.stderr.contains("the agent went away"),
        "the client must say the agent went away\n{}\nagent:\n{agent_err}",
        out.context()
    );
    // Said while the command still ran: before the summary, which comes once it is gone.
    let said = out.stderr.find("the agent went away");
    let summary = out
        .stderr
        .find(&format!("spacetime: sh -c {WL} sleep 1500;"));
    assert!(
        matches!((said, summary), (Some(a), Some(b)) if a < b),
        "the client must say so before the command ends\n{}",
        out.context()
    );
    let t = out.truth_one("sleep");
    assert_eq!(t.int("ms"), 1500, "the command ran to its end");
    assert_eq!(programs(&out.json_value()), "agent");
    (out.stderr.clone(), agent_err)
}

#[test]
fn agent_killed_mid_trace() {
    agent_ends_mid_trace(libc::SIGKILL, "agent-killed");
}

/// SIGTERM: the agent tells its clients it stops, ends their sessions and exits 0.
#[test]
fn agent_stopped_mid_trace() {
    let (client, agent) = agent_ends_mid_trace(libc::SIGTERM, "agent-stopped");
    assert!(
        client.contains("it is stopping"),
        "the client is told the agent stops: {client}"
    );
    assert!(
        agent.ends_with("agent status: ExitStatus(unix_wait_status(0))"),
        "the agent exits 0 on SIGTERM:\n{agent}"
    );
}

const NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
];

/// A non-root `watch` through the agent sees its own uid's exits and no one else's; root's
/// sees both.
#[test]
fn a_non_root_watch_sees_its_own_exits_only() {
    nobody_can_run_the_binaries();
    let agent = Agent::start("watch");
    let watch = |nobody: bool| {
        let w = Watch::new()
            .env("SPACETIME_SOCKET", agent.socket())
            .flag("--json");
        let w = match nobody {
            true => w.under(NOBODY.iter().chain(["--"].iter())),
            false => w,
        };
        w.start()
    };
    let as_nobody = watch(true);
    let as_root = watch(false);
    let mine = token("nobody");
    let theirs = token("root");
    let st = Command::new("setpriv")
        .args(NOBODY)
        .arg("--")
        .args([WL, "quiet-exit", "3", &mine])
        .status()
        .expect("run the workload as nobody");
    assert_eq!(st.code(), Some(3), "nobody's workload");
    let st = Command::new(WL)
        .args(["quiet-exit", "4", &theirs])
        .status()
        .expect("run the workload as root");
    assert_eq!(st.code(), Some(4), "root's workload");
    as_root.wait_until(
        "root's watch sees both exits",
        Duration::from_secs(30),
        |out| out.contains(&mine) && out.contains(&theirs),
    );
    as_nobody.wait_until(
        "nobody's watch sees its exit",
        Duration::from_secs(30),
        |out| out.contains(&mine),
    );
    let nobody = as_nobody.interrupt();
    let root = as_root.interrupt();
    assert_eq!(nobody.exits_with(&mine).len(), 1, "{}", nobody.context());
    assert!(
        nobody.exits_with(&theirs).is_empty(),
        "a non-root watch saw root's exit\n{}",
        nobody.context()
    );
    let others: Vec<Value> = nobody
        .json_lines()
        .into_iter()
        .filter(|v| v["uid"].as_u64() != Some(65534))
        .collect();
    assert!(others.is_empty(), "exits of other users: {others:?}");
    // What each says it watches matches what it sees.
    assert!(
        nobody
            .stderr
            .contains("spacetime: watching every exit of uid 65534 (")
            && !nobody.stderr.contains("on the system"),
        "a non-root watch must say it sees its own uid only\n{}",
        nobody.context()
    );
    assert!(
        root.stderr
            .contains("spacetime: watching every exit on the system;"),
        "root's watch sees every exit\n{}",
        root.context()
    );
    assert_eq!(root.exits_with(&mine).len(), 1, "{}", root.context());
    assert_eq!(root.exits_with(&theirs).len(), 1, "{}", root.context());
    agent.stop();
}

/// Socket activation (contrib/systemd/spacetime-agent.socket): the agent started at the first
/// connection on a socket systemd made serves it, and leaves the socket to systemd.
#[test]
fn socket_activation_serves_the_first_client() {
    nobody_can_run_the_binaries();
    let dir = TempDir::new("agent-activation");
    let socket = dir.path().join("agent.sock");
    let mut activator = Command::new("systemd-socket-activate")
        .args(["--seqpacket", "-l"])
        .arg(&socket)
        .arg(spacetime_bin())
        .args(["agent"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("systemd-socket-activate (systemd) runs");
    spacetime_tests::poll::wait_until(
        "socket from systemd-socket-activate",
        Duration::from_secs(30),
        || socket.exists(),
    );
    std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o666))
        .expect("chmod the socket");
    let out = Trace::new([WL, "touch", "16"])
        .env("SPACETIME_SOCKET", &socket)
        .as_nobody()
        .tag("agent-activated")
        .run();
    out.assert_code(0);
    let v = out.json_value();
    assert_eq!(programs(&v), "agent", "{}", out.context());
    let t = out.truth_one("touch");
    let p = find_process(&out.report(), t.pid()).peak_rss_bytes;
    assert_rss("activated agent: peak", p, t.vmhwm_bytes());
    // SAFETY: our own child (the activator exec'd the agent).
    unsafe { libc::kill(activator.id() as i32, libc::SIGTERM) };
    let st = activator.wait().expect("reap the agent");
    assert_eq!(st.code(), Some(0), "the agent exits 0 on SIGTERM");
    assert!(socket.exists(), "a socket systemd made is left to it");
}

/// `/proc/PID/task/TID/stat`'s scheduling policy (field 41), read after the command name
/// (which may hold spaces and parentheses).
fn policy(stat: &str) -> u32 {
    let after = &stat[stat.rfind(')').expect("a stat line names its command") + 2..];
    after
        .split(' ')
        .nth(38)
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("no policy field in {stat:?}"))
}

/// The agent runs as a batch task, every thread of it (each inherits the policy from the
/// first): woken by a client, it waits for the client to block or its turn to end instead of
/// preempting it, so a client's own work between two requests is not held up by the agent's.
#[test]
fn the_agent_runs_as_a_batch_task() {
    const SCHED_BATCH: u32 = 3;
    let agent = Agent::start("batch");
    Trace::new([WL, "touch", "4"])
        .through(&agent)
        .tag("agent-batch")
        .run()
        .assert_code(0);
    let tasks = std::fs::read_dir(format!("/proc/{}/task", agent.pid()))
        .unwrap_or_else(|e| panic!("the agent's threads: {e}"));
    let mut seen = 0;
    for task in tasks.map_while(Result::ok) {
        let path = task.path().join("stat");
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue; // a thread that ended meanwhile
        };
        assert_eq!(
            policy(&stat),
            SCHED_BATCH,
            "{} is not SCHED_BATCH: {stat}",
            path.display()
        );
        seen += 1;
    }
    assert!(seen >= 1, "no thread of the agent was read");
    agent.stop();
}
