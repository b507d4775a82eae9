//! `spacetime watch`'s kernel-side filters, exec events and line identity, against the kernel:
//! another user's processes are not even sent when filtering by uid (the kernel's own counter
//! says so and their argv never shows), cgroup and `--pid-tree` filters count what the kernel
//! kept back, exec lines of a sleeping child come before it exits with its exact argv and the
//! exec id of its exit line, RFC 3339 times agree with the nanoseconds, and the argv budget
//! cuts what it must and says so.
//!
//! Each test marks its processes with a unique token in argv and looks only at those.

use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};
use spacetime_tests::watch::{argv_of, run, token, TempCgroup, Watch, WatchOutcome};
use spacetime_tests::{assert_world_executable, TempDir};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");
const SEEN: Duration = Duration::from_secs(30);

fn wl(args: &[&str]) -> Command {
    let mut c = Command::new(WL);
    c.args(args);
    c
}

/// `--summary-json`'s object.
fn summary(path: &std::path::Path, out: &WatchOutcome) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {}: {e}\n{}", path.display(), out.context()));
    serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("summary is not JSON: {e}: {text}\n{}", out.context()))
}

fn count(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in the summary {v}"))
}

/// Lines of `event` ("exec" or "exit") with `token` in argv.
fn lines(out: &WatchOutcome, event: &str, token: &str) -> Vec<Value> {
    out.exits_with(token)
        .into_iter()
        .filter(|v| v["event"] == json!(event))
        .collect()
}

/// A process of uid `nobody` (65534) running the workload.
fn as_nobody(args: &[&str]) -> Command {
    let mut c = wl(args);
    c.uid(65534).gid(65534);
    c
}

/// Runs `n` processes of root with a 64 KiB argument each, marked by `tag`.
fn root_processes_with_big_argv(n: usize, tag: &str) {
    let big = "x".repeat(64 << 10);
    for i in 0..n {
        run(&mut wl(&["quiet-exit", "0", &format!("{tag}-{i}"), &big]));
    }
}

#[test]
fn uid_filter_runs_in_the_kernel() {
    assert_world_executable(std::path::Path::new(WL));
    const N: usize = 20;
    let dir = TempDir::new("watch-kuid");
    let sum = dir.path().join("summary.json");
    let w = Watch::new()
        .flags(["--json", "--events", "exec,exit", "--uid", "65534"])
        .flag("--summary-json")
        .flag(&sum)
        .start();
    let neg = token("kuid-neg");
    root_processes_with_big_argv(N, &neg);
    let pos = token("kuid-pos");
    run(&mut as_nobody(&["quiet-exit", "3", &pos]));
    w.wait_for_stdout(&format!("\"{pos}\""), SEEN);
    w.wait_until("the exit line of the uid's process", SEEN, |s| {
        s.lines()
            .any(|l| l.contains(&pos) && l.contains("\"event\":\"exit\""))
    });
    let out = w.interrupt();
    out.assert_clean();
    assert!(
        !out.stdout.contains(&neg),
        "root's processes reached the output\n{}",
        out.context()
    );
    let exits = lines(&out, "exit", &pos);
    assert_eq!(exits.len(), 1, "{}", out.context());
    assert_eq!(exits[0]["uid"], json!(65534));
    assert_eq!(exits[0]["exit"], json!({"code": 3}));
    assert_eq!(lines(&out, "exec", &pos).len(), 1, "{}", out.context());
    // Each root process's fork and exec (with its 64 KiB argv) were withheld by the kernel;
    // its exit went as a bare marker, which is neither reported nor an unknown process.
    let s = summary(&sum, &out);
    let filtered = count(&s, "kernel_filtered");
    assert!(
        filtered >= 2 * N as u64,
        "the kernel withheld {filtered} records, want at least {} (fork and exec of {N} \
         processes)\n{s}",
        2 * N
    );
    assert!(
        out.stderr.contains("kernel filter: "),
        "no kernel filter line in the summary\n{}",
        out.context()
    );
    assert!(
        !out.stderr.contains("exits of unknown processes"),
        "filtered exits were taken for unknown processes\n{}",
        out.context()
    );
}

