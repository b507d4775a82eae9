//! A process's CPU time, in a report or a watch row, against what its parent's `wait4`
//! returned for it.
//!
//! wait4's rusage has microsecond fields, the kernel's nanoseconds truncated; spacetime's
//! nanoseconds truncated the same way must match. A final figure may exceed wait4's by the
//! child's last slice when the parent reaped it on another CPU while it was still leaving
//! ([`crate::exit_tail_us`]). A figure marked not final (`cpu_final: false`: its release
//! record did not come within the wait, which a starved machine's RCU grace periods can
//! outlast) is the exit-time one, which misses that last slice: it can only be lower.

use serde_json::Value;

fn us(row: &Value, key: &str) -> i64 {
    row[key]
        .as_i64()
        .unwrap_or_else(|| panic!("no integer {key} in {row}"))
        / 1000
}

/// Asserts `row`'s `user_ns`/`sys_ns` against wait4's `want` (µs), which returned at
/// `reaped_ns`: equal when final (to the last slice), a lower bound otherwise.
pub fn assert_wait4(what: &str, row: &Value, want: (i64, i64), reaped_ns: i64) {
    let got = (us(row, "user_ns"), us(row, "sys_ns"));
    let d = (got.0 + got.1) - (want.0 + want.1);
    let tail = crate::exit_tail_us(reaped_ns);
    match row["cpu_final"].as_bool() {
        Some(true) => assert!(
            got == want || (0..=tail).contains(&d),
            "{what}: spacetime user+sys {got:?} µs, wait4 {want:?} µs (tail up to {tail} µs)"
        ),
        Some(false) => {
            eprintln!("{what}: CPU not final (its release record did not come in the wait)");
            assert!(
                got.0 >= 0 && got.1 >= 0 && d <= tail,
                "{what}: the exit-time figure {got:?} µs must not pass wait4's {want:?} µs"
            );
        }
        None => panic!("{what}: no cpu_final in {row}"),
    }
}

/// Asserts that a report's `totals.cpu_not_final` counts its processes marked not final.
pub fn assert_not_final_counted(report: &Value) {
    let marked = report["processes"]
        .as_array()
        .expect("processes array")
        .iter()
        .filter(|p| p["cpu_final"] != Value::Bool(true))
        .count() as u64;
    assert_eq!(
        report["totals"]["cpu_not_final"].as_u64(),
        Some(marked),
        "totals.cpu_not_final counts the processes with cpu_final false"
    );
}
