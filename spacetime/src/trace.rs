//! `spacetime trace -- CMD`: load the programs, start CMD held until it is tracked, consume
//! events until every traced process has exited (or the root, on request), then report.

use std::{
    io::{self, IsTerminal},
    os::fd::{AsRawFd, OwnedFd},
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use tokio::io::{unix::AsyncFd, Interest};

use crate::{
    chart,
    cli::{TraceArgs, EXIT_OWN_FAILURE},
    clock::monotonic_ns,
    crosscheck::{cross_check, Clock, Collector, PerProcess},
    events::decode,
    export::perfetto,
    launch::{self, LaunchError},
    loader::{KernelLogger, LearnedPid, LoadOptions, Probes},
    memory::{Memory, MemoryOptions},
    outputs::{Outputs, Requested},
    report::{self, MemoryMeta, Meta, Report, TaskstatsMeta},
    selfstats::OwnCost,
    taskstats::{ListenerOptions, TaskstatsListener},
    timeline::{Point, RssSource, Timeline},
    tree::{ExitStatus, Tree},
};

/// Entry point of the subcommand: returns the process exit status.
pub fn main(args: TraceArgs, verbose: u8) -> i32 {
    let result = match args.pid.is_some() {
        true => attach_run::run(args, verbose),
        false => run(args, verbose),
    };
    match result {
        Ok(code) => code,
        Err(Failure::Launch(e)) => {
            crate::errln!("spacetime: {e}");
            e.exit_code()
        }
        Err(Failure::Other(e)) => {
            crate::errln!("spacetime: {e:#}");
            EXIT_OWN_FAILURE
        }
    }
}

#[path = "trace_attach.rs"]
mod attach_run;

enum Failure {
    Launch(LaunchError),
    Other(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Other(e.into())
    }
}

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn run(args: TraceArgs, verbose: u8) -> Result<i32, Failure> {
    let path = launch::resolve(&args.command[0]).map_err(Failure::Launch)?;
    let creds = if args.keep_root {
        None
    } else {
        launch::sudo_credentials().map_err(Failure::Launch)?
    };
    let (outputs, mut probes) = open_and_load(&args, verbose)?;
    let taskstats = open_taskstats(&args);
    let _delayacct = DelayAcct::configure(args.delayacct, verbose > 0 && !args.quiet);
    let mut handled = vec![libc::SIGCHLD];
    handled.extend(FORWARDED);
    let sigfd = crate::signals::signal_fd(&handled)?;
    // SAFETY: prctl with an integer argument.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        log::warn!("cannot become a child subreaper: orphans will not be waited for");
    }
    let cgroup = args
        .cgroup_peak
        .then(|| crate::cgroup_peak::start(args.quiet));
    let held = launch::spawn_held(
        &path,
        &args.command,
        creds.as_ref(),
        probes.own_pid_program(),
    )
    .map_err(Failure::Launch)?;
    // Signals and waitpid take the pid as spacetime's namespace numbers it; the kernel
    // programs and the tree key processes by the kernel's.
    let root_pid = held.pid as u32;
    let root = match root_kernel_pid(&probes, &held).and_then(|r| {
        probes.track(r.kernel_pid)?;
        Ok(r)
    }) {
        Ok(r) => r,
        Err(e) => {
            // SAFETY: killing and reaping our own child.
            unsafe {
                libc::kill(held.pid, libc::SIGKILL);
                libc::waitpid(held.pid, std::ptr::null_mut(), 0);
            }
            return Err(e.into());
        }
    };
    let cgroup = cgroup.map(|c| crate::cgroup_peak::place(c, held.pid, args.quiet));
    let release_ns = monotonic_ns();
    if let Err(e) = held.release() {
        // SAFETY: reaping our own child, which exits right after a failed exec.
        unsafe { libc::waitpid(root_pid as i32, std::ptr::null_mut(), 0) };
        return Err(Failure::Launch(e));
    }
    let ring = probes.take_events()?;
    let mut tree = Tree::new(root.kernel_pid, std::process::id());
    if root.level > 0 {
        tree = tree.in_namespace(root_pid);
        probes.mechanisms.push(format!(
            "PID namespace at level {}: pids shown are its own; the kernel's learnt by a test run of own_pid, fork records translated",
            root.level
        ));
    }
    let page_size = crate::clock::page_size();
    let width = terminal_width(&io::stderr());
    let mut memory = Memory::new(MemoryOptions {
        kernel_rss: probes.rss_tracking,
        pss_interval_ns: args.pss_interval.saturating_mul(1_000_000),
        page_size,
        quiet: args.quiet,
        started_ns: release_ns,
    });
    if root.level > 0 && crate::pidns::proc_has_own_pids() {
        memory.proc_by_shown_pids();
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut logger = probes.take_logger();
    let loop_opts = LoopOptions {
        root_pid,
        stop_on_root_exit: args.stop_on_root_exit,
        attached: false,
        await_release: probes.cpu_at_release,
    };
    let (mut listener, taskstats_error) = match taskstats {
        Ok(l) => (Some(l), None),
        Err(e) => (None, Some(e)),
    };
    let mut collector = Collector::default();
    let sources = Sources {
        logger: logger.as_mut(),
        taskstats: listener.as_mut(),
        collector: &mut collector,
    };
    let mut sink = Sink {
        tree: &mut tree,
        memory: &mut memory,
        decode_errors: 0,
    };
    let outcome = rt.block_on(consume(ring, sigfd, loop_opts, &mut sink, sources))?;
    let decode_errors = sink.decode_errors;
    // Read before anything else of the end: a --stop-on-root-exit survivor keeps charging.
    let cgroup_peak = cgroup.map(crate::cgroup_peak::finish);
    let t0_ns = tree.root().map_or(release_ns, |r| r.start_ns);
    let command = crate::report::lossless::Args(
        args.command
            .iter()
            .map(|a| a.as_encoded_bytes().to_vec())
            .collect(),
    );
    conclude(Ending {
        args: &args,
        verbose,
        probes: &probes,
        tree: &mut tree,
        memory: &mut memory,
        listener,
        taskstats_error,
        collector,
        outcome,
        decode_errors,
        t0_ns,
        outputs,
        width,
        command,
        cgroup_peak,
    })
}

/// Everything the end of a trace needs to report.
struct Ending<'a> {
    args: &'a TraceArgs,
    verbose: u8,
    probes: &'a Probes,
    tree: &'a mut Tree,
    memory: &'a mut Memory,
    listener: Option<TaskstatsListener>,
    taskstats_error: Option<String>,
    collector: Collector,
    outcome: Outcome,
    decode_errors: u64,
    /// Where the report's times start: the root's start, or the attach.
    t0_ns: u64,
    outputs: Outputs,
    width: usize,
    command: crate::report::lossless::Args,
    cgroup_peak: Option<crate::report::CgroupPeakReport>,
}

