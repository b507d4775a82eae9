//! `spacetime watch` against the kernel: every exit of a known burst, each filter, JSON lines,
//! ancestry, per-image peaks, thread exits and the OpenMetrics endpoint (stops, outputs and the
//! summary: watch_stops.rs).
//!
//! A watch sees every exit on the machine, other tests' included: each test marks its own
//! processes with a unique token in argv and looks only at those.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use spacetime_tests::watch::{
    argv_of, http_get, parse_openmetrics, quiet_exit, release, run, token, TempCgroup, Watch,
    WatchOutcome,
};
use spacetime_tests::{assert_world_executable, TempDir, MIB};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");
const SEEN: Duration = Duration::from_secs(30);

fn wl(args: &[&str]) -> Command {
    let mut c = Command::new(WL);
    c.args(args);
    c
}

fn pid_of(v: &Value) -> u32 {
    v["pid"].as_u64().unwrap_or_else(|| panic!("no pid in {v}")) as u32
}

/// Starts a watch with `flags`, runs `negatives` then `positives` (each with its token in
/// argv), stops it, and checks that exactly the positives were reported, once each.
fn check_filter(
    flags: &[&str],
    negatives: Vec<(String, Command)>,
    positives: Vec<(String, Command)>,
) -> WatchOutcome {
    let w = Watch::new().flag("--json").flags(flags).start();
    for (_, mut c) in negatives {
        run(&mut c);
    }
    let mut pos_tokens = Vec::new();
    for (t, mut c) in positives {
        run(&mut c);
        pos_tokens.push(t);
    }
    let last = pos_tokens.last().expect("a positive case");
    w.wait_for_stdout(&format!("\"{last}\""), SEEN);
    let out = w.interrupt();
    out.assert_clean();
    for t in &pos_tokens {
        let n = out.exits_with(t).len();
        assert_eq!(
            n,
            1,
            "{flags:?}: {t} reported {n} times, want once\n{}",
            out.context()
        );
    }
    out
}

fn assert_absent(out: &WatchOutcome, flags: &[&str], tokens: &[String]) {
    for t in tokens {
        let found = out.exits_with(t);
        assert!(
            found.is_empty(),
            "{flags:?}: {t} must be filtered out, got {found:?}\n{}",
            out.context()
        );
    }
}

/// Runs negatives and positives through `check_filter` and checks the negatives are absent.
fn filter_case(
    flags: &[&str],
    neg: Vec<(String, Command)>,
    pos: Vec<(String, Command)>,
) -> WatchOutcome {
    let neg_tokens: Vec<String> = neg.iter().map(|(t, _)| t.clone()).collect();
    let out = check_filter(flags, neg, pos);
    assert_absent(&out, flags, &neg_tokens);
    out
}

fn quiet(code: i32, what: &str) -> (String, Command) {
    quiet_exit(WL, code, what)
}

