//! The bench's targets, one row each, as the figure a user feels: start-up is the wall a
//! trace adds to the bare command, an agent's CPU is counted in the runs it serves, per-event
//! kernel cost is what one fork, exec or exit costs.

use super::{
    report::{ms, Bench},
    runners::Runner,
    stats::{ratio, Summary},
    WorkloadResult,
};

/// One target: what, the measured figure, whether it is met.
pub struct Target {
    pub what: &'static str,
    pub measured: String,
    pub met: bool,
}

/// Programs that run once per fork, exec or exit of a process (or per dead task's last
/// switch): the per-event cost. rss_stat runs per RSS change; own_pid once per run.
const PER_EVENT: [&str; 9] = [
    "sched_process_fork",
    "sched_prepare_exec",
    "sched_process_exec",
    "exec_args",
    "rss_exec",
    "sched_process_exit",
    "rss_exit",
    "sched_process_free",
    "dead_switch",
];

/// The per-event target in ns.
const PER_EVENT_NS: f64 = 2000.0;

fn runner<'a>(b: &'a Bench, workload: &str, r: Runner) -> Option<(&'a Summary, &'a Summary)> {
    let w = b.workloads.iter().find(|w| w.name == workload)?;
    let find = |r| w.runners.iter().find(|s| s.runner == r);
    Some((find(Runner::Bare)?, find(r)?))
}

fn unmeasured(why: &str) -> String {
    format!("not measured ({why})")
}

/// The wall `r` adds to bare /bin/true.
fn added_wall(b: &Bench, r: Runner, limit_ns: f64) -> (String, bool) {
    match runner(b, "true", r) {
        Some((bare, tr)) => {
            let added = tr.wall.median - bare.wall.median;
            (format!("+{}", ms(added)), added <= limit_ns)
        }
        None => (
            unmeasured(&format!("the true workload under {}", r.name())),
            false,
        ),
    }
}

/// `r`'s wall over bare on `workload`.
fn wall_ratio(b: &Bench, workload: &str, r: Runner, limit: f64) -> (String, bool) {
    match runner(b, workload, r).and_then(|(bare, tr)| ratio(tr.wall.median, bare.wall.median)) {
        Some(x) => (format!("{x:.3}×"), x <= limit),
        None => (unmeasured(&format!("{workload} under {}", r.name())), false),
    }
}

/// The costliest per-event program of `trace` on each workload but the start-up one (too
/// few events to say): the median over repetitions of its ns per run, so one event that an
/// interrupt or a preempted vCPU stretched does not stand for the rest.
fn per_event(workloads: &[WorkloadResult]) -> (String, bool) {
    let mut parts = Vec::new();
    let mut met = true;
    for w in workloads.iter().filter(|w| w.name != "true") {
        let Some(tr) = w.runners.iter().find(|s| s.runner == Runner::Trace) else {
            continue;
        };
        let worst = tr
            .programs
            .iter()
            .filter(|p| PER_EVENT.contains(&p.name.as_str()))
            .max_by(|a, b| a.ns_per_run_median.total_cmp(&b.ns_per_run_median));
        if let Some(p) = worst {
            met &= p.ns_per_run_median <= PER_EVENT_NS;
            parts.push(format!(
                "{}: {} {:.2} µs",
                w.name,
                p.name,
                p.ns_per_run_median / 1e3
            ));
        }
    }
    if parts.is_empty() {
        return (unmeasured("no workload under trace"), false);
    }
    (parts.join("; "), met)
}

/// The targets, in its order.
pub fn targets(b: &Bench) -> Vec<Target> {
    let row = |what, (measured, met): (String, bool)| Target {
        what,
        measured,
        met,
    };
    let bench_run = match &b.bench_runs {
        Some(r) => (format!("+{}", ms(r.added_ns)), r.added_ns <= 2e6),
        None => (
            unmeasured("needs the true workload and the trace runner"),
            false,
        ),
    };
    // The whole process's peak, as wait4 tells it: what the report says is read before the
    // report is built.
    let rss = match b.rss.as_ref().and_then(|r| r.sample.waited_maxrss) {
        Some(x) => (
            format!("{:.1} MiB", x as f64 / (1 << 20) as f64),
            x <= 64 << 20,
        ),
        None => (unmeasured("a full bench of every workload"), false),
    };
    vec![
        row(
            "`trace -q --no-chart -- /bin/true` through the agent: added wall ≤ 5 ms",
            added_wall(b, Runner::TraceAgent, 5e6),
        ),
        row(
            "1000 fork+exec of /bin/true through the agent, wall (agent's CPU counted) ≤ 1.03×",
            wall_ratio(b, "fork-exec", Runner::TraceAgent, 1.03),
        ),
        row(
            "`--no-agent` start-up: added wall ≤ 40 ms",
            added_wall(b, Runner::Trace, 40e6),
        ),
        row(
            "`--no-agent`, 1000 fork+exec ≤ 1.10×",
            wall_ratio(b, "fork-exec", Runner::Trace, 1.10),
        ),
        row(
            "`make -j2` (own programs) ≤ 1.02×",
            wall_ratio(b, "make", Runner::Trace, 1.02),
        ),
        row(
            "in-kernel per fork/exec/exit event, every workload of `cargo xtask bench` ≤ 2 µs",
            per_event(&b.workloads),
        ),
        row(
            "each `bench` run beyond the command itself ≤ 2 ms",
            bench_run,
        ),
        row(
            "spacetime's own peak RSS on a 100 003-process trace ≤ 64 MiB",
            rss,
        ),
    ]
}
