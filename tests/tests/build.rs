//! The summary of a build, against builds whose facts are known: a failure listed first
//! however big the tree, the file each compiler run compiled, the recap as the last line,
//! the critical path of a Makefile whose longest dependency chain is known, CPU over time
//! adding up to the total CPU, a saved report drawn again as it ran, and `diff` gating a
//! build whose peak grew.

use serde_json::Value;
use spacetime_tests::{
    build::{assert_fits, c_project, recap, section},
    spacetime_bin, TempDir, Trace,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// Traces `cmd` at 80 columns, the summary into a file (no colour): (report, summary).
fn traced(dir: &TempDir, tag: &str, cmd: &[&str], flags: &[&str]) -> (Value, String) {
    let summary = dir.path().join(format!("{tag}.txt"));
    let mut t = Trace::new(cmd)
        .tag(tag)
        .env("COLUMNS", "80")
        .env("LANG", "C.UTF-8");
    t = t.flag("-q").flag("-o").flag(&summary);
    for f in flags {
        t = t.flag(f);
    }
    let out = t.run();
    let v = out.json_value();
    let text = std::fs::read_to_string(&summary)
        .unwrap_or_else(|e| panic!("no summary ({e})\n{}", out.context()));
    std::fs::copy(
        out.dir.path().join("report.json"),
        dir.path().join(format!("{tag}.json")),
    )
    .expect("keep the report");
    (v, text)
}

fn failures(v: &Value) -> Vec<(u64, i64)> {
    v["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| {
            (
                f["pid"].as_u64().expect("pid"),
                f["exit"]["code"].as_i64().unwrap_or(-1),
            )
        })
        .collect()
}

#[test]
fn a_failure_is_listed_before_the_tables_however_big_the_tree() {
    let dir = TempDir::new("build-fail");
    let script = "for i in $(seq 60); do ls / >/dev/null; done; sh -c \"exit 3\"";
    let (v, text) = traced(&dir, "fail", &["sh", "-c", script], &["--no-chart"]);
    assert_eq!(v["processes"].as_array().map(Vec::len), Some(63), "{text}");
    // The root (exit 3, as its last command) and the `sh -c "exit 3"` it ran.
    let f = failures(&v);
    assert_eq!(f.len(), 2, "{f:?}\n{text}");
    assert!(f.iter().all(|&(_, code)| code == 3), "{f:?}");
    let failed = section(&text, "FAILED:");
    assert!(
        failed[0].starts_with("FAILED: 2 processes of 63"),
        "{failed:?}\n{text}"
    );
    for (pid, _) in &f {
        let row = failed
            .iter()
            .find(|l| l.split_whitespace().next() == Some(&pid.to_string()))
            .unwrap_or_else(|| panic!("pid {pid} not in the failed section\n{text}"));
        assert_eq!(row.split_whitespace().nth(1), Some("3"), "{row}");
    }
    assert!(
        failed
            .iter()
            .any(|l| l.contains("sh -c exit 3") && l.contains('←')),
        "the failed child and its parent: {failed:?}"
    );
    // Before the tables.
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?}\n{text}"))
    };
    assert!(at("FAILED:") < at("PEAK RSS"), "{text}");
    assert!(!text.contains('\x1b'), "no colour in a file");
    assert_fits(&text, 80);
    let last = recap(&text);
    assert!(
        last.starts_with("exit 3") && last.ends_with("2 failed"),
        "{last}"
    );
}

