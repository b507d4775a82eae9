//! The runners: how each tool wraps a workload, and one measured run.
//!
//! Wall time is taken around fork…wait4; CPU time is the runner's rusage, which covers the
//! tool and every process of the workload it waited for (the BPF programs run in the
//! workload's context, so their cost shows up there too). spacetime's own figures come from
//! its report (`trace --json`, `watch --summary-json`) and, for watch, from the CPU its threads
//! used during the run (schedstat, ns).

use std::{
    fs,
    io::Read,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::workloads::Workload;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runner {
    Bare,
    Time,
    Trace,
    TraceNoPss,
    Strace,
    StraceSeccomp,
    Watch,
    TraceAgent,
    TraceAgentTime,
}

impl Runner {
    pub const ALL: [Runner; 9] = [
        Runner::Bare,
        Runner::Time,
        Runner::Trace,
        Runner::TraceNoPss,
        Runner::TraceAgent,
        Runner::TraceAgentTime,
        Runner::Strace,
        Runner::StraceSeccomp,
        Runner::Watch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Runner::Bare => "bare",
            Runner::Time => "time",
            Runner::Trace => "trace",
            Runner::TraceNoPss => "trace-nopss",
            Runner::Strace => "strace",
            Runner::StraceSeccomp => "strace-seccomp",
            Runner::Watch => "watch",
            Runner::TraceAgent => "trace-agent",
            Runner::TraceAgentTime => "trace-agent-time",
        }
    }

    /// The command line, as shown in the table.
    pub fn label(self) -> &'static str {
        match self {
            Runner::Bare => "bare",
            Runner::Time => "`/usr/bin/time -v`",
            Runner::Trace => {
                "`spacetime trace -q --no-chart` (default figures: RSS timeline + PSS every 50 ms)"
            }
            Runner::TraceNoPss => {
                "`spacetime trace -q --no-chart --pss-interval 0` (RSS timeline, no PSS)"
            }
            Runner::Strace => "`strace -f -o /dev/null`",
            Runner::StraceSeccomp => "`strace -f --seccomp-bpf -e trace=process`",
            Runner::Watch => "bare, with `spacetime watch` running",
            Runner::TraceAgent => {
                "`spacetime trace -q --no-chart` through a running `spacetime agent` (its CPU \
                 counted)"
            }
            Runner::TraceAgentTime => {
                "`spacetime trace --agent -f '%e %M'` through the agent: `time`'s figures, \
                 no memory over time (its CPU counted)"
            }
        }
    }

    pub fn is_spacetime(self) -> bool {
        matches!(
            self,
            Runner::Trace | Runner::TraceNoPss | Runner::Watch | Runner::TraceAgent
        )
    }
}

/// One measured run.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub wall_ns: u64,
    /// User + system CPU of the runner and everything it waited for.
    pub cpu_ns: u64,
    /// spacetime's own CPU (trace: its report; watch: during the run).
    pub tool_cpu_ns: Option<u64>,
    /// spacetime's peak RSS as its report says (VmHWM, read before the report is built).
    pub tool_peak_rss: Option<u64>,
    /// The runner's peak RSS over its whole life, its report included (or a descendant's if
    /// larger), from wait4 (see [`trace_maxrss`]).
    pub waited_maxrss: Option<u64>,
    pub lost: Option<u64>,
    /// Processes spacetime saw (trace: in the tree; watch: exits while it ran).
    pub processes: Option<u64>,
    /// Per kernel program: its run count and time over the run, and what loading it cost.
    pub programs: Vec<ProgramRun>,
    /// spacetime's start-up: checks, offsets, loading (verification) and attaching its
    /// programs, in ns (trace: its report's `spacetime.load_us`).
    pub load_ns: Option<u64>,
    /// Run with the kernel's per-program accounting on, for its `programs` alone: what it
    /// adds to every program run is no part of any other figure.
    pub stats_only: bool,
}

/// One kernel program in one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProgramRun {
    pub name: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    /// Instructions the verifier processed to load it.
    pub verified_insns: Option<u64>,
}

/// What the runs need to know about the machine.
pub struct Env {
    pub spacetime: PathBuf,
    /// Scratch space for reports.
    pub scratch: PathBuf,
    /// The agent the `trace-agent` runner goes through.
    pub agent: Option<AgentProcess>,
}

/// A `spacetime agent` on a private socket, for the whole bench.
pub struct AgentProcess {
    child: Child,
    pub socket: PathBuf,
}

