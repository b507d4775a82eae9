//! `--perfetto FILE` read back with Perfetto's own protos (the `perfetto` pip package), not
//! spacetime's decoder: every traced process is named by a process descriptor and its main
//! thread by a thread descriptor, the process tree carries each pid's parent, and a clock
//! snapshot ties the trace's clock to BOOTTIME, MONOTONIC and REALTIME. The report of the
//! same trace and the test's own clocks are the truth; the saved report's trace is the run's.

use std::collections::BTreeMap;

use serde_json::Value;
use spacetime_tests::{python, TempDir, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn clock_ns(clock: libc::clockid_t) -> i128 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid pointer; the clock exists.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128
}

fn decode(path: &std::path::Path) -> Value {
    let out = python::python_with(
        "perfetto.protos.perfetto.trace.perfetto_trace_pb2",
        &["perfetto", "protobuf"],
    )
    .arg(python::script("check_perfetto.py"))
    .arg(path)
    .output()
    .expect("running check_perfetto.py");
    assert!(
        out.status.success(),
        "Perfetto's protos cannot read the trace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the checker prints JSON")
}

/// (comm, argv) of each process as the report says: its last image's name, its last exec's
/// argv (else the image it was forked with).
fn identities(report: &Value) -> BTreeMap<u64, (String, Vec<String>, u64)> {
    let mut m = BTreeMap::new();
    for p in report["processes"].as_array().expect("processes") {
        let images = p["images"].as_array().expect("images");
        let comm = images.last().expect("an image")["comm"]
            .as_str()
            .expect("comm");
        let argv_image = images
            .iter()
            .rev()
            .find(|i| i["inherited"] == false)
            .unwrap_or(&images[0]);
        let argv = argv_image["argv"]
            .as_array()
            .expect("argv")
            .iter()
            .map(|a| a.as_str().expect("arg").to_string())
            .collect();
        let pid = p["pid"].as_u64().expect("pid");
        let ppid = p["ppid"].as_u64().expect("ppid");
        m.insert(pid, (comm.to_string(), argv, ppid));
    }
    m
}

#[test]
fn perfetto_names_processes_and_threads_and_carries_clocks() {
    let dir = TempDir::new("perfetto");
    let path = dir.path().join("trace.pftrace");
    let out = Trace::new([WL, "tree", "2", "2"])
        .flag("--perfetto")
        .flag(&path)
        .tag("pf")
        .run();
    out.assert_code(0);
    let report = out.json_value();
    let want = identities(&report);
    assert_eq!(want.len(), 7, "tree 2 2 is 7 processes: {want:?}");
    let got = decode(&path);
    assert_eq!(
        got["unknown_fields"], 0,
        "fields Perfetto does not know: {got}"
    );
    assert_eq!(
        got["sequences"],
        serde_json::json!([1]),
        "one packet sequence"
    );
    assert!(
        got["track_events"].as_u64().unwrap_or(0) >= 14,
        "slices: {got}"
    );
    cpu_counter(&got, &report);

    for (list, what) in [("processes", "process"), ("threads", "thread")] {
        let entries = got[list].as_array().expect(list);
        assert_eq!(
            entries.len(),
            want.len(),
            "one {what} descriptor per process"
        );
        for e in entries {
            let pid = e["pid"].as_u64().expect("pid");
            let (comm, argv, _) = want
                .get(&pid)
                .unwrap_or_else(|| panic!("{what} descriptor for pid {pid}, not in the report"));
            assert_eq!(e["name"], comm.as_str(), "pid {pid}: {what} name");
            if what == "process" {
                assert_eq!(e["cmdline"], serde_json::json!(argv), "pid {pid}: cmdline");
            } else {
                assert_eq!(e["tid"].as_u64(), Some(pid), "pid {pid}: main thread's tid");
            }
        }
    }
    let tree = got["tree"].as_array().expect("tree");
    assert_eq!(tree.len(), want.len(), "process tree entries");
    for e in tree {
        let pid = e["pid"].as_u64().expect("pid");
        assert_eq!(e["ppid"].as_u64(), Some(want[&pid].2), "pid {pid}: ppid");
    }

    clocks(&got, &report);

    // The saved report drawn again (`report --perfetto`): the same trace, but for the clocks
    // it cannot say (its start on MONOTONIC and BOOTTIME).
    let saved = dir.path().join("saved.json");
    std::fs::write(&saved, out.json.as_deref().expect("the JSON report")).expect("saved.json");
    let again = dir.path().join("again.pftrace");
    spacetime_tests::pictures::report_to(&saved, "--perfetto", &again);
    let mut from_saved = decode(&again);
    let saved_clocks = from_saved["clocks"].take();
    let mut run = got.clone();
    run["clocks"].take();
    assert_eq!(from_saved, run, "the saved report's trace is the run's");
    let start = report["start_unix_ns"].as_u64().expect("start_unix_ns");
    assert_eq!(saved_clocks, serde_json::json!([[64, 0], [1, start]]));
}

