//! The attack suite, part one: what a user who is not root can learn about other users'
//! processes through `spacetime agent`. Each route of issue 19's audit is tried at least as
//! often as the audit did, as uid 65534 against a private agent, with root's processes
//! running meanwhile; nothing about another uid's process may reach the attacker.
//!
//! Part two (agent_abuse.rs) is what the attacker can make the agent hold or do; part three
//! (agent_failure.rs) what a client is told when the agent fails.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use spacetime_tests::agent::Agent;
use spacetime_tests::attack::{root_process_on, Client, Victims, ATTACKER};
use spacetime_tests::watch::{token, Watch};
use spacetime_tests::{spacetime_bin, TempDir, Trace};

const CLIENT: &str = env!("CARGO_BIN_EXE_st-agent-client");
const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// Tries of each route, at least the audit's: it got a thread's pidfd tracked (one try
/// suffices when it works), 3 stale entries in 89 exit races, and root's process onto a
/// stale pid after 31 878 forks (its pid counter cycled once, at the default pid_max).
const THREAD_TRIES: &str = "100";
/// The audit's 400 exit races (100 in the emulated guest, where each costs a hundred times
/// more: the agent's proof and its insert straddle the exit there all the more often).
fn race_tries() -> String {
    spacetime_tests::repetitions(400, 100).to_string()
}

/// Forks that cycle the pid counter once: all of pid_max but the pids below 300 the kernel
/// skips when it wraps and a margin for the processes running meanwhile (32 000 at the
/// default 32 768; the 6.1 guest lowers pid_max to 1024 for this test so that its emulated
/// CPU cycles it in seconds, not minutes).
fn forks() -> String {
    let pid_max: u64 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .expect("read pid_max")
        .trim()
        .parse()
        .expect("pid_max is a number");
    pid_max.saturating_sub(768).max(200).to_string()
}

/// Stale tracking entries, both ways in: thread pidfds (kernel 6.9+) and the exit race;
/// then the pid counter cycled by [`forks`] forks while root runs processes, and root's
/// processes started on every pid tried (ns_last_pid). Nothing of theirs reaches the
/// attacker's sessions; a thread's pidfd is never tracked.
#[test]
fn stale_tracking_entries_never_capture_another_users_process() {
    let agent = Agent::start("attack-reuse");
    let victims = Victims::start();
    let mut c = Client::start(
        CLIENT,
        agent.socket(),
        ATTACKER,
        &["reuse", THREAD_TRIES, &race_tries(), &forks()],
    );
    let threads = c.until("thread-tries", Duration::from_secs(120));
    let thread_tracked = c.number("thread-tracked", Duration::from_secs(60));
    if threads == "0" {
        let why = c
            .seen
            .iter()
            .find(|l| l.starts_with("thread-pidfd unsupported"))
            .cloned()
            .unwrap_or_default();
        eprintln!("thread pidfd route not tried: {why} (PIDFD_THREAD came in Linux 6.9)");
    }
    assert_eq!(thread_tracked, 0, "a thread's pidfd was tracked");
    let races = c.number("race-tries", Duration::from_secs(120));
    let misnamed = c.number("race-misnamed", Duration::from_secs(60));
    assert_eq!(
        misnamed, 0,
        "the client's own exiting children were refused as not dumpable (a setuid program)"
    );
    let forks = c.number("forks", Duration::from_secs(300));
    let candidates: BTreeSet<u32> = c
        .until("candidates", Duration::from_secs(60))
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    c.until("ready", Duration::from_secs(60));
    let ran = victims.stop();
    // Root's processes on the very pids the attacker tried.
    let landed = candidates
        .iter()
        .filter(|&&p| (0..3).any(|_| root_process_on(p)))
        .count();
    c.say("go");
    let closed = c.number("closed-by-agent", Duration::from_secs(60));
    let tracked = c.number("tracked", Duration::from_secs(60));
    let foreign = c.number("foreign", Duration::from_secs(60));
    let said = c.end();
    eprintln!(
        "reuse attack: {threads} thread pidfds, {races} exit races ({tracked} tracked), {forks} forks, {ran} root processes meanwhile, root on {landed} of {} pids tried; {closed} sessions closed idle by the agent",
        candidates.len()
    );
    assert_eq!(
        foreign,
        0,
        "records about processes the attacker did not start:\n{}",
        said.join("\n")
    );
    assert!(
        landed > 0,
        "no root process landed on a pid tried: the attack proved nothing"
    );
    agent.stop();
}

