//! Runs whose max PSS must be given: the figure is given only when a PSS round read the tree
//! while it held its peak, and when rounds come depends on the machine's speed (they are kept
//! to a share of a CPU). A run that saw none must say why; a later, longer one must give it.

use crate::Outcome;

/// Runs `run(hold_ms)` until the max PSS is given, doubling the hold each time: five holds
/// (16 times the first) are left to a machine of any speed.
pub fn held(first_hold_ms: u64, what: &str, mut run: impl FnMut(&str) -> Outcome) -> Outcome {
    until_known(what, |attempt| run(&(first_hold_ms << attempt).to_string()))
}

/// Runs `run(attempt)` until the max PSS is given, at most five times. A run on a loaded
/// machine may rightly leave it unknown (no round while the peak was held, or memory that
/// changed faster than the rounds followed it, past the bound an exact RSS gives): the report
/// must say why, and a later run must give the figure.
pub fn until_known(what: &str, mut run: impl FnMut(u32) -> Outcome) -> Outcome {
    let mut last = String::new();
    for attempt in 0..5 {
        let out = run(attempt);
        let v = out.json_value();
        if v["totals"]["max_pss_bytes"].as_u64().is_some() {
            return out;
        }
        last = format!(
            "{}\nmax_pss: {}\npss_sampling: {}",
            out.context(),
            v["timeline"]["max_pss"],
            v["timeline"]["pss_sampling"]
        );
        let why = v["totals"]["max_pss_unknown_reason"].as_str().unwrap_or("");
        assert!(
            !why.is_empty(),
            "{what}: max PSS unknown, and the report says not why\n{}",
            out.context()
        );
        eprintln!(
            "{what}: max PSS unknown in run {} of 5 ({why}); run again",
            attempt + 1
        );
    }
    panic!("{what}: max PSS unknown in five runs; the last:\n{last}");
}
