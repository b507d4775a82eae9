//! Unit tests of [`crate::model::timeline`].

use super::*;
use crate::model::{proc_read::Usage, pss_sum::MaxPssFigure};

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

/// A read of `pss` bytes, all anonymous and private.
fn read(pss: u64) -> Usage {
    Usage {
        rss_bytes: pss,
        pss_bytes: pss,
        anon_bytes: pss,
        pss_anon_bytes: Some(pss),
        faulted_bytes: None,
        read_faulted_bytes: None,
    }
}

#[test]
fn tree_pss_is_each_rounds_sum_and_a_process_series_its_reads() {
    let mut t = Timeline::new(RssSource::Kernel);
    t.record_pss_read(key(1), (100, 100), read(10));
    t.record_pss_read(key(2), (100, 100), read(5));
    t.pss_round_done(101);
    t.record_pss_read(key(1), (200, 200), read(30));
    t.record_pss_read(key(2), (200, 200), read(5));
    t.pss_round_done(201);
    t.process_exited(key(2), 250);
    t.record_pss_read(key(1), (300, 300), read(20));
    t.pss_round_done(301);
    assert_eq!(
        t.tree_pss().points(),
        [p(101, 15), p(201, 35), p(250, 30), p(301, 20)]
    );
    assert!(matches!(t.max_pss(), MaxPssFigure::Trusted(m) if m.bytes == 35 && m.ts_ns == 201));
    assert_eq!(
        t.process(&key(2)).expect("2").pss().points(),
        [p(100, 5), p(250, 0)]
    );
    assert_eq!(
        t.process(&key(1)).and_then(|s| s.max_pss()),
        Some(p(200, 30))
    );
}

#[test]
fn a_read_that_ends_after_the_exit_is_dated_at_its_start_before_the_exit() {
    // The walk saw the mm alive, so before the exit at 250; the read's end (260) came after
    // it, the reader preempted as the process exited. The process's series never runs past
    // its end; the round's sum stays at the read's end.
    let mut t = Timeline::new(RssSource::Kernel);
    t.record_pss_read(key(1), (240, 260), read(10));
    t.process_exited(key(1), 250);
    t.pss_round_done(270);
    let s = t.process(&key(1)).expect("1");
    assert_eq!(s.pss().points(), [p(240, 10), p(250, 0)]);
    assert_eq!(s.max_pss(), Some(p(240, 10)));
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
        let s = t
            .process(&key(pid))
            .expect("series")
            .rss
            .points(key(pid).start_ns);
        let max = s.iter().map(|m| m.bytes).max();
        assert_eq!(max, Some(499 * pid as u64 + 1));
    }
}

#[test]
fn json_times_are_relative_to_t0() {
    let mut t = Timeline::new(RssSource::Kernel);
    t.record_tree_rss(p(1_000, 4096));
    t.set_tree_peak(p(1_500, 8192));
    t.record_rss(key(7), p(1_200, 4096));
    t.record_pss_read(key(7), (1_300, 1_300), read(2048));
    t.pss_round_done(1_300);
    let v = serde_json::to_value(t.report(1_000, vec![key(7)])).expect("json");
    assert_eq!(v["rss_source"], "kernel");
    // The kernel's peak joins the series, which had not reached it.
    assert_eq!(v["tree_rss"], serde_json::json!([[0, 4096], [500, 8192]]));
    assert_eq!(v["tree_pss"], serde_json::json!([[300, 2048]]));
    assert_eq!(
        v["tree_peak_rss"],
        serde_json::json!({"t_ns": 500, "bytes": 8192})
    );
    assert_eq!(
        v["max_pss"],
        serde_json::json!({"t_ns": 300, "bytes": 2048, "unseen_bytes": 0, "over_rss_bytes": 0, "trusted": true})
    );
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
    t.record_kernel_rss(k, p(10, 100), Some(100));
    // The exit record comes first; the held-back peak and the last value follow it.
    t.process_exited(k, 50);
    t.record_kernel_rss(k, p(20, 900), Some(900));
    t.record_kernel_rss(k, p(40, 300), Some(300));
    let s = t.process(&k).expect("series");
    assert_eq!(
        s.rss.points(k.start_ns).as_ref(),
        [p(10, 100), p(20, 900), p(40, 300), p(50, 0)]
    );
    // Not summed: the kernel sends the tree's own sum.
    assert_eq!(t.current_rss(), 0);
}

#[test]
fn the_tree_peak_is_dated_when_the_tree_got_within_1_256_of_it() {
    let mut t = Timeline::new(RssSource::Kernel);
    for pt in [p(10, 1000), p(20, 25_500), p(30, 25_590), p(40, 100)] {
        t.record_tree_rss(pt);
    }
    // Exact: 25 600 at 35 (10 pages faulted in at exit); 25 500 is within 1/256 of it.
    t.set_tree_peak(p(35, 25_600));
    assert_eq!(t.tree_peak(), Some(p(20, 25_600)));
    // A peak the series never came near is dated at its own time, and joins the series.
    let mut u = Timeline::new(RssSource::Kernel);
    u.record_tree_rss(p(10, 1000));
    u.set_tree_peak(p(15, 9000));
    assert_eq!(u.tree_peak(), Some(p(15, 9000)));
    assert_eq!(u.tree_rss().max(), Some(p(15, 9000)));
}

