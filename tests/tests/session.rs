//! One loaded session, several runs in a row: each run's figures against its own workload's
//! truth (VmHWM, processes, exit codes), and nothing of one run in the next — not its
//! processes, not its tree-wide peak, not its leftovers keeping a later run waiting.
//!
//! One test in this file: a session blocks signals and makes the process a child subreaper.

use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use spacetime::kernel::loader::LoadOptions;
use spacetime::run::{Run, RunOptions, Session, SessionOptions, Spawn, Start};
use spacetime_tests::{
    assert_rss, check_invariants, find_process, gate::Gate, Exit, Report, TempDir, MIB,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// Runs `st-workload ARGS` (its truth lines in `truth`) through the session.
fn run(session: &mut Session, truth: &Path, args: &[&str], stop_on_root_exit: bool) -> Run {
    let mut argv: Vec<OsString> = vec!["/usr/bin/env".into()];
    argv.push(format!("ST_TRUTH={}", truth.display()).into());
    argv.push(WL.into());
    argv.extend(args.iter().map(OsString::from));
    let start = Start::Spawn(Spawn {
        path: Path::new("/usr/bin/env"),
        argv: &argv,
        creds: None,
    });
    let opts = RunOptions {
        stop_on_root_exit,
        ..RunOptions::default()
    };
    session
        .run(start, &opts)
        .unwrap_or_else(|e| panic!("run of {args:?}: {e:#}"))
}

/// The run's report as the JSON contract has it.
fn report(run: &Run) -> Report {
    let live = run.processes();
    let json = serde_json::to_string(&run.report(&live)).expect("report serializes");
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("report does not parse: {e}: {json}"))
}

