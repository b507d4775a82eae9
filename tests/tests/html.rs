//! The HTML reports in a real browser: headless Chromium loads each page offline, and what it
//! rendered is checked against the JSON report of the same run — the peak label against
//! `tree_peak_rss_bytes`, the max PSS against `max_pss_bytes` (or its reason), the failed count, a timeline bar for every process — with no
//! script error and a screenshot that shows something. Real builds (make -j2 of a C project
//! with a broken file, cargo build of a crate), a bench, a 1 000-process build under 2 MB and
//! a 100 000-process report that still opens.

use std::{path::Path, process::Command, time::Duration};

use serde_json::Value;
use spacetime_tests::{
    build::{c_project, tiny_crate},
    chromium::{render, Rendered},
    spacetime_bin, TempDir, Trace,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// Traces `cmd` with `--html`; returns the report and the page's path.
fn traced_page(dir: &TempDir, tag: &str, cmd: &[&str]) -> (Value, std::path::PathBuf) {
    let page = dir.path().join(format!("{tag}.html"));
    let out = Trace::new(cmd)
        .tag(tag)
        .flag("-q")
        .flag("--html")
        .flag(&page)
        .timeout(Duration::from_secs(600))
        .run();
    let v = out.json_value();
    assert!(page.is_file(), "no page\n{}", out.context());
    (v, page)
}

/// What every trace page must show of its report.
fn check_against(r: &Rendered, v: &Value) {
    r.assert_ran();
    let peak = v["totals"]["tree_peak_rss_bytes"]
        .as_u64()
        .expect("tree peak");
    assert_eq!(
        r.attr("id=\"tree-peak\"", "data-bytes"),
        Some(peak.to_string()),
        "the peak label's figure"
    );
    assert_eq!(
        r.attr("id=\"mem-peak\"", "data-bytes"),
        Some(peak.to_string()),
        "the memory chart's peak"
    );
    let shown = r.text("id=\"tree-peak\"").expect("peak text");
    assert!(shown.ends_with("iB") || shown.ends_with(" B"), "{shown}");
    check_max_pss(r, v);
    check_mean_rss_on_cpu(r, v);
    let procs = v["processes"].as_array().expect("processes");
    // A report written by spacetime lists them; a synthetic one has only the exits.
    let failed = v["failures"].as_array().map_or_else(
        || {
            procs
                .iter()
                .filter(|p| p["exit"]["code"].as_i64().is_some_and(|c| c != 0))
                .count()
        },
        Vec::len,
    );
    assert_eq!(
        r.attr("id=\"failed\"", "data-count"),
        Some(failed.to_string())
    );
    let n = procs.len();
    assert_eq!(
        r.attr("id=\"processes\"", "data-count"),
        Some(n.to_string())
    );
    assert_eq!(
        r.attr("id=\"timeline\"", "data-bars"),
        Some(n.to_string()),
        "a timeline bar for every process"
    );
    let cpu = v["user_ns"].as_u64().expect("user") + v["sys_ns"].as_u64().expect("sys");
    assert_eq!(r.attr("id=\"cpu-total\"", "data-ns"), Some(cpu.to_string()));
    if failed > 0 {
        assert!(r.dom.contains("id=\"failures\""), "the failures table");
    }
}

/// The max PSS chip: the JSON's `totals.max_pss_bytes` when it is a figure, else why not
/// (the report's reason when nothing was read, the summary's few words when it is withheld).
/// Returns what it shows.
fn check_max_pss(r: &Rendered, v: &Value) -> String {
    let shown = r.text("id=\"max-pss\"").expect("max PSS chip");
    let figure = v["totals"]["max_pss_bytes"].as_u64();
    assert_eq!(
        r.attr("id=\"max-pss\"", "data-bytes"),
        Some(figure.map_or(String::new(), |b| b.to_string())),
        "the max PSS chip's figure"
    );
    match (figure, v["totals"]["max_pss_unknown_reason"].as_str()) {
        (Some(_), _) => assert!(shown.ends_with("iB") || shown.ends_with(" B"), "{shown}"),
        (None, Some(why)) => assert!(
            shown == why
                || (shown.starts_with("unknown: about ") && shown.contains(" estimated, ")),
            "max PSS null ({why}), the page shows {shown:?}"
        ),
        (None, None) => assert_eq!(shown, "?"),
    }
    shown
}

/// The mean RSS on CPU chip: the JSON's `totals.mean_rss_on_cpu_bytes`, else its reason; the
/// programs table has its column. Returns what the chip shows.
fn check_mean_rss_on_cpu(r: &Rendered, v: &Value) -> String {
    let chip = "id=\"figure-mean_rss_on_cpu_bytes\"";
    let shown = r.text(chip).expect("mean RSS on CPU chip");
    let figure = v["totals"]["mean_rss_on_cpu_bytes"].as_u64();
    assert_eq!(
        r.attr(chip, "data-value"),
        Some(figure.map_or(String::new(), |b| b.to_string())),
        "the mean RSS on CPU chip's figure"
    );
    match (
        figure,
        v["totals"]["mean_rss_on_cpu_unknown_reason"].as_str(),
    ) {
        (Some(_), _) => assert!(shown.ends_with("iB") || shown.ends_with(" B"), "{shown}"),
        (None, Some(why)) => assert_eq!(shown, why, "null, the page says why"),
        // A synthetic report without the key: derived again, with its reason.
        (None, None) => assert!(!shown.is_empty() && shown != "?", "{shown:?}"),
    }
    assert!(
        r.dom.contains("mean RSS on CPU</th>"),
        "the programs table's column"
    );
    shown
}

/// A process that holds 64 MiB while it burns CPU: the page's mean RSS on CPU is the JSON's,
/// to the byte (tests/taskstats.rs checks the figure against the process's own VmRSS).
#[test]
fn the_mean_rss_on_cpu_on_the_page_is_the_reports() {
    let dir = TempDir::new("html-mean-rss");
    let (v, page) = traced_page(&dir, "hold", &[WL, "hold-burn", "64", "300"]);
    let r = render(&page, dir.path(), 1280, 1200);
    check_against(&r, &v);
    let shown = check_mean_rss_on_cpu(&r, &v);
    assert!(shown.ends_with("MiB"), "{shown}");
}

/// A process that holds 64 MiB: the page's max PSS is the JSON's, to the byte (tests/pss.rs
/// checks the figure against the processes' own PSS). The figure is
/// given only when a PSS round read the tree at its peak, so the hold doubles until one did.
#[test]
fn the_max_pss_on_the_page_is_the_reports() {
    let dir = TempDir::new("html-pss");
    let mut hold = 300;
    for _ in 0..5 {
        let (v, page) = traced_page(&dir, "pss", &[WL, "pss-touch", "64", &hold.to_string()]);
        let r = render(&page, dir.path(), 1280, 1200);
        check_against(&r, &v);
        if v["totals"]["max_pss_bytes"].as_u64().is_some() {
            return;
        }
        hold *= 2;
    }
    panic!("max PSS unknown after five holds up to {} ms", hold / 2);
}

/// With PSS sampling off the page says so, in the report's words.
#[test]
fn a_page_without_pss_rounds_says_why() {
    let dir = TempDir::new("html-nopss");
    let page = dir.path().join("nopss.html");
    let out = Trace::new([WL, "pss-touch", "8", "0"])
        .tag("nopss")
        .flag("-q")
        .flag("--pss-interval")
        .flag("0")
        .flag("--html")
        .flag(&page)
        .run();
    let v = out.json_value();
    assert!(v["totals"]["max_pss_bytes"].is_null(), "{}", out.context());
    let r = render(&page, dir.path(), 1280, 1200);
    check_against(&r, &v);
    let why = v["totals"]["max_pss_unknown_reason"].as_str().expect("why");
    assert_eq!(check_max_pss(&r, &v), why);
}

#[test]
fn a_make_build_with_a_broken_file_renders_as_its_json_says() {
    let dir = TempDir::new("html-make");
    let project = c_project(dir.path(), "proj", 12, Some("f5.c"));
    let p = project.to_string_lossy();
    let (v, page) = traced_page(&dir, "make", &["make", "-k", "-j2", "-C", &p]);
    assert_eq!(v["exit"]["code"], 2, "make -k failed");
    // cc1 and cc of f5.c, and make itself.
    assert!(v["failures"].as_array().map(Vec::len).unwrap_or(0) >= 3);
    let r = render(&page, dir.path(), 1280, 2000);
    check_against(&r, &v);
    let colours = r.assert_screenshot_drawn();
    eprintln!(
        "make page: {} bytes, loaded in {:?}, {colours} colours, screenshot {}",
        std::fs::metadata(&page).map(|m| m.len()).unwrap_or(0),
        r.load,
        r.screenshot.display()
    );
}

#[test]
fn a_cargo_build_renders_as_its_json_says() {
    let dir = TempDir::new("html-cargo");
    let krate = tiny_crate(dir.path());
    let target = dir.path().join("target");
    let manifest = krate.join("Cargo.toml");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let (v, page) = traced_page(
        &dir,
        "cargo",
        &[
            &cargo,
            "build",
            "--offline",
            "--manifest-path",
            &manifest.to_string_lossy(),
            "--target-dir",
            &target.to_string_lossy(),
        ],
    );
    assert_eq!(v["exit"]["code"], 0, "cargo build");
    let labels: Vec<&str> = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .filter_map(|p| p["label"].as_str())
        .collect();
    assert!(
        labels
            .iter()
            .any(|l| l.starts_with("rustc --crate-name tiny ")),
        "the crate's rustc by its label: {labels:?}"
    );
    let r = render(&page, dir.path(), 1280, 1600);
    check_against(&r, &v);
    r.assert_screenshot_drawn();
}

#[test]
fn a_bench_page_draws_every_run() {
    let dir = TempDir::new("html-bench");
    let page = dir.path().join("bench.html");
    let json = dir.path().join("bench.json");
    let st = Command::new(spacetime_bin())
        .args(["bench", "-q", "-N", "-r", "3", "--json"])
        .arg(&json)
        .arg("--html")
        .arg(&page)
        .arg(format!("{WL} touch 8"))
        .arg(format!("{WL} touch 16"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("spacetime bench");
    assert!(st.success());
    let r = render(&page, dir.path(), 1200, 1400);
    r.assert_ran();
    assert_eq!(r.attr("id=\"results\"", "data-count").as_deref(), Some("2"));
    assert_eq!(
        r.attr("data-figure=\"wall\"", "data-points").as_deref(),
        Some("6"),
        "a dot per run"
    );
    r.assert_screenshot_drawn();
    // The saved bench report gives the same page.
    let again = dir.path().join("again.html");
    spacetime_tests::pictures::report_to(&json, "--html", &again);
    let read = |p: &Path| std::fs::read_to_string(p).expect("page");
    assert!(
        read(&again) == read(&page),
        "the saved bench report's page differs from the bench's"
    );
}

/// A parameter scan as hyperfine writes it (`parameters` on each result): the page draws a
/// curve per command over the parameter, a point per value, for time and both peaks.
#[test]
fn a_parameter_scan_is_drawn_as_curves() {
    let dir = TempDir::new("html-scan");
    let json = dir.path().join("scan.json");
    let figure = |base: u64, i: u64| {
        let values: Vec<u64> = (0..3).map(|k| base * (i + 1) + k * 1000).collect();
        let mean = values.iter().sum::<u64>() as f64 / 3.0;
        serde_json::json!({"mean": mean, "stddev": 1000.0, "median": values[1] as f64,
                           "min": values[0], "max": values[2], "values": values})
    };
    let results: Vec<Value> = ["gzip", "zstd"]
        .iter()
        .flat_map(|tool| {
            (1..=4u64).map(move |j| {
                serde_json::json!({
                    "command": format!("{tool} -{j} big.tar"), "runs": 3, "exit_codes": [0, 0, 0],
                    "parameters": {"level": j.to_string()},
                    "wall_ns": figure(50_000_000, j), "user_ns": figure(40_000_000, j),
                    "sys_ns": figure(1_000_000, j), "peak_rss_bytes": figure(4 << 20, j),
                    "tree_peak_rss_bytes": figure(5 << 20, j), "processes": figure(1, 0)
                })
            })
        })
        .collect();
    let report = serde_json::json!({"spacetime_version": "0.1.0", "programs": "own",
        "interrupted": false, "results": results, "comparison": null});
    std::fs::write(&json, report.to_string()).expect("write");
    let page = dir.path().join("scan.html");
    spacetime_tests::pictures::report_to(&json, "--html", &page);
    let r = render(&page, dir.path(), 1200, 2400);
    r.assert_ran();
    for fig in ["wall", "peak", "tree"] {
        let marker = format!("data-parameter=\"level\" data-figure=\"{fig}\"");
        assert_eq!(
            r.attr(&marker, "data-points").as_deref(),
            Some("8"),
            "{fig}: two curves of four values"
        );
    }
    r.assert_screenshot_drawn();
}

/// A build of 1 000 compiler-like steps (each with a compiler's 20-odd arguments): its page
/// stays under 2 MB.
#[test]
fn a_thousand_process_build_page_is_under_two_megabytes() {
    let dir = TempDir::new("html-1000");
    let mk = dir.path().join("Makefile");
    let flags = "-quiet -imultiarch x86_64-linux-gnu -D_FORTIFY_SOURCE=2 -I/usr/include/project/include -I/usr/include/project/src -mtune=generic -march=x86-64 -O2 -Wall -Wextra -fasynchronous-unwind-tables -fstack-protector-strong -Wformat -Werror=format-security";
    let mut text = String::from(".PHONY: all\nall: $(addprefix o,$(shell seq 1000))\no%:\n");
    text.push_str(&format!(
        "\t@{WL} noop {flags} src/file$*.c -o /tmp/cc$*.s\n"
    ));
    std::fs::write(&mk, text).expect("Makefile");
    let (v, page) = traced_page(
        &dir,
        "k",
        &["make", "-s", "-j2", "-f", &mk.to_string_lossy()],
    );
    let n = v["processes"].as_array().map(Vec::len).unwrap_or(0);
    assert!(n >= 1000, "{n} processes");
    let size = std::fs::metadata(&page).expect("page").len();
    assert!(size < 2 << 20, "the page is {size} bytes");
    let r = render(&page, dir.path(), 1280, 1600);
    check_against(&r, &v);
    eprintln!(
        "1000-process page: {n} processes, {size} bytes, drawn {} ms after navigation",
        r.attr("<body", "data-render-ms").unwrap_or_default()
    );
}

/// A synthetic report of 100 000 processes (a shell starting them one after another, 4 at a
/// time), drawn by `spacetime report --html`: the page opens, every process is placed on the
/// timeline, and loading it takes seconds, not minutes.
#[test]
fn a_hundred_thousand_process_report_opens() {
    let dir = TempDir::new("html-100k");
    let json = dir.path().join("big.json");
    write_big_report(&json, 100_000);
    let page = dir.path().join("big.html");
    spacetime_tests::pictures::report_to(&json, "--html", &page);
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    let r = render(&page, dir.path(), 1280, 1200);
    check_against(&r, &v);
    let size = std::fs::metadata(&page).expect("page").len();
    // Guards against a page that hangs, not a speed (`cargo xtask bench` is where speed lives).
    assert!(
        r.load < Duration::from_secs(300),
        "loading took {:?}",
        r.load
    );
    let drawn_ms: u64 = r
        .attr("<body", "data-render-ms")
        .and_then(|v| v.parse().ok())
        .expect("the page says how long it took");
    assert!(drawn_ms < 200_000, "drawn in {drawn_ms} ms");
    eprintln!(
        "100 000-process page: {size} bytes, drawn {drawn_ms} ms after navigation, chromium ran {:?}",
        r.load
    );
}

/// A report as `trace --json` writes it, for `n` children of one shell, each 1 ms long and 4
/// at a time; the 7th of every 1000 fails.
fn write_big_report(path: &Path, n: usize) {
    use std::io::Write;
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let ms = 1_000_000u64;
    let wall = (n as u64 / 4 + 2) * ms;
    let image = |exe: &str, argv: &str, start: u64, end: u64, peak: u64| {
        format!(
            "{{\"exe\":\"{exe}\",\"argv\":[{argv}],\"comm\":\"x\",\"start_ns\":{start},\"end_ns\":{end},\"peak_rss_bytes\":{peak},\"peak_vm_bytes\":{peak},\"inherited\":false,\"shared_mm\":false,\"exact\":true,\"argv_complete\":true}}"
        )
    };
    let process = |pid: usize,
                   ppid: usize,
                   start: u64,
                   end: u64,
                   code: i32,
                   cpu: u64,
                   img: String| {
        format!(
            "{{\"pid\":{pid},\"ppid\":{ppid},\"start_ns\":{start},\"end_ns\":{end},\"threads\":1,\"exit\":{{\"code\":{code}}},\"state\":\"exited\",\"peak_rss_bytes\":{},\"user_ns\":{cpu},\"sys_ns\":0,\"cpu_final\":true,\"ru_maxrss_bytes\":null,\"images\":[{img}],\"taskstats\":null}}",
            1 << 20
        )
    };
    write!(w, "{{\"schema_version\":1,\"spacetime_version\":\"0.1.0\",\"host\":\"h\",\"kernel_release\":\"6\",\"start_unix_ns\":0,\"start_rfc3339\":\"1970-01-01T00:00:00.000000000Z\",\"command\":[\"sh\"],\"exit\":{{\"code\":0}},\"wall_ns\":{wall},\"user_ns\":{},\"sys_ns\":0,\"lost_events\":0,", n as u64 * ms / 2 + ms).expect("w");
    let tree_peak = 5u64 << 20;
    write!(w, "\"totals\":{{\"processes\":{},\"threads\":{},\"peak_rss_bytes\":{},\"peak_rss_pid\":1,\"execs\":{},\"still_running\":0,\"unknown\":0,\"tree_peak_rss_bytes\":{tree_peak},\"tree_peak_at_ns\":{ms},\"max_pss_bytes\":null,\"cpu_not_final\":0}},\"processes\":[", n + 1, n + 1, 1 << 20, n + 1).expect("w");
    write!(
        w,
        "{}",
        process(
            1,
            0,
            0,
            wall,
            0,
            ms,
            image("/bin/sh", "\"sh\"", 0, wall, 1 << 20)
        )
    )
    .expect("w");
    for i in 0..n {
        let start = (i as u64 / 4) * ms + ms / 2;
        let code = if i % 1000 == 7 { 1 } else { 0 };
        let argv = format!("\"true\",\"job-{i}\"");
        write!(
            w,
            ",{}",
            process(
                i + 2,
                1,
                start,
                start + ms,
                code,
                ms / 2,
                image("/bin/true", &argv, start, start + ms, 1 << 20)
            )
        )
        .expect("w");
    }
    write!(w, "],\"kernel\":{{\"counters\":{{}},\"decode_errors\":0,\"args_gaps\":0,\"page_size\":4096,\"ring_buffer_bytes\":4194304,\"mechanisms\":[]}},\"taskstats\":{{\"available\":false,\"unavailable_reason\":\"synthetic\"}},\"spacetime\":{{}},\"timeline\":{{\"rss_source\":\"kernel\",\"tree_rss\":[[0,1048576],[{ms},{tree_peak}],[{},1048576]]}}}}", 2 * ms).expect("w");
    w.flush().expect("flush");
}
