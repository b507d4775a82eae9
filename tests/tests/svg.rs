//! The SVG pictures (`--svg`) as a browser and an image viewer show them: well-formed XML with
//! its size stated and nothing that could run or load, the peak marked where the JSON report
//! says and written with its figures, a traced argv of markup and control bytes kept as text,
//! the same picture from Chromium and from librsvg's `rsvg-convert`, a bench's runs as dots
//! with its means, and a path that cannot be written refused before CMD runs.

use std::{ffi::OsString, os::unix::ffi::OsStringExt, path::Path, process::Command};

use serde_json::Value;
use spacetime_tests::{
    chromium::{rgb, screenshot},
    spacetime_bin, TempDir, Trace,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn parse(svg: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed XML: {e}"))
}

fn by_id<'a>(doc: &'a roxmltree::Document, id: &str) -> roxmltree::Node<'a, 'a> {
    doc.descendants()
        .find(|n| n.attribute("id") == Some(id))
        .unwrap_or_else(|| panic!("no #{id}"))
}

/// Stands alone: a size, a view box, and no script, foreign content, link, style sheet or
/// reference to anything outside the file.
fn assert_self_contained(doc: &roxmltree::Document, text: &str) -> (f64, f64) {
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let dim = |a: &str| -> f64 {
        root.attribute(a)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no numeric {a}"))
    };
    let (w, h) = (dim("width"), dim("height"));
    assert_eq!(root.attribute("viewBox"), Some(&*format!("0 0 {w} {h}")));
    for n in doc.descendants() {
        let t = n.tag_name().name();
        assert!(
            !matches!(
                t,
                "script" | "foreignObject" | "style" | "image" | "use" | "a"
            ),
            "<{t}> in the picture"
        );
        for a in n.attributes() {
            assert!(
                !a.name().starts_with("on") && a.name() != "href" && !a.value().contains("url("),
                "{}={:?}",
                a.name(),
                a.value()
            );
        }
    }
    assert!(!text.contains("@import") && !text.contains("<!ENTITY"));
    (w, h)
}

/// A size written as the summary writes it ("100 MiB", "74.8 MiB") back in bytes, and the
/// most its rounding can hide.
fn bytes_shown(s: &str) -> (f64, f64) {
    let (v, unit) = s.split_once(' ').unwrap_or_else(|| panic!("{s:?}"));
    let shift = match unit {
        "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => panic!("unit {unit:?}"),
    };
    let digits = v.split_once('.').map_or(0, |(_, d)| d.len());
    let scale = (1u64 << shift) as f64;
    // A value half-way between two shown ones may be shown as either (10.25 MiB as 10.2):
    // the slack is half a last digit, and a hair more for the float arithmetic.
    (
        v.parse::<f64>().expect("a number") * scale,
        0.5 * 10f64.powi(-(digits as i32)) * scale * (1.0 + 1e-9),
    )
}