impl AgentProcess {
    pub fn start(env_spacetime: &Path, scratch: &Path) -> Result<AgentProcess> {
        let socket = scratch.join("agent.sock");
        let stderr = scratch.join("agent-stderr");
        let notify = crate::ready::Notify::bind(scratch)?;
        let mut cmd = Command::new(env_spacetime);
        cmd.args(["-v", "agent", "--socket"])
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(fs::File::create(&stderr)?)
            .process_group(0);
        notify.to(&mut cmd);
        let child = cmd.spawn().context("starting spacetime agent")?;
        let mut a = AgentProcess { child, socket };
        notify
            .wait_ready("spacetime agent", &mut a.child, Duration::from_secs(30))
            .with_context(|| fs::read_to_string(&stderr).unwrap_or_default())?;
        Ok(a)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: signals our own child.
            unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}

fn timeval_ns(t: libc::timeval) -> u64 {
    t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000
}

/// Spawns `cmd` and waits for it with wait4: (wall, cpu, exit status).
/// What wait4 said of one run.
struct Measured {
    wall_ns: u64,
    cpu_ns: u64,
    code: i32,
}

fn measure(cmd: &mut Command) -> Result<Measured> {
    let start = Instant::now();
    let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data; wait4 fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let r = loop {
        // SAFETY: waits for our own child, whose handle is not waited for elsewhere.
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        if r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        break r;
    };
    let wall = start.elapsed().as_nanos() as u64;
    if r != pid {
        bail!("waiting for {cmd:?}: {}", std::io::Error::last_os_error());
    }
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        128 + libc::WTERMSIG(status)
    };
    Ok(Measured {
        wall_ns: wall,
        cpu_ns: timeval_ns(ru.ru_utime) + timeval_ns(ru.ru_stime),
        code,
    })
}

fn quiet(cmd: &mut Command, stderr: Stdio) -> &mut Command {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
}

/// The kernel programs' statistics in a spacetime report.
fn programs_of(v: &Value) -> Vec<ProgramRun> {
    let list = v["spacetime"]["kernel_programs"]
        .as_array()
        .or_else(|| v["kernel_programs"].as_array());
    list.map(|l| {
        l.iter()
            .filter_map(|p| {
                Some(ProgramRun {
                    name: p["name"].as_str()?.to_string(),
                    run_cnt: p["run_cnt"].as_u64()?,
                    run_time_ns: p["run_time_ns"].as_u64()?,
                    verified_insns: p["verified_insns"].as_u64(),
                })
            })
            .collect()
    })
    .unwrap_or_default()
}

fn own_cpu(v: &Value) -> Option<u64> {
    let s = &v["spacetime"];
    Some(s["user_ns"].as_u64()? + s["sys_ns"].as_u64()?)
}

fn read_json(path: &Path) -> Result<Value> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// `spacetime trace --agent` through the bench's agent, for `runner`'s options to follow.
/// --agent: a client the agent cannot serve fails rather than load programs of its own (it
/// runs as root), so every run measured is the agent's.
fn through_agent(env: &Env, runner: Runner) -> Result<Command> {
    let agent = env
        .agent
        .as_ref()
        .with_context(|| format!("no agent for {}", runner.name()))?;
    let mut c = Command::new(&env.spacetime);
    c.env("SPACETIME_SOCKET", &agent.socket)
        .args(["trace", "--agent"]);
    Ok(c)
}

/// `w`'s program under `runner` (the caller adds its arguments); trace runners write their
/// JSON report to `report`.
fn command(env: &Env, w: &Workload, runner: Runner, report: &Path) -> Result<Command> {
    Ok(match runner {
        Runner::Bare | Runner::Watch => Command::new(&w.argv[0]),
        Runner::Time => {
            let mut c = Command::new("/usr/bin/time");
            c.args(["-v", "-o", "/dev/null", &w.argv[0]]);
            c
        }
        Runner::Trace | Runner::TraceNoPss => {
            let mut c = Command::new(&env.spacetime);
            c.args([
                "trace",
                "-q",
                "--no-chart",
                "--no-agent",
                "--keep-root",
                "--json",
            ])
            .arg(report);
            if runner == Runner::TraceNoPss {
                c.args(["--pss-interval", "0"]);
            }
            c.args(["--", &w.argv[0]]);
            c
        }
        Runner::TraceAgentTime => {
            let mut c = through_agent(env, runner)?;
            c.args(["-f", "%e %M", "-o", "/dev/null", "--", &w.argv[0]]);
            c
        }
        Runner::TraceAgent => {
            let mut c = through_agent(env, runner)?;
            c.args(["-q", "--no-chart", "--keep-root", "--json"])
                .arg(report)
                .args(["--", &w.argv[0]]);
            c
        }
        Runner::Strace => {
            let mut c = Command::new("strace");
            c.args(["-f", "-o", "/dev/null", &w.argv[0]]);
            c
        }
        Runner::StraceSeccomp => {
            let mut c = Command::new("strace");
            c.args([
                "-f",
                "--seccomp-bpf",
                "-e",
                "trace=process",
                "-o",
                "/dev/null",
                &w.argv[0],
            ]);
            c
        }
    })
}

