//! The targets that compare a trace with the bare command, measured as a user runs them: the
//! target's own command line (no report file the tables need) against the bare command, in
//! adjacent pairs whose order alternates, so that the machine's drift falls on both halves of
//! a pair. The figure is the median over pairs of each pair's ratio, or of the wall it added.
//! The tables' medians come from repetitions of every runner in turn, minutes apart on a
//! machine whose speed wanders; a pair is seconds apart.

use anyhow::Result;

use super::{
    runners::{self, Env, Runner},
    stats::Spread,
    workloads::Workload,
};

/// One target's pairs.
pub struct Pairs {
    pub workload: &'static str,
    pub runner: Runner,
    pub count: usize,
    /// The traced run's wall over the bare run's, per pair.
    pub ratio: Spread,
    /// The wall the trace added to the bare run, per pair, ns (negative where the traced half
    /// was the faster).
    pub added_ns: Spread,
}

/// The targets measured in pairs: workload, runner, pairs (a full bench).
const PLAN: [(&str, Runner, usize); 4] = [
    ("true", Runner::TraceAgentTime, 60),
    ("true", Runner::TraceAgent, 60),
    ("fork-exec", Runner::TraceAgent, 30),
    ("make", Runner::TraceAgent, 20),
];

/// Pairs of each planned target whose workload and runner this bench runs (`quick`: two).
pub fn measure(
    env: &Env,
    workloads: &[&Workload],
    runners: &[Runner],
    quick: bool,
) -> Result<Vec<Pairs>> {
    let mut out = Vec::new();
    for (name, runner, count) in PLAN {
        let Some(w) = workloads.iter().find(|w| w.name == name) else {
            continue;
        };
        if !runners.contains(&runner) || env.agent.is_none() {
            continue;
        }
        let count = if quick { 2 } else { count };
        let mut walls = Vec::with_capacity(count);
        for k in 0..count {
            eprint!(
                "\rxtask: bench {name:<10} {:<17} pair {}/{count}",
                runner.name(),
                k + 1
            );
            // Each order half the time: neither half always runs on what the other warmed.
            let pair = match k % 2 {
                0 => {
                    let bare = runners::target_once(env, w, Runner::Bare)?;
                    (bare, runners::target_once(env, w, runner)?)
                }
                _ => {
                    let traced = runners::target_once(env, w, runner)?;
                    (runners::target_once(env, w, Runner::Bare)?, traced)
                }
            };
            walls.push(pair);
        }
        eprintln!();
        out.push(of_walls(name, runner, &walls));
    }
    Ok(out)
}

/// The pairs' figures from their (bare, traced) walls in ns.
fn of_walls(workload: &'static str, runner: Runner, walls: &[(u64, u64)]) -> Pairs {
    let ratios: Vec<f64> = walls
        .iter()
        .map(|&(bare, traced)| traced as f64 / bare.max(1) as f64)
        .collect();
    let added: Vec<f64> = walls
        .iter()
        .map(|&(bare, traced)| traced as f64 - bare as f64)
        .collect();
    Pairs {
        workload,
        runner,
        count: walls.len(),
        ratio: spread(ratios),
        added_ns: spread(added),
    }
}

/// Median (the mean of the middle two for an even count), minimum and maximum.
fn spread(mut xs: Vec<f64>) -> Spread {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    let median = match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => xs[n / 2],
        _ => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    };
    Spread {
        median,
        min: xs.first().copied().unwrap_or(f64::NAN),
        max: xs.last().copied().unwrap_or(f64::NAN),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_compared_with_its_own_bare_half() {
        // The machine slows down fourfold halfway: a median of each side would read 2.5×;
        // every pair says 1.1× or 1.2×.
        let walls = [(100, 110), (100, 120), (400, 440), (400, 480)];
        let p = of_walls("true", Runner::TraceAgent, &walls);
        assert_eq!(p.count, 4);
        assert!((p.ratio.median - 1.15).abs() < 1e-9, "{}", p.ratio.median);
        assert_eq!((p.ratio.min, p.ratio.max), (1.1, 1.2));
        assert_eq!((p.added_ns.min, p.added_ns.max), (10.0, 80.0));
        assert_eq!(p.added_ns.median, 30.0);
    }

    #[test]
    fn a_faster_traced_half_adds_a_negative_wall() {
        let p = of_walls("true", Runner::TraceAgent, &[(100, 90)]);
        assert_eq!(p.added_ns.median, -10.0);
        assert!(p.ratio.median < 1.0);
    }
}
