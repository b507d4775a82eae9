//! `spacetime bench`: every run's figures against the workload's own truth (VmHWM read right
//! before it exits), per-run exit codes, the comparison, the exports, and how a bench stops.

use std::{ffi::OsString, os::unix::ffi::OsStringExt};

use serde_json::Value;
use spacetime_tests::{
    assert_rss,
    bench::{check_stats, finish, read_lines, start, u64s, Out, LIMIT},
    Truth, MIB,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn bench(tag: &str, flags: &[&str], commands: &[&str]) -> Out {
    spacetime_tests::bench::bench(WL, tag, flags, commands)
}

/// The CSV and Markdown exports parse, and agree with the JSON's `results`.
fn check_exports(out: &Out, results: &[Value]) {
    let mut csv = csv::Reader::from_path(out.path("b.csv")).expect("csv opens");
    let header = csv.headers().expect("header").clone();
    let col = |n: &str| {
        header
            .iter()
            .position(|h| h == n)
            .unwrap_or_else(|| panic!("no column {n}"))
    };
    let rows: Vec<csv::StringRecord> = csv.records().map(|r| r.expect("csv row")).collect();
    assert_eq!(rows.len(), results.len());
    for (c, row) in rows.iter().enumerate() {
        assert_eq!(
            row[col("command")],
            *results[c]["command"].as_str().expect("command")
        );
        assert_eq!(
            row[col("peak_rss_bytes_max")].parse::<u64>().ok(),
            results[c]["peak_rss_bytes"]["max"].as_u64()
        );
    }
    let md = std::fs::read_to_string(out.path("b.md")).expect("markdown");
    let lines: Vec<&str> = md.lines().collect();
    assert_eq!(lines.len(), 2 + results.len(), "{md}");
    let cells = |l: &str| l.replace("\\|", "").matches('|').count();
    assert!(lines.iter().all(|l| cells(l) == cells(lines[0])), "{md}");
    assert!(lines[1].starts_with("|:---|"), "{md}");
}

/// Every run of a one-process workload that touched `mib` MiB: its peak and the tree's are
/// the workload's own VmHWM of that run, exit 0, nothing lost.
fn check_one_process_runs(what: &str, r: &Value, truth: &[Truth], mib: i64) {
    let runs = truth.len();
    assert_eq!(r["runs"], runs, "{what}");
    assert_eq!(u64s(&r["exit_codes"]), vec![0; runs], "{what}");
    for f in [
        "wall_ns",
        "user_ns",
        "sys_ns",
        "peak_rss_bytes",
        "tree_peak_rss_bytes",
        "processes",
    ] {
        check_stats(&format!("{what} {f}"), &r[f]);
    }
    let peaks = u64s(&r["peak_rss_bytes"]["values"]);
    let trees = u64s(&r["tree_peak_rss_bytes"]["values"]);
    for (i, t) in truth.iter().enumerate() {
        assert_eq!(t.int("mib"), mib, "{what}: truth order");
        // One process: its peak is the tree's.
        assert_rss(&format!("{what} run {i} peak"), peaks[i], t.vmhwm_bytes());
        assert_rss(
            &format!("{what} run {i} tree peak"),
            trees[i],
            t.vmhwm_bytes(),
        );
    }
    assert_eq!(u64s(&r["processes"]["values"]), vec![1; runs], "{what}");
    assert_eq!(u64s(&r["lost_events"]), vec![0; runs], "{what}");
    assert!(
        u64s(&r["wall_ns"]["values"]).iter().all(|&w| w > 0),
        "{what}"
    );
}

#[test]
fn every_run_peak_is_the_workload_peak_and_double_memory_is_significant() {
    let runs = 3;
    let out = bench(
        "bench-peaks",
        &[
            "-N",
            "-r",
            "3",
            "--export-csv",
            "DIR/b.csv",
            "--export-markdown",
            "DIR/b.md",
        ],
        &["WL touch 24", "WL touch 64"],
    );
    assert_eq!(out.code, 0, "{}", out.context());
    let v = out.json();
    let truth = out.truth();
    assert_eq!(
        truth.len(),
        2 * runs,
        "one truth line per run: {}",
        out.context()
    );
    let results = v["results"].as_array().expect("results");
    for (c, r) in results.iter().enumerate() {
        let mib = [24, 64][c];
        check_one_process_runs(
            &format!("command {c}"),
            r,
            &truth[c * runs..(c + 1) * runs],
            mib,
        );
    }
    // The comparison: the smaller is the reference; the ratio is the truths' ratio, and certain.
    let mem = &v["comparison"]["peak_rss_bytes"];
    assert_eq!(mem["reference"], 0, "{mem}");
    let hwm = |c: usize| {
        truth[c * runs..(c + 1) * runs]
            .iter()
            .map(|t| t.vmhwm_bytes() as f64)
            .sum::<f64>()
            / runs as f64
    };
    let ratio = mem["relative"][1]["ratio"].as_f64().expect("ratio");
    assert!(
        (ratio - hwm(1) / hwm(0)).abs() < 0.01,
        "ratio {ratio}, truth {}",
        hwm(1) / hwm(0)
    );
    assert!(ratio > 1.9, "64 MiB against 24 MiB: {ratio}");
    assert_eq!(mem["relative"][1]["significant"], true, "{mem}");
    check_exports(&out, results);
    // The terminal summary names both and says the difference is significant.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("Benchmark 2:") && stdout.contains("significant"),
        "{}",
        out.context()
    );
}