#[test]
fn a_31_file_build_shows_the_file_each_compiler_compiled() {
    let dir = TempDir::new("build-31");
    let project = c_project(dir.path(), "proj", 31, None);
    let p = project.to_string_lossy();
    let (v, all) = traced(&dir, "all", &["make", "-j2", "-C", &p], &["--top", "0"]);
    assert_eq!(v["exit"]["code"], 0, "{all}");
    let files: Vec<String> = (1..31)
        .map(|i| format!("f{i}.c"))
        .chain(["main.c".to_string()])
        .collect();
    // Each compiler run, by its label, in the JSON and on a row of the 80-column tree.
    let cc1: Vec<&Value> = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter(|p| {
            p["images"]
                .as_array()
                .and_then(|i| i.last())
                .is_some_and(|i| i["exe"].as_str().is_some_and(|e| e.ends_with("/cc1")))
        })
        .collect();
    assert_eq!(cc1.len(), 31, "{all}");
    for f in &files {
        let want = format!("cc1 … {f} ");
        assert!(
            cc1.iter()
                .any(|p| p["label"].as_str().is_some_and(|l| l.starts_with(&want))),
            "no cc1 labelled {want:?} in the JSON"
        );
        assert!(
            all.lines().any(|l| l.contains(&want)),
            "no row shows {want:?}\n{all}"
        );
    }
    assert_fits(&all, 80);
    recap(&all);
    // Over --top, the runs are grouped, the heaviest kept as a row (a fresh copy: the first
    // is built).
    let again = c_project(dir.path(), "again", 31, None);
    let a = again.to_string_lossy();
    let (gv, grouped) = traced(&dir, "grouped", &["make", "-j2", "-C", &a], &[]);
    assert!(grouped.contains("cc1 ×31"), "{grouped}");
    assert!(grouped.contains("cc ×32"), "{grouped}");
    assert!(
        section(&grouped, "top by CPU")[0].contains("top by peak RSS"),
        "{grouped}"
    );
    assert_fits(&grouped, 80);
    let last = recap(&grouped);
    assert!(
        last.contains(" cc1 ") && last.ends_with("0 failed"),
        "{last}"
    );
    // CPU over time adds up to the total CPU, to the nanosecond, in both builds.
    assert_cpu_integral(&v);
    assert_cpu_integral(&gv);
}

/// The CPU series' integral against user + sys, its labels, and parallelism.
fn assert_cpu_integral(v: &Value) {
    let cpu = &v["timeline"]["cpu"];
    let sum: u64 = cpu["cpu_ns"]
        .as_array()
        .expect("cpu_ns")
        .iter()
        .map(|x| x.as_u64().expect("ns"))
        .sum();
    let total = v["user_ns"].as_u64().expect("user") + v["sys_ns"].as_u64().expect("sys");
    assert_eq!(sum, total, "the CPU series' integral against user + sys");
    assert_eq!(cpu["total_cpu_ns"].as_u64(), Some(total));
    // Sampled by the kernel's CPU clock program (this file does not run through an agent).
    assert_eq!(cpu["method"], "ticks", "{cpu}");
    assert_eq!(
        cpu["approximate"], false,
        "labelled sampled, not approximate"
    );
    let wall = v["wall_ns"].as_u64().expect("wall") as f64;
    let par = v["parallelism"].as_f64().expect("parallelism");
    assert!((par - total as f64 / wall).abs() < 1e-9, "{par}");
}

