//! When the tree-wide peak happened: a program that reaches its size, prints, sleeps and
//! faults in a few pages as it exits peaked at the touch, not at the exit, in every run; and
//! for the whole sleep the timeline shows what it held (a maximum the kernel held back goes
//! out dated when it happened, before the exit's later point).

use serde_json::Value;
use spacetime_tests::{chart::assert_chart_reaches, u64_at, Trace, MIB, PAGE};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// Runs of the loop: the defect showed in 5 of 45 on the host, where the hunt is (45 runs find
/// it 99 times in 100). The emulated guest, where a run costs about ten seconds beside the
/// other guests, runs 3: it checks the dating on 6.1's exit path; the hunt is the host's.
fn runs() -> usize {
    spacetime_tests::repetitions(45, 3)
}

/// The series' value at `t` (a step function: the last point at or before it).
fn value_at(series: &[(u64, u64)], t: u64) -> u64 {
    series
        .iter()
        .take_while(|p| p.0 <= t)
        .last()
        .map_or(0, |p| p.1)
}

/// Nanoseconds since the report's origin of a truth's CLOCK_REALTIME instant.
fn since_origin(v: &Value, unix_ns: i64) -> u64 {
    let origin = u64_at(v, &["start_unix_ns"]) as i64;
    u64::try_from(unix_ns - origin)
        .unwrap_or_else(|_| panic!("truth instant {unix_ns} before the report's origin {origin}"))
}

#[test]
fn a_peak_held_through_a_sleep_is_dated_at_the_touch_in_every_run() {
    let mib = 40;
    let runs = runs();
    let mut dated = Vec::with_capacity(runs);
    for run in 0..runs {
        let out = Trace::new([WL, "peak-sleep", &mib.to_string(), "300"])
            .env("COLUMNS", "100")
            .env("LANG", "C.UTF-8")
            .tag("peak-sleep")
            .run();
        out.assert_code(0);
        let v = out.json_value();
        let ctx = out.context();
        let truth = out.truth_one("peak-sleep");
        let touched = since_origin(&v, truth.int("touched_unix_ns"));
        let held_at = since_origin(&v, truth.int("held_unix_ns"));
        let woke = since_origin(&v, truth.int("woke_unix_ns"));
        let held = truth.int("held_kib") as u64 * 1024;
        let peak = u64_at(&v, &["totals", "tree_peak_rss_bytes"]);
        let at = u64_at(&v, &["totals", "tree_peak_at_ns"]);
        // The exact peak is the exit's (16 pages more than it held): within 1/256 of it, the
        // tree got there when the touch ended.
        assert!(
            peak >= held + 16 * PAGE - 4 * PAGE && peak <= held + 16 * PAGE + MIB,
            "run {run}: tree peak {peak} vs {held} held plus the exit's 16 pages\n{ctx}"
        );
        // Dated at the touch: before what it held was read, so before the sleep and the exit's
        // pages (the defect dated it at the exit). An order, not a distance in time: it holds
        // at any speed.
        assert!(
            at <= held_at && held_at < woke,
            "run {run}: tree peak dated {at} ns, the touch ended at {touched} ns and what it \
             held was read at {held_at} ns (it woke at {woke} ns)\n{ctx}"
        );
        // Through the sleep, the timeline never shows less than it held.
        let tree: Vec<(u64, u64)> = v["timeline"]["tree_rss"]
            .as_array()
            .expect("timeline.tree_rss")
            .iter()
            .map(|p| (p[0].as_u64().unwrap_or(0), p[1].as_u64().unwrap_or(0)))
            .collect();
        let low = std::iter::once(held_at)
            .chain(
                tree.iter()
                    .map(|p| p.0)
                    .filter(|&t| t > held_at && t < woke),
            )
            .map(|t| (t, value_at(&tree, t)))
            .min_by_key(|p| p.1)
            .expect("one instant");
        assert!(
            low.1 + 4 * PAGE >= held,
            "run {run}: at {} ns, during the sleep, the tree series reads {} while the process \
             held {held}: {tree:?}\n{ctx}",
            low.0,
            low.1
        );
        assert_chart_reaches(&out.stderr, peak);
        dated.push((at / 1_000_000, touched / 1_000_000));
    }
    eprintln!("{runs} runs: (peak dated ms, touch ended ms): {dated:?}");
}
