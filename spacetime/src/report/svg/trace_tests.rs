use crate::report::{saved, svg::trace, Report};

/// A saved report of a shell and one child, whose argv is hostile markup and control bytes.
fn report(argv1: &str) -> saved::SavedReport {
    let ms = 1_000_000u64;
    let image = |exe: &str, argv: serde_json::Value, start: u64, end: u64, peak: u64| {
        serde_json::json!({"exe": exe, "argv": argv, "comm": "x", "start_ns": start,
            "end_ns": end, "peak_rss_bytes": peak, "peak_vm_bytes": peak, "inherited": false,
            "shared_mm": false, "exact": true, "argv_complete": true})
    };
    let process = |pid: u32, ppid: u32, start: u64, end: u64, code: i32, img| {
        serde_json::json!({"pid": pid, "ppid": ppid, "start_ns": start, "end_ns": end,
            "threads": 1, "exit": {"code": code}, "state": "exited", "peak_rss_bytes": 1 << 20,
            "user_ns": ms, "sys_ns": 0, "cpu_final": true, "ru_maxrss_bytes": null,
            "images": [img], "taskstats": null})
    };
    let doc = serde_json::json!({
        "schema_version": 1, "spacetime_version": "0.1.0", "host": "h<&>",
        "kernel_release": "6", "start_unix_ns": 0,
        "start_rfc3339": "1970-01-01T00:00:00.000000000Z", "command": ["sh", argv1],
        "exit": {"code": 1}, "wall_ns": 1000 * ms, "user_ns": 2 * ms, "sys_ns": 0,
        "lost_events": 0,
        "totals": {"processes": 2, "threads": 2, "peak_rss_bytes": 1 << 20, "peak_rss_pid": 2,
            "execs": 2, "still_running": 0, "unknown": 0, "tree_peak_rss_bytes": 100 << 20,
            "tree_peak_at_ns": 400 * ms, "max_pss_bytes": null, "cpu_not_final": 0},
        "processes": [
            process(1, 0, 0, 1000 * ms, 1, image("/bin/sh", serde_json::json!(["sh", argv1]), 0, 1000 * ms, 1 << 20)),
            process(2, 1, 400 * ms, 600 * ms, 1, image("/bin/alloc", serde_json::json!(["alloc", argv1]), 400 * ms, 600 * ms, 1 << 20)),
        ],
        "kernel": {"counters": {}, "decode_errors": 0, "args_gaps": 0, "page_size": 4096,
            "ring_buffer_bytes": 4194304, "mechanisms": []},
        "taskstats": {"available": false, "unavailable_reason": "synthetic"},
        "spacetime": {},
        "timeline": {"rss_source": "kernel",
            "tree_rss": [[0, 1 << 20], [400 * ms, 100 << 20], [600 * ms, 1 << 20]]}
    });
    match saved::parse(&doc.to_string()).expect("a saved report") {
        saved::Saved::Trace(t) => *t,
        saved::Saved::Bench(_) => panic!("a trace report"),
    }
}

#[test]
fn hostile_argv_leaves_a_well_formed_picture_with_its_text() {
    let hostile = "</text><script>alert(1)</script>&amp;\"'\u{1}\u{1b}[31m\u{7f}";
    let svg = trace(&Report::from_saved(&report(hostile)));
    let xml = roxmltree::Document::parse(&svg).expect("well-formed XML");
    let root = xml.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    for a in ["width", "height", "viewBox"] {
        assert!(root.attribute(a).is_some(), "no {a}");
    }
    assert!(
        !xml.descendants().any(|n| {
            let t = n.tag_name().name();
            t == "script" || t == "foreignObject" || n.attribute("href").is_some()
        }),
        "a script, a foreign object or a link in {svg}"
    );
    let command = xml
        .descendants()
        .find(|n| n.attribute("id") == Some("command"))
        .and_then(|n| n.text())
        .expect("the command's text");
    assert!(
        command == "sh </text><script>alert(1)</script>&amp;\"'\u{fffd}\u{fffd}[31m\u{fffd}",
        "{command:?}"
    );
}

#[test]
fn the_peak_is_marked_where_the_report_says_and_on_the_curve_top() {
    let svg = trace(&Report::from_saved(&report("x")));
    let xml = roxmltree::Document::parse(&svg).expect("well-formed XML");
    let by_id = |id: &str| {
        xml.descendants()
            .find(|n| n.attribute("id") == Some(id))
            .unwrap_or_else(|| panic!("no #{id}"))
    };
    let peak = by_id("peak");
    assert_eq!(peak.attribute("data-bytes"), Some("104857600"));
    assert_eq!(peak.attribute("data-at-ns"), Some("400000000"));
    assert_eq!(by_id("peak-label").text(), Some("peak 100 MiB at 400.0 ms"));
    let circle = peak
        .children()
        .find(|n| n.has_tag_name("circle"))
        .expect("the marker");
    let cy: f64 = circle
        .attribute("cy")
        .and_then(|v| v.parse().ok())
        .expect("cy");
    // The area's highest point (smallest y) is the marker's height.
    let d = by_id("memory-area").attribute("d").expect("d");
    let top = d
        .split('V')
        .skip(1)
        .filter_map(|s| s.split(|c: char| c.is_ascii_alphabetic()).next())
        .filter_map(|v| v.parse::<f64>().ok())
        .fold(f64::INFINITY, f64::min);
    assert!((top - cy).abs() < 0.11, "curve top {top}, marker {cy}");
    assert_eq!(by_id("failed").attribute("data-count"), Some("2"));
    assert_eq!(by_id("bars").text(), Some("2"));
}
