//! `spacetime watch`'s stops and outputs against the kernel: `--count` and `--duration`,
//! SIGTERM and SIGINT, the output file, the table's layout, namespace pids and the summary.
//!
//! A watch sees every exit on the machine, other tests' included: each test marks its own
//! processes with a unique token in argv and looks only at those.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use spacetime_tests::watch::{quiet_exit, release, run, token, Watch, WatchOutcome};
use spacetime_tests::{TempDir, MIB};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");
const SEEN: Duration = Duration::from_secs(30);

fn quiet(code: i32, what: &str) -> (String, Command) {
    quiet_exit(WL, code, what)
}

/// A holder shell that runs `n` quiet exits once released, for tests that need a watch to
/// see exactly known processes.
fn holder(n: usize, t: &str) -> std::process::Child {
    let script = format!("read x; for i in $(seq 1 {n}); do {WL} quiet-exit 0 {t}-$i; done; true");
    Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn holder")
}

#[test]
fn count_and_duration_stop_cleanly() {
    let t = token("count");
    let mut h = holder(5, &t);
    let w = Watch::new()
        .flags(["--json", "--count", "3", "--pid-tree"])
        .flag(h.id().to_string())
        .start();
    release(&mut h);
    let out = w.wait();
    out.assert_clean();
    assert_eq!(out.json_lines().len(), 3, "--count 3\n{}", out.context());

    let out = Watch::new()
        .flags(["--json", "--duration", "1s"])
        .start()
        .wait();
    out.assert_clean();
    out.json_lines();
}