fn truth(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("truth file {}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("truth line {l:?}: {e}")))
        .collect()
}

fn vmhwm(t: &serde_json::Value) -> u64 {
    t["vmhwm_kib"].as_u64().expect("truth has vmhwm_kib") * 1024
}

fn pid(t: &serde_json::Value) -> i32 {
    t["pid"].as_i64().expect("truth has a pid") as i32
}

/// The run's tree-wide peak, which must exist (the kernel follows RSS here).
fn tree_peak(run: &Run, what: &str) -> u64 {
    run.tree_peak()
        .unwrap_or_else(|| panic!("{what}: no tree-wide peak"))
        .bytes
}

#[test]
fn runs_in_a_row_each_have_their_own_figures() {
    let dir = TempDir::new("session");
    let mut session = Session::open(&SessionOptions {
        load: LoadOptions {
            track_rss: true,
            ..LoadOptions::default()
        },
        taskstats_buffer: 8 << 20,
        delayacct: false,
        delayacct_notice: false,
    })
    .expect("the programs load");

    // A signal between runs is the caller's to see, and does not reach the next run.
    // SAFETY: a signal to this thread, which the session blocked (it stays pending).
    unsafe {
        libc::syscall(
            libc::SYS_tgkill,
            libc::getpid(),
            libc::gettid(),
            libc::SIGHUP,
        );
    }
    assert_eq!(session.signals_between_runs(), vec![libc::SIGHUP]);
    assert!(session.signals_between_runs().is_empty(), "taken once");

    let r1 = one_process(&mut session, dir.path());
    // Run 2's child holds until run 3 is checked (the gate opens when it drops).
    let gate = Gate::new("session-left-gate");
    let (r2, left) = child_left_running(&mut session, dir.path(), &gate);
    let left_fd = Pidfd::open(left);

    // 3: three children forked and exec'd one after another, each touching 4 MiB, while run
    // 2's child still holds its 64 MiB.
    let t3 = dir.path().join("t3");
    let r3 = run(&mut session, &t3, &["storm", "3", WL, "touch", "4"], false);
    let rep3 = report(&r3);
    check_invariants(&rep3);
    assert_eq!(rep3.exit, Exit::Code(0), "run 3: exit");
    let truth3 = truth(&t3);
    assert!(
        truth3.len() >= 3,
        "run 3: a tree records a line per node: {truth3:?}"
    );
    assert_eq!(
        rep3.processes.len(),
        truth3.len(),
        "run 3: one process per node, nothing of run 2: {:?}",
        rep3.pids()
    );
    assert!(
        !rep3.pids().contains(&left),
        "run 3: run 2's child {left} is not in it"
    );
    for t in &truth3 {
        let p = find_process(&rep3, pid(t));
        // VmHWM is the last image's (the root's first is /usr/bin/env, which may peak higher
        // than a small static st-workload, and the process's peak is the higher of the two).
        let last = p.images.last().and_then(|i| i.peak_rss_bytes);
        let last = last.unwrap_or_else(|| panic!("run 3: pid {}: a last image's peak", p.pid));
        assert_rss(&format!("run 3: pid {}", p.pid), last, vmhwm(t));
        assert_eq!(
            p.images.iter().filter_map(|i| i.peak_rss_bytes).max(),
            Some(p.peak_rss_bytes),
            "run 3: pid {}: the process's peak is its images' highest: {:?}",
            p.pid,
            p.images
        );
    }
    let sum3: u64 = truth3.iter().map(vmhwm).sum();
    let peak3 = tree_peak(&r3, "run 3");
    assert!(
        peak3 <= sum3 + 4 * spacetime_tests::PAGE,
        "run 3: tree peak {peak3} above the sum of its processes' VmHWM {sum3}: run 2's child counted?"
    );
    // Run 2's child holds until the gate opens: a run 3 that waited for it would end only
    // with the child's hang guard.
    assert!(
        left_fd.alive(),
        "run 3 ended after run 2's child {left}: it waited for it"
    );
    left_fd.kill();
    drop(gate);

    // 4: an exit status passes through; one process, nothing lost.
    let t4 = dir.path().join("t4");
    let r4 = run(&mut session, &t4, &["exit", "3"], false);
    let rep4 = report(&r4);
    check_invariants(&rep4);
    assert_eq!(rep4.exit, Exit::Code(3), "run 4: exit");
    assert_eq!(r4.exit_code(), 3, "run 4: exit code");
    assert_eq!(
        rep4.processes.len(),
        1,
        "run 4: one process: {:?}",
        rep4.pids()
    );
    assert_eq!(pid(&truth(&t4)[0]), rep4.root().pid, "run 4: the root");
    for (i, r) in [&r1, &r2, &r3, &r4].iter().enumerate() {
        assert_eq!(r.meta.counters.lost(), 0, "run {}: events lost", i + 1);
        assert_eq!(
            r.meta.decode_errors,
            0,
            "run {}: undecodable records",
            i + 1
        );
    }
}

/// Run 1: one process touching 48 MiB.
fn one_process(session: &mut Session, dir: &Path) -> Run {
    let t1 = dir.join("t1");
    let r1 = run(session, &t1, &["touch", "48"], false);
    let rep1 = report(&r1);
    check_invariants(&rep1);
    assert_eq!(rep1.exit, Exit::Code(0), "run 1: exit");
    let truth1 = truth(&t1);
    assert_eq!(truth1.len(), 1, "run 1: one truth line: {truth1:?}");
    let want1 = vmhwm(&truth1[0]);
    assert!(want1 >= 48 * MIB, "run 1: VmHWM {want1} < 48 MiB");
    assert_eq!(
        rep1.processes.len(),
        1,
        "run 1: one process: {:?}",
        rep1.pids()
    );
    let p1 = find_process(&rep1, pid(&truth1[0]));
    assert_rss("run 1: process peak", p1.peak_rss_bytes, want1);
    assert_rss("run 1: tree peak", tree_peak(&r1, "run 1"), want1);
    r1
}

/// Run 2: a root that leaves a child holding 64 MiB, the run stopped at the root's exit.
/// The child holds until `gate` opens (or a hang guard's time). Returns the run and the
/// child's pid.
fn child_left_running(session: &mut Session, dir: &Path, gate: &Gate) -> (Run, i32) {
    let t2 = dir.join("t2");
    let gate_path = gate.path().to_str().expect("a UTF-8 temporary path");
    let hold_ms = spacetime_tests::hang_guard(Duration::from_secs(120)).as_millis();
    let r2 = run(
        session,
        &t2,
        &["leave-child", "64", &hold_ms.to_string(), gate_path],
        true,
    );
    let rep2 = report(&r2);
    assert_eq!(rep2.exit, Exit::Code(0), "run 2: exit");
    let truth2 = truth(&t2);
    let child = truth2
        .iter()
        .find(|t| t["role"] == "child")
        .unwrap_or_else(|| panic!("run 2: no child truth line: {truth2:?}"));
    let left = pid(child);
    assert_eq!(
        rep2.processes.len(),
        2,
        "run 2: root and child: {:?}",
        rep2.pids()
    );
    let c = find_process(&rep2, left);
    assert!(
        c.end_ns.is_none(),
        "run 2: child {left} still running at the end"
    );
    assert!(
        tree_peak(&r2, "run 2") >= 64 * MIB,
        "run 2: the tree peak counts the child's 64 MiB"
    );
    assert_eq!(r2.tree.live(), 1, "run 2: the child is live");
    (r2, left)
}

/// A process held by its pidfd: whether it still runs and a signal to it, whatever its pid
/// became.
struct Pidfd(std::os::fd::OwnedFd);

impl Pidfd {
    fn open(pid: i32) -> Pidfd {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(
            fd >= 0,
            "pidfd_open({pid}): {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a descriptor just returned to us and owned by nothing else.
        Pidfd(unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) })
    }

    /// A pidfd polls readable once its process has exited.
    fn alive(&self) -> bool {
        let mut p = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&self.0),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, alive for the call.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        assert!(n >= 0, "poll: {}", std::io::Error::last_os_error());
        n == 0
    }

    fn kill(&self) {
        // SAFETY: pidfd_send_signal on our descriptor, no siginfo.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                std::os::fd::AsRawFd::as_raw_fd(&self.0),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        assert!(
            r == 0,
            "pidfd_send_signal: {}",
            std::io::Error::last_os_error()
        );
    }
}
