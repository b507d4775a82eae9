//! `cargo xtask bench`: what spacetime costs next to the alternatives, side by side in one run.
//!
//! Every workload runs under every runner, interleaved (each repetition runs all runners, in
//! an order rotated from one repetition to the next, so drift in the machine's speed lands on
//! all of them alike). The kernel's own per-program accounting (`kernel.bpf_stats_enabled`)
//! adds two clock reads to every program run: it is off for the timed repetitions and on for
//! [`COUNTED_REPS`] more of spacetime's runners, which give the per-program figures alone. Its
//! old value comes back afterwards, also on Ctrl-C.

mod paired;
mod report;
mod runners;
pub(crate) use runners::AgentProcess;
mod stats;
mod targets;
mod workloads;

use std::{
    fs,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU8, Ordering},
    time::Instant,
};

use anyhow::{bail, Context, Result};

use runners::{Env, Runner, Sample, WatchSession};
use stats::Summary;
use workloads::{Sizes, Workload};

use crate::{target_dir, toolchain};

#[derive(clap::Args)]
pub struct Options {
    /// Repetitions of every runner on every workload (interleaved)
    #[arg(long, default_value_t = 7)]
    pub reps: usize,
    /// Only these workloads (comma-separated: true, fork-exec, fork-exec-static, make,
    /// touch, storm)
    #[arg(long, value_delimiter = ',')]
    pub workloads: Vec<String>,
    /// Only these runners (comma-separated: bare, time, trace, trace-nopss, strace,
    /// strace-seccomp, watch, trace-agent, trace-agent-time); bare is always needed
    #[arg(long, value_delimiter = ',')]
    pub runners: Vec<String>,
    /// Small workloads and no 100k-process run: checks the bench works, measures little
    #[arg(long)]
    pub quick: bool,
    /// Bench this spacetime binary instead of building one (e.g. an older build)
    #[arg(long, value_name = "PATH")]
    pub spacetime: Option<PathBuf>,
    /// Do not update BENCHMARKS.md
    #[arg(long)]
    pub no_record: bool,
}

const STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";
/// The sysctl's value before the bench, restored on exit and on Ctrl-C (255: not changed).
static SAVED_STATS: AtomicU8 = AtomicU8::new(255);

extern "C" fn restore_on_signal(sig: libc::c_int) {
    let saved = SAVED_STATS.load(Ordering::SeqCst);
    if saved != 255 {
        let byte = [b'0' + saved];
        // SAFETY: open/write/close/_exit are async-signal-safe; the path is NUL-terminated.
        unsafe {
            let fd = libc::open(
                c"/proc/sys/kernel/bpf_stats_enabled".as_ptr(),
                libc::O_WRONLY,
            );
            if fd >= 0 {
                libc::write(fd, byte.as_ptr().cast(), 1);
                libc::close(fd);
            }
        }
    }
    // SAFETY: ends the process from a signal handler.
    unsafe { libc::_exit(128 + sig) };
}

/// Repetitions of spacetime's runners with the kernel's per-program accounting on (at most
/// `--reps`), for the programs' figures.
const COUNTED_REPS: usize = 3;

/// Holds per-program statistics off (see [`StatsGuard::counting`]); the old value comes back
/// when this is dropped.
struct StatsGuard;

impl StatsGuard {
    /// Per-program statistics on (`true`) or off.
    fn counting(&self, on: bool) -> Result<()> {
        let v = if on { "1" } else { "0" };
        fs::write(STATS_SYSCTL, v).context("switching kernel.bpf_stats_enabled")
    }

    fn take() -> Result<StatsGuard> {
        let old: u8 = fs::read_to_string(STATS_SYSCTL)
            .with_context(|| format!("reading {STATS_SYSCTL}"))?
            .trim()
            .parse()
            .context("parsing kernel.bpf_stats_enabled")?;
        SAVED_STATS.store(old.min(9), Ordering::SeqCst);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            // SAFETY: installs a handler that only makes async-signal-safe calls.
            unsafe { libc::signal(sig, restore_on_signal as *const () as libc::sighandler_t) };
        }
        let guard = StatsGuard;
        guard.counting(false)?;
        Ok(guard)
    }
}

impl Drop for StatsGuard {
    fn drop(&mut self) {
        let old = SAVED_STATS.swap(255, Ordering::SeqCst);
        if old != 255 {
            let _ = fs::write(STATS_SYSCTL, old.to_string());
        }
    }
}

/// Results of one workload.
pub struct WorkloadResult {
    pub name: &'static str,
    pub title: String,
    pub expected_processes: Option<u64>,
    pub runners: Vec<Summary>,
}