/// A non-root watch: root's processes and the attacker's own run meanwhile; every record
/// the watch gets is about the attacker's own uid, free records included (the audit saw
/// 1 039 of 1 045 free records in 12 s be other users').
#[test]
fn a_non_root_watch_learns_nothing_of_other_users() {
    let agent = Agent::start("attack-watch");
    let victims = Victims::start();
    let mut c = Client::start(CLIENT, agent.socket(), ATTACKER, &["watch-leak", "6"]);
    let sees = c.number("sees-uid", Duration::from_secs(30));
    let before = victims.ran();
    // The attacker's own setuid run: shown to its watch only as a bare marker.
    let (dir, suid) = setuid_workload("watch-leak");
    let st = std::process::Command::new("setpriv")
        .args([
            &format!("--reuid={ATTACKER}"),
            &format!("--regid={ATTACKER}"),
        ])
        .args(["--clear-groups", "--"])
        .arg(&suid)
        .args(["exit", "0"])
        .status()
        .expect("setpriv runs");
    assert!(st.success(), "the setuid run: {st:?}");
    drop(dir);
    drop(c.stdin.take());
    let records = c.number("records", Duration::from_secs(60));
    // Root's processes that began and ended while the watch was open.
    let during = victims.ran().saturating_sub(before.saturating_add(1));
    let reaps = c.number("reaps", Duration::from_secs(60));
    let own = c.number("own-exits", Duration::from_secs(60));
    let unverified = c.number("unverified", Duration::from_secs(60));
    let unseen = c.number("reaps-unseen", Duration::from_secs(60));
    // Bare markers of the attacker's own processes it could not ptrace at their exit: the
    // setuid run above (and those of tests run as the same user meanwhile).
    let hidden = c.number("hidden", Duration::from_secs(60));
    let foreign = c.number("foreign", Duration::from_secs(60));
    let said = c.end();
    let ran = victims.stop();
    eprintln!(
        "watch attack: {records} records ({reaps} free records, {unseen} of exits not shown, {own} own exits, {hidden} hidden, {unverified} of processes gone unchecked) while root ran {during} processes ({ran} in all)"
    );
    // Free records of exits the watch was not shown can only be of its own processes that
    // exited just before it began: a handful, where other users' would be thousands.
    assert!(
        unseen <= 3,
        "{unseen} free records of exits not shown:\n{}",
        said.join("\n")
    );
    assert_eq!(
        sees,
        u64::from(ATTACKER),
        "the welcome says whose exits it sees"
    );
    assert!(
        during > 0,
        "no root process ran while the watch was open ({ran} in all): nothing judged"
    );
    assert!(own > 0, "the watch saw none of its own exits");
    assert!(hidden >= 1, "the setuid run's exit was not marked hidden");
    assert_eq!(foreign, 0, "other users' records:\n{}", said.join("\n"));
}

/// The proof a track request must pass: a re-exec of the client's own program, a child
/// that exec'd, another user's child, not a child, a file: each refused (the own held child
/// still passes), whether the track request waits for the welcome or follows the hello at
/// once (as `trace` sends it).
#[test]
fn a_track_request_needs_the_clients_own_unexeced_child() {
    let agent = Agent::start("attack-proof");
    let cases = [
        ("own-child", "tracked "),
        ("reexec", "refused process"),
        ("execd", "refused process"),
        ("not-child", "refused process 1 is not a child"),
        (
            "not-pidfd",
            "refused what was passed is not a process descriptor",
        ),
    ];
    let early = cases.map(|(case, want)| (format!("early:{case}"), want));
    let all = cases
        .iter()
        .map(|&(case, want)| (case.to_string(), want))
        .chain(early);
    for (case, want) in all {
        let mut c = Client::start(CLIENT, agent.socket(), ATTACKER, &[&case]);
        let line = c.until("", Duration::from_secs(30));
        assert!(
            line.starts_with(want),
            "{case}: want {want:?}, got {line:?}"
        );
        if case.ends_with("reexec") {
            assert!(line.contains("already exec'd"), "{case}: {line}");
        }
        c.end();
    }
    agent.stop();
}

fn processes(v: &Value) -> Vec<Value> {
    v["processes"].as_array().cloned().unwrap_or_default()
}

