//! What a person sees on the trace page, read from the pixels Chromium drew and from the
//! page after a synthetic mouse move: the processes and the memory chart on one time axis,
//! the last time label drawn whole, "1 core", no program in the failures' red, and the
//! figures under the pointer. The report is synthetic (figures known exactly:
//! spacetime_tests::pictures), drawn by `spacetime report --html`.

use std::path::PathBuf;

use serde_json::Value;
use spacetime_tests::{
    chromium::{probe, probed},
    pictures::{write_report, PEAK_BYTES},
    TempDir,
};

/// The page of the synthetic report with `extra` more programs.
fn page(dir: &TempDir, extra: usize, fail: bool) -> PathBuf {
    let json = dir.path().join("r.json");
    write_report(&json, extra, fail);
    let page = dir.path().join("r.html");
    spacetime_tests::pictures::report_to(&json, "--html", &page);
    page
}

/// Finds, in device pixels: the child's bar (the rows of the timeline whose first ink is
/// right of a fifth of the width), the memory area's left edge at 30 % of its height (only
/// the 100 MiB plateau reaches there), the rightmost ink of each canvas's label strip (its
/// bottom 20 px), the pixels of the failures' red in the timeline; then records every text
/// the charts draw (redrawn on a resize) and moves the mouse over the memory chart and over
/// the child's bar at the bar's middle, keeping the tooltip's text each time.
const PROBE: &str = r#"
(function () {
  const out = { texts: {}, inkRight: {}, width: {}, labelsRight: {}, cssWidth: {} };
  const fill = CanvasRenderingContext2D.prototype.fillText;
  CanvasRenderingContext2D.prototype.fillText = function (t) {
    (out.texts[this.canvas.id] = out.texts[this.canvas.id] || []).push(String(t));
    return fill.apply(this, arguments);
  };
  window.dispatchEvent(new Event("resize"));
  // Drawn, and not white (a canvas is transparent where nothing was drawn).
  const ink = (d, i) => d[i + 3] > 40 && !(d[i] > 235 && d[i + 1] > 235 && d[i + 2] > 235);
  const img = (c) => c.getContext("2d").getImageData(0, 0, c.width, c.height);
  const tl = document.getElementById("timeline"), mem = document.getElementById("memory");
  const T = img(tl), W = T.width;
  let left = Infinity, right = -1, rows = [];
  for (let y = 0; y < T.height - 24; y++) {
    let first = -1, last = -1;
    for (let x = 0; x < W; x++) if (ink(T.data, (y * W + x) * 4)) { if (first < 0) first = x; last = x; }
    if (first > W / 5) { left = Math.min(left, first); right = Math.max(right, last); rows.push(y); }
  }
  out.barLeft = left; out.barRight = right;
  const M = img(mem), y0 = Math.round(M.height * 0.3);
  let memLeft = -1;
  for (let x = 0; x < M.width; x++) if (ink(M.data, (y0 * M.width + x) * 4)) { memLeft = x; break; }
  out.memLeft = memLeft;
  let red = 0;
  for (let i = 0; i < T.data.length; i += 4) {
    const r = T.data[i] / 255, g = T.data[i + 1] / 255, b = T.data[i + 2] / 255;
    const max = Math.max(r, g, b), min = Math.min(r, g, b), d = max - min;
    if (T.data[i + 3] < 128 || max === 0 || d / max <= 0.5 || max !== r) continue;
    const h = ((g - b) / d) * 60;
    if (Math.abs(h) <= 15) red++;
  }
  out.red = red;
  for (const c of document.querySelectorAll("canvas")) {
    const P = img(c);
    let r = -1;
    for (let y = P.height - 20; y < P.height; y++)
      for (let x = 0; x < P.width; x++) if (ink(P.data, (y * P.width + x) * 4)) r = Math.max(r, x);
    out.inkRight[c.id] = r; out.width[c.id] = P.width;
    out.labelsRight[c.id] = Number(c.dataset.labelsRight);
    out.cssWidth[c.id] = c.getBoundingClientRect().width;
  }
  out.viewport = document.documentElement.clientWidth;
  const dpr = window.devicePixelRatio || 1;
  const mid = (left + right + 1) / 2 / dpr;
  const move = (c, y) => {
    const r = c.getBoundingClientRect();
    c.dispatchEvent(new MouseEvent("mousemove", { clientX: r.left + mid, clientY: r.top + y, bubbles: true }));
    const tip = document.getElementById("tip") || document.querySelector(".tip");
    return tip ? tip.textContent : null;
  };
  if (!isFinite(mid)) { document.body.dataset.probe = JSON.stringify(out); return; }
  out.memTip = move(mem, mem.getBoundingClientRect().height / 2);
  const cursor = document.getElementById("cursor");
  out.cursorNs = cursor ? Number(cursor.dataset.ns) : null;
  if (rows.length) out.barTip = move(tl, (rows[0] + rows[rows.length - 1]) / 2 / dpr);
  document.body.dataset.probe = JSON.stringify(out);
})();
"#;