/// make -j3 runs a → b → c → d (200, 210, 220, 230 ms, each waiting for the one before) beside
/// e and f (300 ms each, started with a): the critical path is the chain.
#[test]
fn the_critical_path_is_the_longest_dependency_chain() {
    let dir = TempDir::new("build-path");
    let mk = dir.path().join("Makefile");
    let rule = |t: &str, dep: &str, ms: u32| format!("{t}: {dep}\n\t{WL} sleep {ms} {t}\n");
    let makefile = [
        ".PHONY: all a b c d e f\nall: d e f\n".to_string(),
        rule("a", "", 200),
        rule("b", "a", 210),
        rule("c", "b", 220),
        rule("d", "c", 230),
        rule("e", "", 300),
        rule("f", "", 300),
    ]
    .concat();
    std::fs::write(&mk, makefile).expect("Makefile");
    let mkp = mk.to_string_lossy();
    let (v, text) = traced(&dir, "path", &["make", "-s", "-j3", "-f", &mkp], &[]);
    let procs = v["processes"].as_array().expect("processes");
    let target = |pid: u64| -> Option<String> {
        let p = procs.iter().find(|p| p["pid"].as_u64() == Some(pid))?;
        let argv = p["images"].as_array()?.last()?["argv"].as_array()?.clone();
        (argv.len() == 4 && argv[1] == "sleep").then(|| argv[3].as_str().unwrap_or("").to_string())
    };
    let path = v["critical_path"].as_array().expect("critical_path");
    let share: f64 = path
        .iter()
        .map(|s| s["share"].as_f64().expect("share"))
        .sum();
    assert!(
        (share - 1.0).abs() < 1e-6,
        "shares add up to the wall: {share}"
    );
    let steps: Vec<String> = path
        .iter()
        .filter_map(|s| s["pid"].as_u64().and_then(target))
        .collect();
    assert_eq!(steps, ["a", "b", "c", "d"], "{path:#?}");
    // Each step's share is its interval over the wall, and the chain's steps hold at least
    // the 860 ms its sleeps take, whatever make's own time around them.
    let wall = v["wall_ns"].as_u64().expect("wall_ns");
    let ns = |s: &serde_json::Value, k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k}: {s}"));
    for s in path {
        let d = ns(s, "end_ns") - ns(s, "start_ns");
        let want = d as f64 / wall as f64;
        let got = s["share"].as_f64().expect("share");
        assert!(
            (got - want).abs() < 1e-9,
            "share {got} of a {d} ns step over {wall} ns"
        );
    }
    let chain: u64 = path
        .iter()
        .filter(|s| s["pid"].as_u64().and_then(target).is_some())
        .map(|s| ns(s, "end_ns") - ns(s, "start_ns"))
        .sum();
    assert!(
        chain >= 860_000_000 && chain <= wall,
        "the chain's steps hold {chain} ns of a {wall} ns wall, its sleeps 860 ms\n{text}"
    );
    let lines = section(&text, "critical path");
    for t in ["a", "b", "c", "d"] {
        assert!(
            lines
                .iter()
                .any(|l| l.ends_with(&format!(" {t}")) && l.contains('%')),
            "step {t} in the summary: {lines:#?}"
        );
    }
}

#[test]
fn a_saved_report_is_drawn_again_as_it_ran() {
    let dir = TempDir::new("build-saved");
    let project = c_project(dir.path(), "proj", 6, Some("f3.c"));
    let p = project.to_string_lossy();
    let html = dir.path().join("run.html");
    let (_, text) = traced(
        &dir,
        "saved",
        &["make", "-k", "-j2", "-C", &p],
        &["--html", &html.to_string_lossy()],
    );
    let json = dir.path().join("saved.json");
    let again = std::process::Command::new(spacetime_bin())
        .arg("report")
        .arg(&json)
        .env("COLUMNS", "80")
        .env("LANG", "C.UTF-8")
        .output()
        .expect("spacetime report");
    assert!(again.status.success(), "{again:?}");
    assert_eq!(String::from_utf8_lossy(&again.stdout), text);
    let page = dir.path().join("again.html");
    spacetime_tests::pictures::report_to(&json, "--html", &page);
    assert_eq!(
        std::fs::read(&page).expect("page"),
        std::fs::read(&html).expect("the run's page"),
        "the page of the saved report is the run's"
    );
}

/// A build whose one step touches `mib` MiB.
fn build_of(dir: &TempDir, tag: &str, mib: u32) -> std::path::PathBuf {
    let mk = dir.path().join(format!("{tag}.mk"));
    std::fs::write(
        &mk,
        format!(".PHONY: all\nall:\n\t{WL} touch {mib}\n\ttrue\n"),
    )
    .expect("mk");
    traced(
        dir,
        tag,
        &["make", "-s", "-f", &mk.to_string_lossy()],
        &["--no-chart"],
    );
    dir.path().join(format!("{tag}.json"))
}

fn diff(a: &std::path::Path, b: &std::path::Path, extra: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(spacetime_bin())
        .arg("diff")
        .args(extra)
        .arg(a)
        .arg(b)
        .env("COLUMNS", "80")
        .output()
        .expect("spacetime diff");
    (
        out.status.code().expect("an exit code"),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn diff_fails_a_build_whose_peak_grew_by_ten_percent_and_passes_one_that_did_not() {
    let dir = TempDir::new("build-diff");
    let base = build_of(&dir, "base", 100);
    let same = build_of(&dir, "same", 100);
    let grown = build_of(&dir, "grown", 110);
    let gate = ["--fail-on", "peak:+5%"];
    let (code, text) = diff(&base, &grown, &gate);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("OVER THRESHOLD: peak RSS (largest process) +"),
        "{text}"
    );
    let (code, text) = diff(&base, &same, &gate);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("no threshold crossed"), "{text}");
    assert_fits(&text, 80);
    let (code, md) = diff(
        &base,
        &grown,
        &["--format", "markdown", "--fail-on", "tree-peak:+5%"],
    );
    assert_eq!(code, 1, "{md}");
    assert!(
        md.contains("| `tree-wide peak RSS` |") && md.contains(":x:"),
        "{md}"
    );
    // Not a report at all: spacetime's own failure.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, "{\"x\": 1}").expect("junk");
    assert_eq!(diff(&base, &junk, &[]).0, 125);
}

