//! hyperfine's warnings about a command's times, with its rules: a run under 5 ms through a
//! shell; a first run far slower than the rest; outliers. An outlier is a run whose modified
//! Z-score (its distance to the median over the median absolute deviation, Iglewicz and
//! Hoaglin) is above 10 standard deviations' worth (1.4826 · 10).

/// Below this, a shell's start-up cannot be calibrated well enough (hyperfine's 5 ms).
pub const MIN_EXECUTION_NS: u64 = 5_000_000;
/// 1.4826 turns the MAD into an estimate of the standard deviation.
pub const OUTLIER_THRESHOLD: f64 = 1.4826 * 10.0;

#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// A run through a shell took under 5 ms.
    FastExecution,
    /// The first run's wall time (ns), far above the rest's.
    SlowFirstRun {
        wall_ns: u64,
        warmup: bool,
        prepare: bool,
    },
    Outliers {
        warmup: bool,
        prepare: bool,
    },
}

/// The warnings of a command's (corrected) run times.
pub fn of(walls_ns: &[u64], shell: bool, warmup: bool, prepare: bool) -> Vec<Warning> {
    let mut w = Vec::new();
    if walls_ns.is_empty() {
        return w;
    }
    if shell && walls_ns.iter().any(|&t| t < MIN_EXECUTION_NS) {
        w.push(Warning::FastExecution);
    }
    let walls: Vec<f64> = walls_ns.iter().map(|&t| t as f64).collect();
    let scores = super::stats::modified_zscores(&walls);
    if scores[0] > OUTLIER_THRESHOLD {
        w.push(Warning::SlowFirstRun {
            wall_ns: walls_ns[0],
            warmup,
            prepare,
        });
    } else if scores.iter().any(|s| s.abs() > OUTLIER_THRESHOLD) {
        w.push(Warning::Outliers { warmup, prepare });
    }
    w
}

impl Warning {
    /// hyperfine's wording, with spacetime's name.
    pub fn text(&self) -> String {
        match *self {
            Warning::FastExecution => format!(
                "Command took less than {} ms to complete. Note that the results might be \
                 inaccurate because spacetime can not calibrate the shell startup time much \
                 more precise than this limit. You can try to use the `-N`/`--shell=none` \
                 option to disable the shell completely.",
                MIN_EXECUTION_NS / 1_000_000
            ),
            Warning::SlowFirstRun {
                wall_ns,
                warmup,
                prepare,
            } => format!(
                "The first benchmarking run for this command was significantly slower than \
                 the rest ({}). This could be caused by (filesystem) caches that were not \
                 filled until after the first run. {}",
                crate::util::units::duration_ns(wall_ns),
                slow_hint(warmup, prepare)
            ),
            Warning::Outliers { warmup, prepare } => format!(
                "Statistical outliers were detected. Consider re-running this benchmark on a \
                 quiet system without any interferences from other programs.{}",
                if warmup && prepare {
                    ""
                } else {
                    " It might help to use the '--warmup' or '--prepare' options."
                }
            ),
        }
    }
}

fn slow_hint(warmup: bool, prepare: bool) -> &'static str {
    match (warmup, prepare) {
        (true, true) => {
            "You are already using both the '--warmup' option as well as the '--prepare' \
             option. Consider re-running the benchmark on a quiet system. Maybe it was a random \
             outlier. Alternatively, consider increasing the warmup count."
        }
        (true, false) => {
            "You are already using the '--warmup' option which helps to fill these caches \
             before the actual benchmark. You can either try to increase the warmup count \
             further or re-run this benchmark on a quiet system in case it was a random \
             outlier. Alternatively, consider using the '--prepare' option to clear the caches \
             before each timing run."
        }
        (false, true) => {
            "You are already using the '--prepare' option which can be used to clear caches. \
             If you did not use a cache-clearing command with '--prepare', you can either try \
             that or consider using the '--warmup' option to fill those caches before the \
             actual benchmark."
        }
        (false, false) => {
            "You should consider using the '--warmup' option to fill those caches before the \
             actual benchmark. Alternatively, use the '--prepare' option to clear the caches \
             before each timing run."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_warning() {
        let ms = 1_000_000;
        let steady = [20 * ms, 21 * ms, 22 * ms, 19 * ms, 20 * ms, 18 * ms];
        assert!(of(&steady, true, false, false).is_empty());
        let slow_first = [90 * ms, 21 * ms, 22 * ms, 19 * ms, 20 * ms, 18 * ms];
        assert!(matches!(
            of(&slow_first, false, false, false)[..],
            [Warning::SlowFirstRun { wall_ns, .. }] if wall_ns == 90 * ms
        ));
        let late = [20 * ms, 21 * ms, 22 * ms, 19 * ms, 18 * ms, 90 * ms];
        assert_eq!(
            of(&late, false, true, true),
            [Warning::Outliers {
                warmup: true,
                prepare: true
            }]
        );
        let fast = [ms, 2 * ms, 3 * ms];
        assert_eq!(of(&fast, true, false, false), [Warning::FastExecution]);
        assert!(of(&fast, false, false, false).is_empty(), "no shell");
    }
}