fn look(extra: usize, fail: bool) -> Value {
    let dir = TempDir::new(&format!("html-view-{extra}-{fail}"));
    let page = page(&dir, extra, fail);
    let dom = probe(&page, dir.path(), 1280, 1400, PROBE);
    probed(&dom)
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn a_process_lines_up_with_its_memory_and_the_last_label_is_whole() {
    let v = look(0, false);
    // The child starts at 400 ms, when the tree's RSS rises to 100 MiB: one column on both.
    let (bar, area) = (num(&v["barLeft"]), num(&v["memLeft"]));
    assert!(
        bar.is_finite() && area > 0.0,
        "the bar or the area not found: {v}"
    );
    assert!(
        (bar - area).abs() <= 1.0,
        "the child's bar starts at x={bar}, the memory it used at x={area}: {v}"
    );
    for id in ["memory", "cpu", "timeline"] {
        let (ink, width) = (num(&v["inkRight"][id]), num(&v["width"][id]));
        // A label is drawn near the end (1.00 s sits at the plot's right end), not cut.
        assert!(
            ink < width - 1.0 && ink > width - 80.0,
            "{id}: the labels' ink ends at {ink} of {width}: {v}"
        );
        let (right, css) = (num(&v["labelsRight"][id]), num(&v["cssWidth"][id]));
        assert!(
            right <= css && css <= num(&v["viewport"]),
            "{id}: the last label ends at {right}, the canvas at {css}: {v}"
        );
    }
    let cpu: Vec<&str> = v["texts"]["cpu"]
        .as_array()
        .expect("the CPU chart's texts")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    // Two cores at the top: its middle is one core.
    assert!(
        cpu.contains(&"1 core") && cpu.contains(&"2 cores"),
        "{cpu:?}"
    );
    assert!(!cpu.iter().any(|t| t.starts_with("1 cores")), "{cpu:?}");
}

#[test]
fn the_pointer_shows_the_figures_at_its_time_and_the_process_under_it() {
    let v = look(0, false);
    let tip = v["memTip"]
        .as_str()
        .expect("a tooltip over the memory chart");
    // The middle of the child's bar: 500 ms, give or take a pixel (1 s over ~1190 px).
    let at = v["cursorNs"].as_f64().expect("the cursor's time");
    assert!((at - 500e6).abs() < 2e6, "the cursor at {at} ns: {v}");
    assert!(tip.contains(" ms"), "{tip}");
    let mib = PEAK_BYTES >> 20;
    assert!(
        tip.contains(&format!("memory {mib} MiB")),
        "the tree's RSS at 500 ms is the peak: {tip}"
    );
    assert!(tip.contains("CPU 2.00 cores"), "two cores at 500 ms: {tip}");
    let bar = v["barTip"].as_str().expect("a tooltip over the bar");
    for want in [
        "alloc 100M",
        "pid 2",
        "from 400.0 ms to 600.0 ms · 200.0 ms",
        "peak RSS 1.0 MiB",
    ] {
        assert!(bar.contains(want), "{want:?} not in {bar:?}");
    }
}

#[test]
fn no_program_is_drawn_in_the_failures_red() {
    let clean = look(40, false);
    assert_eq!(
        clean["red"], 0,
        "40 programs, no failure, yet pixels of the failures' red"
    );
    // The check sees red where a failure is drawn.
    let failed = look(40, true);
    assert!(num(&failed["red"]) > 20.0, "{failed}");
}