/// Figures of the processes still running, the cross-check, the report and its outputs;
/// returns the root's status as spacetime's.
fn conclude(e: Ending) -> Result<i32, Failure> {
    let Ending {
        args,
        verbose,
        probes,
        tree,
        memory,
        listener,
        taskstats_error,
        mut collector,
        outcome,
        decode_errors,
        t0_ns,
        mut outputs,
        width,
        command,
        cgroup_peak,
    } = e;
    let page_size = crate::clock::page_size();
    if probes.rss_tracking && tree.live() > 0 {
        live_memory(probes, tree, memory);
    }
    let kernel_peak = match probes.rss_tracking {
        true => probes.tree_rss().ok().filter(|t| t.peak_ts_ns != 0),
        false => None,
    };
    memory.finish(
        kernel_peak.map(|t| Point::new(t.peak_ts_ns, t.peak_pages.max(0) as u64 * page_size)),
    );

    let counters = probes.counters()?;
    let end_ns = if tree.live() == 0 {
        tree.processes()
            .iter()
            .filter_map(|p| p.end_ns)
            .max()
            .unwrap_or(outcome.end_ns)
    } else {
        outcome.end_ns
    };
    let exited = tree
        .processes()
        .iter()
        .filter(|p| p.end_ns.is_some())
        .count();
    let mut per_process = PerProcess::default();
    let taskstats = match (&listener, taskstats_error) {
        // Registered, yet not one record for any exit on the system: they go elsewhere.
        (Some(l), _) if exited > 0 && l.stats().records == 0 => TaskstatsMeta::Unavailable(
            "no taskstats record arrived: the kernel sends them only to the host's network namespace".into(),
        ),
        (Some(l), _) => {
            let st = l.stats();
            let (mut coverage, sums) =
                cross_check(tree, &collector, clock_offset(), page_size);
            drop(std::mem::take(&mut collector));
            per_process = sums;
            coverage.enobufs = st.enobufs;
            coverage.parse_errors = st.parse_errors;
            TaskstatsMeta::Available {
                coverage,
                delayacct: delayacct_on(),
                rcvbuf_bytes: st.rcvbuf_bytes as u64,
            }
        }
        (None, e) => {
            TaskstatsMeta::Unavailable(e.map_or_else(|| "not opened".into(), |e| e.to_string()))
        }
    };
    if let Some(l) = listener {
        let _ = l.close();
    }
    // Processes whose exit never arrived: still running (--stop-on-root-exit), or gone with
    // their exit record lost, which the report must not call running.
    let gone = crate::pidfd::gone_unseen(tree);
    // Measured last, with the programs still attached: the figures cover the whole trace.
    let own_cost = OwnCost::measure(probes);
    let mut report = Report::build(
        tree,
        &per_process,
        Meta {
            command,
            root_exit: outcome.root_status,
            t0_ns,
            end_ns,
            page_size,
            counters,
            decode_errors,
            ring_buffer_bytes: probes.ring_buffer_bytes,
            mechanisms: probes.mechanisms.clone(),
            taskstats,
            memory: MemoryMeta::of(&memory.timeline),
            own_cost,
            gone: &gone,
        },
    );
    report.cgroup_peak = cgroup_peak;
    let title = report.command.lossy_line();
    let perfetto_opts = perfetto::Options {
        title: &title,
        t0_ns,
        end_ns,
        page_size,
    };
    let summary = match &args.format {
        Some(f) => f.render(&report),
        None => {
            // Colours only on a terminal: not in a file of `-o`.
            let terminal = outputs.summary.is_none() && io::stderr().is_terminal();
            let cols = summary_width(outputs.summary.as_ref(), args.wide);
            let chart_w = cols.unwrap_or(width);
            let chart = (!args.no_chart)
                .then(|| memory_chart(&memory.timeline, t0_ns, end_ns, chart_w, terminal));
            report::text::render(&report, cols, args.top, verbose > 0, chart.as_deref())
        }
    };
    outputs.write(&report, &summary, |w| {
        perfetto::write_to(&mut &mut *w, tree, &memory.timeline, &perfetto_opts)
    });
    Ok(outcome.root_status.map_or(0, |s| s.shell_code()))
}

