//! A tracing session: the kernel programs loaded once ([`Session::open`]), then one traced
//! run after another ([`Session::run`]), each returning its own [`Run`]: the tree, the memory
//! timeline, the report model, the root's status, and kernel counters that are the run's own.
//!
//! Between runs the session clears what a run leaves in the kernel (processes still tracked,
//! mms followed, the tree-wide RSS peak, the learnt pid) and throws away records that arrive
//! for an earlier run's processes, so run N+1 starts clean.

use std::{
    ffi::OsString,
    os::fd::{AsRawFd, OwnedFd},
    path::Path,
};

use super::{
    delayacct::DelayAcct,
    run_loop::{self, LoopOptions, Sink},
};
use crate::{
    kernel::{
        loader::{KernelCounters, LearnedPid, LoadOptions},
        provenance::Provenance,
        source::{self, agent::AgentSource, own::OwnSource, KernelSource, Programs},
        taskstats::ListenerStats,
    },
    model::{
        crosscheck::{Clock, Collector, PerProcess},
        memory::{Memory, MemoryOptions},
        timeline::Point,
        tree::{Key, Tree},
    },
    report::status::StatusLine,
    report::{self, MemoryMeta, Processes, Report},
    run::launch::{self, Credentials, LaunchError},
    util::clock::monotonic_ns,
};
use rustc_hash::FxHashSet;

mod attached;
mod end;

/// Signals passed on to the traced command.
const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// What is set up once for every run.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    pub load: LoadOptions,
    /// The taskstats socket's receive buffer, bytes.
    pub taskstats_buffer: u32,
    /// Switch delay accounting on while the session lives (restored when it ends).
    pub delayacct: bool,
    /// Say on stderr that delays read 0 when delay accounting is off.
    pub delayacct_notice: bool,
}

/// What may differ from one run to the next.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// End the run when the root exits, leaving the rest running (untraced from then on).
    pub stop_on_root_exit: bool,
    /// Shortest PSS sampling interval per process, ns; 0 turns PSS off.
    pub pss_interval_ns: u64,
    /// Share of one CPU the PSS rounds may use (None: `pss::DEFAULT_CPU_BUDGET`).
    pub pss_cpu_budget: Option<f64>,
    /// Something shows memory over time. Without it, and without PSS, nothing samples
    /// /proc where the kernel does not follow RSS (a `time -f` format).
    pub memory_over_time: bool,
    /// No warnings on stderr from the memory sampler.
    pub quiet: bool,
    /// Run a started command in a memory cgroup of its own and report its peak
    /// ([`report::Meta::cgroup_peak`]); no effect on an attach.
    pub cgroup_peak: bool,
}