/// A CI gate fails on new failures without being told to: a build whose step newly fails (its
/// make still exits 0) exits 1 with no `--fail-on`; `--fail-on failures:+1` loosens that.
#[test]
fn diff_fails_a_build_that_newly_fails_unless_told_otherwise() {
    let dir = TempDir::new("build-diff-failed");
    // The shell's own `false` would be no process: /bin/false is one.
    let (ok, _) = traced(
        &dir,
        "ok",
        &["sh", "-c", "/bin/true; true"],
        &["--no-chart"],
    );
    let (failed, _) = traced(
        &dir,
        "failed",
        &["sh", "-c", "/bin/false; true"],
        &["--no-chart"],
    );
    assert_eq!(failures(&ok).len(), 0, "the good run has no failure");
    assert_eq!(failures(&failed).len(), 1, "the bad run has one failure");
    let (a, b) = (dir.path().join("ok.json"), dir.path().join("failed.json"));
    let (code, text) = diff(&a, &b, &[]);
    assert_eq!(code, 1, "a new failure passed the gate:\n{text}");
    assert!(text.contains("OVER THRESHOLD: failed +1"), "{text}");
    let (code, text) = diff(&a, &b, &["--fail-on", "peak:+50%"]);
    assert_eq!(
        code, 1,
        "naming another figure keeps the failure gate:\n{text}"
    );
    let (code, text) = diff(&a, &b, &["--fail-on", "failures:+1"]);
    assert_eq!(code, 0, "--fail-on failures:+1 allows one:\n{text}");
    // Fewer failures is no failure.
    assert_eq!(diff(&b, &a, &[]).0, 0);
}

/// Files handed to `report` and `diff` are untrusted: a device that never ends, noise, a file
/// larger than the limit, a report of a newer spacetime. Each is refused (125) with words that
/// say why: the devices at their first byte, the large file before it is read.
#[test]
fn report_and_diff_refuse_what_they_cannot_read_as_a_report() {
    let dir = TempDir::new("report-input");
    traced(&dir, "ok", &["true"], &["--no-chart"]);
    let ok = dir.path().join("ok.json");
    let run = |args: &[&std::ffi::OsStr]| {
        let out = std::process::Command::new(spacetime_bin())
            .args(args)
            .output()
            .expect("spacetime");
        (
            out.status.code().expect("an exit code"),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let os = |s: &'static str| std::ffi::OsStr::new(s);
    let (code, err) = run(&[os("report"), os("/dev/zero")]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("not a spacetime report") && err.contains("the byte 0x00"),
        "{err}"
    );
    let (code, err) = run(&[
        os("diff"),
        ok.as_os_str(),
        os("/dev/urandom"),
        os("--max-input"),
        os("1M"),
    ]);
    assert_eq!(code, 125, "{err}");
    assert!(err.contains("/dev/urandom: "), "{err}");
    let (code, err) = run(&[os("report"), os("--max-input"), os("100"), ok.as_os_str()]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("more than the 100 B read without --max-input"),
        "{err}"
    );
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(&ok).expect("ok.json")).expect("JSON");
    v["schema_version"] = 999.into();
    let newer = dir.path().join("newer.json");
    std::fs::write(&newer, v.to_string()).expect("newer.json");
    let (code, err) = run(&[os("report"), newer.as_os_str()]);
    assert_eq!(code, 125, "{err}");
    assert!(
        err.contains("written by a newer spacetime (schema version 999"),
        "{err}"
    );
    // The report itself still reads.
    assert_eq!(run(&[os("report"), ok.as_os_str()]).0, 0);
}