#[test]
fn cgroup_filter_runs_in_the_kernel() {
    let cg = TempCgroup::new(&format!("/{}/inner", token("kcg")));
    let parent = cg.rel.trim_end_matches("/inner").to_string();
    let dir = TempDir::new("watch-kcg");
    let sum = dir.path().join("summary.json");
    // The parent cgroup: a process in a cgroup below it passes.
    let w = Watch::new()
        .flags(["--json", "--cgroup", &parent, "--summary-json"])
        .flag(&sum)
        .start();
    let neg = token("kcg-neg");
    run(&mut wl(&["quiet-exit", "0", &neg]));
    let pos = token("kcg-pos");
    let mut c = wl(&["quiet-exit", "0", &pos]);
    cg.join(&mut c);
    run(&mut c);
    w.wait_for_stdout(&format!("\"{pos}\""), SEEN);
    let out = w.interrupt();
    out.assert_clean();
    assert!(!out.stdout.contains(&neg), "{}", out.context());
    let v = &lines(&out, "exit", &pos)[0];
    assert_eq!(v["cgroup"], json!(cg.rel), "{v}");
    assert!(
        !out.stderr.contains("filtered in userspace"),
        "a plain existing cgroup must be filtered in the kernel\n{}",
        out.context()
    );
    let s = summary(&sum, &out);
    assert!(count(&s, "kernel_filtered") >= 2, "{s}");
}

#[test]
fn pid_tree_counts_what_the_kernel_left_out() {
    let dir = TempDir::new("watch-ktree");
    let sum = dir.path().join("summary.json");
    let inside = token("ktree-in");
    let mut holder = Command::new("sh")
        .args(["-c", &format!("read x; {WL} quiet-exit 0 {inside}")])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn holder");
    let w = Watch::new()
        .flags(["--json", "--events", "exec,exit", "--summary-json"])
        .flag(&sum)
        .flags(["--pid-tree", &holder.id().to_string()])
        .start();
    let outside = token("ktree-out");
    run(&mut wl(&["quiet-exit", "0", &outside]));
    {
        use std::io::Write as _;
        let mut stdin = holder.stdin.take().expect("holder stdin");
        stdin.write_all(b"go\n").expect("release holder");
    }
    holder.wait().expect("wait holder");
    w.wait_until("the tree's exit line", SEEN, |s| {
        s.lines()
            .any(|l| l.contains(&inside) && l.contains("\"event\":\"exit\""))
    });
    let out = w.interrupt();
    out.assert_clean();
    assert!(!out.stdout.contains(&outside), "{}", out.context());
    assert_eq!(lines(&out, "exec", &inside).len(), 1, "{}", out.context());
    let s = summary(&sum, &out);
    assert!(count(&s, "kernel_filtered") >= 2, "{s}");
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Nanoseconds since the epoch of `2026-11-23T10:30:00.123456789Z`; panics on anything else.
fn parse_rfc3339(s: &str) -> i64 {
    let bad = || panic!("not RFC 3339 UTC with nanoseconds: {s:?}");
    let b = s.as_bytes();
    if b.len() != 30 || &s[4..5] != "-" || &s[10..11] != "T" || &s[19..20] != "." || &s[29..] != "Z"
    {
        bad();
    }
    let n = |r: std::ops::Range<usize>| s[r].parse::<i64>().unwrap_or_else(|_| bad());
    let days = days_from_civil(n(0..4), n(5..7), n(8..10));
    let secs = days * 86400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19);
    secs * 1_000_000_000 + n(20..29)
}