/// How a run's root comes to be.
pub enum Start<'a> {
    /// Fork the command, hold it until it is tracked, then exec it.
    Spawn(Spawn<'a>),
    /// Attach to running processes (the first is the root), their descendants and every
    /// later fork (see [`crate::kernel::attach`]).
    Attach(&'a [u32]),
}

/// A command to start: `path` is `argv[0]` resolved ([`launch::resolve`]).
pub struct Spawn<'a> {
    pub path: &'a Path,
    pub argv: &'a [OsString],
    /// Who it runs as (None: as spacetime).
    pub creds: Option<&'a Credentials>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The command could not be started (not found, not executable…): the run never began.
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl From<crate::kernel::loader::LoadError> for RunError {
    fn from(e: crate::kernel::loader::LoadError) -> Self {
        RunError::Other(e.into())
    }
}

impl From<std::io::Error> for RunError {
    fn from(e: std::io::Error) -> Self {
        RunError::Other(e.into())
    }
}

/// The programs loaded once (here or by an agent), and everything a run needs that
/// outlives it.
pub struct Session {
    kernel: Box<dyn KernelSource>,
    sigfd: OwnedFd,
    rt: tokio::runtime::Runtime,
    page_size: u64,
    /// An earlier run ended with processes of its tree still running.
    earlier_left: bool,
    /// Where started commands' standard streams go ([`Session::detach_stdio`]).
    stdio: launch::Stdio,
    /// The first run's root, started while the agent was asked for the session.
    early: Option<EarlyRoot>,
    _delayacct: DelayAcct,
}

/// Where a run's root is.
struct Root {
    /// As spacetime's PID namespace numbers it.
    pid: u32,
    /// As the kernel (initial namespace) numbers it.
    learned: LearnedPid,
    /// CLOCK_MONOTONIC when it was let go (or attached to).
    release_ns: u64,
    /// What attaching found, for a run that attached.
    attached: Option<crate::kernel::attach::Attached>,
}

/// The figures kept at a run's start, to make the run's own from cumulative ones.
struct Baseline {
    counters: KernelCounters,
    taskstats: ListenerStats,
}

/// A run's root started while the session opened ([`Session::open_any`]'s `first`): held
/// before its exec, forked while the agent works on the hello, and asked to be tracked
/// without waiting for the welcome: one round trip where a track request after the
/// welcome took two. Dropped unused
/// (another run came first, or none), the child is killed and reaped.
struct EarlyRoot {
    held: Option<launch::Held>,
    path: std::path::PathBuf,
    argv: Vec<OsString>,
}

impl EarlyRoot {
    /// Starts `s` held (as spacetime: an agent's session needs no program run in the child)
    /// and gives its pidfd; None when either fails (the run then starts it as usual, and
    /// says why if it fails again).
    fn start(s: &Spawn<'_>) -> Option<(EarlyRoot, OwnedFd)> {
        let stdio = launch::Stdio::default();
        let held = launch::spawn_held_with(s.path, s.argv, s.creds, None, stdio).ok()?;
        let pidfd = crate::kernel::pidfd::open_pidfd(held.pid as u32);
        let root = EarlyRoot {
            held: Some(held),
            path: s.path.to_path_buf(),
            argv: s.argv.to_vec(),
        };
        // An error drops `root`: the child is killed.
        Some((root, pidfd.ok()?))
    }

    /// Whether this is the root of a run that starts `s` with standard streams `stdio`.
    fn is_for(&self, s: &Spawn<'_>, stdio: launch::Stdio) -> bool {
        self.path == s.path && self.argv == s.argv && stdio == launch::Stdio::default()
    }

    fn into_held(mut self) -> Option<launch::Held> {
        self.held.take()
    }
}

impl Drop for EarlyRoot {
    fn drop(&mut self) {
        if let Some(h) = self.held.take() {
            kill_and_reap(h.pid);
        }
    }
}

impl Session {
    /// Loads and attaches the programs, opens the taskstats listener and the signalfd, and
    /// becomes the child subreaper (orphans of a traced tree are waited for here). Blocks
    /// SIGCHLD, SIGINT, SIGTERM and SIGHUP for the calling thread: call before other threads
    /// exist so that they inherit the mask.
    pub fn open(opts: &SessionOptions) -> anyhow::Result<Session> {
        Session::open_any(opts, Programs::Own, None)
    }

    /// Through the agent when its socket answers (unless [`Programs::Own`]), otherwise with
    /// programs loaded here (root only, and not for [`Programs::Agent`]): see
    /// [`source::open`]. Blocks signals as [`Session::open`] does. `first`: the command the
    /// first run starts, with spacetime's standard streams: through the agent it is started
    /// (held) once the hello is sent, and its track request follows the hello at once.
    pub fn open_any(
        opts: &SessionOptions,
        programs: Programs,
        first: Option<&Spawn<'_>>,
    ) -> anyhow::Result<Session> {
        let want = {
            use crate::kernel::remote::proto::want;
            let delayacct = if opts.delayacct { want::DELAYACCT } else { 0 };
            let memory = if opts.load.track_rss {
                0
            } else {
                want::NO_MEMORY
            };
            let cpu = match opts.load.cpu_clock {
                crate::kernel::loader::CpuClock::Off => 0,
                _ => want::CPU_OVER_TIME,
            };
            want::TRACE | delayacct | memory | cpu
        };
        let through_agent = |conn| -> anyhow::Result<Box<dyn KernelSource>> {
            agents_own_settings(&opts.load);
            // The agent switched it at the hello, before its welcome, if it could.
            if opts.delayacct && !crate::run::delayacct::delayacct_on() {
                crate::errln!("spacetime: the agent could not switch delay accounting on (that needs CAP_SYS_ADMIN, which its unit leaves out; `sysctl kernel.task_delayacct=1` turns it on for everyone): delays read 0");
            }
            Ok(match opts.load.track_rss {
                true => Box::new(AgentSource::new(conn)),
                false => Box::new(AgentSource::without_memory(conn)),
            })
        };
        let own = || -> anyhow::Result<Box<dyn KernelSource>> {
            let taskstats = Some(opts.taskstats_buffer as usize);
            Ok(Box::new(OwnSource::open(&opts.load, taskstats)?))
        };
        let max = opts.load.max_tracked;
        let mut early = None;
        let held = || {
            let (root, pidfd) = EarlyRoot::start(first?)?;
            early = Some(root);
            Some(pidfd)
        };
        let kernel = source::open(programs, want, max, held, through_agent, own);
        // Programs loaded here (the agent refused, or was not asked) may need to run one in
        // the child before it is let go: it starts anew.
        let early = early.filter(
            |_| matches!(&kernel, Ok(k) if k.capabilities().provenance == Provenance::Agent),
        );
        let mut session = Session::over(kernel?, opts)?;
        session.early = early;
        Ok(session)
    }

    /// A session over any kernel side: one opened by [`source::open`], or one written by a
    /// test that drives the run loop without the kernel. Blocks signals as
    /// [`Session::open`] does.
    pub fn over(kernel: Box<dyn KernelSource>, opts: &SessionOptions) -> anyhow::Result<Session> {
        // Through the agent, the agent switches it (a root-only sysctl) for the session.
        let here = opts.delayacct && kernel.capabilities().provenance == Provenance::Own;
        let delayacct = DelayAcct::configure(here, opts.delayacct_notice && !opts.delayacct);
        let mut handled = vec![libc::SIGCHLD];
        handled.extend(FORWARDED);
        let sigfd = crate::util::signals::signal_fd(&handled)?;
        if rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_err() {
            log::warn!("cannot become a child subreaper: orphans will not be waited for");
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Session {
            kernel,
            sigfd,
            rt,
            page_size: crate::util::clock::page_size(),
            earlier_left: false,
            stdio: launch::Stdio::default(),
            early: None,
            _delayacct: delayacct,
        })
    }

    /// Where the standard streams of the commands started from now on go (default: they
    /// share spacetime's): `spacetime bench` reads no input and shows no output of its runs.
    pub fn detach_stdio(&mut self, stdio: launch::Stdio) {
        self.stdio = stdio;
    }

    /// Whose kernel programs.
    pub fn programs(&self) -> Provenance {
        self.kernel.capabilities().provenance
    }

    /// Says on stderr whose programs, how long loading took and which kernel mechanisms are
    /// in use (`-v`).
    pub fn tell_loaded(&self) {
        self.kernel.capabilities().tell();
    }

    /// Runs one command to its end (every process it started gone, or its root, with
    /// [`RunOptions::stop_on_root_exit`]) and returns what was seen.
    pub fn run(&mut self, start: Start<'_>, opts: &RunOptions) -> Result<Run, RunError> {
        self.begin()?;
        let baseline = Baseline {
            counters: self.kernel.counters().unwrap_or_default(),
            taskstats: self.kernel.taskstats_stats(),
        };
        let command = match &start {
            Start::Spawn(s) => report::lossless::Args(
                s.argv
                    .iter()
                    .map(|a| a.as_encoded_bytes().to_vec())
                    .collect(),
            ),
            Start::Attach(_) => report::lossless::Args::default(),
        };
        let mut cgroup = (opts.cgroup_peak && matches!(start, Start::Spawn(_)))
            .then(|| crate::run::cgroup_peak::start(opts.quiet));
        let root = self.start(start, &mut cgroup, opts.quiet)?;
        let mut mechanisms = self.kernel.capabilities().mechanisms.clone();
        let (mut tree, command) = first_tree(&root, command, &mut mechanisms);
        let mut memory = Memory::new(MemoryOptions {
            kernel_rss: self.kernel.capabilities().rss_tracking,
            over_time: opts.memory_over_time,
            pss_interval_ns: opts.pss_interval_ns,
            pss_cpu_budget: opts.pss_cpu_budget,
            page_size: self.page_size,
        });
        memory.timeline.cpu.enabled = self.kernel.capabilities().cpu_ticks;
        memory.timeline.cpu.online_cpus = crate::kernel::loader::online_cpus();
        let mut status = StatusLine::stderr(opts.quiet);
        if root.learned.level > 0 && crate::kernel::pidns::proc_has_own_pids() {
            memory.proc_by_shown_pids();
        }
        let mut collector = Collector::new(Clock {
            realtime_offset_ns: crate::util::clock::realtime_offset_ns() as i128,
        });
        let loop_opts = LoopOptions {
            root_pid: root.pid,
            stop_on_root_exit: opts.stop_on_root_exit,
            await_release: self.kernel.capabilities().cpu_at_release,
            earlier_left: self.earlier_left,
            attached: root.attached.is_some(),
        };
        let mut sink = Sink {
            tree: &mut tree,
            memory: &mut memory,
            status: &mut status,
            started_ns: root.release_ns,
            collector: &mut collector,
            decode_errors: 0,
        };
        let io = self.kernel.io(self.sigfd.as_raw_fd());
        let mut outcome = self
            .rt
            .block_on(run_loop::consume(loop_opts, &mut sink, io))?;
        // The status line goes before anything of the end is printed.
        sink.status.finish();
        let figures = self.read_end(loop_opts, &mut sink, &mut outcome, &root, &baseline);
        let ends = end::Ends {
            outcome,
            cgroup,
            baseline,
            figures,
        };
        let run = self.finish(tree, memory, collector, ends, root, mechanisms);
        let run = run.map(|mut r| {
            r.meta.command = command;
            r
        });
        // Whatever happens to the figures, the next run must not inherit this one's processes.
        let left = self.kernel.untrack_all();
        let run = run?;
        match left {
            Ok(n) => self.earlier_left |= n > 0 || run.tree.live() > 0,
            Err(e) => {
                self.earlier_left = true;
                log::warn!("cannot stop tracing the processes left running: {e}");
            }
        }
        Ok(run)
    }

    /// Signals sent to spacetime since the last run ended (SIGINT, SIGTERM, SIGHUP; not
    /// SIGCHLD), taken from the queue. Between runs nothing is forwarded: a caller running
    /// one command after another asks here whether it was told to stop; a signal left
    /// pending would otherwise reach the next run (and be forwarded to its command).
    pub fn signals_between_runs(&mut self) -> Vec<libc::c_int> {
        crate::util::signals::read_signals(self.sigfd.as_raw_fd())
            .into_iter()
            .map(|(signo, _)| signo)
            .filter(|&signo| signo != libc::SIGCHLD)
            .collect()
    }

    /// Clears what an earlier run left in the kernel and in the queues.
    fn begin(&mut self) -> Result<(), RunError> {
        Ok(self.kernel.begin()?)
    }

    /// Starts the run's root and has the kernel track it.
    fn start(
        &mut self,
        start: Start<'_>,
        cgroup: &mut Option<crate::run::cgroup_peak::Run>,
        quiet: bool,
    ) -> Result<Root, RunError> {
        match start {
            Start::Spawn(s) => self.spawn(&s, cgroup, quiet),
            Start::Attach(pids) => {
                // A root started for a spawn is not this run's.
                self.early = None;
                let attached = self.kernel.attach(pids)?;
                attached.tell(quiet);
                let pid = attached.targets[0].pid;
                Ok(Root {
                    pid,
                    learned: LearnedPid {
                        kernel_pid: pid,
                        level: 0,
                    },
                    release_ns: attached.attach_ns,
                    attached: Some(attached),
                })
            }
        }
    }

    fn spawn(
        &mut self,
        s: &Spawn<'_>,
        cgroup: &mut Option<crate::run::cgroup_peak::Run>,
        quiet: bool,
    ) -> Result<Root, RunError> {
        let early = self.early.take().filter(|e| e.is_for(s, self.stdio));
        let held = match early.and_then(EarlyRoot::into_held) {
            Some(h) => h,
            None => {
                let own_pid = self.kernel.capabilities().own_pid_program;
                launch::spawn_held_with(s.path, s.argv, s.creds, own_pid, self.stdio)?
            }
        };
        // Signals and waitpid take the pid as spacetime's namespace numbers it; the kernel
        // programs and the tree key processes by the kernel's.
        let pid = held.pid as u32;
        let learned = match self.kernel.track_root(held.child()) {
            Ok(r) => r,
            Err(e) => {
                kill_and_reap(held.pid);
                return Err(e.into());
            }
        };
        // In its cgroup before its exec: everything CMD maps is charged there.
        if let Some(c) = cgroup.take() {
            *cgroup = Some(crate::run::cgroup_peak::place(c, held.pid, quiet));
        }
        let release_ns = monotonic_ns();
        let held_pid = held.pid;
        if let Err(e) = held.release() {
            // Our own child, which exits right after a failed exec.
            reap(held_pid);
            return Err(RunError::Launch(e));
        }
        Ok(Root {
            pid,
            learned,
            release_ns,
            attached: None,
        })
    }
}

/// The run's tree before its first record, and its command: a started command's as given;
/// an attach's, the root's argv, with what /proc said of every process attached to.
fn first_tree(
    root: &Root,
    command: report::lossless::Args,
    mechanisms: &mut Vec<String>,
) -> (Tree, report::lossless::Args) {
    let (mut tree, command) = match &root.attached {
        Some(a) => {
            mechanisms.push(a.mechanism().into());
            (attached::tree(a), attached::command(a))
        }
        None => (
            Tree::new(root.learned.kernel_pid, std::process::id()),
            command,
        ),
    };
    if root.learned.level > 0 {
        tree = tree.in_namespace(root.pid);
        mechanisms.push(format!(
            "PID namespace at level {}: pids shown are its own; the kernel's learnt by a test run of own_pid, fork records translated",
            root.learned.level
        ));
    }
    (tree, command)
}

/// One traced run, whole: what the report model is built from.
pub struct Run {
    /// What the report states of the run beyond its processes.
    pub meta: report::Meta,
    pub tree: Tree,
    /// The memory timeline (`memory.timeline`), tree-wide peak included.
    pub memory: Memory,
    /// taskstats sums per process (by index in the tree).
    pub per_process: PerProcess,
    /// The first SIGINT, SIGTERM or SIGHUP spacetime received during the run (forwarded to
    /// the command when a process sent it; the terminal's already reached it).
    pub stop_signal: Option<libc::c_int>,
    /// CLOCK_MONOTONIC when the command started (let go to exec, or attached to); when it
    /// ended is [`report::Meta::end_ns`].
    pub t0_ns: u64,
    pub page_size: u64,
    /// Processes whose exit was never seen and that were gone at the end.
    pub gone: FxHashSet<Key>,
}

impl Run {
    /// What the report's processes are views over: this run's tree, its taskstats sums,
    /// which processes are gone, its start and page size.
    pub fn processes(&self) -> Processes<'_> {
        Processes::new(
            &self.tree,
            &self.per_process,
            &self.gone,
            self.t0_ns,
            self.page_size,
        )
    }

    /// The report model over this run, its processes viewed through `live` ([`Run::processes`]).
    pub fn report<'a>(&'a self, live: &'a Processes<'a>) -> Report<'a> {
        let memory = MemoryMeta::of(&self.memory.timeline);
        Report::build(&self.tree, live, &self.meta, memory)
    }

    /// The tree-wide RSS peak of this run and when it happened (None without RSS data).
    pub fn tree_peak(&self) -> Option<Point> {
        self.memory.timeline.tree_peak()
    }

    /// The status spacetime exits with: the root's, as a shell reports it.
    /// Through an agent that went away mid-run, a command that exited 0 is no proof of a
    /// whole report: [`EXIT_AGENT_GONE`](crate::util::exit_code::EXIT_AGENT_GONE) then.
    pub fn exit_code(&self) -> i32 {
        match self.meta.root_exit.map_or(0, |s| s.shell_code()) {
            0 if self.meta.agent_gone.is_some() => crate::util::exit_code::EXIT_AGENT_GONE,
            code => code,
        }
    }
}

/// Kills and reaps our own child (unreaped: its pid is still its own).
fn kill_and_reap(pid: libc::pid_t) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
    }
    reap(pid);
}

/// Waits for our own child to end and reaps it.
fn reap(pid: libc::pid_t) {
    if let Some(p) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty());
    }
}

/// Through the agent, its programs' ring buffer and RSS point interval are the agent's: a
/// different value asked for here is said, not silently dropped.
fn agents_own_settings(asked: &LoadOptions) {
    let default = LoadOptions::default();
    if asked.ring_buffer_bytes != default.ring_buffer_bytes
        || asked.rss_interval_ns != default.rss_interval_ns
    {
        log::warn!(
            "through the agent, --ring-buffer and --rss-interval are the agent's own; use --no-agent (as root) for yours"
        );
    }
}
