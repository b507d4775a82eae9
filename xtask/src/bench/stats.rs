//! Medians, spreads and ratios over a runner's samples (the statistics themselves are
//! `spacetime-stats`, shared with `spacetime bench`).

use std::collections::BTreeMap;

#[cfg(test)]
use super::runners::ProgramRun;
use super::runners::{Runner, Sample};
pub use spacetime_stats::Spread;

/// One kernel program's cost over all runs of a runner: runs and ns per run.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramCost {
    pub name: String,
    pub runs: u64,
    pub ns_per_run: f64,
    /// The median over the runs of its ns per run in each (runs where it ran): robust to one
    /// event an interrupt stretched where a run has few.
    pub ns_per_run_median: f64,
    /// Instructions the verifier processed to load it (the largest of the runs).
    pub verified_insns: Option<u64>,
}

/// One program's figures summed over a runner's samples, and its ns per run in each.
#[derive(Default)]
struct ProgramTotals {
    runs: u64,
    ns: u64,
    insns: Option<u64>,
    per_run: Vec<u64>,
}

/// What one runner did on one workload.
#[derive(Clone, Debug)]
pub struct Summary {
    pub runner: Runner,
    pub samples: Vec<Sample>,
    pub wall: Spread,
    pub cpu: Spread,
    pub tool_cpu: Option<Spread>,
    pub tool_peak_rss: Option<u64>,
    /// Total lost over the runs (None: the runner does not report loss).
    pub lost: Option<u64>,
    pub processes: Option<(u64, u64)>,
    pub programs: Vec<ProgramCost>,
    /// Repetitions whose program runs were counted (`programs` sums over them).
    pub counted_reps: usize,
    /// spacetime's start-up (programs checked, loaded, verified and attached), when it says.
    pub load: Option<Spread>,
}

impl Summary {
    /// Every figure from the timed samples; the programs' from those that counted them (run
    /// with the kernel's accounting on, see [`Sample::stats_only`]).
    pub fn of(runner: Runner, samples: Vec<Sample>) -> Option<Summary> {
        let timed: Vec<&Sample> = samples.iter().filter(|s| !s.stats_only).collect();
        let wall = Spread::of(&timed.iter().map(|s| s.wall_ns).collect::<Vec<_>>())?;
        let cpu = Spread::of(&timed.iter().map(|s| s.cpu_ns).collect::<Vec<_>>())?;
        let tool: Vec<u64> = timed.iter().filter_map(|s| s.tool_cpu_ns).collect();
        let procs: Vec<u64> = timed.iter().filter_map(|s| s.processes).collect();
        let counted = samples
            .iter()
            .filter(|s| s.programs.iter().any(|p| p.run_cnt > 0))
            .count();
        let mut programs: BTreeMap<&str, ProgramTotals> = BTreeMap::new();
        for s in &samples {
            for p in &s.programs {
                let e = programs.entry(&p.name).or_default();
                e.runs += p.run_cnt;
                e.ns += p.run_time_ns;
                e.insns = e.insns.max(p.verified_insns);
                if let Some(per_run) = p.run_time_ns.checked_div(p.run_cnt) {
                    e.per_run.push(per_run);
                }
            }
        }
        let programs = programs
            .into_iter()
            .filter(|(_, t)| t.runs > 0)
            .map(|(name, t)| ProgramCost {
                name: name.to_string(),
                runs: t.runs,
                ns_per_run: t.ns as f64 / t.runs as f64,
                ns_per_run_median: Spread::of(&t.per_run).map_or(f64::NAN, |s| s.median),
                verified_insns: t.insns,
            })
            .collect();
        let load: Vec<u64> = timed.iter().filter_map(|s| s.load_ns).collect();
        Some(Summary {
            runner,
            wall,
            cpu,
            tool_cpu: Spread::of(&tool),
            tool_peak_rss: timed.iter().filter_map(|s| s.tool_peak_rss).max(),
            lost: samples
                .iter()
                .map(|s| s.lost)
                .try_fold(0u64, |acc, l| l.map(|l| acc + l))
                .filter(|_| runner.is_spacetime()),
            processes: procs
                .iter()
                .min()
                .zip(procs.iter().max())
                .map(|(a, b)| (*a, *b)),
            programs,
            counted_reps: counted,
            load: Spread::of(&load),
            samples,
        })
    }
}

/// The ratio of two medians.
pub fn ratio(x: f64, bare: f64) -> Option<f64> {
    (bare > 0.0).then(|| x / bare)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_summed_over_runs() {
        let prog = |name: &str, run_cnt, run_time_ns, insns| ProgramRun {
            name: name.into(),
            run_cnt,
            run_time_ns,
            verified_insns: insns,
        };
        let sample = |cnt, ns, load_ns| Sample {
            wall_ns: 10,
            cpu_ns: 5,
            lost: Some(0),
            programs: vec![prog("exit", cnt, ns, Some(900)), prog("idle", 0, 0, None)],
            load_ns,
            ..Sample::default()
        };
        let s = Summary::of(
            Runner::Trace,
            vec![sample(10, 1000, Some(30)), sample(30, 5000, Some(50))],
        )
        .unwrap();
        assert_eq!(
            s.programs,
            [ProgramCost {
                name: "exit".into(),
                runs: 40,
                ns_per_run: 150.0,
                // 100 and 166 ns per run in the two samples.
                ns_per_run_median: 133.0,
                verified_insns: Some(900),
            }]
        );
        assert_eq!(s.lost, Some(0));
        assert_eq!(
            s.load.map(|l| (l.median, l.min, l.max)),
            Some((40.0, 30.0, 50.0))
        );
        let bare = Summary::of(Runner::Bare, vec![sample(0, 0, None)]).unwrap();
        assert_eq!(
            bare.load, None,
            "no start-up figure where the runner gives none"
        );
    }

    #[test]
    fn counted_runs_give_the_programs_and_only_them() {
        let timed = |wall_ns| Sample {
            wall_ns,
            cpu_ns: wall_ns,
            load_ns: Some(wall_ns),
            // Accounting off: the kernel counted nothing.
            programs: vec![ProgramRun {
                name: "exit".into(),
                ..ProgramRun::default()
            }],
            ..Sample::default()
        };
        let counted = Sample {
            wall_ns: 1000,
            cpu_ns: 1000,
            load_ns: Some(1000),
            programs: vec![ProgramRun {
                name: "exit".into(),
                run_cnt: 4,
                run_time_ns: 800,
                verified_insns: None,
            }],
            stats_only: true,
            ..Sample::default()
        };
        let s = Summary::of(Runner::Trace, vec![timed(10), timed(30), counted]).unwrap();
        assert_eq!((s.wall.median, s.wall.max, s.cpu.max), (20.0, 30.0, 30.0));
        assert_eq!(s.load.map(|l| l.max), Some(30.0));
        assert_eq!(s.counted_reps, 1);
        assert_eq!(
            s.programs
                .iter()
                .map(|p| (p.runs, p.ns_per_run))
                .collect::<Vec<_>>(),
            [(4, 200.0)]
        );
    }

    #[test]
    fn loss_unknown_when_a_run_did_not_say() {
        let a = Sample {
            lost: Some(2),
            ..Sample::default()
        };
        let b = Sample::default();
        assert_eq!(Summary::of(Runner::Trace, vec![a, b]).unwrap().lost, None);
        assert_eq!(ratio(3.0, 2.0), Some(1.5));
        assert_eq!(ratio(3.0, 0.0), None);
    }
}