/// A burst of 1000 fork+exec+exits under a system-wide watch: each exit is reported once and
/// whole. The watch sees the whole machine, and the tests beside it (a 100 MiB watch, storms)
/// can fill its ring on a busy machine, so loss is allowed and must be counted: no more exits
/// of the burst missing than records the watch says it lost.
#[test]
fn watch_sees_every_exit_of_a_burst() {
    const N: usize = 1000;
    let w = Watch::new().flag("--json").start();
    let tag = token("burst");
    let dir = TempDir::new("watch-burst");
    let truth = dir.path().join("truth.jsonl");
    let burst_pid = run(wl(&["burst", &N.to_string(), &tag]).env("ST_TRUTH", &truth));
    // Every exit of the burst, its own last (it reaps its children first), or what a full
    // ring left of them: lost records are allowed here, and counted below, so the wait
    // itself never fails.
    let burst_line = format!("\"burst\",\"{N}\",\"{tag}\"");
    let child_token = format!("\"{tag}-");
    let _ = spacetime_tests::poll::poll(
        spacetime_tests::hang_guard(Duration::from_secs(60)),
        Duration::from_millis(20),
        || {
            let so_far = w.stdout_now();
            let children = so_far.lines().filter(|l| l.contains(&child_token)).count();
            (so_far.contains(&burst_line) && children >= N).then_some(())
        },
    );
    let out = w.interrupt();
    out.assert_clean();

    let text = std::fs::read_to_string(&truth).expect("burst truth line");
    let t: Value = serde_json::from_str(text.trim()).expect("truth is JSON");
    assert_eq!(t["failed"], json!(0), "burst children failed: {t}");
    let pids: Vec<u64> = t["pids"]
        .as_array()
        .expect("pids")
        .iter()
        .map(|p| p.as_u64().expect("pid"))
        .collect();
    assert_eq!(pids.len(), N);

    // Each row is told apart by its pid. A row whose fork or exec record was lost lacks its
    // parent or its new argv, name and program: partial, allowed only as loss.
    let index_of: BTreeMap<u64, usize> = pids.iter().enumerate().map(|(i, &p)| (p, i)).collect();
    let mut by_index: BTreeMap<usize, Value> = BTreeMap::new();
    let mut partial = Vec::new();
    let mut burst_seen = false;
    for v in out.exits_containing(&tag) {
        let pid = u64::from(pid_of(&v));
        if pid == u64::from(burst_pid) {
            assert_eq!(
                v["exit"],
                json!({"code": 0}),
                "the burst process itself: {v}"
            );
            burst_seen = true;
            continue;
        }
        let i = *index_of
            .get(&pid)
            .unwrap_or_else(|| panic!("an exit of no process of the burst: {v}"));
        assert_eq!(v["exit"], json!({"code": i % 256}), "child {i}: exit: {v}");
        assert!(
            v["peak_rss_bytes"].as_u64().unwrap_or(0) > 0,
            "child {i}: peak: {v}"
        );
        assert!(v["runtime_ns"].as_u64().unwrap_or(0) > 0, "child {i}: {v}");
        let code = (i % 256).to_string();
        // exec names a process after the file it ran: /proc/self/exe.
        let whole = argv_of(&v) == [WL, "quiet-exit", code.as_str(), &format!("{tag}-{i}")]
            && v["ppid"] == json!(burst_pid)
            && v["comm"] == json!("exe")
            && v["exe"] == json!("/proc/self/exe");
        if !whole {
            partial.push(i);
        }
        assert!(
            by_index.insert(i, v).is_none(),
            "child {i} reported twice\n{}",
            out.context()
        );
    }
    let missing: Vec<usize> = (0..N).filter(|i| !by_index.contains_key(i)).collect();
    let lost = out.summary_count("ring buffer full");
    let short = missing.len() + partial.len() + usize::from(!burst_seen);
    assert!(
        short as u64 <= lost,
        "{} of {N} children's exits missing (first: {:?}), {} partial (first: {}), the \
         burst's own seen: {burst_seen}; {lost} records said lost\n{}",
        missing.len(),
        &missing[..missing.len().min(10)],
        partial.len(),
        partial
            .first()
            .map_or(String::new(), |&i| by_index[&i].to_string()),
        out.context()
    );
    assert_eq!(out.summary_count("undecodable"), 0, "{}", out.context());
}

#[test]
fn filter_comm() {
    let t = token("comm-neg");
    let mut neg = Command::new("sh");
    neg.args(["-c", "exit 0", &t]);
    filter_case(
        &["--comm", "st-work*"],
        vec![(t, neg)],
        vec![quiet(0, "comm-pos")],
    );
}

#[test]
fn filter_exe() {
    let t = token("exe-neg");
    let mut neg = Command::new("sh");
    neg.args(["-c", "exit 0", &t]);
    filter_case(
        &["--exe", "st-workload", "--exe", "/no/such/*"],
        vec![(t, neg)],
        vec![quiet(0, "exe-pos")],
    );
}

#[test]
fn filter_uid() {
    assert_world_executable(std::path::Path::new(WL));
    let (t, mut c) = quiet(0, "uid-pos");
    c.uid(65534).gid(65534);
    let out = filter_case(
        &["--uid", "65534"],
        vec![quiet(0, "uid-neg")],
        vec![(t.clone(), c)],
    );
    let v = &out.exits_with(&t)[0];
    assert_eq!(v["uid"], json!(65534), "{v}");
}

