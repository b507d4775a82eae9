//! hyperfine's options in `spacetime bench`, with hyperfine's meanings: parameter scans with
//! time and memory per value (a real `make -j{j}`), the order of setup, prepare, conclude and
//! cleanup, the run bounds and the 3 s rule, names, units, sort and reference, streams,
//! exports to standard output, and the warnings.

use std::process::Command;

use serde_json::Value;
use spacetime_tests::{
    assert_rss,
    bench::{bench, read_lines, u64s, Out},
    spacetime_bin, TempDir, MIB,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn ok(out: &Out) -> Value {
    assert_eq!(out.code, 0, "{}", out.context());
    out.json()
}

fn stdout(out: &Out) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn parameter_scan_of_make_j_reports_time_and_memory_per_value() {
    // Four recipes, each holding 24 MiB until j of them have (a fresh directory per value,
    // made by --prepare, counts them): make -j1 holds one at a time, -j4 all four at once,
    // by construction rather than by timing; the tree peak says so, the largest process's
    // peak stays one holder's.
    let dir = TempDir::new("bench-make");
    let mut mk = String::from("all: h1 h2 h3 h4\n");
    for i in 1..=4 {
        mk.push_str(&format!("h{i}:\n\t@{WL} hold-together $(N) $(D) 24 100\n"));
    }
    std::fs::write(dir.path().join("Makefile"), mk).expect("Makefile");
    let d = dir.path().display();
    let make = format!("make -s -B -C {d} -j{{j}} N={{j}} D={d}/d{{j}}");
    let prepare = format!("rm -rf {d}/d{{j}} && mkdir {d}/d{{j}}");
    let out = bench(
        WL,
        "bench-make-j",
        &["-r", "1", "-P", "j", "1", "4", "--prepare", &prepare],
        &[&make],
    );
    let v = ok(&out);
    let results = v["results"].as_array().expect("results");
    assert_eq!(results.len(), 4, "{}", out.context());
    let truth = out.truth();
    assert_eq!(truth.len(), 16, "four holders per run: {}", out.context());
    let largest_holder = truth.iter().map(|t| t.vmhwm_bytes()).max().expect("truth");
    for (k, r) in results.iter().enumerate() {
        assert_eq!(r["parameters"]["j"], (k + 1).to_string());
        assert_eq!(r["command"], make.replace("{j}", &(k + 1).to_string()));
        // make, its shell-less recipes: five processes at least.
        assert!(u64s(&r["processes"]["values"])[0] >= 5, "{r}");
        let peak = u64s(&r["peak_rss_bytes"]["values"])[0];
        assert!(
            peak <= largest_holder + 8 * 4096 && peak >= 24 * MIB,
            "j={}: {peak}",
            k + 1
        );
    }
    let tree = |k: usize| u64s(&results[k]["tree_peak_rss_bytes"]["values"])[0];
    assert!(
        tree(0) < 2 * 24 * MIB,
        "-j1 holds one at a time: {}",
        tree(0)
    );
    assert!(
        tree(3) > 4 * 24 * MIB,
        "-j4 holds all four at once: {}",
        tree(3)
    );
    // The terminal: a table of time and memory per value.
    let text = stdout(&out);
    let table = text.split_once("Parameter scan\n").expect("the table").1;
    let rows: Vec<&str> = table.lines().take(5).collect();
    assert!(
        rows[0].contains("j") && rows[0].contains("Time (mean") && rows[0].contains("Tree peak"),
        "{text}"
    );
    for (k, row) in rows[1..].iter().enumerate() {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells[..2],
            [(k + 1).to_string(), (k + 1).to_string()],
            "{row}"
        );
    }
}

#[test]
fn setup_prepare_conclude_cleanup_run_in_hyperfines_order_with_parameters() {
    let log = "DIR/log";
    let hook = |what: &str| format!("echo {what} {{n}} >> {log}");
    let flags = [
        "-r",
        "2",
        "-w",
        "1",
        "-P",
        "n",
        "1",
        "2",
        "-s",
        &hook("setup"),
        "-p",
        &hook("prepare"),
        "-C",
        &hook("conclude"),
        "-c",
        &hook("cleanup"),
    ];
    let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let out = bench(
        WL,
        "bench-hooks",
        &flags,
        &[&format!("echo run {{n}} >> {log}")],
    );
    ok(&out);
    let mut want = Vec::new();
    for n in 1..=2 {
        want.push(format!("setup {n}"));
        // The warm-up run, then two measured runs, each between prepare and conclude.
        for _ in 0..3 {
            want.extend([
                format!("prepare {n}"),
                format!("run {n}"),
                format!("conclude {n}"),
            ]);
        }
        want.push(format!("cleanup {n}"));
    }
    assert_eq!(read_lines(&out.path("log")), want, "{}", out.context());
}