/// Opens the outputs (before anything runs: a path that cannot be written must not cost a
/// whole run), then loads the kernel programs.
fn open_and_load(args: &TraceArgs, verbose: u8) -> Result<(Outputs, Probes), Failure> {
    let outputs = Outputs::open(&Requested {
        json: args.json.as_deref(),
        perfetto: args.perfetto.as_deref(),
        summary: args.output.as_deref(),
        append: args.append,
    })?;
    let opts = LoadOptions {
        ring_buffer_bytes: args.ring_buffer,
        max_tracked: args.max_processes,
        track_rss: true,
        rss_interval_ns: args.rss_interval.saturating_mul(1_000_000),
        ..LoadOptions::default()
    };
    let probes = Probes::load(&opts)?;
    if verbose > 0 {
        crate::errln!(
            "spacetime: programs loaded in {:.1} ms; ring buffer {} KiB",
            probes.load_ms,
            probes.ring_buffer_bytes >> 10
        );
        for m in &probes.mechanisms {
            crate::errln!("spacetime:   {m}");
        }
    }
    Ok((outputs, probes))
}

/// stderr's width when it is a terminal, else `COLUMNS`, else 120.
fn terminal_width(stderr: &io::Stderr) -> usize {
    let fd = stderr.is_terminal().then(|| stderr.as_raw_fd());
    crate::term::columns(fd, false).unwrap_or(120)
}

