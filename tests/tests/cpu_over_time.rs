//! CPU over time against its truths: the cores a phase of the workload used (its own CPU over
//! its own wall, read by the workload) and the report's CPU, which wait4 vouches for.

use serde_json::Value;
use spacetime_tests::agent::Agent;
use spacetime_tests::{Outcome, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");
/// Each phase of `cpu-phases`, ms.
const PHASE_MS: &str = "300";
/// The CPU clock program's period: a thread's CPU is placed to within about this much.
const TICK_NS: u64 = 10_000_000;
/// How far a phase's mean cores may be from its truth: the CPU misplaced across its two
/// edges, each thread's run time spread over the segment between two of its points. A point
/// comes when a tick finds the thread running, so a segment holds about a tick period of the
/// thread's CPU however busy the machine is: the misplaced CPU does not grow when a busy or
/// emulated CPU stretches the phase's wall, and its share of the phase only shrinks. 0.25
/// cores of an unhurried 260 ms window is 65 ms of CPU, six segments' worth.
const CORES_TOLERANCE: f64 = 0.25;

fn int(v: &Value, key: &str) -> u64 {
    v[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no integer {key} in {v}"))
}

/// The series' mean cores over `[from, to)` (ns since the report's start): each bucket
/// counted in proportion to its overlap.
fn mean_cores(cpu: &Value, from: u64, to: u64) -> f64 {
    let width = int(cpu, "bucket_ns");
    let buckets = cpu["cpu_ns"].as_array().expect("cpu_ns");
    let mut ns = 0f64;
    for (k, b) in buckets.iter().enumerate() {
        let (s, e) = (k as u64 * width, (k as u64 + 1) * width);
        let overlap = e.min(to).saturating_sub(s.max(from));
        ns += b.as_u64().expect("ns") as f64 * overlap as f64 / width as f64;
    }
    ns / (to - from) as f64
}

#[test]
fn cores_follow_the_phases_and_add_up_to_wait4() {
    let out = Trace::new([WL, "rusage-of", WL, "cpu-phases", PHASE_MS])
        .tag("cpu-phases")
        .run();
    assert_phases_sampled(&out);
}

/// Through an agent of the test's own (the suite's agent pass runs the test above through
/// its agent too): the agent attaches the CPU clock for the session, so the series is the
/// sampled kind, with the same bounds as the programs loaded by spacetime itself.
#[test]
fn through_an_agent_cores_follow_the_phases_and_add_up_to_wait4() {
    let agent = Agent::start("cpu-phases");
    let out = Trace::new([WL, "rusage-of", WL, "cpu-phases", PHASE_MS])
        .through(&agent)
        .flag("-v")
        .tag("cpu-phases-agent")
        .run();
    assert_eq!(
        out.json_value()["programs"],
        "agent",
        "traced through the agent\n{}",
        out.context()
    );
    assert!(
        out.stderr
            .contains("sampled by the agent's CPU clock at 100 Hz"),
        "-v names the agent's CPU clock\n{}",
        out.context()
    );
    // The summary's chart says what it is, as with the programs loaded by spacetime itself.
    assert!(
        out.stderr.contains("CPU in cores, sampled at 100 Hz"),
        "the chart's title says sampled\n{}",
        out.context()
    );
    assert_phases_sampled(&out);
    agent.stop();
}

/// The report of `cpu-phases` under `rusage-of`: a sampled series that shows each phase's
/// cores to within [`CORES_TOLERANCE`] and adds up to the report's CPU, itself wait4's.
fn assert_phases_sampled(out: &Outcome) {
    out.assert_code(0);
    let v = out.json_value();
    let ctx = out.context();
    let cpu = &v["timeline"]["cpu"];
    assert_eq!(
        cpu["method"], "ticks",
        "sampled by the kernel: {cpu}\n{ctx}"
    );
    assert_eq!(cpu["approximate"], false, "{cpu}");
    assert_eq!(cpu["tick_hz"], 100, "{cpu}");
    assert_eq!(cpu["ticks_dropped"], 0, "{cpu}");
    let phases = out.truth_one("cpu-phases");
    let origin = int(&v, "start_unix_ns") as i64;
    let at = |key: &str| {
        u64::try_from(phases.int(key) - origin)
            .unwrap_or_else(|_| panic!("{key} before the report's start\n{ctx}"))
    };
    for p in ["p1", "p2"] {
        let (s, e) = (
            at(&format!("{p}_start_unix_ns")),
            at(&format!("{p}_end_unix_ns")),
        );
        assert!(
            e > s + 4 * TICK_NS,
            "{p}: {s}..{e} ns is too short to judge"
        );
        // The truth: the process's CPU over the phase's wall.
        let want = phases.int(&format!("{p}_cpu_ns")) as f64 / (e - s) as f64;
        // Inside the phase, two tick periods clear of its edges.
        let got = mean_cores(cpu, s + 2 * TICK_NS, e - 2 * TICK_NS);
        assert!(
            (got - want).abs() <= CORES_TOLERANCE,
            "{p}: the series says {got:.3} cores over {s}..{e} ns, the workload used \
             {want:.3}\n{cpu}\n{ctx}"
        );
    }
    // The integral is the report's CPU exactly, and that is wait4's for the workload.
    let sum: u64 = cpu["cpu_ns"]
        .as_array()
        .expect("cpu_ns")
        .iter()
        .map(|x| x.as_u64().expect("ns"))
        .sum();
    let total = int(&v, "user_ns") + int(&v, "sys_ns");
    assert_eq!(sum, total, "the series' integral against user + sys\n{ctx}");
    assert_eq!(cpu["total_cpu_ns"].as_u64(), Some(total));
    let wait4 = out.truth_one("rusage-of");
    let child = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"].as_i64() == Some(wait4.int("child")))
        .unwrap_or_else(|| panic!("the workload is missing from the report\n{ctx}"));
    let got_us = (int(child, "user_ns") / 1000 + int(child, "sys_ns") / 1000) as i64;
    let want_us = wait4.int("user_us") + wait4.int("sys_us");
    let tail = spacetime_tests::exit_tail_us(wait4.int("reaped_ns"));
    assert!(
        (0..=tail).contains(&(got_us - want_us)),
        "the workload's user+sys {got_us} µs, wait4's {want_us} µs (tail up to {tail} µs)\n{ctx}"
    );
    // Most of the CPU was placed by ticks, not spread over lives.
    let unsampled = int(cpu, "unsampled_cpu_ns");
    assert!(
        unsampled < total / 10,
        "{unsampled} of {total} ns placed by no tick\n{cpu}"
    );
}

/// The CPUs the kernel lists as online (/sys/devices/system/cpu/online: "0-1,4").
fn online_cpus() -> u64 {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("online CPUs");
    text.trim()
        .split(',')
        .map(|r| match r.split_once('-') {
            Some((a, b)) => b.parse::<u64>().expect("cpu") - a.parse::<u64>().expect("cpu") + 1,
            None => 1,
        })
        .sum()
}

/// A Python spawn pool of twice as many busy workers as CPUs, each spawned for two short busy
/// loops and replaced: every
/// bucket of the series holds at most what the online CPUs could run in it, and the
/// integral is still user + sys.
#[test]
fn cpu_over_time_never_exceeds_the_online_cpus() {
    let cpus = online_cpus();
    let workers = (2 * cpus).to_string();
    let script = "import multiprocessing as mp, sys\n\
                  def busy(n):\n    x = 0\n    for i in range(n): x += i\n    return x\n\
                  if __name__ == '__main__':\n\
                  \x20   mp.set_start_method('spawn')\n\
                  \x20   with mp.Pool(int(sys.argv[1]), maxtasksperchild=2) as p: p.map(busy, [200000] * 64, 1)\n";
    // A file: spawned workers import the pool's module to find `busy`.
    let dir = spacetime_tests::TempDir::new("cpu-bound");
    let file = dir.path().join("pool.py");
    std::fs::write(&file, script).expect("write pool.py");
    let file = file.to_string_lossy();
    for run in 0..spacetime_tests::repetitions(3, 1) {
        let out = Trace::new(["/usr/bin/python3", &file, &workers])
            .tag("cpu-bound")
            .run();
        out.assert_code(0);
        let v = out.json_value();
        let ctx = out.context();
        let cpu = &v["timeline"]["cpu"];
        assert_eq!(cpu["online_cpus"].as_u64(), Some(cpus), "{cpu}\n{ctx}");
        let width = int(cpu, "bucket_ns");
        let buckets: Vec<u64> = cpu["cpu_ns"]
            .as_array()
            .expect("cpu_ns")
            .iter()
            .map(|x| x.as_u64().expect("ns"))
            .collect();
        let top = buckets.iter().copied().max().unwrap_or(0);
        eprintln!(
            "run {run}: {} buckets of {width} ns, the fullest {:.3} of {cpus} CPUs, {} ns unsampled",
            buckets.len(),
            top as f64 / width as f64,
            int(cpu, "unsampled_cpu_ns")
        );
        for (k, &b) in buckets.iter().enumerate() {
            assert!(
                b <= width * cpus,
                "bucket {k}: {b} ns of CPU in {width} ns on {cpus} CPUs\n{cpu}\n{ctx}"
            );
        }
        let total = int(&v, "user_ns") + int(&v, "sys_ns");
        assert_eq!(buckets.iter().sum::<u64>(), total, "the integral\n{ctx}");
    }
}
