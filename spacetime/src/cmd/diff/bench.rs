//! Two bench reports: each command of B against the same command of A (matched by command
//! line, or by position when the lists differ only in their commands), its mean time, CPU and
//! memory with the change and whether it is significant — the bench's own Welch test on the
//! runs' values (the `spacetime-stats` crate the bench uses).

use serde_json::Value;
use spacetime_stats::{welch_p, Stats};

use super::table::{Gated, Row, Section};
use crate::util::term;

/// A figure's per-run values (`{…, "values": [...]}`), as the bench's statistics.
fn stats(result: &Value, key: &str) -> Option<Stats> {
    let values: Vec<u64> = result
        .get(key)?
        .get("values")?
        .as_array()?
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    Stats::of(&values)
}

/// CPU per run: user + system.
fn cpu(result: &Value) -> Option<Stats> {
    let (u, s) = (stats(result, "user_ns")?, stats(result, "sys_ns")?);
    let values: Vec<u64> = u.values.iter().zip(&s.values).map(|(a, b)| a + b).collect();
    Stats::of(&values)
}

fn failures(result: &Value) -> Option<Stats> {
    let codes: Vec<u64> = result
        .get("exit_codes")?
        .as_array()?
        .iter()
        .map(|c| u64::from(c.as_i64() != Some(0)))
        .collect();
    Stats::of(&[codes.iter().sum()])
}

fn row(name: &str, figure: Gated, a: Option<Stats>, b: Option<Stats>) -> Row {
    let mut r = Row::new(name, Some(figure), figure.unit())
        .values(a.as_ref().map(|s| s.mean), b.as_ref().map(|s| s.mean));
    if let (Some(a), Some(b)) = (&a, &b) {
        r.p_value = welch_p(a, b);
        r.significant = Some(
            r.p_value
                .is_some_and(|p| p < crate::cmd::bench::compare::ALPHA),
        );
    }
    r
}

fn results(v: &Value) -> &[Value] {
    v.get("results")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn command(r: &Value) -> &str {
    r.get("command").and_then(Value::as_str).unwrap_or_default()
}

/// The sections comparing two saved bench reports: one per command of B.
pub fn compare(a: &Value, b: &Value) -> Vec<Section> {
    let (ra, rb) = (results(a), results(b));
    let by_position = ra.len() == rb.len()
        && rb
            .iter()
            .any(|r| !ra.iter().any(|x| command(x) == command(r)));
    rb.iter()
        .enumerate()
        .map(|(i, r)| {
            let other = if by_position {
                ra.get(i)
            } else {
                ra.iter().find(|x| command(x) == command(r))
            };
            let name = term::escape(command(r).as_bytes());
            let pair = |f: fn(&Value) -> Option<Stats>| (other.and_then(f), f(r));
            let (wa, wb) = pair(|v| stats(v, "wall_ns"));
            let (ca, cb) = pair(cpu);
            let (pa, pb) = pair(|v| stats(v, "peak_rss_bytes"));
            let (ta, tb) = pair(|v| stats(v, "tree_peak_rss_bytes"));
            let (fa, fb) = pair(failures);
            let mut failed = Row::new("failed runs", Some(Gated::Failures), Gated::Failures.unit())
                .values(fa.map(|s| s.mean), fb.map(|s| s.mean));
            failed.note = format!(
                "of {} → {} runs",
                other
                    .and_then(|o| o.get("runs"))
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                r.get("runs").and_then(Value::as_u64).unwrap_or(0)
            );
            Section {
                title: match other {
                    Some(o) if command(o) != command(r) => {
                        format!("{} (A: {})", name, term::escape(command(o).as_bytes()))
                    }
                    _ => name.clone(),
                },
                rows: vec![
                    row("wall (mean)", Gated::Wall, wa, wb),
                    row("CPU (mean)", Gated::Cpu, ca, cb),
                    row("peak RSS (mean)", Gated::Peak, pa, pb),
                    row("tree peak RSS (mean)", Gated::TreePeak, ta, tb),
                    failed,
                ],
                gated: true,
                gate_prefix: format!("{name}: "),
            }
        })
        .collect()
}