/// The summary's width: its terminal's (stderr, or stdout for `-o -`), else `COLUMNS`, else
/// 120; a file is not cut to a terminal it is not on. None (no cut) with `--wide`.
fn summary_width(summary: Option<&crate::outputs::Dest>, wide: bool) -> Option<usize> {
    let fd = match summary {
        None => io::stderr().is_terminal().then_some(libc::STDERR_FILENO),
        Some(crate::outputs::Dest::Stdout) => {
            io::stdout().is_terminal().then_some(libc::STDOUT_FILENO)
        }
        Some(_) => None,
    };
    crate::term::columns(fd, wide)
}

/// How often the ring buffer is drained when the kernel has not woken us.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(50);

struct Outcome {
    root_status: Option<ExitStatus>,
    end_ns: u64,
}

/// Where decoded records go.
struct Sink<'a> {
    tree: &'a mut Tree,
    memory: &'a mut Memory,
    decode_errors: u64,
}

/// Applies every record in the ring buffer.
fn drain(ring: &mut RingBuf<MapData>, sink: &mut Sink) {
    while let Some(item) = ring.next() {
        match decode(&item) {
            Ok(ev) => {
                sink.memory.observe(&ev);
                sink.tree.apply(ev);
            }
            Err(e) => {
                sink.decode_errors += 1;
                log::debug!("undecodable record: {e}");
            }
        }
    }
}

/// Sleeps until `due` (CLOCK_MONOTONIC ns), or forever when nothing is due.
async fn sleep_until(due: Option<u64>) {
    match due {
        Some(due) => {
            tokio::time::sleep(Duration::from_nanos(due.saturating_sub(monotonic_ns()))).await
        }
        None => std::future::pending().await,
    }
}

/// Processes still running (`--stop-on-root-exit`): their peak so far, held-back point and
/// last value, from the mms the kernel still follows.
fn live_memory(probes: &Probes, tree: &mut Tree, memory: &mut Memory) {
    let states = match probes.followed_mms() {
        Ok(s) => s,
        Err(e) => {
            log::warn!("cannot read the followed mms: {e}; running processes have no peak");
            return;
        }
    };
    let live: std::collections::HashSet<crate::tree::Key> = tree
        .processes()
        .iter()
        .filter(|p| p.end_ns.is_none())
        .filter_map(|p| p.key)
        .collect();
    for r in crate::memory::live_mm_records(&states) {
        let key = crate::tree::Key {
            tgid: r.hdr.tgid,
            start_ns: r.hdr.leader_start_ns,
        };
        if live.contains(&key) {
            let ev = crate::events::Event::Rss(r);
            memory.observe(&ev);
            tree.apply(ev);
        }
    }
}

/// The tree-wide RSS over time, as a chart for the summary.
fn memory_chart(
    timeline: &Timeline,
    t0_ns: u64,
    end_ns: u64,
    width: usize,
    terminal: bool,
) -> String {
    let peak = timeline.tree_peak();
    let title = match (timeline.rss_source, peak) {
        (_, None) => "memory (tree RSS)".to_string(),
        (RssSource::Kernel, Some(p)) => format!(
            "memory (tree RSS) · peak {} at {}",
            crate::units::bytes(p.bytes),
            crate::units::duration_ns(p.ts_ns.saturating_sub(t0_ns))
        ),
        (RssSource::Statm, Some(p)) => format!(
            "memory (tree RSS, sampled from statm) · peak {} at {}",
            crate::units::bytes(p.bytes),
            crate::units::duration_ns(p.ts_ns.saturating_sub(t0_ns))
        ),
    };
    let spec = chart::Spec {
        title: &title,
        t0_ns,
        end_ns,
        width,
        height: 10,
        style: chart::Style::detect(terminal),
        peak_bytes: peak.map_or(0, |p| p.bytes),
    };
    chart::render(timeline.tree_rss().points(), &spec)
}

