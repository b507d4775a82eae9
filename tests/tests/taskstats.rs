//! The taskstats cross-check: every traced exit confirmed by the kernel's exit records, the
//! peaks of both sides agreeing, per-process figures against the workload's own truth.

use serde_json::Value;
use spacetime_tests::{find_process, Trace, MIB, PAGE};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn taskstats(v: &Value) -> &Value {
    v.get("taskstats")
        .unwrap_or_else(|| panic!("report has no \"taskstats\" object"))
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("taskstats.{key} is not an integer in {v}"))
}

/// 200 fork+execs (50 in the emulated guest, where each costs a hundred times more and the
/// kernel's records are the same): their exit records (1172 B each) fit the 8 MiB taskstats
/// buffer many times over, so none can be dropped however late the reader runs.
#[test]
fn every_exit_of_a_storm_is_confirmed() {
    let children = spacetime_tests::storm_size(200, 50);
    let out = Trace::new([WL, "storm", &children.to_string(), WL, "noop"])
        .tag("ts-storm")
        .run();
    out.assert_code(0);
    let report = out.report();
    let v = out.json_value();
    let t = taskstats(&v);
    assert_eq!(
        t.get("available"),
        Some(&Value::Bool(true)),
        "taskstats must be available here: {t}"
    );
    let n = report.processes.len() as u64;
    assert_eq!(n, children as u64 + 1, "storm root + {children} children");
    assert_eq!(u64_of(t, "matched"), n, "every exit confirmed: {t}");
    assert_eq!(u64_of(t, "bpf_only"), 0, "{t}");
    assert_eq!(u64_of(t, "taskstats_only"), 0, "{t}");
    assert_eq!(u64_of(t, "enobufs"), 0, "{t}");
    // Both sides computed the kernel's way read the same quantity at nearly the same moment.
    let diff = u64_of(t, "max_peak_diff_kib");
    assert!(
        diff * 1024 <= 2 * PAGE,
        "peaks differ from taskstats by {diff} KiB (> 2 pages): {t}"
    );
    let stderr = &out.stderr;
    assert!(
        stderr.contains(&format!(
            "coverage: {n}/{n} exits confirmed by taskstats, 0 lost"
        )),
        "summary must end with the coverage line:\n{stderr}"
    );
    // Every process carries its taskstats figures.
    for p in v["processes"].as_array().expect("processes") {
        let pid = p["pid"].as_u64().unwrap_or(0);
        let ts = &p["taskstats"];
        assert!(ts.is_object(), "pid {pid}: no taskstats figures: {p}");
        assert!(
            ts["minflt"].as_u64().unwrap_or(0) > 0,
            "pid {pid}: a process faults at least once: {ts}"
        );
        // A mean RSS on CPU wherever taskstats counted CPU time, else null and why.
        let cpu_us = u64_of(ts, "utime_us") + u64_of(ts, "stime_us");
        let mean = &p["mean_rss_on_cpu_bytes"];
        let why = p["mean_rss_on_cpu_unknown_reason"].as_str();
        match cpu_us {
            0 => assert!(
                mean.is_null() && why.is_some_and(|w| w.contains("no CPU time")),
                "pid {pid}: {p}"
            ),
            _ => assert!(mean.as_u64().is_some() && why.is_none(), "pid {pid}: {p}"),
        }
    }
}

#[test]
fn figures_agree_with_the_process_own_view() {
    let out = Trace::new([WL, "touch", "64"]).tag("ts-touch").run();
    out.assert_code(0);
    let report = out.report();
    let truth = out.truth_one("touch");
    let p = find_process(&report, truth.pid());
    let v = out.json_value();
    let proc_v = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|x| x["pid"].as_i64() == Some(p.pid as i64))
        .expect("the touching process");
    let ts = &proc_v["taskstats"];
    // Touching 64 MiB faults at least once per page.
    let minflt = ts["minflt"].as_u64().expect("minflt");
    assert!(
        minflt >= 64 * MIB / PAGE,
        "pid {}: minflt {minflt} < pages touched",
        p.pid
    );
    // taskstats hiwater_rss lags the exact figure by at most one per-CPU batch per counter.
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let ts_bytes = ts["hiwater_rss_kib"].as_u64().expect("hiwater_rss_kib") * 1024;
    let lag = (2 * 32 * cpus + 8) * PAGE;
    let want = truth.vmhwm_bytes();
    assert!(
        ts_bytes <= want + 2 * PAGE && ts_bytes + lag >= want,
        "pid {}: taskstats hiwater {ts_bytes} vs VmHWM {want} (allowed lag {lag})",
        p.pid
    );
    assert_eq!(
        ts["records"].as_u64(),
        Some(1),
        "pid {}: one thread, one record: {ts}",
        p.pid
    );
}