#[test]
fn filter_cgroup() {
    let cg = TempCgroup::new(&format!("/{}", token("cg")));
    let (t, mut c) = quiet(0, "cg-pos");
    cg.join(&mut c);
    let out = filter_case(
        &["--cgroup", &cg.rel],
        vec![quiet(0, "cg-neg")],
        vec![(t.clone(), c)],
    );
    let v = &out.exits_with(&t)[0];
    assert_eq!(v["cgroup"], json!(cg.rel), "{v}");
}

#[test]
fn filter_min_rss() {
    let t = token("rss-pos");
    let pos = wl(&["touch", "64", &t]);
    let out = filter_case(
        &["--min-rss", "32M"],
        vec![quiet(0, "rss-neg")],
        vec![(t.clone(), pos)],
    );
    let v = &out.exits_with(&t)[0];
    let peak = v["peak_rss_bytes"].as_u64().expect("peak");
    assert!(peak >= 64 * MIB, "peak {peak} < 64 MiB: {v}");
}

/// `--min-runtime`: a process is shown exactly when its runtime reaches the threshold. A
/// quick process usually stays below it, but a slow machine may stretch it past: an
/// unfiltered watch beside the filtered one says each process's runtime, and the filter is
/// judged against that, so the rule is checked at any speed. The positive one sleeps past the
/// threshold, so it is shown on every machine.
#[test]
fn filter_min_runtime() {
    const FLAGS: [&str; 2] = ["--min-runtime", "200ms"];
    let all = Watch::new().flag("--json").start();
    let filtered = Watch::new().flag("--json").flags(FLAGS).start();
    let (neg, mut quick) = quiet(0, "rt-neg");
    let pos = token("rt-pos");
    run(&mut quick);
    run(&mut wl(&["sleep", "400", &pos]));
    for w in [&all, &filtered] {
        w.wait_for_stdout(&format!("\"{pos}\""), SEEN);
    }
    all.wait_for_stdout(&format!("\"{neg}\""), SEEN);
    let (all, filtered) = (all.interrupt(), filtered.interrupt());
    all.assert_clean();
    filtered.assert_clean();
    for t in [&neg, &pos] {
        let truth = all.exits_with(t);
        assert_eq!(
            truth.len(),
            1,
            "{t} once in the unfiltered watch\n{}",
            all.context()
        );
        let rt = truth[0]["runtime_ns"].as_u64().expect("runtime");
        let shown = filtered.exits_with(t).len();
        assert_eq!(
            shown,
            usize::from(rt >= 200_000_000),
            "{FLAGS:?}: {t} of runtime {rt} ns shown {shown} times\n{}",
            filtered.context()
        );
        if t == &pos {
            assert!(rt >= 400_000_000, "runtime {rt}: {}", truth[0]);
        }
    }
}

#[test]
fn filter_failed() {
    let t = token("kill-pos");
    let killed = wl(&["kill", "9", &t]);
    let (t7, c7) = quiet(7, "fail-pos");
    let out = filter_case(
        &["--failed"],
        vec![quiet(0, "fail-neg")],
        vec![(t.clone(), killed), (t7.clone(), c7)],
    );
    assert_eq!(out.exits_with(&t)[0]["exit"], json!({"signal": 9}));
    assert_eq!(out.exits_with(&t7)[0]["exit"], json!({"code": 7}));
}