/// The traced command's kernel pid, which its held child recorded by running `own_pid`.
fn root_kernel_pid(probes: &Probes, held: &launch::Held) -> anyhow::Result<LearnedPid> {
    let learned = match held.own_pid_run {
        Some(0) => probes.learned_pid()?,
        Some(errno) => {
            log::debug!("running own_pid: {}", io::Error::from_raw_os_error(errno));
            None
        }
        None => None,
    };
    match learned {
        Some(l) if l.level > 0 || l.kernel_pid == held.pid as u32 => Ok(l),
        Some(l) => anyhow::bail!(
            "the kernel numbers the traced command {} while fork returned {} in the initial PID namespace",
            l.kernel_pid,
            held.pid
        ),
        // Without the program (a kernel without raw tracepoint test runs), pids are the
        // kernel's only in the initial namespace.
        None if crate::pidns::in_initial_namespace() => Ok(LearnedPid {
            kernel_pid: held.pid as u32,
            level: 0,
        }),
        None => anyhow::bail!(
            "spacetime runs inside a PID namespace and this kernel did not tell the traced command's kernel pid (BPF_PROG_TEST_RUN of a raw tracepoint program, Linux 5.10+): it cannot be traced"
        ),
    }
}

/// Reaps every child that has exited; returns true when none are left.
fn reap(root_pid: u32, root_status: &mut Option<ExitStatus>) -> bool {
    loop {
        let mut status = 0;
        // SAFETY: plain syscall.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG | libc::__WALL) };
        if pid > 0 {
            if pid as u32 == root_pid {
                *root_status = Some(ExitStatus::from_wait(status as u32));
            }
            continue;
        }
        return pid < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD);
    }
}

struct LoopOptions {
    root_pid: u32,
    stop_on_root_exit: bool,
    /// `trace -p`: the processes are not our children; Ctrl-C stops the trace.
    attached: bool,
    /// Free records come (see [`RELEASE_GRACE`]).
    await_release: bool,
}

/// Longest the trace waits at its end for the free records of processes already reaped: each
/// comes one RCU grace period after the reap with the final CPU time. Measured here: 12-22 ms
/// on an idle machine, up to 260 ms with both CPUs busy.
const RELEASE_GRACE: Duration = Duration::from_millis(1000);

/// Where records come from besides the ring buffer.
struct Sources<'a> {
    logger: Option<&'a mut KernelLogger>,
    taskstats: Option<&'a mut TaskstatsListener>,
    collector: &'a mut Collector,
}