/// A directory where a setuid program works: the build's own temporary directory, else the
/// system's, whichever is not mounted nosuid.
fn suid_dir() -> std::path::PathBuf {
    let nosuid = |p: &std::path::Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("a path");
        // SAFETY: statvfs is plain data, filled by the call.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: a valid path and buffer.
        let r = unsafe { libc::statvfs(c.as_ptr(), &mut st) };
        r != 0 || st.f_flag & libc::ST_NOSUID != 0
    };
    [
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")),
        std::env::temp_dir(),
    ]
    .into_iter()
    .find(|d| d.is_dir() && !nosuid(d))
    .expect("a directory not mounted nosuid")
}

/// A root-owned setuid copy of the workload in a directory of its own (`tag`), removed with
/// the returned guard.
fn setuid_workload(tag: &str) -> (SuidDir, std::path::PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = suid_dir().join(format!("spacetime-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let suid = dir.join("suid-workload");
    std::fs::copy(WL, &suid).expect("copy the workload");
    std::fs::set_permissions(&dir, PermissionsExt::from_mode(0o755)).expect("chmod the directory");
    std::fs::set_permissions(&suid, PermissionsExt::from_mode(0o4755))
        .expect("make it setuid root");
    (SuidDir(dir), suid)
}

struct SuidDir(std::path::PathBuf);

impl Drop for SuidDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A traced process that execs a setuid program (a root-owned setuid copy of the workload)
/// leaves the trace there: the report says so (state "left"), with no argv of the new
/// program and nothing after (no exit, no taskstats record); what the command ran before and
/// after is traced as ever.
#[test]
fn a_setuid_exec_leaves_the_trace() {
    let agent = Agent::start("attack-setuid");
    let (dir, suid) = setuid_workload("suid");
    let suid = suid.to_str().expect("utf-8").to_string();
    let script = format!("{WL} touch 1; {suid} exit 0; {WL} touch 1");
    let out = Trace::new(["sh", "-c", &script])
        .through(&agent)
        .as_nobody()
        .tag("attack-setuid")
        .run();
    drop(dir);
    out.assert_code(0);
    let v = out.json_value();
    let procs = processes(&v);
    let left: Vec<&Value> = procs.iter().filter(|p| p["state"] == "left").collect();
    assert_eq!(
        left.len(),
        1,
        "one process left the trace\n{}",
        out.context()
    );
    let p = left[0];
    assert!(p["exit"].is_null(), "no exit of a process that left: {p}");
    let last = p["images"].as_array().and_then(|i| i.last()).cloned();
    let exe = last.as_ref().and_then(|i| i["exe"].as_str()).unwrap_or("");
    assert!(
        exe.ends_with("/suid-workload"),
        "its last image is the setuid one: {p}"
    );
    let argv = last.as_ref().map(|i| i["argv"].clone()).unwrap_or_default();
    assert!(
        argv.as_array().is_none_or(|a| a.is_empty()),
        "its argv withheld: {argv}"
    );
    // Both workloads traced, before and after (a shell may exec the last one itself).
    let touched = procs
        .iter()
        .flat_map(|p| p["images"].as_array().cloned().unwrap_or_default())
        .filter(|i| i["exe"] == WL && i["argv"][1] == "touch")
        .count();
    assert_eq!(touched, 2, "both workloads traced\n{}", out.context());
    agent.stop();
}

/// `trace -p` through the agent applies ptrace's rule beyond the uids: a process of the
/// attacker's uid in another group, or one that made itself not dumpable, is refused.
#[test]
fn attach_applies_ptraces_rule() {
    let agent = Agent::start("attack-attach");
    for (regid, mode, want) in [
        ("--regid=65533", "sleep", "it runs as gid 65533"),
        ("--regid=65534", "undumpable", "it is not dumpable"),
    ] {
        let mut target = std::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                regid,
                "--clear-groups",
                "--",
                WL,
                mode,
                // Killed below: it need only outlast the refusal, at any speed.
                "600000",
            ])
            .spawn()
            .expect("start the target");
        let pid = target.id();
        spacetime_tests::attack::wait_exec(pid, WL);
        // Dumpable is given up after the exec: wait until /proc says so.
        if mode == "undumpable" {
            spacetime_tests::poll::wait_until("undumpable target", Duration::from_secs(60), || {
                let status = std::fs::metadata(format!("/proc/{pid}/status")).expect("the target");
                std::os::unix::fs::MetadataExt::uid(&status) == 0
            });
        }
        let out = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(spacetime_bin())
            .args(["trace", "-p", &pid.to_string()])
            .env("SPACETIME_SOCKET", agent.socket())
            .output()
            .expect("setpriv runs spacetime");
        let err = String::from_utf8_lossy(&out.stderr);
        let _ = target.kill();
        let _ = target.wait();
        assert_eq!(out.status.code(), Some(125), "{mode}: {err}");
        assert!(err.contains(want), "{mode}: want {want:?}: {err}");
    }
    agent.stop();
}