#[test]
fn filter_pid_tree() {
    let child = token("tree-child");
    let grandchild = token("tree-grandchild");
    let script = format!(
        "read x; {WL} quiet-exit 0 {child}; sh -c '{WL} quiet-exit 0 {grandchild}; true'; true"
    );
    let mut holder = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn holder");
    let flags = ["--pid-tree".to_string(), holder.id().to_string()];
    let w = Watch::new().flag("--json").flags(&flags).start();
    let (neg, mut c) = quiet(0, "tree-neg");
    run(&mut c);
    release(&mut holder);
    w.wait_for_stdout(&format!("\"{grandchild}\""), SEEN);
    let out = w.interrupt();
    out.assert_clean();
    assert_eq!(out.exits_with(&child).len(), 1, "{}", out.context());
    assert_eq!(out.exits_with(&grandchild).len(), 1, "{}", out.context());
    assert_absent(&out, &["--pid-tree"], &[neg]);
    // The holder itself is in its tree.
    assert!(
        out.json_lines().iter().any(|v| pid_of(v) == holder.id()),
        "the --pid-tree process's own exit is missing\n{}",
        out.context()
    );
}

#[test]
fn threads_only_with_the_flag() {
    for with in [false, true] {
        let t = token("threads");
        let w = if with {
            Watch::new().flags(["--json", "--threads"]).start()
        } else {
            Watch::new().flag("--json").start()
        };
        let pid = run(&mut wl(&["threads", "3", &t]));
        if with {
            // A thread that is not the last can reach the exit tracepoint after the last one
            // ended the group: wait for all three thread lines, not the first line.
            w.wait_until("three thread exits", SEEN, |out| {
                out.lines()
                    .filter(|l| l.contains(&t) && l.contains("\"thread\":true"))
                    .count()
                    >= 3
            });
        } else {
            w.wait_for_stdout(&t, SEEN);
        }
        let out = w.interrupt();
        out.assert_clean();
        let mine: Vec<Value> = out.exits_with(&t);
        let threads: Vec<&Value> = mine.iter().filter(|v| v["thread"] == json!(true)).collect();
        let procs: Vec<&Value> = mine.iter().filter(|v| v.get("thread").is_none()).collect();
        assert_eq!(
            procs.len(),
            1,
            "with={with}: one process exit\n{}",
            out.context()
        );
        assert_eq!(procs[0]["threads"], json!(4), "1 + 3 threads: {}", procs[0]);
        if with {
            assert!(threads.len() >= 3, "with --threads: {threads:?}");
            for th in &threads {
                assert_eq!(pid_of(th), pid, "{th}");
                assert_ne!(th["tid"], json!(pid), "{th}");
            }
        } else {
            assert!(threads.is_empty(), "without --threads: {threads:?}");
        }
    }
}

#[test]
fn ancestry_survives_exited_parents() {
    let w = Watch::new().flags(["--json", "--ancestry"]).start();
    let t = token("anc");
    let script = format!("{WL} quiet-exit 0 {t}; true");
    let sh = run(Command::new("sh").args(["-c", &script]));
    let o = token("orphan");
    let root = run(&mut wl(&["orphan", "300", &o]));
    let me = std::process::id();
    // Root, child and the grandchild that ends 300 ms after them.
    w.wait_until("the orphan's three exits", SEEN, |s| {
        s.lines().filter(|l| l.contains(o.as_str())).count() >= 3
    });
    let out = w.interrupt();
    out.assert_clean();

    let v = &out.exits_with(&t)[0];
    let chain: Vec<(u64, bool)> = v["ancestry"]
        .as_array()
        .unwrap_or_else(|| panic!("no ancestry: {v}"))
        .iter()
        .map(|a| (a["pid"].as_u64().expect("pid"), a["exited"] == json!(true)))
        .collect();
    assert_eq!(chain[0], (u64::from(sh), false), "parent is the shell: {v}");
    assert_eq!(chain[1], (u64::from(me), false), "then the test: {v}");

    // orphan: root forks child, child forks grandchild and exits; root exits; grandchild
    // ends 300 ms later: its chain goes through both, exited.
    let lines = out.exits_with(&o);
    assert_eq!(lines.len(), 3, "{}", out.context());
    let child = lines
        .iter()
        .find(|l| l["ppid"] == json!(root))
        .expect("the orphan's child");
    let grand = lines
        .iter()
        .find(|l| l["ppid"] == child["pid"])
        .unwrap_or_else(|| panic!("grandchild missing: {lines:?}"));
    let anc = grand["ancestry"].as_array().expect("ancestry");
    assert_eq!(anc[0]["pid"], child["pid"], "{grand}");
    assert_eq!(anc[0]["exited"], json!(true), "{grand}");
    assert_eq!(anc[1]["pid"], json!(root), "{grand}");
    assert_eq!(anc[1]["exited"], json!(true), "{grand}");
    assert_eq!(anc[2]["pid"], json!(me), "{grand}");
}