/// A process that holds 96 MiB (its own VmRSS) while it burns 1 s of CPU: its mean RSS on
/// CPU, per process, for its program, for the tree and under `%A`. The kernel adds RSS × CPU
/// time at each tick, so the figure lies between what the burn alone gives (96 MiB over the
/// burn's share of the process's CPU: the touch before it held less, at most all of it) and
/// the most it held; a slow (emulated) CPU only moves it within those bounds, as the touch
/// takes a larger share. 10 % of slack below for the ticks' granularity, 5 % above.
#[test]
fn mean_rss_on_cpu_is_what_the_process_held() {
    let out = Trace::new([WL, "hold-burn", "96", "1000"])
        .flag("-f")
        .flag("A=%A")
        .tag("ts-mean-rss")
        .run();
    out.assert_code(0);
    let truth = out.truth_one("hold-burn");
    let held = truth.int("held_kib") as u64 * 1024;
    assert!(
        held >= 96 * MIB && truth.int("end_kib") as u64 * 1024 >= 96 * MIB,
        "the workload held its 96 MiB through the burn: {held}"
    );
    let burn = truth.int("cpu_ns") as f64;
    assert!(burn >= 1e9, "it burned 1 s of CPU");
    let v = out.json_value();
    let p = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"].as_i64() == Some(i64::from(truth.pid())))
        .expect("the holder");
    // The process's whole CPU, as wait4 returned it (tests/tests/cpu.rs).
    let total = (p["user_ns"].as_i64().expect("user") + p["sys_ns"].as_i64().expect("sys")) as f64;
    let lo = held as f64 * (burn / total).min(1.0) * 0.90;
    let hi = held as f64 * 1.05;
    let within = |what: &str, got: Option<u64>| {
        let got = got.unwrap_or_else(|| {
            panic!(
                "{what}: no mean_rss_on_cpu_bytes; the process: {p}\ntaskstats: {}",
                taskstats(&v)
            )
        });
        println!(
            "{what}: {got} B; VmRSS {held} B, the burn {:.1} % of the CPU: {lo:.0}..{hi:.0}",
            100.0 * burn / total
        );
        assert!(
            lo <= got as f64 && got as f64 <= hi,
            "{what}: {got} B not in {lo:.0}..{hi:.0} (held {held} B)"
        );
    };
    within("process", p["mean_rss_on_cpu_bytes"].as_u64());
    within("tree", v["totals"]["mean_rss_on_cpu_bytes"].as_u64());
    let program = v["by_program"]
        .as_array()
        .expect("by_program")
        .iter()
        .find(|g| g["exe"].as_str() == Some(WL))
        .expect("st-workload's program");
    within("program", program["mean_rss_on_cpu_bytes"].as_u64());
    let kib = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("A="))
        .unwrap_or_else(|| panic!("no %A line:\n{}", out.stderr));
    within("%A", kib.parse::<u64>().ok().map(|k| k * 1024));
}

/// `diff` compares the mean RSS on CPU of two runs, the tree's and each program's: 32 MiB
/// held against 96 MiB held; the change it prints is the one the two reports' figures give.
#[test]
fn diff_compares_the_mean_rss_on_cpu() {
    let dir = spacetime_tests::TempDir::new("ts-mean-diff");
    let saved = |mib: &str| {
        let out = Trace::new([WL, "hold-burn", mib, "500"])
            .tag("ts-mean-diff")
            .run();
        out.assert_code(0);
        let figure = out.json_value()["totals"]["mean_rss_on_cpu_bytes"]
            .as_f64()
            .unwrap_or_else(|| panic!("{mib} MiB: no tree figure"));
        let path = dir.path().join(format!("{mib}.json"));
        std::fs::write(&path, out.json.as_deref().expect("JSON report")).expect("write");
        (path, figure)
    };
    let ((a, fa), (b, fb)) = (saved("32"), saved("96"));
    let out = std::process::Command::new(spacetime_tests::spacetime_bin())
        .arg("diff")
        .args([&a, &b])
        .output()
        .expect("spacetime diff");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let change = |line: &str| -> f64 {
        let pct = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix('+')?.strip_suffix('%')?.parse().ok());
        pct.unwrap_or_else(|| panic!("no change in {line:?}"))
    };
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("mean RSS on CPU"))
        .unwrap_or_else(|| panic!("no mean RSS on CPU row:\n{text}"));
    let want = 100.0 * (fb / fa - 1.0);
    let got = change(row);
    assert!(
        fb > fa && (got - want).abs() <= 0.051,
        "{got} % printed, the reports give {want:.2} %:\n{text}"
    );
    assert!(
        text.contains("mean RSS on CPU by program"),
        "each program's too:\n{text}"
    );
}