/// One run of `w` under `runner` (watch runs use [`WatchSession`] instead).
pub fn run_once(env: &Env, w: &Workload, runner: Runner) -> Result<Sample> {
    prepare(w)?;
    let report = env.scratch.join("trace.json");
    let _ = fs::remove_file(&report);
    let mut cmd = command(env, w, runner, &report)?;
    cmd.args(&w.argv[1..]).current_dir(&w.dir);
    let stderr_path = env.scratch.join("stderr");
    let stderr = fs::File::create(&stderr_path)?;
    // The agent works for the run in its own process: its CPU is the run's too.
    let agent_pid = match runner {
        Runner::TraceAgent | Runner::TraceAgentTime => env.agent.as_ref().map(AgentProcess::pid),
        _ => None,
    };
    let agent_before = agent_pid.map(threads_cpu_ns).transpose()?;
    let Measured {
        wall_ns,
        mut cpu_ns,
        code,
    } = measure(quiet(&mut cmd, stderr.into()))?;
    let agent_cpu = match (agent_pid, agent_before) {
        (Some(pid), Some(before)) => Some(threads_cpu_ns(pid)?.saturating_sub(before)),
        _ => None,
    };
    cpu_ns += agent_cpu.unwrap_or(0);
    succeeded(w, runner, code, &stderr_path)?;
    let mut s = Sample {
        wall_ns,
        cpu_ns,
        ..Sample::default()
    };
    if matches!(
        runner,
        Runner::Trace | Runner::TraceNoPss | Runner::TraceAgent
    ) {
        let v = read_json(&report)?;
        let want = if runner == Runner::TraceAgent {
            "agent"
        } else {
            "own"
        };
        if v["programs"].as_str() != Some(want) {
            bail!(
                "{} under {}: the report says programs {}",
                w.name,
                runner.name(),
                v["programs"]
            );
        }
        s.tool_cpu_ns = own_cpu(&v).map(|c| c + agent_cpu.unwrap_or(0));
        s.tool_peak_rss = v["spacetime"]["peak_rss_bytes"].as_u64();
        s.lost = v["lost_events"].as_u64();
        s.processes = v["totals"]["processes"].as_u64();
        s.programs = programs_of(&v);
        s.load_ns = v["spacetime"]["load_us"].as_u64().map(|us| us * 1000);
    }
    Ok(s)
}

/// `w`'s untimed preparation, if it has one (e.g. `make clean`).
fn prepare(w: &Workload) -> Result<()> {
    let Some(prep) = &w.prepare else {
        return Ok(());
    };
    let st = Command::new(&prep[0])
        .args(&prep[1..])
        .current_dir(&w.dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("preparing {}", w.name))?;
    if !st.success() {
        bail!("preparing {}: {prep:?} failed with {st}", w.name);
    }
    Ok(())
}

/// An error with the last lines of the run's standard error unless it exited with 0.
fn succeeded(w: &Workload, runner: Runner, code: i32, stderr: &Path) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let err = fs::read_to_string(stderr).unwrap_or_default();
    let tail: String = err.lines().rev().take(5).collect::<Vec<_>>().join(" | ");
    bail!(
        "{} under {} exited with {code}: {tail}",
        w.name,
        runner.name()
    )
}

/// One run of `w` as a target of the issue states it, its wall in ns: bare, through the agent
/// with `time`'s figures, or through the agent with the default figures and no report file
/// (`trace -q --no-chart`; [`run_once`]'s runs write the JSON the tables read, which costs a
/// file written and renamed per run).
pub fn target_once(env: &Env, w: &Workload, runner: Runner) -> Result<u64> {
    prepare(w)?;
    let report = env.scratch.join("trace.json");
    let mut cmd = match runner {
        Runner::TraceAgent => {
            let mut c = through_agent(env, runner)?;
            c.args(["-q", "--no-chart", "--", &w.argv[0]]);
            c
        }
        Runner::Bare | Runner::TraceAgentTime => command(env, w, runner, &report)?,
        other => bail!("no target runs {} in pairs", other.name()),
    };
    cmd.args(&w.argv[1..]).current_dir(&w.dir);
    let stderr_path = env.scratch.join("stderr");
    let stderr = fs::File::create(&stderr_path)?;
    let m = measure(quiet(&mut cmd, stderr.into()))?;
    succeeded(w, runner, m.code, &stderr_path)?;
    Ok(m.wall_ns)
}

