//! spacetime inside a PID namespace (a container): the kernel programs key processes by the
//! initial namespace's pids, `fork()` and /proc give the namespace's. The report must hold the
//! whole tree, numbered as spacetime's namespace numbers it, with the root's status and exact
//! peaks. The truths are the workload's own getpid()/getppid() and VmHWM, read in its
//! namespace.

use std::process::Command;

use spacetime_tests::{
    assert_close_bytes, assert_rss, check_invariants, find_process, pss_rounds::held,
    spacetime_bin, Exit, Outcome, TempDir, Trace, MIB, PAGE,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");
/// A new PID namespace with its own /proc, spacetime as its pid 1.
const NEW_PIDNS: [&str; 4] = ["unshare", "--pid", "--fork", "--mount-proc"];

/// unshare(1) is on the CI host (util-linux) and in the 6.1 guest (busybox): its absence is a
/// broken test machine, not a reason to skip.
fn require_unshare() {
    let ok = Command::new("unshare")
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(ok, "unshare(1) is needed: install util-linux");
}

/// `sh -c` running a tree of 1 + 2 + 4 processes and a process touching 8 MiB, then exiting
/// with 2: nine processes in all, the shell included.
fn small_tree() -> [String; 3] {
    [
        "sh".into(),
        "-c".into(),
        format!("{WL} tree 2 2; {WL} touch 8; exit 2"),
    ]
}
const SMALL_TREE_PROCESSES: usize = 9;

/// Every workload process is in the report under its own getpid(), with its getppid() as
/// parent and its own VmHWM as peak; the shell is the root, with status 2.
fn check_small_tree(out: &Outcome) {
    out.assert_code(2);
    let report = out.report();
    check_invariants(&report);
    assert_eq!(
        report.processes.len(),
        SMALL_TREE_PROCESSES,
        "sh + 7 tree nodes + touch; pids {:?}\n{}",
        report.pids(),
        out.context()
    );
    assert_eq!(
        report.exit,
        Exit::Code(2),
        "the report's exit\n{}",
        out.context()
    );
    let root = report.root();
    assert_eq!(
        root.exit,
        Some(Exit::Code(2)),
        "root pid {}: exit",
        root.pid
    );
    // spacetime is the namespace's first process: pid 1 there.
    assert_eq!(
        root.ppid, 1,
        "root pid {}: started by spacetime, pid 1",
        root.pid
    );
    let truths: Vec<_> = out
        .truth_of("tree")
        .into_iter()
        .chain(out.truth_of("touch"))
        .collect();
    assert_eq!(truths.len(), 8, "truth lines: {truths:?}");
    for t in truths {
        let p = find_process(&report, t.pid());
        assert_eq!(p.ppid, t.ppid(), "pid {}: ppid as its getppid()", t.pid());
        assert_eq!(p.exit, Some(Exit::Code(0)), "pid {}: exit", t.pid());
        // Which process a figure belongs to is what this test proves; memory.rs holds the
        // 8-page exactness bound. Here a tree parent reaps its children after its last
        // reading, which on 6.1 inside two namespaces was seen to add 5 pages.
        assert_close_bytes(
            &format!("pid {} ({}) peak_rss_bytes", t.pid(), t.mode()),
            p.peak_rss_bytes,
            t.vmhwm_bytes(),
            8 * PAGE,
        );
        if t.mode() == "touch" {
            assert_eq!(p.ppid, root.pid, "touch pid {}: the shell forked it", p.pid);
            assert!(p.peak_rss_bytes >= 8 * MIB, "touch pid {}: peak", p.pid);
        }
        if t.mode() == "tree" {
            for child in t.ints("children") {
                let c = find_process(&report, child as i32);
                assert_eq!(c.ppid, t.pid(), "tree child {child}: ppid");
            }
        }
    }
    // A new namespace numbers from 1 up: every pid shown is one of its few.
    // (spacetime's own threads take pids there too: the programs are verified on several.)
    let small = SMALL_TREE_PROCESSES as i32 + 64;
    assert!(
        report.pids().iter().all(|&p| p > 1 && p <= small),
        "namespace pids are small: {:?}",
        report.pids()
    );
}

#[test]
fn tree_inside_a_pid_namespace() {
    require_unshare();
    let out = Trace::new(small_tree())
        .under(NEW_PIDNS)
        .tag("pidns-tree")
        .run();
    check_small_tree(&out);
}

/// spacetime two namespaces down: its level is 2, pids are still those of its own namespace.
#[test]
fn tree_inside_a_nested_pid_namespace() {
    require_unshare();
    let nested: Vec<&str> = NEW_PIDNS.iter().chain(NEW_PIDNS.iter()).copied().collect();
    let out = Trace::new(small_tree())
        .under(nested)
        .tag("pidns-nested")
        .run();
    check_small_tree(&out);
}

/// A traced process in a namespace below spacetime's is shown with the pid spacetime's
/// namespace gives it (the second number of its NSpid line), not its own pid 1.
#[test]
fn process_in_a_deeper_namespace_has_the_pid_spacetime_sees() {
    require_unshare();
    let out = Trace::new([
        "unshare",
        "--pid",
        "--fork",
        "sh",
        "-c",
        "exec grep NSpid: /proc/self/status",
    ])
    .under(NEW_PIDNS)
    .tag("pidns-deeper")
    .run();
    out.assert_code(0);
    // /proc is spacetime's namespace's: the line reads "NSpid: <spacetime's pid> 1".
    let stdout = out.stdout_str();
    let ns: Vec<i32> = stdout
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().expect("a pid"))
        .collect();
    assert_eq!(
        ns.len(),
        2,
        "two levels below /proc's namespace: {stdout:?}"
    );
    assert_eq!(ns[1], 1, "first process of the inner namespace: {stdout:?}");
    let report = out.report();
    check_invariants(&report);
    let p = find_process(&report, ns[0]);
    let last = p.images.last().expect("an image");
    assert_eq!(last.argv[0], "grep", "pid {}: {:?}", p.pid, p.images);
    assert_eq!(p.exit, Some(Exit::Code(0)), "pid {}: exit", p.pid);
}