/// Renders the picture with Chromium and with rsvg-convert: both draw something, and the two
/// agree on all but a few pixels (glyph edges).
fn assert_renders_alike(svg: &Path, dir: &Path, w: f64, h: f64) {
    let (w, h) = (w as u32, h as u32);
    let shot = screenshot(svg, dir, w, h);
    let png = dir.join("rsvg.png");
    let out = Command::new("rsvg-convert")
        .arg(svg)
        .arg("-o")
        .arg(&png)
        .output()
        .expect("rsvg-convert (cargo xtask test installs librsvg2-bin)");
    assert!(
        out.status.success(),
        "rsvg-convert: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (cw, ch, c) = rgb(&shot);
    let (rw, rh, r) = rgb(&png);
    assert_eq!((rw, rh), (w, h), "rsvg's size is the picture's");
    assert_eq!((cw, ch), (w, h), "Chromium's size is the window's");
    let differ = c
        .chunks(3)
        .zip(r.chunks(3))
        .filter(|(a, b)| a.iter().zip(b.iter()).any(|(x, y)| x.abs_diff(*y) > 64))
        .count();
    let dark = r.chunks(3).filter(|p| p.iter().all(|&v| v < 120)).count();
    let total = (w * h) as usize;
    assert!(
        dark > total / 500,
        "hardly any text drawn: {dark} of {total}"
    );
    assert!(
        differ * 100 < total * 2,
        "Chromium and rsvg differ in {differ} of {total} pixels ({} and {})",
        shot.display(),
        png.display()
    );
}

#[test]
fn a_trace_is_drawn_as_its_json_says_in_a_browser_and_an_image_viewer() {
    let dir = TempDir::new("svg-trace");
    let svg = dir.path().join("t.svg");
    let script = format!("{WL} touch 8; {WL} touch 48; {WL} exit 3 || true");
    let out = Trace::new(["sh", "-c", &script])
        .flag("-q")
        .flag("--svg")
        .flag(&svg)
        .run();
    let v = out.json_value();
    let text = std::fs::read_to_string(&svg).expect("the picture");
    let doc = parse(&text);
    let (w, h) = assert_self_contained(&doc, &text);
    let peak = by_id(&doc, "peak");
    let json_peak = v["totals"]["tree_peak_rss_bytes"].as_u64().expect("peak");
    let json_at = v["totals"]["tree_peak_at_ns"].as_u64().expect("at");
    assert_eq!(peak.attribute("data-bytes"), Some(&*json_peak.to_string()));
    assert_eq!(peak.attribute("data-at-ns"), Some(&*json_at.to_string()));
    // What it writes: "peak 48.6 MiB at 57.3 ms", the size within its rounding of the JSON's.
    let label = by_id(&doc, "peak-label").text().expect("the peak's label");
    let size = label
        .strip_prefix("peak ")
        .and_then(|s| s.split(" at ").next())
        .expect(label);
    let (shown, slack) = bytes_shown(size);
    assert!(
        (shown - json_peak as f64).abs() <= slack,
        "{label:?} for {json_peak} bytes"
    );
    // The marker sits on the curve's highest point.
    let cy: f64 = peak
        .children()
        .find(|n| n.has_tag_name("circle"))
        .and_then(|c| c.attribute("cy"))
        .and_then(|v| v.parse().ok())
        .expect("the marker's y");
    let d = by_id(&doc, "memory-area").attribute("d").expect("the area");
    let top = d
        .split('V')
        .skip(1)
        .filter_map(|s| s.split(|c: char| c.is_ascii_alphabetic()).next())
        .filter_map(|v| v.parse::<f64>().ok())
        .fold(f64::INFINITY, f64::min);
    assert!(
        (top - cy).abs() < 0.11,
        "the curve's top {top}, the marker {cy}"
    );
    let procs = v["processes"].as_array().expect("processes").len();
    assert_eq!(
        by_id(&doc, "bars").text(),
        Some(&*procs.to_string()),
        "a bar each"
    );
    let failed = v["failures"].as_array().map_or(0, Vec::len);
    assert!(failed >= 1, "exit 3 is a failure");
    assert_eq!(
        by_id(&doc, "failed").attribute("data-count"),
        Some(&*failed.to_string())
    );
    assert_renders_alike(&svg, dir.path(), w, h);
}

#[test]
fn hostile_argv_bytes_are_text_in_the_picture() {
    let dir = TempDir::new("svg-hostile");
    let svg = dir.path().join("h.svg");
    let words: Vec<OsString> = vec![
        WL.into(),
        "touch".into(),
        "1".into(),
        "</text><script>alert(1)</script>".into(),
        OsString::from_vec(b"\x1b[31m\x01\xff\xfe&amp;\"'".to_vec()),
    ];
    let out = Trace::new(&words).flag("-q").flag("--svg").flag(&svg).run();
    assert!(out.status.success(), "{}", out.context());
    let text = std::fs::read_to_string(&svg).expect("the picture");
    let doc = parse(&text);
    let (w, h) = assert_self_contained(&doc, &text);
    let command = by_id(&doc, "command").text().expect("the command");
    assert!(
        command.ends_with(" touch 1 </text><script>alert(1)</script> \u{fffd}[31m\u{fffd}\u{fffd}\u{fffd}&amp;\"'"),
        "{command:?}"
    );
    // Chromium shows it as a picture, not an error page.
    let shot = screenshot(&svg, dir.path(), w as u32, h as u32);
    let (_, _, px) = rgb(&shot);
    assert!(px.chunks(3).filter(|p| p.iter().all(|&v| v < 120)).count() > 500);
    assert!(!text.contains("<script"), "markup from argv");
}

fn bench_svg(dir: &TempDir) -> (Value, std::path::PathBuf) {
    let svg = dir.path().join("b.svg");
    let json = dir.path().join("b.json");
    let st = Command::new(spacetime_bin())
        .args(["bench", "-q", "-N", "-r", "3", "--json"])
        .arg(&json)
        .arg("--svg")
        .arg(&svg)
        .arg(format!("{WL} touch 8"))
        .arg(format!("{WL} touch 32"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("spacetime bench");
    assert!(st.success());
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("json");
    (v, svg)
}

#[test]
fn a_bench_is_drawn_run_by_run_with_its_means() {
    let dir = TempDir::new("svg-bench");
    let (v, svg) = bench_svg(&dir);
    let text = std::fs::read_to_string(&svg).expect("the picture");
    let doc = parse(&text);
    let (w, h) = assert_self_contained(&doc, &text);
    let results = v["results"].as_array().expect("results");
    for (fig, key) in [
        ("wall", "wall_ns"),
        ("peak", "peak_rss_bytes"),
        ("tree", "tree_peak_rss_bytes"),
    ] {
        let g = doc
            .descendants()
            .find(|n| n.attribute("data-figure") == Some(fig))
            .unwrap_or_else(|| panic!("no {fig} strip"));
        let runs: Vec<f64> = g
            .descendants()
            .filter(|n| n.attribute("class") == Some("run"))
            .filter_map(|n| n.attribute("data-value")?.parse().ok())
            .collect();
        let mut want: Vec<f64> = results
            .iter()
            .flat_map(|r| r[key]["values"].as_array().expect("values").iter())
            .filter_map(Value::as_f64)
            .collect();
        let mut got = runs.clone();
        want.sort_by(f64::total_cmp);
        got.sort_by(f64::total_cmp);
        assert_eq!(got, want, "{fig}: a dot per run, at its value");
        for (k, r) in results.iter().enumerate() {
            let stats = g
                .descendants()
                .find(|n| n.attribute("data-command") == Some(&*k.to_string()))
                .expect("the command's figures");
            let mean = r[key]["mean"].as_f64().expect("mean");
            let shown: f64 = stats
                .attribute("data-mean")
                .and_then(|m| m.parse().ok())
                .expect("data-mean");
            assert_eq!(shown, mean, "{fig} of command {k}");
            let words = stats.text().expect("the figures' text");
            assert!(words.ends_with("3 runs"), "{words:?}");
            if fig != "wall" {
                let (m, slack) = bytes_shown(words.split(" ± ").next().expect("a mean"));
                assert!((m - mean).abs() <= slack, "{words:?} for a mean of {mean}");
            }
        }
    }
    assert_renders_alike(&svg, dir.path(), w, h);
    // The saved bench report gives the same picture.
    let again = dir.path().join("again.svg");
    spacetime_tests::pictures::report_to(&dir.path().join("b.json"), "--svg", &again);
    assert!(
        std::fs::read(&again).expect("again") == text.as_bytes(),
        "the saved report's picture differs from the bench's"
    );
}

#[test]
fn a_path_that_cannot_be_written_is_refused_before_cmd_runs() {
    let dir = TempDir::new("svg-refused");
    let mark = dir.path().join("ran");
    let out = Command::new(spacetime_bin())
        .args([
            "trace",
            "-q",
            "--svg",
            "/nonexistent-dir/t.svg",
            "--",
            "touch",
        ])
        .arg(&mark)
        .output()
        .expect("spacetime trace");
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("/nonexistent-dir/t.svg") && err.contains("nothing was run"),
        "{err}"
    );
    assert!(!mark.exists(), "CMD ran");
}
