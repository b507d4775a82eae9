//! `spacetime watch` refuses values that cannot mean what they say, before loading anything.

use std::process::Command;

use spacetime_tests::spacetime_bin;

/// Runs `spacetime watch ARGS`; returns (exit code, stderr).
fn watch(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(spacetime_bin())
        .arg("watch")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run spacetime watch {args:?}: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn count_zero_is_refused() {
    let (code, err) = watch(&["--count", "0"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("--count"), "{err}");
}

#[test]
fn comm_limit_must_be_positive_and_bounded() {
    for bad in ["0", "-1", "many", "100001"] {
        let (code, err) = watch(&[&format!("--metrics-comm-limit={bad}")]);
        assert_eq!(code, Some(125), "--metrics-comm-limit {bad}: {err}");
        assert!(err.contains("--metrics-comm-limit"), "{err}");
    }
}
