//! The trace report against its published schema (docs/trace-report.schema.json), validated
//! by Python's `jsonschema` (an implementation independent of spacetime), on real reports:
//! a multi-process tree with threads, a root killed by a signal, and a trace stopped at the
//! root's exit with a survivor still running. The origin fields are checked against the
//! machine's own files and clocks.

use serde_json::Value;
use spacetime_tests::{python, TempDir, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn unix_ns() -> u64 {
    spacetime_tests::unix_ns() as u64
}

fn proc_text(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
        .trim()
        .to_string()
}

/// `date -u` of the second of `unix_ns`, as RFC 3339 without the fraction.
fn date_utc(unix_ns: u64) -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%S"])
        .arg(format!("--date=@{}", unix_ns / 1_000_000_000))
        .output()
        .expect("running date");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn check_origin(report: &Value, before_ns: u64, after_ns: u64) {
    assert_eq!(report["schema_version"], 2, "schema_version");
    assert_eq!(
        report["spacetime_version"],
        env!("CARGO_PKG_VERSION"),
        "spacetime_version (the workspace shares one version)"
    );
    assert_eq!(report["host"], proc_text("/proc/sys/kernel/hostname"));
    assert_eq!(
        report["kernel_release"],
        proc_text("/proc/sys/kernel/osrelease")
    );
    let start = report["start_unix_ns"].as_u64().expect("start_unix_ns");
    assert!(
        (before_ns..=after_ns).contains(&start),
        "start_unix_ns {start} is not between the test's clock before ({before_ns}) and \
         after ({after_ns}) the trace"
    );
    let rfc = report["start_rfc3339"].as_str().expect("start_rfc3339");
    assert_eq!(
        &rfc[..19],
        date_utc(start),
        "start_rfc3339 {rfc} vs date -u of start_unix_ns"
    );
    assert_eq!(
        &rfc[20..29],
        format!("{:09}", start % 1_000_000_000),
        "start_rfc3339's fraction"
    );
}

/// Runs each trace, checks its origin fields, and writes its report into `dir`.
fn reports(dir: &TempDir) -> Vec<std::path::PathBuf> {
    let traces: Vec<(&str, Trace, i32)> = vec![
        ("tree", Trace::new([WL, "tree", "3", "2"]).tag("tree"), 0),
        ("threads", Trace::new([WL, "threads", "4"]).tag("thr"), 0),
        ("killed", Trace::new([WL, "kill", "9"]).tag("kill"), 128 + 9),
        (
            "survivor",
            Trace::new([WL, "orphan", "20000"])
                .flag("--stop-on-root-exit")
                .tag("orphan"),
            0,
        ),
        (
            "cgroup-peak",
            Trace::new([WL, "cow-fork", "8"])
                .flag("--cgroup-peak")
                .tag("cgpeak"),
            0,
        ),
    ];
    let mut paths = Vec::new();
    for (name, trace, code) in traces {
        let before = unix_ns();
        let out = trace.run();
        let after = unix_ns();
        out.assert_code(code);
        let report = out.json_value();
        check_origin(&report, before, after);
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, report.to_string()).expect("writing the report");
        paths.push(path);
    }
    paths
}

#[test]
fn reports_validate_against_the_schema() {
    let dir = TempDir::new("schema");
    let paths = reports(&dir);
    // The survivor's report has the nulls the schema allows (end_ns, exit).
    let survivor: Value =
        serde_json::from_str(&std::fs::read_to_string(&paths[3]).expect("read")).expect("json");
    let processes = survivor["processes"].as_array().expect("processes");
    assert!(
        processes.iter().any(|p| p["exit"].is_null()),
        "the --stop-on-root-exit trace has no still-running process"
    );
    assert!(
        processes.len() >= 3,
        "the orphan trace holds {} processes",
        processes.len()
    );
    let out = python::check_reports(&paths);
    assert!(
        out.status.success(),
        "reports do not match docs/trace-report.schema.json:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn schema_checker_rejects_what_the_schema_forbids() {
    // A report the schema must refuse: the checker is not a rubber stamp.
    let dir = TempDir::new("schema-bad");
    let out = Trace::new([WL, "tree", "1", "1"]).tag("bad").run();
    out.assert_code(0);
    let mut report = out.json_value();
    report["processes"][0]["exit"] = serde_json::json!({ "code": -1 });
    report["undocumented_key"] = Value::from(1);
    report
        .as_object_mut()
        .expect("object")
        .remove("start_unix_ns");
    let path = dir.path().join("bad.json");
    std::fs::write(&path, report.to_string()).expect("write");
    let out = python::check_reports(&[&path]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "a broken report passed");
    for want in ["exit", "undocumented_key", "start_unix_ns"] {
        assert!(
            said.contains(want),
            "the checker did not flag {want}: {said}"
        );
    }
}
