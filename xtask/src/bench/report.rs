//! The bench's results: a Markdown table, JSON, and the latest table kept in BENCHMARKS.md.

use std::{fmt::Write as _, fs, path::Path, process::Command};

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::{
    runners::Runner,
    stats::{ratio, Spread, Summary},
    targets::targets,
    BenchRuns, RssRun, WorkloadResult,
};

/// The machine and build the bench ran on.
pub struct Machine {
    pub date: String,
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    pub mem_gib: f64,
    pub commit: String,
    pub spacetime: String,
}

fn output(cmd: &mut Command) -> String {
    cmd.output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

impl Machine {
    pub fn probe(spacetime: &Path) -> Machine {
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_kib: f64 = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0.0);
        Machine {
            date: output(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"])),
            kernel: output(Command::new("uname").arg("-r")),
            cpu: cpuinfo
                .lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_string())
                .unwrap_or_else(|| "unknown CPU".into()),
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            mem_gib: mem_kib / (1024.0 * 1024.0),
            commit: output(
                Command::new("git")
                    .current_dir(crate::root())
                    .args(["describe", "--always", "--dirty"]),
            ),
            spacetime: output(Command::new(spacetime).arg("--version")),
        }
    }
}

pub struct Bench {
    pub machine: Machine,
    pub reps: usize,
    pub quick: bool,
    pub elapsed_s: f64,
    pub workloads: Vec<WorkloadResult>,
    pub rss: Option<RssRun>,
    pub bench_runs: Option<BenchRuns>,
    /// The targets' own commands against bare, in adjacent pairs.
    pub pairs: Vec<super::paired::Pairs>,
}

/// [`ms`] with its sign: + or −.
pub fn signed_ms(ns: f64) -> String {
    match ns < 0.0 {
        true => format!("−{}", ms(-ns)),
        false => format!("+{}", ms(ns)),
    }
}

pub fn ms(ns: f64) -> String {
    let v = ns / 1e6;
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}

fn spread(s: &Spread) -> String {
    format!("{} ({}–{})", ms(s.median), ms(s.min), ms(s.max))
}

fn bare_of(w: &WorkloadResult) -> Option<&Summary> {
    w.runners.iter().find(|s| s.runner == Runner::Bare)
}

/// One workload's table of runners, then its in-kernel costs and start-ups.
fn workload_section(o: &mut String, w: &WorkloadResult) {
    let Some(bare) = bare_of(w) else { return };
    let _ = writeln!(o, "\n### {} — {}\n", w.name, w.title);
    let _ = writeln!(
        o,
        "| runner | wall, median (min–max) | × bare | CPU, median | CPU × bare | spacetime CPU | spacetime peak RSS | lost | processes seen |\n|---|---|---|---|---|---|---|---|---|"
    );
    for s in &w.runners {
        let dash = || "–".to_string();
        let _ = writeln!(
            o,
            "| {} | {} | {:.3} | {} | {:.2} | {} | {} | {} | {} |",
            s.runner.label(),
            spread(&s.wall),
            ratio(s.wall.median, bare.wall.median).unwrap_or(f64::NAN),
            ms(s.cpu.median),
            ratio(s.cpu.median, bare.cpu.median).unwrap_or(f64::NAN),
            s.tool_cpu.as_ref().map_or_else(dash, |c| ms(c.median)),
            s.tool_peak_rss.map_or_else(dash, mib),
            s.lost.map_or_else(dash, |l| l.to_string()),
            match (s.processes, s.runner) {
                (None, _) => dash(),
                (Some((a, b)), Runner::Watch) => format!("{a}–{b} (system-wide)"),
                (Some((a, b)), _) if a == b => match w.expected_processes {
                    Some(e) if e != a => format!("**{a} of {e}**"),
                    _ => a.to_string(),
                },
                (Some((a, b)), _) => format!("{a}–{b}"),
            }
        );
    }
    for s in w.runners.iter().filter(|s| !s.programs.is_empty()) {
        let list: Vec<String> = s
            .programs
            .iter()
            .map(|p| {
                format!(
                    "{} {:.0} ns × {}{}",
                    p.name,
                    p.ns_per_run,
                    p.runs / s.counted_reps.max(1) as u64,
                    p.verified_insns
                        .map_or(String::new(), |i| format!(" ({i} insns verified)"))
                )
            })
            .collect();
        let _ = writeln!(
            o,
            "\nIn-kernel cost under `{}` (ns per run × runs per repetition, and the \
             instructions the verifier processed to load it): {}.",
            s.runner.name(),
            list.join(", ")
        );
    }
    for s in &w.runners {
        if let Some(l) = &s.load {
            let _ = writeln!(
                o,
                "\nStart-up under `{}` (checks, kernel offsets, programs loaded, verified \
                 and attached): {}.",
                s.runner.name(),
                spread(l)
            );
        }
    }
}