/// `--socket` in a directory another user can write: refused before anything loads, 150
/// times while that user races a link to a root-only file onto the socket's path; the file
/// keeps its mode. A file in the way that is not a socket is never removed.
#[test]
fn the_socket_is_never_made_through_a_link() {
    let secret_dir = TempDir::new("attack-secret");
    std::fs::set_permissions(
        secret_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .expect("chmod");
    let secret = secret_dir.path().join("secret");
    std::fs::write(&secret, b"root's").expect("write");
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod");
    let open = TempDir::new("attack-socketdir"); // 0777: anyone may plant a link there
    let socket = open.path().join("agent.sock");
    let racer = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["sh", "-c"])
        .arg(format!(
            "while :; do ln -sf {} {} 2>/dev/null; rm -f {}; done",
            secret.display(),
            socket.display(),
            socket.display()
        ))
        .spawn();
    let mut racer = racer.expect("start the racer");
    let mut refused = 0;
    // The audit's 150 starts; 15 in the emulated guest, where each start costs half a second
    // beside the racer (the check is userspace's, the same on every kernel).
    for _ in 0..spacetime_tests::repetitions(150, 15) {
        let out = std::process::Command::new(spacetime_bin())
            .args(["agent", "--socket"])
            .arg(&socket)
            .output()
            .expect("run spacetime agent");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(err.contains("must be owned by root"), "{err}");
        refused += 1;
    }
    let _ = racer.kill();
    let _ = racer.wait();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&secret)
            .expect("the secret")
            .permissions(),
    );
    assert_eq!(
        mode & 0o777,
        0o600,
        "the secret's mode after {refused} starts"
    );
    // A safe directory with a regular file where the socket goes: refused, file kept.
    std::fs::set_permissions(
        secret_dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let out = std::process::Command::new(spacetime_bin())
        .args(["agent", "--socket"])
        .arg(&secret)
        .output()
        .expect("run spacetime agent");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not a socket"),
        "{out:?}"
    );
    assert_eq!(std::fs::read(&secret).expect("kept"), b"root's");
}

/// The kernel's own defence, with no agent check in front: an entry left for a pid no live
/// process holds is cleared by the fork that gives the pid to a new process, before it
/// runs: nothing of the newcomer reaches the session, and the clearing is counted.
#[test]
fn the_kernel_clears_a_stale_entry_at_the_next_fork_on_its_pid() {
    use spacetime::kernel::loader::{LoadOptions, Probes, SessionId};
    const S: SessionId = 5;
    let mut probes = Probes::load(&LoadOptions::default()).expect("the programs load");
    let mut ring = probes.take_events().expect("the ring");
    probes.reset_session(S).expect("reset");
    for _ in 0..50 {
        // A pid just freed: a child's, reaped.
        let mut c = std::process::Command::new("/bin/true")
            .spawn()
            .expect("spawn");
        let pid = c.id();
        c.wait().expect("reap");
        probes.track_in(pid, S).expect("a stale entry");
        // Counted before this attempt: an earlier attempt's entry may have been cleared by
        // another process of the machine that took its pid first (that attempt gave up).
        let before = probes.counters_of(S).expect("counters").stale_cleared;
        if !root_process_on(pid) {
            probes.untrack(pid).expect("untrack");
            continue;
        }
        assert_eq!(
            probes.tracked_in(pid).expect("read"),
            None,
            "pid {pid} still tracked"
        );
        let counted = probes.counters_of(S).expect("counters").stale_cleared;
        assert_eq!(
            counted,
            before + 1,
            "the clearing is counted in the session's counters"
        );
        while let Some(r) = ring.next_record() {
            let ev = spacetime::kernel::events::decode(&r).expect("a record");
            assert_ne!(
                ev.session(),
                S,
                "a record of the newcomer on pid {pid}: {ev:?}"
            );
        }
        return;
    }
    panic!("no process landed on a stale pid in 50 attempts");
}