async fn consume(
    ring: RingBuf<MapData>,
    sigfd: OwnedFd,
    LoopOptions {
        root_pid,
        stop_on_root_exit,
        attached,
        await_release,
    }: LoopOptions,
    sink: &mut Sink<'_>,
    Sources {
        mut logger,
        mut taskstats,
        collector,
    }: Sources<'_>,
) -> io::Result<Outcome> {
    let mut batch = Vec::new();
    // SAFETY: both own their descriptor, which stays open and unchanged while registered.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }?;
    // SAFETY: as above.
    let sig = unsafe { AsyncFd::register_with_interest(sigfd, Interest::READABLE) }?;
    let mut root_status = None;
    let mut no_children = reap(root_pid, &mut root_status);
    // The kernel wakes us only when the ring fills up (wake-ups are costly per record), so
    // the ring is also drained on this tick.
    let mut tick = tokio::time::interval(DRAIN_INTERVAL);
    let mut stopped = false;
    while !stopped
        && !finished(
            attached,
            stop_on_root_exit,
            &root_status,
            no_children,
            sink.tree,
        )
    {
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), sink);
                guard.clear_ready();
            }
            guard = sig.readable() => {
                let mut guard = guard?;
                for (signo, from_process) in read_signals(sig.get_ref().as_raw_fd()) {
                    if signo == libc::SIGCHLD {
                        no_children = reap(root_pid, &mut root_status);
                    } else if attached {
                        // Ctrl-C or a kill ends the trace, not the processes attached to.
                        stopped = true;
                    } else if from_process {
                        // CMD may have exited with its SIGCHLD still queued (reaped first, it
                        // is not taken for alive), and forks may wait in the ring.
                        no_children = reap(root_pid, &mut root_status);
                        drain(ring.get_mut(), sink);
                        forward(signo, root_pid, root_status.is_none(), sink.tree);
                    }
                }
                guard.clear_ready();
            }
            _ = sleep_until(sink.memory.next_due()) => {
                sink.memory.sample(monotonic_ns(), sink.tree);
            }
            _ = tick.tick() => {
                // Also picks up new processes for sampling (only due ones are read).
                sink.memory.sample(monotonic_ns(), sink.tree);
                sink.memory.tick(monotonic_ns(), sink.tree);
                // taskstats records are read on this tick, not as each arrives: one wake-up
                // per exit cost ~10 µs of CPU per process at storm rates; 50 ms of records
                // fit the socket buffer many times over. Records first, then the ring: the
                // ring holds each process's fork before its exit record is sent, so every
                // record read here has its process in the tree after the drain.
                if let Some(t) = taskstats.as_deref_mut() {
                    if let Err(e) = t.drain(&mut batch) {
                        log::warn!("taskstats: {e}; the cross-check stops here");
                        taskstats = None;
                    }
                }
                drain(ring.get_mut(), sink);
                collector.keep(sink.tree, &mut batch);
                if let Some(l) = logger.as_mut() {
                    l.flush();
                }
                no_children = reap(root_pid, &mut root_status);
            }
        }
    }
    // Processes reaped in the last moments get their final CPU time one grace period later.
    // Those never reaped (--stop-on-root-exit) keep their exit figures: the wait is bounded.
    if await_release {
        wait_for_free_records(&mut ring, sink).await;
    }
    // Every exit was recorded before its process became reapable: one last drain has it all
    // (taskstats first, as on the tick).
    if let Some(t) = taskstats {
        if let Err(e) = t.drain(&mut batch) {
            log::warn!("taskstats: {e}");
        }
    }
    drain(ring.get_mut(), sink);
    collector.keep(sink.tree, &mut batch);
    if let Some(l) = logger {
        l.flush();
    }
    if attached {
        // Not our child: its status is the kernel's exit record's.
        root_status = sink.tree.root().and_then(|r| r.exit);
    }
    Ok(Outcome {
        root_status,
        end_ns: monotonic_ns(),
    })
}

/// Whether the trace is over: the root reaped and, unless stopping at its exit, every child;
/// after an attach, every process attached to or forked since has ended (the root alone
/// with `--stop-on-root-exit`).
fn finished(
    attached: bool,
    stop_on_root_exit: bool,
    root_status: &Option<ExitStatus>,
    no_children: bool,
    tree: &Tree,
) -> bool {
    if !attached {
        return root_status.is_some() && (stop_on_root_exit || no_children);
    }
    let root_ended = tree.root().is_some_and(|r| r.end_ns.is_some());
    root_ended && (stop_on_root_exit || tree.live() + tree.pending_adoptions() == 0)
}