/// What each run of `spacetime bench` costs beyond the command, its start-up amortized:
/// `spacetime bench -r RUNS /bin/true` whole, with its own programs and through the agent,
/// interleaved, against RUNS times the bare command's wall.
pub struct BenchRuns {
    pub runs: u32,
    /// `spacetime bench --no-agent`'s whole wall.
    pub own: stats::Spread,
    /// `spacetime bench --agent`'s whole wall (none when the bench runs no agent).
    pub agent: Option<stats::Spread>,
    /// The bare command's own wall (the true workload's median).
    pub bare_ns: f64,
}

impl BenchRuns {
    /// Wall per run beyond the bare command's, start-up included: what a user of `bench
    /// -r RUNS` waits for beyond RUNS runs of the command, over RUNS.
    pub fn added_per_run(&self, whole: &stats::Spread) -> f64 {
        let runs = f64::from(self.runs);
        (whole.median - runs * self.bare_ns) / runs
    }
}

/// Runs of each `spacetime bench` the bench times (the amortization).
const BENCH_RUNS: u32 = 30;

fn bench_runs(env: &Env, reps: usize, results: &[WorkloadResult]) -> Result<Option<BenchRuns>> {
    let bare = results
        .iter()
        .find(|w| w.name == "true")
        .and_then(|w| w.runners.iter().find(|s| s.runner == Runner::Bare));
    let Some(bare) = bare else {
        return Ok(None);
    };
    let (mut own, mut agent) = (Vec::new(), Vec::new());
    for rep in 0..reps.max(3) {
        // Each pair in either order, so that neither always runs on what the other warmed.
        for k in 0..2 {
            match ((rep + k) % 2, &env.agent) {
                (0, _) => own.push(runners::bench_once(env, BENCH_RUNS, None)?),
                (_, Some(a)) => agent.push(runners::bench_once(env, BENCH_RUNS, Some(a))?),
                (_, None) => {}
            }
        }
    }
    let Some(own) = stats::Spread::of(&own) else {
        return Ok(None);
    };
    Ok(Some(BenchRuns {
        runs: BENCH_RUNS,
        own,
        agent: stats::Spread::of(&agent),
        bare_ns: bare.wall.median,
    }))
}

/// spacetime's own peak RSS on a big trace.
pub struct RssRun {
    pub processes: u64,
    pub sample: Sample,
}

fn pick<T: Copy>(all: &[T], names: &[String], name: impl Fn(T) -> &'static str) -> Result<Vec<T>> {
    if names.is_empty() {
        return Ok(all.to_vec());
    }
    for n in names {
        if !all.iter().any(|&x| name(x) == n) {
            let known: Vec<&str> = all.iter().map(|&x| name(x)).collect();
            bail!("unknown name {n:?} (known: {})", known.join(", "));
        }
    }
    Ok(all
        .iter()
        .copied()
        .filter(|&x| names.iter().any(|n| n == name(x)))
        .collect())
}

/// One run of `w` under `r` (a watch runs beside it, in a session of its own).
fn run_one(env: &Env, w: &Workload, r: Runner) -> Result<Sample> {
    match r {
        Runner::Watch => WatchSession::start(env)?.run(env, w),
        _ => runners::run_once(env, w, r),
    }
}

fn run_workload(
    env: &Env,
    w: &Workload,
    runners: &[Runner],
    reps: usize,
    stats: &StatsGuard,
) -> Result<WorkloadResult> {
    // One untimed run to warm the page cache.
    runners::run_once(env, w, Runner::Bare)?;
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); runners.len()];
    for rep in 0..reps {
        for k in 0..runners.len() {
            let i = (k + rep) % runners.len();
            let r = runners[i];
            samples[i].push(run_one(env, w, r)?);
        }
        eprint!(
            "\rxtask: bench {:<18} repetition {}/{reps}",
            w.name,
            rep + 1
        );
    }
    // The programs' own figures, apart: counting them costs every run.
    stats.counting(true)?;
    for _ in 0..COUNTED_REPS.min(reps) {
        for (i, &r) in runners.iter().enumerate().filter(|(_, r)| r.is_spacetime()) {
            let mut s = run_one(env, w, r)?;
            s.stats_only = true;
            samples[i].push(s);
        }
    }
    stats.counting(false)?;
    eprintln!();
    Ok(WorkloadResult {
        name: w.name,
        title: w.title.clone(),
        expected_processes: w.processes,
        runners: runners
            .iter()
            .zip(samples)
            .filter_map(|(&r, s)| Summary::of(r, s))
            .collect(),
    })
}

