//! `watch --json` lines as their consumers take them: every kind (exec, process exit, thread
//! exit, with ancestry and images) against docs/watch-line.schema.json; the OpenTelemetry
//! recipe of docs/watch.md (its field and parsing rules, read from that page itself) applied
//! to every line; and `-o FILE` reopened on SIGHUP, as a log rotation needs.

use std::{process::Command, time::Duration};

use serde_json::Value;
use spacetime_tests::{
    python, unix_ns,
    watch::{argv_of, run, token, Watch},
    workspace_root, TempDir,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// The recipe's timestamp rule, from docs/watch.md's collector configuration: the attribute it
/// parses, with the layout it gives.
struct Recipe {
    field: String,
}

fn recipe() -> Recipe {
    let page =
        std::fs::read_to_string(workspace_root().join("docs/watch.md")).expect("docs/watch.md");
    let line = page
        .lines()
        .find(|l| l.contains("type: json_parser"))
        .and_then(|_| {
            page.lines()
                .find(|l| l.trim_start().starts_with("timestamp:"))
        })
        .expect("the recipe's timestamp rule");
    assert!(
        page.lines().any(|l| l.trim() == "parse_ints: true"),
        "the json_parser must keep integers: a float rounds ns to 256"
    );
    assert!(
        line.contains("layout_type: epoch") && line.contains("layout: ns"),
        "{line}"
    );
    let field = line
        .split("parse_from: attributes.")
        .nth(1)
        .and_then(|r| r.split([',', ' ', '}']).next())
        .expect("parse_from")
        .to_string();
    Recipe { field }
}

impl Recipe {
    /// What filelog's epoch-ns rule makes of a line (with parse_ints: an int64), or why it
    /// refuses it.
    fn time_ns(&self, line: &Value) -> Result<i64, String> {
        match line.get(&self.field) {
            None => Err(format!("no {}: the entry would not parse", self.field)),
            Some(v) => v
                .as_i64()
                .ok_or_else(|| format!("{} is not an integer: {v}", self.field)),
        }
    }
}

/// `date -u` of `ns` to the second, as RFC 3339 without the fraction.
fn date_utc(ns: i64) -> String {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S"])
        .arg(format!("--date=@{}", ns.div_euclid(1_000_000_000)))
        .output()
        .expect("date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn every_line_kind_matches_the_schema_and_the_collector_recipe() {
    let before = unix_ns();
    let w = Watch::new()
        .flags([
            "--json",
            "--events",
            "exec,exit",
            "--threads",
            "--ancestry",
            "--images",
        ])
        .start();
    let t = token("json-kinds");
    // A process with threads, one that execs a second image, one that fails.
    run(Command::new(WL)
        .args(["threads", "2"])
        .env("ST_TRUTH", "/dev/null"));
    run(Command::new(WL)
        .args(["grow-exec", "1", WL, "quiet-exit", "3", &t])
        .env("ST_TRUTH", "/dev/null"));
    w.wait_for_stdout(&t, Duration::from_secs(30));
    let out = w.interrupt();
    out.assert_clean();
    let after = unix_ns();
    let lines = out.json_lines();
    let kinds = |event: &str, thread: bool| {
        lines
            .iter()
            .filter(|v| v["event"] == event && v.get("thread").is_some() == thread)
            .count()
    };
    assert!(
        kinds("exec", false) > 0 && kinds("exit", false) > 0 && kinds("exit", true) > 0,
        "exec, exit and thread-exit lines expected\n{}",
        out.context()
    );
    let two_images = lines
        .iter()
        .find(|v| v["event"] == "exit" && argv_of(v).contains(&t))
        .expect("the exit of the exec'd image");
    // The spawner's fork (it ran on its address space), grow-exec, quiet-exit.
    let images = two_images["images"].as_array().map_or(0, Vec::len);
    assert!(images >= 2, "{two_images}");
    // The recipe's rule on every line: the field, an integer, ns since the epoch, the line's
    // own instant (`time`, and an exit's end).
    let r = recipe();
    assert_eq!(r.field, "time_unix_ns");
    for v in &lines {
        let ns = r.time_ns(v).unwrap_or_else(|e| panic!("{e}: {v}"));
        assert!(
            (before..=after).contains(&ns),
            "{ns} outside the watch: {v}"
        );
        let time = v["time"].as_str().expect("time");
        assert_eq!(&time[..19], date_utc(ns), "{v}");
        assert_eq!(
            time[20..29],
            format!("{:09}", ns.rem_euclid(1_000_000_000)),
            "{v}"
        );
        if v["event"] == "exit" {
            assert_eq!(v["end_unix_ns"], ns, "{v}");
        }
        assert_eq!(v["schema_version"], 2, "{v}");
    }
    let dir = TempDir::new("watch-schema");
    let file = dir.path().join("lines.jsonl");
    std::fs::write(&file, &out.stdout).expect("write lines");
    let check = python::check_json("watch-line.schema.json", true, &[&file]);
    assert!(
        check.status.success(),
        "lines do not match docs/watch-line.schema.json:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

#[test]
fn output_file_is_reopened_on_sighup() {
    let dir = TempDir::new("watch-rotate");
    let log = dir.path().join("exits.jsonl");
    let rotated = dir.path().join("exits.jsonl.1");
    let w = Watch::new().flag("--json").flag("-o").flag(&log).start();
    let has =
        |p: &std::path::Path, t: &str| std::fs::read_to_string(p).is_ok_and(|s| s.contains(t));
    let (first, second) = (token("rot-1"), token("rot-2"));
    run(Command::new(WL).args(["quiet-exit", "0", &first]));
    w.wait_until("the first exit in the log", Duration::from_secs(30), |_| {
        has(&log, &first)
    });
    std::fs::rename(&log, &rotated).expect("rotate");
    w.signal(libc::SIGHUP);
    // The signal is handled when the watch gets to it: an exit before that still belongs to
    // the old file. The reopen creates the new one.
    w.wait_until("the log reopened", Duration::from_secs(30), |_| {
        log.exists()
    });
    run(Command::new(WL).args(["quiet-exit", "0", &second]));
    w.wait_until(
        "the second exit in a new log",
        Duration::from_secs(30),
        |_| has(&log, &second),
    );
    let out = w.interrupt();
    out.assert_clean();
    assert!(out.stdout.is_empty(), "{}", out.stdout);
    assert!(
        has(&rotated, &first) && !has(&rotated, &second),
        "the old file keeps the old lines"
    );
    assert!(!has(&log, &first), "the new file starts after the rotation");
}