#[test]
fn output_file_is_appended_and_sigterm_stops() {
    let dir = TempDir::new("watch-out");
    let file = dir.path().join("exits.jsonl");
    std::fs::write(&file, "earlier line\n").expect("write");
    let w = Watch::new().flag("--json").flag("-o").flag(&file).start();
    let (t, mut c) = quiet(0, "outfile");
    run(&mut c);
    let what = format!("{t} in {}", file.display());
    spacetime_tests::poll::wait_until(&what, SEEN, || {
        std::fs::read_to_string(&file)
            .unwrap_or_default()
            .contains(&t)
    });
    w.signal(libc::SIGTERM);
    let out = w.wait();
    out.assert_clean();
    assert!(
        out.stdout.is_empty(),
        "stdout must stay empty with -o: {}",
        out.stdout
    );
    let text = std::fs::read_to_string(&file).expect("read");
    assert!(
        text.starts_with("earlier line\n"),
        "not appended: {text:.200}"
    );
    for l in text.lines().skip(1) {
        serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
}

#[test]
fn table_output_is_aligned() {
    let w = Watch::new().start();
    let (t, mut c) = quiet(5, "table");
    let pid = run(&mut c);
    w.wait_for_stdout(&t, SEEN);
    let out = w.interrupt();
    out.assert_clean();
    let header = out.stdout.lines().next().expect("header");
    assert!(
        header.starts_with("TIME") && header.ends_with("COMMAND"),
        "{header}"
    );
    let line: Vec<char> = out
        .stdout
        .lines()
        .find(|l| l.contains(&t))
        .expect("our line")
        .chars()
        .collect();
    let text = |from: usize, to: usize| line[from..to.min(line.len())].iter().collect::<String>();
    let col = |name: &str| header.find(name).unwrap_or_else(|| panic!("no {name}"));
    let shown = || format!("{header}\n{}", text(0, line.len()));
    // Right-aligned numbers end where their header ends; text starts where its header starts.
    let pid_end = col("PID") + 3;
    assert_eq!(
        text(0, pid_end).split_whitespace().last(),
        Some(pid.to_string().as_str()),
        "{}",
        shown()
    );
    assert_eq!(text(col("EXIT"), col("EXIT") + 2), "5 ", "{}", shown());
    assert!(
        text(col("COMMAND"), line.len()).starts_with(WL),
        "{}",
        shown()
    );
}

#[test]
fn namespace_pid_is_shown_when_it_differs() {
    assert!(
        Command::new("unshare").arg("--help").output().is_ok(),
        "unshare(1) is needed: install util-linux"
    );
    let w = Watch::new().flag("--json").start();
    let (inside, host) = (token("ns-inside"), token("ns-host"));
    run(Command::new("unshare").args(["--pid", "--fork", WL, "quiet-exit", "0", &inside]));
    run(Command::new(WL).args(["quiet-exit", "0", &host]));
    w.wait_for_stdout(&format!("\"{host}\""), SEEN);
    let out = w.interrupt();
    out.assert_clean();
    let v = &out.exits_with(&inside)[0];
    // The first process of a new PID namespace is its pid 1.
    assert_eq!(v["ns_pid"], json!(1), "{v}");
    assert_ne!(v["pid"], json!(1), "{v}");
    let h = &out.exits_with(&host)[0];
    assert!(h.get("ns_pid").is_none(), "same namespace as the host: {h}");
}

/// The figure before "process exits" in the text summary ("watched 1.2 s: 52 process exits").
fn text_process_exits(out: &WatchOutcome) -> u64 {
    let line = out
        .stderr
        .lines()
        .find(|l| l.starts_with("spacetime: watched "))
        .unwrap_or_else(|| panic!("no summary line\n{}", out.context()));
    line.split(" process exit")
        .next()
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exit count in {line:?}"))
}

/// Reads `--summary-json`'s file and checks what holds for any watch: one object, the loss
/// breakdown adding up to nothing lost, the counts as the text summary says, spacetime's own
/// cost.
fn check_summary(out: &WatchOutcome, file: &std::path::Path, stopped_by: &str) -> Value {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| panic!("read {}: {e}\n{}", file.display(), out.context()));
    assert_eq!(text.lines().count(), 1, "one JSON line: {text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    let n = |path: &[&str]| -> u64 {
        let mut x = &v;
        for k in path {
            x = &x[k];
        }
        x.as_u64()
            .unwrap_or_else(|| panic!("{path:?} must be a non-negative integer: {v}"))
    };
    assert_eq!(v["stopped_by"], json!(stopped_by), "{v}");
    assert!(n(&["elapsed_ns"]) > 0, "{v}");
    assert_eq!(
        n(&["process_exits"]),
        text_process_exits(out),
        "process exits: JSON and text summary differ: {v}\n{}",
        out.context()
    );
    assert!(n(&["process_exits"]) >= n(&["reported"]), "{v}");
    n(&["thread_exits"]);
    assert_eq!(n(&["lost_events"]), 0, "{v}\n{}", out.context());
    for k in ["ringbuf_lost", "decode_errors", "read_failures"] {
        assert_eq!(n(&["loss", k]), 0, "loss.{k}: {v}");
    }
    n(&["loss", "enobufs"]);
    let ts = &v["taskstats"];
    match ts["available"].as_bool() {
        Some(true) => {
            for k in ["matched", "bpf_only", "taskstats_only"] {
                n(&["taskstats", k]);
            }
        }
        Some(false) => assert!(ts["unavailable_reason"].is_string(), "{v}"),
        None => panic!("taskstats.available must be a boolean: {v}"),
    }
    let cpu = n(&["spacetime", "user_ns"]) + n(&["spacetime", "sys_ns"]);
    assert!(cpu > 0, "spacetime's own CPU: {v}");
    let peak = n(&["spacetime", "peak_rss_bytes"]);
    assert!((MIB..=512 * MIB).contains(&peak), "own peak RSS: {v}");
    assert!(v["spacetime"]["bpf_stats_enabled"].is_boolean(), "{v}");
    let names: Vec<&str> = v["spacetime"]["kernel_programs"]
        .as_array()
        .unwrap_or_else(|| panic!("kernel_programs must be an array: {v}"))
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert!(names.contains(&"sched_process_exit"), "{names:?}");
    v
}

#[test]
fn summary_json_after_count_and_sigint() {
    let dir = TempDir::new("watch-summary");
    let file = dir.path().join("summary.json");

    let t = token("sumcount");
    let mut h = holder(5, &t);
    let w = Watch::new()
        .flags(["--json", "--count", "3", "--summary-json"])
        .flag(&file)
        .flag("--pid-tree")
        .flag(h.id().to_string())
        .start();
    release(&mut h);
    let out = w.wait();
    out.assert_clean();
    let v = check_summary(&out, &file, "count");
    assert_eq!(v["reported"], json!(3), "--count 3: {v}");
    assert_eq!(out.json_lines().len(), 3, "--count 3\n{}", out.context());

    let t = token("sumint");
    let mut h = holder(4, &t);
    let w = Watch::new()
        .flags(["--json", "--summary-json"])
        .flag(&file)
        .flag("--pid-tree")
        .flag(h.id().to_string())
        .start();
    release(&mut h);
    w.wait_for_stdout(&format!("\"{t}-4\""), SEEN);
    let out = w.interrupt();
    out.assert_clean();
    let v = check_summary(&out, &file, "SIGINT");
    let lines = out.json_lines();
    assert_eq!(
        v["reported"],
        json!(lines.len()),
        "reported vs JSON lines\n{}",
        out.context()
    );
    for i in 1..=4 {
        let n = out.exits_with(&format!("{t}-{i}")).len();
        assert_eq!(n, 1, "{t}-{i} reported {n} times\n{}", out.context());
    }
}