pub fn bench(opts: Options) -> Result<()> {
    if !crate::is_root() {
        bail!("the bench loads eBPF programs: run `sudo -E cargo xtask bench` (or as root)");
    }
    if opts.reps == 0 {
        bail!("--reps must be at least 1");
    }
    toolchain::apt_install(
        &["strace", "time", "gcc", "make", "libc6-dev"],
        "the bench's workloads and the tools it compares with",
    )?;
    let spacetime = match opts.spacetime {
        Some(p) => p,
        None => {
            crate::build()?;
            crate::spacetime_bin()
        }
    };
    let out = target_dir().join("bench");
    let scratch = out.join("scratch");
    fs::create_dir_all(&scratch).with_context(|| format!("creating {}", scratch.display()))?;
    let spacetime = installed_copy(&spacetime, &out)?;
    let sizes = if opts.quick {
        Sizes::quick()
    } else {
        Sizes::full()
    };
    eprintln!("xtask: building the bench workloads");
    let all = workloads::build(&out.join("work"), &sizes)?;
    let names: Vec<&'static str> = all.iter().map(|w| w.name).collect();
    let chosen = pick(&names, &opts.workloads, |n| n)?;
    let runners = pick(&Runner::ALL, &opts.runners, Runner::name)?;
    if runners.first() != Some(&Runner::Bare) {
        bail!("the runners must include bare (every ratio is to bare)");
    }
    let through_agent = [Runner::TraceAgent, Runner::TraceAgentTime];
    let agent = match runners.iter().any(|r| through_agent.contains(r)) {
        true => Some(runners::AgentProcess::start(&spacetime, &scratch)?),
        false => None,
    };
    let env = Env {
        spacetime,
        scratch,
        agent,
    };
    let machine = report::Machine::probe(&env.spacetime);
    let started = Instant::now();
    let guard = StatsGuard::take()?;
    let mut results = Vec::new();
    for w in all.iter().filter(|w| chosen.contains(&w.name)) {
        results.push(run_workload(&env, w, &runners, opts.reps, &guard)?);
    }
    let targets: Vec<&Workload> = all.iter().filter(|w| chosen.contains(&w.name)).collect();
    let pairs = paired::measure(&env, &targets, &runners, opts.quick)?;
    let with_trace = runners.contains(&Runner::Trace);
    let bench_runs = match with_trace {
        true => {
            eprintln!("xtask: bench: spacetime bench -r {BENCH_RUNS}, own programs and agent");
            bench_runs(&env, opts.reps, &results)?
        }
        false => None,
    };
    let rss = match opts.workloads.is_empty() {
        true => rss_run(&env, &sizes, &out.join("work"))?,
        false => None,
    };
    drop(guard);
    let bench = report::Bench {
        machine,
        reps: opts.reps,
        quick: opts.quick,
        elapsed_s: started.elapsed().as_secs_f64(),
        workloads: results,
        rss,
        bench_runs,
        pairs,
    };
    let table = report::markdown(&bench);
    println!("{table}");
    let stamp = bench.machine.date.replace([':', ' '], "-");
    let json = serde_json::to_string_pretty(&report::json(&bench))?;
    for name in [format!("bench-{stamp}.json"), "latest.json".to_string()] {
        fs::write(out.join(&name), &json)?;
    }
    fs::write(out.join("latest.md"), &table)?;
    eprintln!(
        "xtask: bench results in {}",
        out.join("latest.json").display()
    );
    if !(opts.quick || opts.no_record) {
        report::record(&crate::root().join("BENCHMARKS.md"), &table)?;
        eprintln!("xtask: BENCHMARKS.md updated");
    }
    Ok(())
}

/// `bin` copied whole into `dir`, as installing it copies it: the binary the linker has
/// just written, run in place, took 26 more page faults and 0.25 ms more to trace /bin/true
/// through the agent than the same bytes copied (300 interleaved pairs), a cost of having
/// just been built that no installed binary pays. Written beside and renamed over, so that a
/// copy still running from a bench before is not written into.
fn installed_copy(bin: &Path, dir: &Path) -> Result<PathBuf> {
    let copy = dir.join("spacetime");
    let part = dir.join("spacetime.part");
    fs::copy(bin, &part)
        .with_context(|| format!("copying {} to {}", bin.display(), part.display()))?;
    fs::rename(&part, &copy).with_context(|| format!("renaming {}", part.display()))?;
    Ok(copy)
}

/// spacetime's own memory on a big trace (none when the sizes ask for none).
fn rss_run(env: &Env, sizes: &Sizes, work: &Path) -> Result<Option<RssRun>> {
    if sizes.rss_processes == 0 {
        return Ok(None);
    }
    eprintln!(
        "xtask: bench: spacetime's own memory on a {}-process trace",
        sizes.rss_processes
    );
    let w = Workload {
        name: "rss",
        title: String::new(),
        argv: workloads::exec_storm_argv(work, sizes.rss_processes),
        dir: work.to_path_buf(),
        processes: None,
        prepare: None,
    };
    let mut sample = runners::run_once(env, &w, Runner::Trace)?;
    sample.waited_maxrss = Some(runners::trace_maxrss(env, &w)?);
    Ok(Some(RssRun {
        processes: sizes.rss_processes + 1,
        sample,
    }))
}
