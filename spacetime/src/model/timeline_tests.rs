//! Unit tests of [`crate::model::timeline`].

use super::*;

fn key(pid: u32) -> Key {
    Key {
        tgid: pid,
        start_ns: pid as u64 * 10,
    }
}

fn p(ts: u64, b: u64) -> Point {
    Point::new(ts, b)
}

#[test]
fn equal_values_coalesce_and_same_time_replaces() {
    let mut s = Series::default();
    for pt in [p(1, 5), p(2, 5), p(3, 7), p(3, 9), p(4, 9), p(2, 4)] {
        s.push(pt, 100);
    }
    // (2,4) arrived late: moved just after the last point.
    assert_eq!(s.points(), [p(1, 5), p(3, 9), p(4, 4)]);
    // Replacing at the same time back to the previous value removes the step.
    s.push(p(4, 9), 100);
    assert_eq!(s.points(), [p(1, 5), p(3, 9)]);
}

#[test]
fn compaction_bounds_points_and_keeps_extremes() {
    let mut s = Series::default();
    // A noisy ramp with one spike and one dip.
    for i in 0..10_000u64 {
        let mut v = 1000 + i % 7 + i / 10;
        if i == 5_555 {
            v = 1_000_000;
        }
        if i == 7_777 {
            v = 3;
        }
        s.push(p(i, v), 256);
    }
    assert!(s.len() <= 256, "{} points", s.len());
    assert!(s.compacted());
    assert_eq!(s.max(), Some(p(5_555, 1_000_000)));
    assert!(s.points().contains(&p(7_777, 3)));
    assert_eq!(s.points()[0], p(0, 1000), "the start stays");
    assert!(s.points().windows(2).all(|w| w[0].ts_ns < w[1].ts_ns));
    assert!(s.points().windows(2).all(|w| w[0].bytes != w[1].bytes));
}

#[test]
fn tree_pss_is_the_sum_of_latest_samples() {
    let mut t = Timeline::new(RssSource::Kernel);
    t.record_pss(key(1), p(100, 10));
    t.record_pss(key(2), p(100, 5));
    t.record_pss(key(1), p(200, 30));
    t.process_exited(key(2), 250);
    t.record_pss(key(1), p(300, 20));
    assert_eq!(
        t.tree_pss().points(),
        [p(100, 15), p(200, 35), p(250, 30), p(300, 20)]
    );
    assert_eq!(t.max_pss(), Some(p(200, 35)));
    assert_eq!(
        t.process(&key(2)).expect("2").pss().points(),
        [p(100, 5), p(250, 0)]
    );
    assert_eq!(t.max_process_pss(), Some((key(1), p(200, 30))));
}

#[test]
fn statm_source_sums_rss_and_kernel_source_does_not() {
    let mut t = Timeline::new(RssSource::Statm);
    t.record_rss(key(1), p(10, 100));
    t.record_rss(key(2), p(10, 50));
    t.record_rss(key(2), p(20, 80));
    assert_eq!(t.current_rss(), 180);
    t.process_exited(key(1), 30);
    assert_eq!(t.tree_rss().points(), [p(10, 150), p(20, 180), p(30, 80)]);
    assert_eq!(t.tree_peak(), Some(p(20, 180)));

    let mut k = Timeline::new(RssSource::Kernel);
    k.record_rss(key(1), p(10, 100));
    assert!(k.tree_rss().is_empty());
    k.record_tree_rss(p(10, 100));
    k.record_tree_rss(p(11, 90));
    k.set_tree_peak(p(10, 123));
    assert_eq!(k.tree_peak(), Some(p(10, 123)));
    assert_eq!(k.current_rss(), 90);
}

#[test]
fn global_budget_lowers_the_per_process_cap() {
    let limits = Limits {
        tree_points: 1 << 20,
        process_points: 1024,
        total_process_points: 4096,
    };
    let mut t = Timeline::with_limits(RssSource::Kernel, limits);
    for pid in 1..=64u32 {
        for i in 0..500u64 {
            t.record_rss(key(pid), p(i, i * (pid as u64) + (i % 3)));
        }
    }
    let total: usize = t
        .processes()
        .map(|(_, s)| s.rss.len() + s.pss().len())
        .sum();
    assert!(total <= 4096 + 64 * 8, "{total} points");
    // Every process still has its maximum.
    for pid in 1..=64u32 {
        let s = &t.process(&key(pid)).expect("series").rss;
        assert_eq!(s.max().map(|m| m.bytes), Some(499 * pid as u64 + 1));
    }
}