#[test]
fn the_kernels_points_after_a_process_is_gone_begin_no_image_in_the_pss_sum() {
    for found_gone in [false, true] {
        let mut t = Timeline::new(RssSource::Kernel);
        t.record_kernel_rss(key(1), p(10, 4096), Some(4096));
        t.record_kernel_rss(key(2), p(10, 8192), Some(8192));
        if found_gone {
            t.pss_read_gone(key(2), None);
        } else {
            t.process_exited(key(2), 20);
        }
        let before = t.pss_tree_now();
        // A held-back peak dated before the exit, and the last value as the kernel stops
        // following the mm: both in the process's RSS series, neither in the tree's PSS.
        t.record_kernel_rss(key(2), p(15, 12288), Some(12288));
        t.record_kernel_rss(key(2), p(25, 0), Some(0));
        let after = t.pss_tree_now();
        assert_eq!(
            (after.estimate_bytes, after.uncertain_bytes),
            (before.estimate_bytes, before.uncertain_bytes),
            "found gone: {found_gone}"
        );
        let rss = t
            .process(&key(2))
            .expect("series")
            .rss
            .points(key(2).start_ns);
        assert!(rss.contains(&p(15, 12288)), "{rss:?}");
    }
}

/// A saved report's timeline read back is the run's: written again, the same text, with a
/// series that packs, one on the heap, one past its limit (compacted), values that are no
/// whole pages, a process never sampled, a withheld maximum.
#[test]
fn a_timeline_read_back_writes_the_same_text() {
    let limits = Limits {
        tree_points: 64,
        process_points: 64,
        total_process_points: 1 << 12,
    };
    let mut t = Timeline::with_limits(RssSource::Kernel, limits);
    let t0 = 1_000;
    // Started after t0: their series are packed against their starts.
    let key = |pid: u32| Key {
        tgid: pid,
        start_ns: t0 + pid as u64,
    };
    for i in 0..200u64 {
        let ts = t0 + 10 + i * 7;
        t.record_tree_rss(p(ts, 4096 * (10 + i % 13 + i / 3)));
        t.record_kernel_rss(key(3), p(ts, 4096 * (1 + i % 5) + 24 * (i % 2)), Some(4096));
    }
    for (i, ts) in [40u64, 90, 160, 600].into_iter().enumerate() {
        t.record_kernel_rss(key(4), p(t0 + ts, 4096 * (i as u64 + 1)), Some(0));
    }
    t.set_tree_peak(p(t0 + 900, 4096 * 500));
    for i in 0..12u64 {
        t.record_kernel_rss(
            key(5),
            p(t0 + 55 + i * 1_000_000, 8192 * (i + 1)),
            Some(8192),
        );
    }
    t.record_pss_read(key(3), (t0 + 100, t0 + 101), read(3000));
    t.record_pss_read(key(4), (t0 + 100, t0 + 102), read(4096));
    t.pss_round_done(t0 + 103);
    // A fork's child that writes what it shares after the last round: withheld.
    t.record_kernel_rss(key(6), p(t0 + 700, 40_960), Some(40_960));
    t.process_exited(key(4), t0 + 800);
    t.pss_sampling = Some(PssSampling {
        samples: 2,
        rounds: 1,
        early_rounds: 0,
        read_ns: 1234,
        max_round_read_ns: 1234,
        cpu_budget: 0.02,
    });
    t.settle();
    let order: Vec<Key> = (3..=6).map(key).collect();
    let written = serde_json::to_string(&t.report(t0, order.clone())).expect("json");
    let back = Timeline::restore(&written).unwrap_or_else(|e| panic!("{e}: {written}"));
    let since_start = order
        .iter()
        .map(|k| Key {
            start_ns: k.start_ns - t0,
            ..*k
        })
        .collect();
    let again = serde_json::to_string(&back.report(0, since_start)).expect("json");
    assert_eq!(again, written);
    let v: serde_json::Value = serde_json::from_str(&written).expect("json");
    let procs = v["processes"].as_array().expect("processes");
    let lens: Vec<usize> = procs
        .iter()
        .map(|e| e["rss"].as_array().map_or(0, Vec::len))
        .collect();
    assert_eq!(lens.len(), 4, "{written}");
    assert!(lens[0] <= 64 && lens[0] > 8 && lens[2] == 12, "{lens:?}");
    assert!(
        matches!(back.max_pss(), MaxPssFigure::Uncertain(_)),
        "{written}"
    );
    assert_eq!(back.tree_peak().map(|p| p.bytes), Some(4096 * 500));
}