pub fn markdown(b: &Bench) -> String {
    let m = &b.machine;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Ran {} on {} × {} ({:.1} GiB), Linux {}, spacetime {} (commit {}); {} interleaved \
         repetitions{}, {:.0} s in all. kernel.bpf_stats_enabled was off for them (it adds \
         two clock reads to every BPF program run) and on for up to 3 more of spacetime's \
         runners, which give the in-kernel figures and nothing else.\n",
        m.date,
        m.cpus,
        m.cpu,
        m.mem_gib,
        m.kernel,
        m.spacetime.trim_start_matches("spacetime "),
        m.commit,
        b.reps,
        if b.quick { " (--quick sizes)" } else { "" },
        b.elapsed_s
    );
    let _ = writeln!(
        o,
        "### Targets\n\n| target | measured | met |\n|---|---|---|"
    );
    for t in targets(b) {
        let _ = writeln!(
            o,
            "| {} | {} | {} |",
            t.what,
            t.measured,
            if t.met { "yes" } else { "**no**" }
        );
    }
    let _ = writeln!(
        o,
        "\nStart-up and the ratios to bare: the target's own command line (`trace --agent \
         -q --no-chart -- CMD`, no report file; `trace --agent -f '%e %M' -- CMD`) and the \
         bare command run in adjacent pairs, each order half the time; the figure is the \
         median over pairs of each pair's added wall or ratio, with the range of the pairs \
         (the tables below are repetitions of every runner in turn, the traces writing the \
         JSON report they read). The agent's CPU is counted in the tables' CPU. Per event: the costliest of the programs that \
         run once per fork, exec or exit (or per dead task's last switch), of every runner \
         that loads its own (`trace`, `trace-nopss`, `watch`), as the median over \
         repetitions of its ns per run, among those that ran at least 10 times a \
         repetition; one that ran fewer (its first run is cold: the one process of /bin/true \
         or touch) is shown beside, not counted."
    );
    for w in &b.workloads {
        workload_section(&mut o, w);
    }
    if let Some(r) = &b.bench_runs {
        let per = |w: &Spread| {
            format!(
                "{} whole, {} per run beyond the command",
                spread(w),
                signed_ms(r.added_per_run(w))
            )
        };
        let _ = writeln!(
            o,
            "\n### spacetime bench: each run beyond the command\n\n`spacetime bench -N -q -r {} \
             /bin/true`, its start-up included, against {} bare runs of /bin/true ({} each): \
             with its own programs (`--no-agent`) {}; through the agent (`--agent`) {}.",
            r.runs,
            r.runs,
            ms(r.bare_ns),
            per(&r.own),
            r.agent.as_ref().map_or("not measured".into(), per),
        );
    }
    if let Some(r) = &b.rss {
        let s = &r.sample;
        let _ = writeln!(
            o,
            "\n### spacetime's own memory on a big trace\n\n`spacetime trace` of {} processes \
             (fork+exec of /bin/true, one after another: a build's shape): spacetime's peak RSS {} (GNU time's %M: its \
             whole life, the report's building included; the report's own figure, read \
             before it is built, says {}), its CPU {}, wall {}, {} processes in the report, {} \
             lost.",
            r.processes,
            s.waited_maxrss.map_or("unknown".into(), mib),
            s.tool_peak_rss.map_or("unknown".into(), mib),
            s.tool_cpu_ns.map_or("unknown".into(), |c| ms(c as f64)),
            ms(s.wall_ns as f64),
            s.processes.map_or("unknown".into(), |p| p.to_string()),
            s.lost.map_or("unknown".into(), |l| l.to_string()),
        );
    }
    o
}

fn spread_json(s: &Spread) -> Value {
    json!({"median": s.median, "min": s.min, "max": s.max})
}