/// A process that held 64 MiB while it burned CPU: its last slice carries the JSON's mean RSS
/// on CPU (tests/taskstats.rs checks the figure against its own VmRSS).
#[test]
fn a_process_slice_carries_its_mean_rss_on_cpu() {
    let dir = TempDir::new("perfetto-mean");
    let path = dir.path().join("trace.pftrace");
    let out = Trace::new([WL, "hold-burn", "64", "300"])
        .flag("--perfetto")
        .flag(&path)
        .tag("pf-mean")
        .run();
    out.assert_code(0);
    let report = out.json_value();
    let want = report["processes"][0]["mean_rss_on_cpu_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("no figure: {}", report["processes"][0]));
    let got = decode(&path);
    assert_eq!(
        got["uint_annotations"]["mean_rss_on_cpu_bytes"],
        serde_json::json!([want]),
        "{}",
        got["uint_annotations"]
    );
}

/// The CPU counter: cores in use, whose integral is the report's CPU.
fn cpu_counter(got: &serde_json::Value, report: &serde_json::Value) {
    let counters = got["double_counters"].as_object().expect("double counters");
    let (name, cpu) = counters
        .iter()
        .find(|(n, _)| n.starts_with("CPU (cores in use"))
        .unwrap_or_else(|| panic!("no CPU counter: {got}"));
    assert_eq!(cpu["unit"], "cores", "{name}");
    let points = cpu["points"].as_array().expect("points");
    let integral: f64 = points
        .windows(2)
        .map(|w| {
            (w[1][0].as_f64().unwrap_or(0.0) - w[0][0].as_f64().unwrap_or(0.0))
                * w[0][1].as_f64().unwrap_or(0.0)
        })
        .sum();
    let total = (report["user_ns"].as_u64().expect("user")
        + report["sys_ns"].as_u64().expect("sys")) as f64;
    assert!(
        (integral - total).abs() <= total * 1e-9 + 1.0,
        "the CPU counter integrates to {integral} ns, the report says {total}"
    );
    assert_eq!(
        points.last().map(|p| p[1].as_f64()),
        Some(Some(0.0)),
        "back to 0 at the end"
    );
}

/// Clocks: the trace clock's 0 is the report's start; the others at that instant.
fn clocks(got: &serde_json::Value, report: &serde_json::Value) {
    assert_eq!(
        got["default_clock"], 64,
        "packets default to the trace clock"
    );
    let clocks: BTreeMap<u64, i128> = got["clocks"]
        .as_array()
        .expect("clocks")
        .iter()
        .map(|c| {
            (
                c[0].as_u64().expect("id"),
                c[1].as_u64().expect("ts") as i128,
            )
        })
        .collect();
    assert_eq!(clocks.get(&64), Some(&0), "trace clock at t0: {clocks:?}");
    let (real, mono, boot) = (clocks[&1], clocks[&3], clocks[&6]);
    let start = report["start_unix_ns"].as_u64().expect("start_unix_ns") as i128;
    assert!(
        (real - start).abs() < 1_000_000,
        "REALTIME in the snapshot {real} vs the report's start_unix_ns {start}"
    );
    let now_mono = clock_ns(libc::CLOCK_MONOTONIC);
    let boot_offset = clock_ns(libc::CLOCK_BOOTTIME) - now_mono;
    assert!(
        (boot - mono - boot_offset).abs() < 1_000_000,
        "BOOTTIME - MONOTONIC in the snapshot is {}, the test reads {boot_offset}",
        boot - mono
    );
    let wall = report["wall_ns"].as_u64().expect("wall_ns") as i128;
    assert!(
        mono < now_mono && mono + wall <= now_mono,
        "MONOTONIC at t0 ({mono}) plus the trace's wall time ({wall}) is after now ({now_mono})"
    );
}