/// The proof after the insert (shared by the agent and `trace -p`): a process that exited
/// before its entry went in (a zombie: its pidfd is readable) has the entry taken back.
#[test]
fn an_insert_for_a_process_that_exited_is_taken_back() {
    use spacetime::kernel::loader::{LoadOptions, Probes};
    use spacetime::kernel::{attach, pidfd};
    let mut probes = Probes::load(&LoadOptions::default()).expect("the programs load");
    let mut child = std::process::Command::new("/bin/true")
        .spawn()
        .expect("spawn");
    let pid = child.id();
    let pinned = pidfd::Pinned::open(pid)
        .expect("pidfd")
        .expect("alive or a zombie");
    let stat = || std::fs::read(format!("/proc/{pid}/stat")).expect("stat");
    spacetime_tests::poll::wait_until("zombie", Duration::from_secs(60), || {
        pidfd::stat_fields(&stat()).expect("parsed").state == b'Z'
    });
    let start = pidfd::start_mono_ns(pidfd::stat_fields(&stat()).expect("parsed").start_ticks);
    let r = attach::track_pinned(&mut probes, &pinned, start, 6);
    assert!(matches!(r, Err(attach::AttachError::Gone(_))), "{r:?}");
    assert_eq!(
        probes.tracked_in(pid).expect("read"),
        None,
        "the entry was left"
    );
    child.wait().expect("reap");
}

