//! CPU time against its truth: what `wait4` returned to the parent that reaped each process.
//!
//! wait4's rusage has microsecond fields, the kernel's nanoseconds truncated
//! (`ns_to_kernel_old_timeval`); spacetime's nanoseconds truncated the same way must match.
//! One difference is possible: if a child's final schedule folds its last slice in after its
//! parent's wait read the runtime (the parent reaps on another CPU while the child is still
//! leaving), the kernel's own figure grows by that slice, microseconds, after wait4 returned.

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use spacetime_tests::cputime::{assert_not_final_counted, assert_wait4};
use spacetime_tests::watch::{token, Watch};
use spacetime_tests::{TempDir, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// The report's one process with `pid` (the workload's children live at once with no other
/// process of the tree, so a pid names one process).
fn process(report: &Value, pid: i64) -> &Value {
    let found: Vec<&Value> = report["processes"]
        .as_array()
        .expect("processes array")
        .iter()
        .filter(|p| p["pid"].as_i64() == Some(pid))
        .collect();
    match found[..] {
        [p] => p,
        [] => panic!("pid {pid} missing from the report"),
        _ => panic!(
            "pid {pid} is {} processes in the report: {found:?}",
            found.len()
        ),
    }
}

#[test]
fn each_process_cpu_is_what_wait4_returned() {
    // Very short children (0: exit at once; one tick is 1-10 ms) and longer ones, with user
    // and system ticks.
    let spins = [
        "0", "0", "0", "100", "700", "3000", "0", "15000", "40000", "0",
    ];
    let mut argv = vec![WL, "rusage"];
    argv.extend(spins);
    let out = Trace::new(argv).tag("cpu-rusage").run();
    out.assert_code(0);
    let report = out.json_value();
    let t = out.truth_one("rusage");
    let (pids, user, sys) = (t.ints("pids"), t.ints("user_us"), t.ints("sys_us"));
    let reaped = t.ints("reaped_ns");
    assert_eq!(pids.len(), spins.len(), "children");
    for (i, &pid) in pids.iter().enumerate() {
        let p = process(&report, pid);
        assert_wait4(
            &format!("pid {pid} ({} µs burnt; {p})", spins[i]),
            p,
            (user[i], sys[i]),
            reaped[i],
        );
    }
    assert_not_final_counted(&report);
    // The truth is not vacuous: the 40 ms spinner ran for at least a tick of any clock. A
    // child that exits at once may have 0 from wait4 itself: where the kernel found no usable
    // TSC at boot (an emulated CPU under load), its scheduler clock counts in jiffies, and
    // spacetime's figure is then wait4's 0, checked above.
    assert!(
        user.iter().zip(&sys).map(|(u, s)| u + s).sum::<i64>() >= 40_000 / 2,
        "wait4's CPU of the children: user {user:?} sys {sys:?}"
    );
    // The totals are the processes' sum.
    let sum: i64 = report["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .map(|p| p["user_ns"].as_i64().unwrap_or(0) + p["sys_ns"].as_i64().unwrap_or(0))
        .sum();
    let total = report["user_ns"].as_i64().unwrap_or(-1) + report["sys_ns"].as_i64().unwrap_or(-1);
    assert_eq!(total, sum, "report user_ns + sys_ns = sum over processes");
}

#[test]
fn threaded_exits_cpu_is_what_wait4_returned() {
    // The process's figures are final at the last of its tasks' final switches: the leader's
    // (exit_group, joined threads), or a thread's that outlived the leader (leader-first).
    let shapes = ["group", "leader-first", "joined"];
    let out = Trace::new([WL, "rusage-threads", "3000"])
        .tag("cpu-threads")
        .run();
    out.assert_code(0);
    let report = out.json_value();
    let t = out.truth_one("rusage-threads");
    let (pids, user, sys) = (t.ints("pids"), t.ints("user_us"), t.ints("sys_us"));
    let reaped = t.ints("reaped_ns");
    assert_eq!(pids.len(), shapes.len(), "children");
    for (i, &pid) in pids.iter().enumerate() {
        let p = process(&report, pid);
        assert_wait4(
            &format!("{} (pid {pid}): {p}", shapes[i]),
            p,
            (user[i], sys[i]),
            reaped[i],
        );
    }
    assert_not_final_counted(&report);
}

/// A process of one thread runs no longer than it lives: its CPU time (what wait4 returned,
/// its exit's teardown included) fits between its fork and its end, the moment its task left
/// the CPU for good (it read as the exit, before the teardown: a forked child showed up to
/// 1.3 times its life). Pinned to one CPU, a parent cannot reap its child while the child is
/// still switching out, so the final figures go at that switch every time. The two clocks
/// differ by what the kernel allows: CLOCK_MONOTONIC slewed by at most 500 ppm against the
/// scheduler's, and in the emulated guest a scheduler clock that may count in ticks.
#[test]
fn a_process_of_one_thread_never_runs_longer_than_it_lives() {
    let cpu = allowed_cpu();
    let spins = ["0", "0", "300", "0", "3000", "0", "0", "1000"];
    let mut argv = vec![WL, "rusage"];
    argv.extend(spins);
    let out = Trace::new(argv)
        .under(["taskset", "-c", &cpu.to_string()])
        .tag("cpu-life")
        .run();
    out.assert_code(0);
    let report = out.json_value();
    let t = out.truth_one("rusage");
    let pids = t.ints("pids");
    assert_eq!(pids.len(), spins.len(), "children");
    let tick_ns = if spacetime_tests::emulated() {
        10_000_000
    } else {
        0
    };
    for (i, &pid) in pids.iter().enumerate() {
        let p = process(&report, pid);
        assert_eq!(
            (p["cpu_final"].as_bool(), p["threads"].as_u64()),
            (Some(true), Some(1)),
            "pid {pid}: one thread, its final figures at its last switch: {p}"
        );
        let int = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("no {k} in {p}"));
        let life = int("end_ns") - int("start_ns");
        let ran = int("user_ns") + int("sys_ns");
        assert!(
            ran <= life + life / 2000 + tick_ns,
            "pid {pid} ({} µs burnt): {ran} ns of CPU in a life of {life} ns: {p}",
            spins[i]
        );
    }
}

/// The first CPU this test may run on.
fn allowed_cpu() -> usize {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is ours and as large as said.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    assert_eq!(
        r,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: reads bits of the set filled above.
    (0..libc::CPU_SETSIZE as usize)
        .find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .expect("a CPU allowed")
}

#[test]
fn a_loop_of_short_processes_sums_to_wait4() {
    // What time(1) does: fork+exec a shell running the loop, wait4 it. The rusage covers the
    // shell and the children it reaped (500; 100 in the emulated guest, where each costs a
    // hundred times more); spacetime's sum over the same processes must be within 10 % (it
    // was 0.24x when CPU was read in the exit path).
    let children = spacetime_tests::storm_size(500, 100);
    let script = format!("i=0; while [ $i -lt {children} ]; do /bin/true; i=$((i+1)); done");
    let out = Trace::new([WL, "rusage-of", "/bin/sh", "-c", &script])
        .tag("cpu-500")
        .timeout(Duration::from_secs(240))
        .run();
    out.assert_code(0);
    let report = out.json_value();
    let t = out.truth_one("rusage-of");
    let want_us = t.int("user_us") + t.int("sys_us");
    let root = t.pid() as i64;
    let procs = report["processes"].as_array().expect("processes");
    let others: Vec<&Value> = procs
        .iter()
        .filter(|p| p["pid"].as_i64() != Some(root))
        .collect();
    assert_eq!(
        others.len(),
        children + 1,
        "the shell and its {children} children"
    );
    let not_final: Vec<&&Value> = others
        .iter()
        .filter(|p| p["cpu_final"] != Value::Bool(true))
        .collect();
    // Every process here was reaped, so every one should have its free record. Known
    // defect: while another spacetime instance attaches its programs at the same moment, a
    // few consecutive free records were seen missing (10 of 500, twice in a full suite run;
    // never alone). Such processes keep their exit-time figures and are counted, never
    // silent: the report must say how many, and they must stay few.
    let counted = report["totals"]["cpu_not_final"].as_u64();
    assert_eq!(
        counted,
        Some(not_final.len() as u64),
        "totals.cpu_not_final counts the processes with cpu_final false"
    );
    assert!(
        not_final.len() <= others.len() / 20,
        "every process was reaped: its CPU must be final; {} are not: pids {:?}; lost_events {}, \
         kernel {}",
        not_final.len(),
        not_final
            .iter()
            .map(|p| p["pid"].clone())
            .collect::<Vec<_>>(),
        report["lost_events"],
        report["kernel"]
    );
    if !not_final.is_empty() {
        eprintln!(
            "cpu_final false for {} of {}",
            not_final.len(),
            others.len()
        );
    }
    let got_us: i64 = others
        .iter()
        .map(|p| (p["user_ns"].as_i64().unwrap_or(0) + p["sys_ns"].as_i64().unwrap_or(0)) / 1000)
        .sum();
    let ratio = got_us as f64 / want_us as f64;
    assert!(
        (0.9..=1.1).contains(&ratio),
        "spacetime's sum {got_us} µs vs wait4's {want_us} µs (ratio {ratio:.3})"
    );
}

#[test]
fn watch_reports_short_exits_with_wait4_cpu() {
    let spins = ["0", "0", "0", "0", "0", "200", "0", "0"];
    watch_matches_wait4("rusage", &spins);
}

/// Processes of threads, each shape of their end (the leader last with its group, the leader
/// first, the threads joined): each release record comes once and in time, whether its
/// process needed an entry to claim it or not.
#[test]
fn watch_reports_threaded_exits_with_wait4_cpu() {
    watch_matches_wait4("rusage-threads", &["3000"]);
}

/// Runs `st-workload KIND ARGS… TOKEN` beside a watch: every child it reaped has its row,
/// with the CPU time its wait4 returned (final, not the exit-time figure).
fn watch_matches_wait4(kind: &str, args: &[&str]) {
    let tok = token("cpu");
    let dir = TempDir::new("cpu-watch");
    let truth = dir.path().join("truth.jsonl");
    let w = Watch::new().flag("--json").start();
    let status = Command::new(WL)
        .arg(kind)
        .args(args)
        .arg(&tok)
        .env("ST_TRUTH", &truth)
        .status()
        .expect("run st-workload");
    assert!(status.success(), "st-workload {kind}: {status}");
    let text = std::fs::read_to_string(&truth).expect("truth file");
    let t: Value =
        serde_json::from_str(text.lines().next().expect("a truth line")).expect("truth JSON");
    let ints = |k: &str| -> Vec<i64> {
        t[k].as_array()
            .unwrap_or_else(|| panic!("truth has no {k}: {t}"))
            .iter()
            .map(|v| v.as_i64().expect("integer"))
            .collect()
    };
    let (pids, user, sys) = (ints("pids"), ints("user_us"), ints("sys_us"));
    let reaped = ints("reaped_ns");
    // Each row waits for its process's final CPU figures, which can come out of order (one
    // RCU grace period after the reap where the last switch could not prove them): every
    // child's, not only the last's.
    assert!(!pids.is_empty(), "{kind}: no children in the truth: {t}");
    let rows_of = |s: &str| {
        pids.iter().all(|p| {
            let pid = format!("\"pid\":{p},");
            s.lines().any(|l| l.contains(&tok) && l.contains(&pid))
        })
    };
    w.wait_until("a row for every child", Duration::from_secs(30), rows_of);
    let out = w.interrupt();
    out.assert_clean();
    let rows = out.exits_with(&tok);
    for (i, pid) in pids.iter().enumerate() {
        let row = rows
            .iter()
            .find(|r| r["pid"].as_i64() == Some(*pid))
            .unwrap_or_else(|| panic!("{kind}: pid {pid} not reported\n{}", out.context()));
        // 0 where wait4 says 0 (a kernel whose scheduler clock counts in jiffies: see
        // each_process_cpu_is_what_wait4_returned), never where it does not.
        assert_wait4(
            &format!("watch {kind} pid {pid}: {row}"),
            row,
            (user[i], sys[i]),
            reaped[i],
        );
    }
}

/// `1.4 ms`, `978 µs`, `0 ns`, `2.01 s` in ns, and the step of its last digit in ns.
fn shown_ns(value: &str, unit: &str) -> (f64, f64) {
    let v: f64 = value.parse().unwrap_or_else(|_| panic!("{value:?}"));
    let scale = match unit {
        "ns" => 1.0,
        "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => panic!("unit {unit:?}"),
    };
    let decimals = value.split_once('.').map_or(0, |(_, d)| d.len()) as i32;
    (v * scale, scale * 10f64.powi(-decimals))
}

/// `-v`'s detail line under each row says the row's CPU split (wait4's), not taskstats' tick
/// samples, which are 0 for a process that ran under a tick while its CPU column said 1 ms.
#[test]
fn verbose_detail_lines_split_the_rows_cpu() {
    let out = Trace::new(["sh", "-c", "/bin/true; /bin/true"])
        .flag("-v")
        .flag("-w")
        .tag("cpu-detail")
        .run();
    out.assert_code(0);
    let report: Value = serde_json::from_str(out.json.as_deref().expect("JSON")).expect("JSON");
    let lines: Vec<&str> = out.stderr.lines().collect();
    let mut checked = 0;
    for p in report["processes"].as_array().expect("processes") {
        let ns = |k: &str| p[k].as_u64().unwrap_or_else(|| panic!("no {k} in {p}")) as f64;
        let pid = p["pid"].as_u64().expect("pid").to_string();
        let row = lines
            .iter()
            .position(|l| l.split_whitespace().next() == Some(pid.as_str()))
            .unwrap_or_else(|| panic!("no row for {pid}: {}", out.context()));
        let detail = lines[row + 1];
        let words: Vec<&str> = detail.split_whitespace().collect();
        let at = words
            .iter()
            .position(|w| *w == "user")
            .unwrap_or_else(|| panic!("no detail line under {pid}: {detail}"));
        assert_eq!(words[at + 3], "sys", "{detail}");
        // The report's figure, to the last digit shown.
        for ((shown, step), want) in [
            (shown_ns(words[at + 1], words[at + 2]), ns("user_ns")),
            (shown_ns(words[at + 4], words[at + 5]), ns("sys_ns")),
        ] {
            assert!(
                (shown - want).abs() <= step,
                "pid {pid}: {detail} against user_ns {} sys_ns {}",
                ns("user_ns"),
                ns("sys_ns")
            );
        }
        checked += 1;
    }
    assert_eq!(checked, 3, "sh and its two children: {}", out.context());
}