pub fn json(b: &Bench) -> Value {
    let m = &b.machine;
    let workloads: Vec<Value> = b
        .workloads
        .iter()
        .map(|w| {
            let bare = bare_of(w).map(|s| (s.wall.median, s.cpu.median));
            let runners: Vec<Value> = w
                .runners
                .iter()
                .map(|s| {
                    json!({
                        "runner": s.runner.name(),
                        "wall_ns": spread_json(&s.wall),
                        "cpu_ns": spread_json(&s.cpu),
                        "wall_ratio": bare.and_then(|(bw, _)| ratio(s.wall.median, bw)),
                        "cpu_ratio": bare.and_then(|(_, bc)| ratio(s.cpu.median, bc)),
                        "spacetime_cpu_ns": s.tool_cpu.as_ref().map(spread_json),
                        "spacetime_peak_rss_bytes": s.tool_peak_rss,
                        "lost_events": s.lost,
                        "kernel_programs": s.programs.iter().map(|p| json!({
                            "name": p.name, "runs": p.runs, "ns_per_run": p.ns_per_run,
                            "verified_insns": p.verified_insns,
                        })).collect::<Vec<_>>(),
                        "load_ns": s.load.as_ref().map(spread_json),
                        "samples": s.samples.iter().map(|x| json!({
                            "wall_ns": x.wall_ns, "cpu_ns": x.cpu_ns,
                            "spacetime_cpu_ns": x.tool_cpu_ns,
                            "spacetime_peak_rss_bytes": x.tool_peak_rss,
                            "lost_events": x.lost, "processes": x.processes,
                            "load_ns": x.load_ns,
                        })).collect::<Vec<_>>(),
                    })
                })
                .collect();
            json!({
                "name": w.name, "title": w.title,
                "expected_processes": w.expected_processes, "runners": runners,
            })
        })
        .collect();
    json!({
        "date": m.date, "kernel": m.kernel, "cpu": m.cpu, "cpus": m.cpus,
        "mem_gib": m.mem_gib, "commit": m.commit, "spacetime": m.spacetime,
        "repetitions": b.reps, "quick": b.quick, "elapsed_s": b.elapsed_s,
        "workloads": workloads,
        "rss_run": b.rss.as_ref().map(|r| json!({
            "processes": r.processes,
            "wall_ns": r.sample.wall_ns,
            "spacetime_cpu_ns": r.sample.tool_cpu_ns,
            "spacetime_peak_rss_bytes": r.sample.waited_maxrss,
            "report_peak_rss_bytes": r.sample.tool_peak_rss,
            "processes_seen": r.sample.processes,
            "lost_events": r.sample.lost,
        })),
        "bench_runs": b.bench_runs.as_ref().map(|r| json!({
            "runs": r.runs, "bare_ns": r.bare_ns,
            "wall_ns_own": spread_json(&r.own),
            "added_ns_per_run_own": r.added_per_run(&r.own),
            "wall_ns_agent": r.agent.as_ref().map(spread_json),
            "added_ns_per_run_agent": r.agent.as_ref().map(|a| r.added_per_run(a)),
        })),
        "pairs": b.pairs.iter().map(|p| json!({
            "workload": p.workload, "runner": p.runner.name(), "pairs": p.count,
            "ratio": spread_json(&p.ratio), "added_ns": spread_json(&p.added_ns),
        })).collect::<Vec<_>>(),
        "targets": targets(b).into_iter().map(|t| json!({
            "target": t.what, "measured": t.measured, "met": t.met,
        })).collect::<Vec<_>>(),
    })
}

const BEGIN: &str = "<!-- bench:begin (cargo xtask bench rewrites this part) -->";
const END: &str = "<!-- bench:end -->";

/// Puts `table` between the markers of `doc` (appending them if missing).
pub fn splice(doc: &str, table: &str) -> String {
    let body = format!("{BEGIN}\n{table}\n{END}");
    match (doc.find(BEGIN), doc.find(END)) {
        (Some(a), Some(b)) if a < b => format!("{}{body}{}", &doc[..a], &doc[b + END.len()..]),
        _ => format!("{}\n## Latest run\n\n{body}\n", doc.trim_end()),
    }
}

/// Keeps the latest table in BENCHMARKS.md.
pub fn record(path: &Path, table: &str) -> Result<()> {
    let doc = fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n".into());
    fs::write(path, splice(&doc, table)).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splice_replaces_only_between_markers() {
        let doc = format!("# B\nintro\n{BEGIN}\nold\n{END}\nafter\n");
        let out = splice(&doc, "new");
        assert_eq!(out, format!("# B\nintro\n{BEGIN}\nnew\n{END}\nafter\n"));
        let fresh = splice("# B\n", "t");
        assert!(fresh.contains(&format!("{BEGIN}\nt\n{END}")), "{fresh}");
        assert_eq!(splice(&fresh, "u").matches(BEGIN).count(), 1);
    }
}
