use super::*;
use crate::report::metrics::{CommStats, Metrics, RSS_BUCKETS, RUNTIME_BUCKETS};

fn sample_metrics() -> Metrics {
    let mut m = Metrics::new(true, 2);
    m.by_comm.insert(
        "make".into(),
        CommStats {
            exits: [3, 1, 0],
            user_ns: 1_500_000_000,
            sys_ns: 250_000_000,
            ..CommStats::default()
        },
    );
    m.by_comm.insert(
        "a\"b\\c".into(),
        CommStats {
            exits: [1, 0, 0],
            ..CommStats::default()
        },
    );
    m.other = CommStats {
        exits: [0, 0, 2],
        user_ns: 1,
        sys_ns: 2,
        ..CommStats::default()
    };
    m.reported = 7;
    m
}

#[test]
fn floats_and_escapes() {
    assert_eq!(float(1.0), "1.0");
    assert_eq!(float(0.001), "0.001");
    assert_eq!(float(1073741824.0), "1073741824.0");
    assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

#[test]
fn openmetrics_declares_families_and_ends_with_eof() {
    let text = render(&sample_metrics(), Format::OpenMetrics);
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE spacetime_watch_exits counter\n"),
        "{text}"
    );
    assert!(
        text.contains("# UNIT spacetime_watch_cpu_seconds seconds\n"),
        "{text}"
    );
    assert!(text.contains("# TYPE spacetime_build info\n"), "{text}");
    assert!(
        text.contains("spacetime_watch_exits_total{comm=\"make\",status=\"failed\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("spacetime_watch_cpu_seconds_total{comm=\"make\",mode=\"user\"} 1.5\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "spacetime_watch_exits_total{comm=\"[other programs]\",status=\"signaled\"} 2\n"
        ),
        "{text}"
    );
    assert!(text.contains("comm=\"a\\\"b\\\\c\""), "{text}");
}

#[test]
fn text_format_has_help_and_type_on_sample_names_and_no_eof() {
    let text = render(&sample_metrics(), Format::Text);
    assert!(!text.contains("# EOF"), "{text}");
    assert!(!text.contains("# UNIT"), "{text}");
    assert!(
        text.contains("# TYPE spacetime_watch_exits_total counter\n"),
        "{text}"
    );
    assert!(
        text.contains("# HELP spacetime_watch_exits_total "),
        "{text}"
    );
    assert!(
        text.contains("# TYPE spacetime_build_info gauge\n"),
        "{text}"
    );
    // Every family has HELP (promtool insists).
    let types = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
    let helps = text.lines().filter(|l| l.starts_with("# HELP ")).count();
    assert_eq!(types, helps, "{text}");
}

#[test]
fn no_series_twice() {
    for format in [Format::OpenMetrics, Format::Text] {
        let text = render(&sample_metrics(), format);
        let mut seen = std::collections::HashSet::new();
        for l in text.lines().filter(|l| !l.starts_with('#')) {
            let series = l.rsplit_once(' ').map_or(l, |(s, _)| s);
            assert!(seen.insert(series.to_string()), "{series} twice in\n{text}");
        }
    }
}

#[test]
fn histograms_are_cumulative() {
    let mut m = Metrics::default();
    for v in [0.0004, 0.0007, 0.003, 7200.0] {
        m.runtime.observe(&RUNTIME_BUCKETS, v);
    }
    let text = render(&m, Format::Text);
    for line in [
        // The first bound is 1/1024 s, to 4 digits: both short runs are under it.
        "spacetime_watch_runtime_seconds_bucket{le=\"0.0009766\"} 2\n",
        "spacetime_watch_runtime_seconds_bucket{le=\"0.003012\"} 3\n",
        "spacetime_watch_runtime_seconds_bucket{le=\"4096.0\"} 3\n",
        "spacetime_watch_runtime_seconds_bucket{le=\"+Inf\"} 4\n",
        "spacetime_watch_runtime_seconds_count 4\n",
        "spacetime_watch_peak_rss_bytes_bucket{le=\"524288.0\"} 0\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn buckets_are_fine_enough_for_a_quantile_within_ten_percent() {
    for b in [&*RSS_BUCKETS, &*RUNTIME_BUCKETS] {
        assert_eq!(b.les.len(), b.bounds.len() + 1);
        for w in b.bounds.windows(2) {
            let r = w[1] / w[0];
            // Interpolated inside its bucket, a quantile is off by at most the bucket's ratio.
            assert!(r > 1.085 && r < 1.096, "{} / {}: {r}", w[1], w[0]);
        }
    }
    assert_eq!(RSS_BUCKETS.bounds.len(), 137);
    assert_eq!(
        *RSS_BUCKETS.bounds.last().expect("bounds"),
        (64u64 << 30) as f64
    );
    assert_eq!(RUNTIME_BUCKETS.bounds.len(), 177);
    assert_eq!(*RUNTIME_BUCKETS.bounds.last().expect("bounds"), 4096.0);
}

#[test]
fn histograms_by_comm_carry_the_overflow_value() {
    let mut m = sample_metrics();
    assert!(
        !render(&m, Format::Text).contains("comm_peak_rss"),
        "only with --metrics-histograms"
    );
    m.histograms = true;
    let c = m.by_comm.get_mut("make").expect("make");
    c.rss.observe(&RSS_BUCKETS, 70.0 * 1048576.0);
    m.other.rss.observe(&RSS_BUCKETS, 1048576.0);
    let text = render(&m, Format::Text);
    for line in [
        "# TYPE spacetime_watch_comm_peak_rss_bytes histogram\n",
        "# TYPE spacetime_watch_comm_runtime_seconds histogram\n",
        "spacetime_watch_comm_peak_rss_bytes_count{comm=\"make\"} 1\n",
        "spacetime_watch_comm_peak_rss_bytes_bucket{comm=\"make\",le=\"+Inf\"} 1\n",
        "spacetime_watch_comm_peak_rss_bytes_count{comm=\"[other programs]\"} 1\n",
        "spacetime_watch_comm_runtime_seconds_count{comm=\"a\\\"b\\\\c\"} 0\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}

#[test]
fn identity_families_are_bounded_and_declared() {
    use crate::report::metrics::identity::{ByIdentity, IdLabel};
    let mut m = Metrics::new(false, 2);
    let mut b = ByIdentity::new(IdLabel::Unit, 2);
    b.values.insert(
        "cron.service".into(),
        CommStats {
            exits: [2, 1, 0],
            user_ns: 500_000_000,
            sys_ns: 0,
            ..CommStats::default()
        },
    );
    b.other = CommStats {
        exits: [0, 0, 4],
        ..CommStats::default()
    };
    m.by_identity.push(b);
    let text = render(&m, Format::Text);
    for line in [
        "# HELP spacetime_watch_unit_exits_total ",
        "# TYPE spacetime_watch_unit_exits_total counter",
        "spacetime_watch_unit_exits_total{unit=\"cron.service\",status=\"ok\"} 2",
        "spacetime_watch_unit_exits_total{unit=\"cron.service\",status=\"failed\"} 1",
        "spacetime_watch_unit_exits_total{unit=\"[other units]\",status=\"signaled\"} 4",
        "spacetime_watch_unit_cpu_seconds_total{unit=\"cron.service\",mode=\"user\"} 0.5",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
    let om = render(&m, Format::OpenMetrics);
    assert!(
        om.contains("# UNIT spacetime_watch_unit_cpu_seconds seconds"),
        "{om}"
    );
}