#[test]
fn exec_line_comes_at_start_and_shares_its_exit_lines_id() {
    let t = token("exec-sleeper");
    let w = Watch::new()
        .flags(["--json", "--events", "exec,exit"])
        .start();
    let mut child: Child = wl(&["sleep", "60000", &t, "two words", "é"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sleeper");
    w.wait_for_stdout(&format!("\"{t}\""), SEEN);
    // Seen while it sleeps: it has not exited (nobody reaped it, so the pid is still ours).
    assert!(
        child.try_wait().expect("try_wait").is_none(),
        "the sleeper ended before its exec line was seen"
    );
    child.kill().expect("kill sleeper");
    child.wait().expect("wait sleeper");
    w.wait_until("the sleeper's exit line", SEEN, |s| {
        s.lines()
            .any(|l| l.contains(&t) && l.contains("\"event\":\"exit\""))
    });
    let out = w.interrupt();
    out.assert_clean();
    let execs = lines(&out, "exec", &t);
    let exits = lines(&out, "exit", &t);
    assert_eq!((execs.len(), exits.len()), (1, 1), "{}", out.context());
    let (x, e) = (&execs[0], &exits[0]);
    let want = [WL, "sleep", "60000", t.as_str(), "two words", "é"];
    assert_eq!(argv_of(x), want, "exec line argv: {x}");
    assert_eq!(argv_of(e), want, "exit line argv: {e}");
    assert_eq!(x["argv_complete"], json!(true), "{x}");
    assert_eq!(x["pid"], json!(child.id()), "{x}");
    assert_eq!(x["ppid"], json!(std::process::id()), "{x}");
    assert_eq!(e["exit"], json!({"signal": 9}), "{e}");
    let id = x["exec_id"].as_str().expect("exec_id");
    assert_eq!(e["exec_id"], json!(id), "exec ids differ:\n{x}\n{e}");
    assert!(
        id.contains(&format!(":{}:", child.id())),
        "exec id {id} names no pid"
    );
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    assert_eq!(x["host"], json!(host.trim()), "{x}");
    assert_eq!(e["host"], json!(host.trim()), "{e}");
    // Times: RFC 3339 equals the nanoseconds, and the exec is within the process's life.
    let ns = |v: &Value, k: &str| v[k].as_i64().unwrap_or_else(|| panic!("no {k} in {v}"));
    let text = |v: &Value, k: &str| {
        v[k].as_str()
            .unwrap_or_else(|| panic!("no {k} in {v}"))
            .to_string()
    };
    assert_eq!(
        parse_rfc3339(&text(x, "time")),
        ns(x, "time_unix_ns"),
        "{x}"
    );
    assert_eq!(
        parse_rfc3339(&text(e, "start_time")),
        ns(e, "start_unix_ns"),
        "{e}"
    );
    assert_eq!(
        parse_rfc3339(&text(e, "end_time")),
        ns(e, "end_unix_ns"),
        "{e}"
    );
    let (start, exec, end) = (
        ns(e, "start_unix_ns"),
        ns(x, "time_unix_ns"),
        ns(e, "end_unix_ns"),
    );
    assert!(
        start <= exec && exec < end,
        "start {start}, exec {exec}, end {end}"
    );
    let now = spacetime_tests::unix_ns();
    assert!(
        (now - end).abs() < 120_000_000_000,
        "end {end} is not near now {now}"
    );
    // In the output, the exec line comes before the exit line.
    let at = |needle: &str| {
        out.stdout
            .lines()
            .position(|l| l.contains(&t) && l.contains(needle))
            .expect("line")
    };
    assert!(at("\"event\":\"exec\"") < at("\"event\":\"exit\""));
}

#[test]
fn table_rows_show_exec_events() {
    let t = token("exec-row");
    let w = Watch::new()
        .flags(["--events", "exec,exit", "--wide"])
        .start();
    run(&mut wl(&["quiet-exit", "5", &t]));
    w.wait_until("two rows of the process", SEEN, |s| {
        s.lines().filter(|l| l.contains(&t)).count() >= 2
    });
    let out = w.interrupt();
    out.assert_clean();
    let rows: Vec<&str> = out.stdout.lines().filter(|l| l.contains(&t)).collect();
    assert_eq!(rows.len(), 2, "{}", out.stdout);
    let cells = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    // TIME PID PPID UID EXIT …: the exec row says "exec" where the exit row has its code.
    assert_eq!(cells(rows[0])[4], "exec", "{}", rows[0]);
    assert_eq!(cells(rows[1])[4], "5", "{}", rows[1]);
}

#[test]
fn argv_budget_cuts_the_largest_and_counts() {
    const N: usize = 12;
    let dir = TempDir::new("watch-budget");
    let sum = dir.path().join("summary.json");
    let w = Watch::new()
        .flags(["--json", "--events", "exec,exit", "--argv-budget", "1M"])
        .flag("--summary-json")
        .flag(&sum)
        .start();
    let t = token("budget");
    // One argument holds at most 128 KiB (MAX_ARG_STRLEN): 200 KiB in two.
    let big = "y".repeat(100 << 10);
    // N processes alive together with 200 KiB of argv each: 2.4 MiB against a 1 MiB budget.
    let mut kids: Vec<Child> = (0..N)
        .map(|i| {
            wl(&["sleep", "60000", &format!("{t}-{i}"), &big, &big])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let lines_of = |s: &str, event: &str| {
        s.lines()
            .filter(|l| l.contains(&format!("{t}-")) && l.contains(event))
            .count()
    };
    w.wait_until("every exec line", SEEN, |s| {
        lines_of(s, "\"event\":\"exec\"") >= N
    });
    for k in &mut kids {
        k.kill().expect("kill");
        k.wait().expect("wait");
    }
    w.wait_until("every exit line", SEEN, |s| {
        lines_of(s, "\"event\":\"exit\"") >= N
    });
    let out = w.interrupt();
    out.assert_clean();
    let s = summary(&sum, &out);
    let evicted = count(&s, "argv_evicted");
    assert!(evicted >= 1, "nothing evicted under a 1 MiB budget\n{s}");
    let mut cut = 0;
    for i in 0..N {
        let tag = format!("{t}-{i}");
        let found = lines(&out, "exit", &tag);
        assert_eq!(found.len(), 1, "exit lines of {tag}\n{}", out.context());
        let v = &found[0];
        let argv = argv_of(v);
        if v["argv_complete"] == json!(false) {
            cut += 1;
            // What is kept is the start of the true argv.
            let joined = argv.join("\0");
            let truth = [WL, "sleep", "60000", &tag, &big, &big].join("\0");
            assert!(
                truth.starts_with(&joined) && joined.len() <= 256,
                "cut argv is not a prefix of at most 256 bytes: {joined:?}"
            );
        } else {
            assert_eq!(argv, [WL, "sleep", "60000", &tag, &big, &big]);
        }
    }
    assert!(cut >= 1, "no exit line shows a cut argv");
    assert!(
        out.stderr.contains("argv budget:"),
        "the summary does not show the evictions\n{}",
        out.context()
    );
}

#[test]
fn metrics_by_unit_count_the_units_exits() {
    use spacetime_tests::watch::http_get_accepting;
    let unit = format!("{}.service", token("unit"));
    let cg = TempCgroup::new(&format!("/{}/{unit}", token("slice")));
    let w = Watch::new()
        .flags([
            "--json",
            "--metrics",
            "127.0.0.1:0",
            "--metrics-label",
            "unit",
        ])
        .start();
    let addr = w.metrics_addr();
    let t = token("unit-exit");
    for code in [0, 0, 4] {
        let mut c = wl(&["quiet-exit", &code.to_string(), &t]);
        cg.join(&mut c);
        run(&mut c);
    }
    w.wait_until("the unit's three exits", SEEN, |s| {
        s.lines().filter(|l| l.contains(&t)).count() >= 3
    });
    let (code, _, text) = http_get_accepting(addr, "/metrics", "");
    assert_eq!(code, 200, "{text}");
    for (status, n) in [("ok", 2), ("failed", 1)] {
        let line =
            format!("spacetime_watch_unit_exits_total{{unit=\"{unit}\",status=\"{status}\"}} {n}");
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    // promtool's verdict on these families: tests/tests/prometheus.rs (a host tool).
    w.interrupt().assert_clean();
}