/// PSS is sampled from the namespace's own /proc, by the namespace's pid: a process holding
/// 64 MiB of private pages has a PSS of about that, under its own pid in the timeline.
#[test]
fn pss_is_sampled_inside_a_pid_namespace() {
    require_unshare();
    // The sampler's interval stretches with a process's size and a slow machine (qemu TCG) may
    // catch it only while it is still touching its pages: the hold doubles until a round saw it.
    let out = held(1500, "pidns hold 64 MiB", |hold| {
        Trace::new([WL, "hold", "64", hold])
            .under(NEW_PIDNS)
            .tag("pidns-pss")
            .run()
    });
    out.assert_code(0);
    let truth = out.truth_one("hold");
    let v = out.json_value();
    let peak = v["totals"]["peak_rss_bytes"].as_u64().unwrap_or(0);
    assert_rss("holder peak_rss_bytes", peak, truth.vmhwm_bytes());
    let pss = v["totals"]["max_pss_bytes"].as_u64().unwrap_or(0);
    assert!(
        pss >= 62 * MIB && pss <= peak,
        "max PSS {pss} should be about 64 MiB and at most the RSS peak {peak}\n{}",
        out.context()
    );
    let series = v["timeline"]["processes"]
        .as_array()
        .expect("timeline.processes")
        .iter()
        .find(|p| p["pid"] == serde_json::json!(truth.pid()))
        .unwrap_or_else(|| panic!("no timeline for pid {}: {}", truth.pid(), v["timeline"]));
    assert!(
        !series["pss"].as_array().expect("pss").is_empty(),
        "pid {}: PSS points: {series}",
        truth.pid()
    );
}

/// `watch` inside a PID namespace with its own /proc: an exit there carries, as `ns_pid`, the
/// pid the process had in the namespace (its shell's `$$` before exec), and `pid` stays the
/// kernel's.
#[test]
fn watch_inside_a_pid_namespace_shows_namespace_pids() {
    require_unshare();
    let dir = TempDir::new("pidns-watch");
    let token = format!("pidns-watch-{}", std::process::id());
    // Waits poll files for a line (bounded): the shell has no other way to see them.
    let script = r#"
        "$ST" watch --json --comm st-workload > "$D/out" 2> "$D/err" &
        w=$!
        n=0
        until grep -q 'spacetime: watching ' "$D/err"; do
            kill -0 $w 2>/dev/null || exit 90
            n=$((n + 1)); [ $n -lt 6000 ] || exit 91
            sleep 0.01
        done
        sh -c 'echo $$ > "$D/pid"; exec "$WL" quiet-exit 3 "$TOKEN"'
        n=0
        until grep -q "$TOKEN" "$D/out"; do
            kill -0 $w 2>/dev/null || exit 92
            n=$((n + 1)); [ $n -lt 6000 ] || exit 93
            sleep 0.01
        done
        kill -INT $w
        wait $w
    "#;
    let out = Command::new(NEW_PIDNS[0])
        .args(&NEW_PIDNS[1..])
        .args(["sh", "-c", script])
        .env("ST", spacetime_bin())
        .env("WL", WL)
        .env("D", dir.path())
        .env("TOKEN", &token)
        .output()
        .expect("run unshare");
    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap_or_default();
    let context = format!("status {:?}\nwatch stderr:\n{}", out.status, read("err"));
    assert!(out.status.success(), "{context}");
    let ns_pid: u64 = read("pid").trim().parse().expect("the shell's pid");
    let exits: Vec<serde_json::Value> = read("out")
        .lines()
        .filter(|l| l.contains(&token))
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(exits.len(), 1, "one exit with {token}\n{context}");
    let x = &exits[0];
    assert_eq!(x["ns_pid"], serde_json::json!(ns_pid), "{x}");
    assert_ne!(
        x["pid"],
        serde_json::json!(ns_pid),
        "pid is the kernel's: {x}"
    );
    assert_eq!(x["exit"], serde_json::json!({"code": 3}), "{x}");
}

/// `--pid-tree` names a process by the namespace's pid, which the kernel numbers otherwise:
/// refused in one sentence rather than following a stranger.
#[test]
fn watch_pid_tree_inside_a_pid_namespace_is_refused() {
    require_unshare();
    let out = Command::new(NEW_PIDNS[0])
        .args(&NEW_PIDNS[1..])
        .arg(spacetime_bin())
        .args(["watch", "--pid-tree", "1", "--duration", "1s"])
        .output()
        .expect("run unshare");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{stderr}");
    assert!(
        stderr.contains("--pid-tree 1: ") && stderr.contains("PID namespace"),
        "{stderr}"
    );
}