#[test]
fn threads_are_summed_into_their_process() {
    let out = Trace::new([WL, "threads", "8"]).tag("ts-threads").run();
    out.assert_code(0);
    let v = out.json_value();
    let root = &v["processes"][0];
    assert_eq!(root["threads"].as_u64(), Some(9));
    assert_eq!(
        root["taskstats"]["records"].as_u64(),
        Some(9),
        "one record per thread: {}",
        root["taskstats"]
    );
}

/// Before 5.14 there is no sysctl to switch, and delay accounting is on from boot.
#[test]
fn delayacct_is_switched_on_and_restored() {
    let before = spacetime_tests::sysctl::task_delayacct();
    let out = Trace::new([WL, "touch", "8"])
        .flag("--delayacct")
        .tag("ts-delayacct")
        .run();
    out.assert_code(0);
    let v = out.json_value();
    assert_eq!(
        taskstats(&v)["delayacct"],
        Value::Bool(true),
        "delay accounting was on during the trace"
    );
    let after = spacetime_tests::sysctl::task_delayacct();
    assert_eq!(before, after, "kernel.task_delayacct restored");
}

/// Outside the host's network namespace the kernel's exit records never arrive: the trace
/// still runs, and the report says why there is no cross-check.
#[test]
fn missing_taskstats_is_explained_not_fatal() {
    let dir = std::env::temp_dir().join(format!("spacetime-ts-netns-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let json = dir.join("report.json");
    let out = std::process::Command::new("unshare")
        .arg("--net")
        .arg(spacetime_tests::spacetime_bin())
        .args(["trace", "--json"])
        .arg(&json)
        .args(["--", WL, "exit", "3"])
        .output()
        .expect("run unshare --net spacetime");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "the trace still runs:\n{stderr}"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json).expect("report")).expect("JSON");
    let _ = std::fs::remove_dir_all(&dir);
    let t = taskstats(&v);
    assert_eq!(t["available"], Value::Bool(false), "{t}");
    let totals = &v["totals"];
    assert!(totals["mean_rss_on_cpu_bytes"].is_null(), "{totals}");
    assert_eq!(
        totals["mean_rss_on_cpu_unknown_reason"].as_str(),
        Some("taskstats unavailable"),
        "{totals}"
    );
    let reason = t["unavailable_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("network namespace"),
        "reason names the cause: {reason:?}"
    );
    assert!(
        stderr.contains("coverage: taskstats unavailable ("),
        "the coverage line says why:\n{stderr}"
    );
}

/// watch shares trace's checks: outside the host's network namespace (told by the namespace
/// itself when /proc/1 can be read, else by not one record arriving while processes exit) it
/// says why there is no cross-check instead of reporting one that heard nothing.
#[test]
fn watch_outside_the_host_network_namespace_says_why() {
    use std::io::{BufRead as _, BufReader, Read as _};
    let mut child = std::process::Command::new("unshare")
        .arg("--net")
        .arg(spacetime_tests::spacetime_bin())
        .args(["watch", "--count", "1", "--comm", "true"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run unshare --net spacetime watch");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut seen = String::new();
    // The watch names what it watches once its programs are attached.
    while !seen.contains("Ctrl-C to stop") {
        let mut line = String::new();
        let n = stderr
            .read_line(&mut line)
            .expect("read the watch's stderr");
        assert!(n > 0, "the watch ended before it started:\n{seen}");
        seen.push_str(&line);
    }
    let status = std::process::Command::new("true")
        .status()
        .expect("run true");
    assert!(status.success(), "true: {status}");
    let deadline =
        std::time::Instant::now() + spacetime_tests::hang_guard(std::time::Duration::from_secs(30));
    let code = loop {
        if let Some(s) = child.try_wait().expect("wait for the watch") {
            break s.code();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the watch did not stop at its first `true` exit:\n{seen}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    stderr.read_to_string(&mut seen).expect("read the rest");
    assert_eq!(code, Some(0), "the watch ran:\n{seen}");
    let line = seen
        .lines()
        .find(|l| l.trim_start().starts_with("taskstats:"))
        .unwrap_or_else(|| panic!("no taskstats line in the summary:\n{seen}"));
    assert!(
        line.contains("not checked (") && line.contains("network namespace"),
        "the summary says why there is no cross-check: {line:?}\n{seen}"
    );
}