/// A client in another PID namespace is refused at its hello: the kernel programs number
/// processes as the agent's namespace does, so the client's pids would name others.
#[test]
fn a_client_in_another_pid_namespace_is_refused() {
    let agent = Agent::start("attack-pidns");
    let out = std::process::Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc", CLIENT])
        .arg(agent.socket())
        .args(["sessions", "1"])
        .output()
        .expect("unshare runs st-agent-client");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("refused the client runs in another PID namespace"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    agent.stop();
}

/// A non-root watch through the agent sees what its user could ptrace at the exit, as ptrace
/// decides (the audit: `passwd`, `chfn` and `su` exits with their I/O counters, which
/// /proc/PID/io withholds from their user). A user of its own (no other test runs as it)
/// runs a setuid-root copy of the workload, which execs the workload again, between two
/// ordinary runs: both watches, the raw client's and `spacetime watch`'s, get the ordinary
/// execs and exits with their taskstats records, and of the setuid one only a bare hidden
/// marker (no exec record, no taskstats record); the watch counts it as hidden in its
/// summary.
#[test]
fn a_non_root_watch_does_not_see_setuid_programs() {
    const USER: u32 = 60177;
    let agent = Agent::start("attack-watch-setuid");
    let (dir, suid) = setuid_workload("watch-suid");
    let as_user = [
        format!("--reuid={USER}"),
        format!("--regid={USER}"),
        "--clear-groups".into(),
        "--".into(),
    ];
    let mut raw = Client::start(CLIENT, agent.socket(), USER, &["watch-exits"]);
    raw.until("welcomed", Duration::from_secs(60));
    let watch = Watch::new()
        .env("SPACETIME_SOCKET", agent.socket())
        .flag("--json")
        .under(
            ["setpriv"]
                .iter()
                .copied()
                .chain(as_user.iter().map(String::as_str)),
        )
        .start();
    let (before, hidden, after) = (token("before"), token("hidden"), token("after"));
    let run = |prog: &std::path::Path, args: &[&str]| {
        let mut c = std::process::Command::new("setpriv")
            .args(&as_user)
            .arg(prog)
            .args(args)
            .spawn()
            .expect("setpriv runs");
        let pid = c.id();
        let st = c.wait().expect("reap");
        (pid, st.code())
    };
    let wl = std::path::Path::new(WL);
    let a = run(wl, &["quiet-exit", "3", &before]);
    let b = run(&suid, &["grow-exec", "1", WL, "quiet-exit", "5", &hidden]);
    let c = run(wl, &["quiet-exit", "4", &after]);
    drop(dir);
    assert_eq!(
        (a.1, b.1, c.1),
        (Some(3), Some(5), Some(4)),
        "the three runs"
    );
    watch.wait_until(
        "the watch sees the run after the setuid one",
        Duration::from_secs(30),
        |out| out.contains(&after),
    );
    let out = watch.interrupt();
    drop(raw.stdin.take());
    raw.until("flushed", Duration::from_secs(60));
    let said = raw.end();
    let has = |l: String| said.contains(&l);
    eprintln!("raw watch of uid {USER}: {said:?}");
    for (pid, what) in [(a.0, "before"), (c.0, "after")] {
        assert!(
            has(format!("exit {pid} shown")),
            "{what}: exit shown\n{said:?}"
        );
        assert!(
            has(format!("taskstats {pid}")),
            "{what}: taskstats\n{said:?}"
        );
        assert!(has(format!("exec {pid}")), "{what}: exec\n{said:?}");
    }
    let pid = b.0;
    assert!(!has(format!("exec {pid}")), "setuid: exec\n{said:?}");
    assert!(
        has(format!("exit {pid} hidden")),
        "setuid: hidden marker\n{said:?}"
    );
    assert!(
        !has(format!("exit {pid} shown")),
        "setuid: exit shown\n{said:?}"
    );
    assert!(
        !has(format!("taskstats {pid}")),
        "setuid: taskstats leaked\n{said:?}"
    );
    // `spacetime watch`: the ordinary exits, not the setuid one, counted as hidden.
    assert_eq!(out.exits_with(&before).len(), 1, "{}", out.context());
    assert_eq!(out.exits_with(&after).len(), 1, "{}", out.context());
    assert!(out.exits_with(&hidden).is_empty(), "{}", out.context());
    let line = out
        .stderr
        .lines()
        .find_map(|l| l.trim().strip_prefix("hidden:"))
        .unwrap_or_else(|| panic!("no hidden line in the summary\n{}", out.context()));
    assert!(
        line.trim_start().starts_with("1 exits"),
        "one exit hidden: {line}\n{}",
        out.context()
    );
    agent.stop();
}

/// The agent's CPU clock samples every traced thread of every session that shows CPU over
/// time, and its ticks go to the session of the process they are about, like every other
/// record. The attacker's two sessions (one asking for CPU over time, one not) each trace a
/// child of theirs that spins for 300 ms of CPU, while root traces a CPU-bound workload
/// through the same agent: root's report is sampled from the ticks of its processes, the
/// attacker's asking session gets its own child's ticks and nothing of root's, and the other
/// session no tick at all.
#[test]
fn cpu_clock_ticks_reach_only_the_session_of_their_process() {
    let agent = Agent::start("attack-ticks");
    let mut c = Client::start(CLIENT, agent.socket(), ATTACKER, &["ticks", "300"]);
    let clock = c.until("cpu-clock", Duration::from_secs(60));
    assert!(
        clock.starts_with("ticking "),
        "the welcome of a session asking for CPU over time: {clock}"
    );
    c.until("ready", Duration::from_secs(60));
    let out = Trace::new([WL, "cpu-phases", "300"])
        .through(&agent)
        .tag("attack-ticks")
        .run();
    out.assert_code(0);
    let v = out.json_value();
    let cpu = &v["timeline"]["cpu"];
    assert_eq!(cpu["method"], "ticks", "{cpu}\n{}", out.context());
    let total = v["user_ns"].as_u64().unwrap_or(0) + v["sys_ns"].as_u64().unwrap_or(0);
    let unsampled = cpu["unsampled_cpu_ns"].as_u64().unwrap_or(u64::MAX);
    assert!(
        unsampled < total / 10,
        "root's run was sampled: {unsampled} of {total} ns placed by no tick\n{cpu}"
    );
    c.say("go");
    let own = c.number("own-ticks", Duration::from_secs(120));
    let unasked = c.number("unasked-ticks", Duration::from_secs(60));
    let foreign = c.number("foreign", Duration::from_secs(60));
    let said = c.end();
    eprintln!("ticks: {own} of the attacker's own child, {unasked} to the session that did not ask, {foreign} foreign");
    assert!(
        own > 0,
        "300 ms of CPU and no tick reached its session:\n{}",
        said.join("\n")
    );
    assert_eq!(
        unasked, 0,
        "ticks reached a session that did not ask for them"
    );
    assert_eq!(
        foreign,
        0,
        "records about processes the attacker did not start:\n{}",
        said.join("\n")
    );
    agent.stop();
}