/// Drains until every exited process has its free record (final CPU time), or
/// [`RELEASE_GRACE`] has passed.
async fn wait_for_free_records(ring: &mut AsyncFd<RingBuf<MapData>>, sink: &mut Sink<'_>) {
    let waited = std::time::Instant::now();
    loop {
        drain(ring.get_mut(), sink);
        let missing = sink.tree.awaiting_release();
        if missing == 0 || waited.elapsed() >= RELEASE_GRACE {
            log::debug!(
                "waited {:?} for free records; {missing} missing",
                waited.elapsed()
            );
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Pending signals: (number, sent by a process rather than by the kernel or the terminal).
fn read_signals(fd: libc::c_int) -> Vec<(libc::c_int, bool)> {
    let mut out = Vec::new();
    loop {
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads one siginfo into a properly sized buffer.
        let n = unsafe { libc::read(fd, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
        if n != size as isize {
            return out;
        }
        // SI_USER, SI_QUEUE, SI_TKILL are <= 0; the terminal's signals come as SI_KERNEL and
        // already reached CMD's process group.
        out.push((info.ssi_signo as libc::c_int, info.ssi_code <= 0));
    }
}

/// Passes a signal sent to spacetime on to CMD (or, once CMD is gone, to the processes left).
/// CMD is our child: until reaped its pid stays its own. Any other process is signalled only
/// through a pidfd once proven to be the one in the tree (pid and start time): a process
/// whose exit record was lost may be gone and its pid reused by a stranger.
fn forward(signo: libc::c_int, root_pid: u32, root_alive: bool, tree: &Tree) {
    if root_alive {
        // SAFETY: plain syscall; the pid is our unreaped child's.
        unsafe { libc::kill(root_pid as libc::pid_t, signo) };
        return;
    }
    // pid 0: inside a PID namespace, a process whose fork record was lost.
    for p in tree
        .processes()
        .iter()
        .filter(|p| p.end_ns.is_none() && p.pid != 0)
    {
        if !crate::pidfd::signal_if_same(p.pid, p.start_ns, signo) {
            log::debug!(
                "not forwarded to pid {}: not the traced process (gone)",
                p.pid
            );
        }
    }
}

fn open_taskstats(args: &TraceArgs) -> Result<TaskstatsListener, String> {
    // The kernel sends exit records to listeners in the initial network namespace only: a
    // listener elsewhere (a container) registers fine and then hears nothing.
    let netns = |pid: &str| {
        std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
    };
    if let (Ok(own), Ok(init)) = (netns("self"), netns("1")) {
        if own != init {
            return Err("spacetime runs outside the host's network namespace, and the kernel sends taskstats records only there".into());
        }
    }
    let opts = ListenerOptions {
        rcvbuf_bytes: args.taskstats_buffer as usize,
        ..ListenerOptions::default()
    };
    TaskstatsListener::open(opts).map_err(|e| e.to_string())
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now: taskstats dates tasks by the wall clock.
fn clock_offset() -> Clock {
    Clock {
        realtime_offset_ns: crate::clock::realtime_offset_ns() as i128,
    }
}

fn delayacct_on() -> bool {
    crate::taskstats::delayacct_enabled().unwrap_or(false)
}

/// Delay accounting switched on for the trace (`--delayacct`) and restored when dropped, on
/// every way out of the trace.
struct DelayAcct {
    restore: Option<bool>,
}

impl DelayAcct {
    /// `notice`: say that delays read 0 when accounting is off (-v only: the summary shows
    /// delays only then).
    fn configure(enable: bool, notice: bool) -> DelayAcct {
        if !enable {
            if notice && !delayacct_on() {
                crate::errln!("spacetime: delay accounting is off (sysctl kernel.task_delayacct=0): delays read 0; --delayacct turns it on for the trace");
            }
            return DelayAcct { restore: None };
        }
        match crate::taskstats::set_delayacct(true) {
            Ok(old) => DelayAcct {
                restore: (!old).then_some(old),
            },
            Err(e) => {
                crate::errln!("spacetime: cannot switch delay accounting on: {e}");
                DelayAcct { restore: None }
            }
        }
    }
}

impl Drop for DelayAcct {
    fn drop(&mut self) {
        if let Some(old) = self.restore {
            if let Err(e) = crate::taskstats::set_delayacct(old) {
                crate::errln!(
                    "spacetime: could not restore kernel.task_delayacct={}: {e}",
                    old as u8
                );
            }
        }
    }
}