#[test]
fn images_have_their_own_peaks() {
    let w = Watch::new().flags(["--json", "--images"]).start();
    let t = token("img");
    run(&mut wl(&["grow-exec", "48", WL, "quiet-exit", "0", &t]));
    w.wait_for_stdout(&t, SEEN);
    let out = w.interrupt();
    out.assert_clean();
    let v = &out.exits_with(&t)[0];
    let all = v["images"]
        .as_array()
        .unwrap_or_else(|| panic!("no images: {v}"));
    // The first image, inherited from the test harness, ran on its address space until the
    // exec (posix_spawn): it counts 0 bytes.
    assert_eq!(all[0]["shared_mm"], json!(true), "{v}");
    assert_eq!(all[0]["peak_rss_bytes"], json!(0), "{v}");
    let images = &all[1..];
    assert_eq!(images.len(), 2, "{v}");
    let first = images[0]["peak_rss_bytes"].as_u64().expect("first peak");
    let last = images[1]["peak_rss_bytes"].as_u64().expect("last peak");
    assert!(first >= 48 * MIB, "grow-exec image peak {first}: {v}");
    assert!(last < 16 * MIB, "quiet-exit image peak {last}: {v}");
    assert_eq!(argv_of(&images[1]), argv_of(v), "{v}");
    assert_eq!(
        v["peak_rss_bytes"].as_u64(),
        Some(first),
        "process peak: {v}"
    );
}

#[test]
fn metrics_endpoint_serves_openmetrics() {
    let w = Watch::new()
        .flags(["--json", "--metrics", "127.0.0.1:0"])
        .start();
    let addr = w.metrics_addr();
    assert!(addr.ip().is_loopback(), "{addr}");
    let (ok, mut c0) = quiet(0, "m-ok");
    let (failed, mut c3) = quiet(3, "m-failed");
    let killed = token("m-killed");
    run(&mut c0);
    run(&mut c3);
    run(&mut wl(&["kill", "15", &killed]));
    for t in [&ok, &failed, &killed] {
        w.wait_for_stdout(t, SEEN);
    }
    let (code, headers, body) = http_get(addr, "/metrics");
    assert_eq!(code, 200, "{body}");
    assert!(
        headers
            .get("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text")),
        "{headers:?}"
    );
    let families = parse_openmetrics(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let fam = |name: &str| {
        families
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no family {name}\n{body}"))
    };
    let exits = fam("spacetime_watch_exits");
    assert_eq!(exits.ty, "counter");
    for status in ["ok", "failed", "signaled"] {
        let n = exits
            .value(
                "spacetime_watch_exits_total",
                &[("comm", "st-workload"), ("status", status)],
            )
            .unwrap_or(0.0);
        assert!(n >= 1.0, "st-workload {status}: {n}\n{body}");
    }
    let rt = fam("spacetime_watch_runtime_seconds");
    assert_eq!(
        (rt.ty.as_str(), rt.unit.as_deref()),
        ("histogram", Some("seconds"))
    );
    assert!(
        rt.value("spacetime_watch_runtime_seconds_count", &[])
            .unwrap_or(0.0)
            >= 3.0
    );
    assert_eq!(fam("spacetime_watch_peak_rss_bytes").ty, "histogram");
    let lost = fam("spacetime_watch_lost_events");
    assert_eq!(
        lost.value(
            "spacetime_watch_lost_events_total",
            &[("source", "ring_buffer")]
        ),
        Some(0.0),
        "{body}"
    );
    fam("spacetime_watch_taskstats_coverage");
    let (code, _, _) = http_get(addr, "/nope");
    assert_eq!(code, 404);
    w.interrupt().assert_clean();
}