#[test]
fn at_least_ten_runs_and_three_seconds_within_min_and_max() {
    // 300 ms a run: 3 s fit fewer than 10, so 10.
    let out = bench(WL, "bench-min10", &["-N"], &["WL sleep 300"]);
    assert_eq!(ok(&out)["results"][0]["runs"], 10, "{}", out.context());
    // A short command: the 3 s rule asks for more than 4, -M caps it.
    let out = bench(
        WL,
        "bench-max",
        &["-N", "-m", "3", "-M", "4"],
        &["WL sleep 1"],
    );
    assert_eq!(ok(&out)["results"][0]["runs"], 4);
    // -M alone lowers the default minimum of 10 to it.
    let out = bench(WL, "bench-maxonly", &["-N", "-M", "2"], &["WL sleep 1"]);
    assert_eq!(ok(&out)["results"][0]["runs"], 2);
}

/// `--min-benchmarking-time SECS` replaces the 3 s: at most what fits in it at the first
/// run's cost (which is at least the command's sleep), never fewer than -m, and -r wins.
#[test]
fn min_benchmarking_time_replaces_three_seconds() {
    // 40 ms a run: 0.1 s holds at most 2 of them; -m 2 is the floor. (The 3 s rule would
    // have asked for at least 10.)
    let out = bench(
        WL,
        "bench-mintime",
        &["-N", "-m", "2", "--min-benchmarking-time", "0.1"],
        &["WL sleep 40"],
    );
    assert_eq!(ok(&out)["results"][0]["runs"], 2, "{}", out.context());
    // A second's worth of a 300 ms command is at most 3 runs: -m 5 is the floor.
    let out = bench(
        WL,
        "bench-mintime-min",
        &["-N", "-m", "5", "--min-benchmarking-time", "1"],
        &["WL sleep 300"],
    );
    assert_eq!(ok(&out)["results"][0]["runs"], 5, "{}", out.context());
    let out = bench(
        WL,
        "bench-mintime-runs",
        &["-N", "-r", "3", "--min-benchmarking-time", "0.01"],
        &["WL sleep 1"],
    );
    assert_eq!(ok(&out)["results"][0]["runs"], 3, "{}", out.context());
    // Not a time: a usage error before anything runs.
    let out = bench(
        WL,
        "bench-mintime-bad",
        &["--min-benchmarking-time", "0"],
        &["WL sleep 1"],
    );
    assert_eq!(out.code, 125, "{}", out.context());
}

#[test]
fn names_units_sort_and_reference() {
    let reference = format!("{WL} sleep 60");
    let out = bench(
        WL,
        "bench-names",
        &[
            "-N",
            "-r",
            "3",
            "-n",
            "fast",
            "-n",
            "slow",
            "--reference",
            &reference,
            "--reference-name",
            "ref",
            "-u",
            "microsecond",
            "--sort",
            "command",
            "--export-markdown",
            "DIR/t.md",
            "--export-asciidoc",
            "DIR/t.adoc",
            "--export-orgmode",
            "DIR/t.org",
        ],
        &["WL sleep 10", "WL sleep 30"],
    );
    let v = ok(&out);
    let names: Vec<&str> = v["results"]
        .as_array()
        .expect("r")
        .iter()
        .map(|r| r["command"].as_str().expect("s"))
        .collect();
    assert_eq!(names, ["ref", "fast", "slow"]);
    assert_eq!(v["comparison"]["wall_ns"]["reference"], 0);
    // Each ratio is its command's mean wall over the reference's, whatever the machine's speed.
    let mean = |i: usize| {
        v["results"][i]["wall_ns"]["mean"]
            .as_f64()
            .expect("wall_ns.mean")
    };
    for i in [1, 2] {
        let r = v["comparison"]["wall_ns"]["relative"][i]["ratio"]
            .as_f64()
            .expect("ratio");
        let want = mean(i) / mean(0);
        assert!(
            (r - want).abs() <= 1e-9 * want.max(1.0),
            "result {i}: ratio {r}, its mean over the reference's {want}"
        );
    }
    let text = stdout(&out);
    assert!(text.contains("Relative speed comparison"), "{text}");
    // In a locale that is not UTF-8, µ is u and ± is +-.
    let us = text.contains(" µs ± ") || text.contains(" us +- ");
    assert!(us && !text.contains(" ms "), "-u microsecond: {text}");
    assert!(
        text.contains("Benchmark 1: ref\n") && text.contains("Benchmark 3: slow\n"),
        "{text}"
    );
    let md = std::fs::read_to_string(out.path("t.md")).expect("md");
    assert!(md.starts_with("| Command | Mean [µs] |"), "{md}");
    let adoc = std::fs::read_to_string(out.path("t.adoc")).expect("adoc");
    assert!(
        adoc.starts_with("[cols=\"<,>") && adoc.ends_with("|===\n"),
        "{adoc}"
    );
    let org = std::fs::read_to_string(out.path("t.org")).expect("org");
    assert!(
        org.lines().nth(1).is_some_and(|l| l.starts_with("|--+")),
        "{org}"
    );
    assert!(org.contains("| =fast=  |"), "{org}");
}