/// spacetime's own peak RSS over a whole trace of `w` (its report's building included), as
/// GNU time gives it from wait4. Not the bench's own wait4: the kernel folds the high-water
/// mark of the mm an exec replaces into ru_maxrss, and a child spawned by the bench starts on
/// the bench's (hundreds of MiB); under time(1) it starts on time's, a few.
pub fn trace_maxrss(env: &Env, w: &Workload) -> Result<u64> {
    let report = env.scratch.join("trace.json");
    let out = env.scratch.join("maxrss");
    let trace = command(env, w, Runner::Trace, &report)?;
    let mut cmd = Command::new("/usr/bin/time");
    cmd.args(["-f", "%M", "-o"])
        .arg(&out)
        .arg(trace.get_program())
        .args(trace.get_args())
        .args(&w.argv[1..])
        .current_dir(&w.dir);
    let m = measure(quiet(&mut cmd, Stdio::null()))?;
    if m.code != 0 {
        bail!(
            "{} under /usr/bin/time {:?} exited with {}",
            w.name,
            trace.get_program(),
            m.code
        );
    }
    let text = fs::read_to_string(&out).with_context(|| format!("reading {}", out.display()))?;
    let kib: u64 = text
        .lines()
        .last()
        .unwrap_or("")
        .trim()
        .parse()
        .with_context(|| format!("GNU time's %M: {text:?}"))?;
    Ok(kib * 1024)
}

/// Wall of one `spacetime bench` of `runs` runs of /bin/true (no shell): with its own
/// programs, or through `agent` only.
pub fn bench_once(env: &Env, runs: u32, agent: Option<&AgentProcess>) -> Result<u64> {
    let mut cmd = Command::new(&env.spacetime);
    cmd.arg("bench");
    match agent {
        Some(a) => cmd.env("SPACETIME_SOCKET", &a.socket).arg("--agent"),
        None => cmd.arg("--no-agent"),
    };
    cmd.args(["-N", "-q", "-r"])
        .arg(runs.to_string())
        .arg("/bin/true");
    let m = measure(quiet(&mut cmd, Stdio::null()))?;
    if m.code != 0 {
        bail!("spacetime bench -r {runs} /bin/true exited with {}", m.code);
    }
    Ok(m.wall_ns)
}

/// CPU time of every thread of `pid`, in ns (schedstat's first field).
fn threads_cpu_ns(pid: u32) -> Result<u64> {
    let mut total = 0;
    let dir = format!("/proc/{pid}/task");
    for t in fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let path = t?.path().join("schedstat");
        let text = fs::read_to_string(&path).unwrap_or_default();
        total += text
            .split_whitespace()
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(total)
}

fn status_field(pid: u32, key: &str) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kib: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// `spacetime watch` running system-wide around one bare run.
pub struct WatchSession {
    child: Child,
    summary: PathBuf,
    stderr: PathBuf,
}

impl WatchSession {
    pub fn start(env: &Env) -> Result<WatchSession> {
        let summary = env.scratch.join("watch-summary.json");
        let stderr = env.scratch.join("watch-stderr");
        let _ = fs::remove_file(&summary);
        let err = fs::File::create(&stderr)?;
        let notify = crate::ready::Notify::bind(&env.scratch)?;
        let mut cmd = Command::new(&env.spacetime);
        cmd.args(["watch", "--json", "-o", "/dev/null", "--summary-json"])
            .arg(&summary)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(err)
            .process_group(0);
        notify.to(&mut cmd);
        let child = cmd.spawn().context("starting spacetime watch")?;
        let mut w = WatchSession {
            child,
            summary,
            stderr,
        };
        if let Err(e) = notify.wait_ready("spacetime watch", &mut w.child, Duration::from_secs(30))
        {
            let _ = w.child.kill();
            let text = fs::read_to_string(&w.stderr).unwrap_or_default();
            return Err(e.context(text));
        }
        // Let the start-up /proc scan settle before anything is timed.
        std::thread::sleep(Duration::from_millis(300));
        Ok(w)
    }

    /// Runs `w` bare while the watch runs; stops the watch and reads its summary.
    pub fn run(mut self, env: &Env, w: &Workload) -> Result<Sample> {
        let pid = self.child.id();
        let before = threads_cpu_ns(pid)?;
        let mut s = run_once(env, w, Runner::Watch)?;
        // Let the watch drain what the run produced before reading its CPU.
        std::thread::sleep(Duration::from_millis(200));
        let after = threads_cpu_ns(pid)?;
        s.tool_cpu_ns = Some(after.saturating_sub(before));
        s.tool_peak_rss = status_field(pid, "VmHWM:");
        // SAFETY: signals our own child.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
        let st = self.child.wait()?;
        let v = read_json(&self.summary).with_context(|| {
            let mut err = String::new();
            let _ = fs::File::open(&self.stderr).and_then(|mut f| f.read_to_string(&mut err));
            format!("watch ended with {st}: {err}")
        })?;
        s.lost = v["lost_events"].as_u64();
        s.processes = v["process_exits"].as_u64();
        s.programs = programs_of(&v);
        Ok(s)
    }
}

impl Drop for WatchSession {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