#[test]
fn json_times_are_relative_to_t0() {
    let mut t = Timeline::new(RssSource::Kernel);
    t.record_tree_rss(p(1_000, 4096));
    t.set_tree_peak(p(1_500, 8192));
    t.record_rss(key(7), p(1_200, 4096));
    t.record_pss(key(7), p(1_300, 2048));
    let v = serde_json::to_value(t.report(1_000, vec![key(7)])).expect("json");
    assert_eq!(v["rss_source"], "kernel");
    assert_eq!(v["tree_rss"], serde_json::json!([[0, 4096]]));
    assert_eq!(v["tree_pss"], serde_json::json!([[300, 2048]]));
    assert_eq!(
        v["tree_peak_rss"],
        serde_json::json!({"t_ns": 500, "bytes": 8192})
    );
    assert_eq!(v["max_pss"]["bytes"], 2048);
    let proc0 = &v["processes"][0];
    assert_eq!(proc0["pid"], 7);
    assert_eq!(proc0["start_ns"], 0);
    assert_eq!(proc0["rss"], serde_json::json!([[200, 4096]]));
    assert_eq!(proc0["max_pss_bytes"], 2048);
}

#[test]
fn late_points_go_where_they_belong() {
    let mut s = Series::default();
    for pt in [p(10, 5), p(30, 7)] {
        s.insert(pt, 100);
    }
    // A point held back by the kernel, sent after a later one: inserted at its time.
    s.insert(p(20, 9), 100);
    assert_eq!(s.points(), [p(10, 5), p(20, 9), p(30, 7)]);
    // At one time, the larger value stays; a value equal to the one before adds nothing.
    s.insert(p(20, 8), 100);
    s.insert(p(25, 9), 100);
    assert_eq!(s.points(), [p(10, 5), p(20, 9), p(30, 7)]);
    assert_eq!(s.max(), Some(p(20, 9)));
}

#[test]
fn kernel_points_after_the_exit_record_keep_the_series_whole() {
    let mut t = Timeline::new(RssSource::Kernel);
    let k = key(1);
    t.record_kernel_rss(k, p(10, 100));
    // The exit record comes first; the held-back peak and the last value follow it.
    t.process_exited(k, 50);
    t.record_kernel_rss(k, p(20, 900));
    t.record_kernel_rss(k, p(40, 300));
    let s = t.process(&k).expect("series");
    assert_eq!(
        s.rss.points(),
        [p(10, 100), p(20, 900), p(40, 300), p(50, 0)]
    );
    // Not summed: the kernel sends the tree's own sum.
    assert_eq!(t.current_rss(), 0);
}

#[test]
fn pss_is_estimated_from_the_exact_rss_between_samples() {
    let mut t = Timeline::new(RssSource::Kernel);
    let (a, b) = (key(1), key(2));
    // a: sampled at 10 MiB RSS with 2 MiB taken off by sharing, then grows to 100 MiB.
    t.record_kernel_rss(a, p(1, 10));
    t.record_pss(a, p(2, 8));
    t.record_sharing(a, 2);
    t.record_kernel_rss(a, p(3, 100));
    // b was never sampled: no estimate for it.
    t.record_kernel_rss(b, p(4, 50));
    assert_eq!(t.max_pss(), Some(p(2, 8)), "sampled");
    assert_eq!(t.max_pss_estimated(), Some(p(3, 98)), "100 − 2");
    // a frees, exits: the estimate follows, the maximum stays.
    t.record_kernel_rss(a, p(5, 20));
    t.process_exited(a, 6);
    t.record_pss(b, p(7, 40));
    assert_eq!(t.max_pss_estimated(), Some(p(3, 98)));
    // A sampled maximum above every estimate is the estimate too.
    t.record_pss(b, p(8, 500));
    assert_eq!(t.max_pss_estimated(), Some(p(8, 500)));
}

#[test]
fn the_pss_estimate_never_exceeds_the_exact_tree_peak() {
    let mut t = Timeline::new(RssSource::Kernel);
    let (parent, child) = (key(1), key(2));
    // The parent filled 128, was sampled unshared, freed it, and its last decrease was
    // dropped by the kernel's rate limit: it stays in the sum at 128 while the child fills 256.
    t.record_kernel_rss(parent, p(1, 128));
    t.record_pss(parent, p(2, 128));
    t.record_sharing(parent, 0);
    t.record_kernel_rss(child, p(3, 1));
    t.record_pss(child, p(4, 1));
    t.record_sharing(child, 0);
    t.record_kernel_rss(child, p(5, 256));
    // The kernel's exact tree sum peaked at 258 (parent 2 + child 256).
    t.set_tree_peak(p(5, 258));
    assert_eq!(
        t.max_pss_estimated(),
        Some(p(5, 258)),
        "bounded by the exact peak"
    );
}