#[test]
fn exit_codes_are_reported_per_run() {
    let out = bench(
        "bench-exits",
        &["-N", "-i", "-r", "2"],
        &["WL exit 3", "WL kill 9"],
    );
    assert_eq!(
        out.code,
        0,
        "-i: failures do not fail the bench; {}",
        out.context()
    );
    let v = out.json();
    assert_eq!(v["results"][0]["exit_codes"], serde_json::json!([3, 3]));
    assert_eq!(v["results"][1]["exit_codes"], serde_json::json!([137, 137]));
    // Each run's peak is still measured: the truth line is written before the exit.
    let truth = out.truth();
    assert_eq!(truth.len(), 4, "{}", out.context());
    let peaks = u64s(&v["results"][0]["peak_rss_bytes"]["values"]);
    assert_rss("exit 3, run 0", peaks[0], truth[0].vmhwm_bytes());

    // Without -i the first failure stops the bench, and what ran is still reported.
    let out = bench(
        "bench-fail",
        &["-N", "-r", "5"],
        &["WL exit 3", "WL touch 1"],
    );
    assert_eq!(out.code, 1, "{}", out.context());
    assert!(out.stderr.contains("--ignore-failure"), "{}", out.context());
    let v = out.json();
    assert_eq!(v["results"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["results"][0]["exit_codes"], serde_json::json!([3]));
    assert_eq!(out.truth().len(), 1, "nothing ran after the failure");
}

#[test]
fn forks_are_counted_and_warmups_are_not_measured() {
    // Root forks 3 children: 4 processes, each writing its truth line.
    let out = bench(
        "bench-tree",
        &["-N", "-r", "2", "-w", "1"],
        &["WL tree 1 3"],
    );
    assert_eq!(out.code, 0, "{}", out.context());
    let v = out.json();
    let r = &v["results"][0];
    assert_eq!(r["runs"], 2);
    assert_eq!(u64s(&r["processes"]["values"]), [4, 4]);
    let truth = out.truth();
    assert_eq!(
        truth.len(),
        12,
        "warm-up and two runs, 4 lines each: {}",
        out.context()
    );
    let peaks = u64s(&r["peak_rss_bytes"]["values"]);
    let trees = u64s(&r["tree_peak_rss_bytes"]["values"]);
    for i in 0..2 {
        // Runs are sequential: run i's lines follow the warm-up's 4.
        let run = &truth[4 * (i + 1)..4 * (i + 2)];
        let largest = run.iter().map(Truth::vmhwm_bytes).max().expect("lines");
        assert_rss(&format!("run {i} largest process"), peaks[i], largest);
        assert!(
            trees[i] >= peaks[i],
            "run {i}: tree peak {} below the largest process {}",
            trees[i],
            peaks[i]
        );
        let sum: u64 = run.iter().map(Truth::vmhwm_bytes).sum();
        assert!(
            trees[i] <= sum + 4 * 4096,
            "run {i}: tree peak {} above the sum of peaks {sum}",
            trees[i]
        );
    }
}

#[test]
fn prepare_runs_before_every_run_through_the_shell() {
    let out = bench(
        "bench-prepare",
        &["-r", "2", "-w", "1", "--prepare", "echo p >> DIR/prepared"],
        &["WL touch 8 && exit 0"],
    );
    assert_eq!(out.code, 0, "{}", out.context());
    assert_eq!(
        read_lines(&out.path("prepared")).len(),
        3,
        "warm-up + 2 runs"
    );
    let v = out.json();
    let truth = out.truth();
    assert_eq!(truth.len(), 3);
    let peaks = u64s(&v["results"][0]["peak_rss_bytes"]["values"]);
    // Through `sh -c`: the workload is one of the run's processes, and the largest.
    for (i, &p) in peaks.iter().enumerate() {
        assert_rss(&format!("run {i}"), p, truth[i + 1].vmhwm_bytes());
        assert!(p >= 8 * MIB);
    }
    assert_eq!(
        v["results"][0]["command"],
        format!("{WL} touch 8 && exit 0")
    );
}

#[test]
fn output_paths_and_commands_are_checked_before_any_run() {
    let out = bench(
        "bench-badpath",
        &["-N", "--export-csv", "/nonexistent/dir/b.csv"],
        &["WL touch 1"],
    );
    assert_eq!(out.code, 125, "{}", out.context());
    assert!(
        out.stderr.contains("/nonexistent/dir/b.csv"),
        "{}",
        out.context()
    );
    assert!(
        out.truth().is_empty(),
        "a run happened before the path was checked"
    );
    let out = bench("bench-quote", &["-N"], &["WL touch 'unterminated"]);
    assert_eq!(out.code, 125, "{}", out.context());
    assert!(out.truth().is_empty());
}

#[test]
fn command_bytes_are_escaped_on_the_terminal_and_exact_in_json() {
    let mut cmd = format!("{WL} quiet-exit 0 ").into_bytes();
    cmd.extend_from_slice(b"\x1b]0;pwned\x07\x9b2J");
    let (child, dir) = start(
        "bench-escape",
        &["-N", "-r", "1"],
        &[OsString::from_vec(cmd.clone())],
        false,
    );
    let out = finish(child, dir);
    assert_eq!(out.code, 0, "{}", out.context());
    for bad in [0x1b, 0x07, 0x9b] {
        assert!(
            !out.stdout.contains(&bad),
            "raw byte {bad:#x} on the terminal: {}",
            out.context()
        );
    }
    let v = out.json();
    // Not UTF-8 (a lone 0x9b): the exact bytes are in command_b64.
    use base64::Engine;
    let b64 = v["results"][0]["command_b64"]
        .as_str()
        .expect("command_b64");
    let exact = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    assert_eq!(exact, cmd);
}

/// Interrupts a long bench once a few runs are done: SIGINT to spacetime alone (`kill`), or to
/// its whole process group as the terminal's Ctrl-C does (the running command dies too, or is
/// caught still held before its exec).
fn interrupt(tag: &str, group: bool) {
    let cmds = [OsString::from(format!("{WL} touch 2"))];
    let (child, dir) = start(tag, &["-N", "-r", "10000"], &cmds, group);
    // Each run writes its truth line just before it exits: once three are written, at least
    // two runs have completed.
    let truth = dir.path().join("truth.jsonl");
    spacetime_tests::poll::wait_until("three runs started", LIMIT, || {
        read_lines(&truth).len() >= 3
    });
    let pid = child.id() as i32;
    // SAFETY: our own child (and the group it leads), not yet waited for.
    unsafe { libc::kill(if group { -pid } else { pid }, libc::SIGINT) };
    let out = finish(child, dir);
    assert_eq!(out.code, 130, "{}", out.context());
    let v = out.json();
    assert_eq!(v["interrupted"], true);
    let runs = v["results"][0]["runs"].as_u64().expect("runs");
    assert!((2..10000).contains(&runs), "{runs} runs: {}", out.context());
    assert_eq!(
        u64s(&v["results"][0]["peak_rss_bytes"]["values"]).len() as u64,
        runs
    );
    // The run the signal cut short is not among them.
    assert_eq!(
        u64s(&v["results"][0]["exit_codes"])
            .iter()
            .filter(|&&c| c != 0)
            .count(),
        0
    );
    assert!(out.stderr.contains("interrupted"), "{}", out.context());
}

#[test]
fn sigint_stops_and_reports_the_runs_that_completed() {
    interrupt("bench-int", false);
}

#[test]
fn ctrl_c_to_the_process_group_stops_and_reports_the_runs_that_completed() {
    interrupt("bench-int-group", true);
}

#[test]
fn commands_read_dev_null_and_write_there_unless_show_output() {
    // Through the shell, one path per readlink: busybox's takes one (Debian's guest).
    let cmd = "readlink /proc/self/fd/0; readlink /proc/self/fd/1";
    let out = bench("bench-quietcmd", &["-r", "2"], &[cmd]);
    assert_eq!(out.code, 0, "{}", out.context());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("/dev/null"),
        "the command's output reached stdout: {stdout}"
    );
    let out = bench("bench-showcmd", &["-r", "2", "--show-output"], &[cmd]);
    assert_eq!(out.code, 0, "{}", out.context());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    // The header as the runs start, then each run: stdin is /dev/null, stdout is spacetime's
    // own (the test's file).
    assert!(lines[0].starts_with("Benchmark 1: "), "{stdout}");
    let stdout_file = out.path("stdout");
    let want = ["/dev/null".to_string(), stdout_file.display().to_string()];
    assert_eq!(lines[1..3], want, "first run: {stdout}");
    assert_eq!(lines[3..5], want, "second run: {stdout}");
}
