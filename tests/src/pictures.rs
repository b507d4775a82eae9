//! A small trace report whose figures are known exactly, for the pictures' tests: a shell
//! for 1 s (no CPU of its own), one child `alloc` from 400 to 600 ms that uses two cores all
//! along, the tree's RSS 1 MiB except 100 MiB while the child runs; optionally more children
//! of distinct programs (one at a time, 1-8 ms) and a failed one.

use std::path::Path;

use serde_json::{json, Value};

pub const MS: u64 = 1_000_000;
pub const WALL_NS: u64 = 1000 * MS;
pub const CHILD_START_NS: u64 = 400 * MS;
pub const CHILD_END_NS: u64 = 600 * MS;
pub const PEAK_BYTES: u64 = 100 << 20;

fn image(exe: &str, argv: Value, start: u64, end: u64) -> Value {
    json!({"exe": exe, "argv": argv, "comm": "x", "start_ns": start, "end_ns": end,
        "peak_rss_bytes": 1 << 20, "peak_vm_bytes": 1 << 20, "inherited": false,
        "shared_mm": false, "exact": true, "argv_complete": true})
}

fn process(
    pid: u32,
    ppid: u32,
    (start, end): (u64, u64),
    code: i32,
    cpu: u64,
    img: Value,
) -> Value {
    json!({"pid": pid, "ppid": ppid, "start_ns": start, "end_ns": end, "threads": 1,
        "exit": {"code": code}, "state": "exited", "peak_rss_bytes": 1 << 20, "user_ns": cpu,
        "sys_ns": 0, "cpu_final": true, "ru_maxrss_bytes": null, "images": [img],
        "taskstats": null})
}

/// Writes the report to `path`: `extra` more programs (each a child of its own exe), the
/// last of them failed when `fail`.
pub fn write_report(path: &Path, extra: usize, fail: bool) {
    let mut procs = vec![
        process(
            1,
            0,
            (0, WALL_NS),
            0,
            0,
            image("/bin/sh", json!(["sh", "-c", "build"]), 0, WALL_NS),
        ),
        process(
            2,
            1,
            (CHILD_START_NS, CHILD_END_NS),
            0,
            2 * (CHILD_END_NS - CHILD_START_NS),
            image(
                "/usr/bin/alloc",
                json!(["alloc", "100M"]),
                CHILD_START_NS,
                CHILD_END_NS,
            ),
        ),
    ];
    for k in 0..extra {
        let start = 620 * MS + k as u64 * 9 * MS;
        let end = start + MS + (k as u64 % 8) * MS;
        let exe = format!("/usr/bin/tool{k}");
        let code = if fail && k + 1 == extra { 1 } else { 0 };
        let argv = json!([format!("tool{k}"), "-c"]);
        procs.push(process(
            3 + k as u32,
            1,
            (start, end),
            code,
            MS / 4,
            image(&exe, argv, start, end),
        ));
    }
    let n = procs.len();
    let doc = json!({
        "schema_version": 1, "spacetime_version": "0.1.0", "host": "h", "kernel_release": "6",
        "start_unix_ns": 0, "start_rfc3339": "1970-01-01T00:00:00.000000000Z",
        "command": ["sh", "-c", "build"], "exit": {"code": 0}, "wall_ns": WALL_NS,
        "user_ns": 2 * (CHILD_END_NS - CHILD_START_NS) + extra as u64 * MS / 4,
        "sys_ns": 0, "lost_events": 0,
        "totals": {"processes": n, "threads": n, "peak_rss_bytes": 1 << 20, "peak_rss_pid": 2,
            "execs": n, "still_running": 0, "unknown": 0, "tree_peak_rss_bytes": PEAK_BYTES,
            "tree_peak_at_ns": CHILD_START_NS, "max_pss_bytes": null, "cpu_not_final": 0},
        "processes": procs,
        "kernel": {"counters": {}, "decode_errors": 0, "args_gaps": 0, "page_size": 4096,
            "ring_buffer_bytes": 4194304, "mechanisms": []},
        "taskstats": {"available": false, "unavailable_reason": "synthetic"},
        "spacetime": {},
        "timeline": {"rss_source": "kernel", "tree_rss": [[0, 1 << 20],
            [CHILD_START_NS, PEAK_BYTES], [CHILD_END_NS, 1 << 20]]}
    });
    std::fs::write(path, doc.to_string()).expect("write the report");
}

/// `spacetime report JSON FLAG OUT` (FLAG: `--html` or `--svg`): draws a saved report again;
/// panics unless it exits 0.
pub fn report_to(json: &Path, flag: &str, out: &Path) {
    let st = std::process::Command::new(crate::spacetime_bin())
        .arg("report")
        .arg(json)
        .arg(flag)
        .arg(out)
        .status()
        .unwrap_or_else(|e| panic!("spacetime report {flag}: {e}"));
    assert!(
        st.success(),
        "spacetime report {} {flag} {}: {st}",
        json.display(),
        out.display()
    );
}