#[test]
fn input_output_and_exports_to_standard_output() {
    let dir = TempDir::new("bench-streams");
    let input = dir.path().join("in.txt");
    std::fs::write(&input, "line one\nline two\n").expect("input");
    let file = dir.path().join("out.txt");
    let out = Command::new(spacetime_bin())
        .current_dir(dir.path())
        .args(["bench", "-N", "-r", "3", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&file)
        .args(["--export-json", "-", "--export-csv", "-", "cat"])
        .env_remove("SUDO_UID")
        .output()
        .expect("bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Every run read the input from its start; the file holds what the last one wrote.
    assert_eq!(
        std::fs::read_to_string(&file).expect("out"),
        "line one\nline two\n"
    );
    // The JSON, then the CSV, on stdout; the summary went to stderr.
    let text = String::from_utf8_lossy(&out.stdout);
    let (json, csv) = text.split_at(text.find("\ncommand,mean,").expect("the CSV") + 1);
    let v: Value = serde_json::from_str(json).expect("the JSON on stdout");
    assert_eq!(v["results"][0]["runs"], 3);
    assert!(csv.lines().count() == 2, "{csv}");
    assert!(stderr.contains("Benchmark 1: cat"), "{stderr}");
    assert!(!dir.path().join("-").exists(), "a file named -");
    // A pipe read and dropped: a command writing more than a pipe holds still ends.
    let out = bench(
        WL,
        "bench-pipe",
        &["-r", "2", "--output", "pipe"],
        &["head -c 2000000 /dev/zero"],
    );
    ok(&out);
    // A policy that is not one, and an input that does not exist: refused before any run.
    let out = bench(WL, "bench-badout", &["--output", "nul"], &["true"]);
    assert_eq!(out.code, 125, "{}", out.context());
    assert!(
        out.stderr.contains("unknown --output \"nul\""),
        "{}",
        out.stderr
    );
    let out = bench(WL, "bench-noin", &["--input", "/nonexistent/in"], &["true"]);
    assert_eq!(out.code, 125, "{}", out.context());
}

#[test]
fn a_slow_first_run_and_a_fast_command_are_warned_about() {
    let flag = "DIR/first";
    let cmd = format!("[ -e {flag} ] || {{ sleep 0.4; touch {flag}; }}");
    let out = bench(WL, "bench-warn", &["-r", "6"], &[&cmd]);
    ok(&out);
    let text = stdout(&out)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        text.contains(
            "The first benchmarking run for this command was significantly slower than the rest"
        ),
        "{}",
        out.context()
    );
    assert!(
        text.contains("You should consider using the '--warmup' option"),
        "{text}"
    );
    assert!(
        text.contains("Command took less than 5 ms to complete"),
        "{text}"
    );
}

#[test]
fn a_failing_hook_stops_the_bench_and_says_which() {
    let out = bench(
        WL,
        "bench-badhook",
        &["-N", "-r", "2", "-C", "false"],
        &["WL touch 1"],
    );
    assert_eq!(out.code, 1, "{}", out.context());
    assert!(
        out.stderr
            .contains("the --conclude command false exited with status 1"),
        "{}",
        out.stderr
    );
    assert_rss(
        "the run before",
        u64s(&out.json()["results"][0]["peak_rss_bytes"]["values"])[0],
        out.truth()[0].vmhwm_bytes(),
    );
}
