//! `spacetime trace -- CMD`: load the programs, start CMD held until it is tracked, consume
//! events until every traced process has exited (or the root, on request), then report.

use std::{
    io::{self, IsTerminal, Write},
    os::fd::{AsRawFd, OwnedFd},
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use tokio::io::{unix::AsyncFd, Interest};

use crate::{
    chart,
    cli::{TraceArgs, EXIT_OWN_FAILURE},
    crosscheck::{cross_check, Clock, Collector, PerProcess},
    events::decode,
    export::perfetto,
    launch::{self, LaunchError},
    loader::{KernelLogger, LoadOptions, Probes},
    memory::{Memory, MemoryOptions},
    report::{self, MemoryMeta, Meta, Report, TaskstatsMeta},
    selfstats::OwnCost,
    taskstats::{ListenerOptions, TaskstatsListener},
    timeline::{Point, RssSource, Timeline},
    tree::{ExitStatus, Tree},
};

/// Entry point of the subcommand: returns the process exit status.
pub fn main(args: TraceArgs, verbose: u8) -> i32 {
    match run(args, verbose) {
        Ok(code) => code,
        Err(Failure::Launch(e)) => {
            eprintln!("spacetime: {e}");
            e.exit_code()
        }
        Err(Failure::Other(e)) => {
            eprintln!("spacetime: {e:#}");
            EXIT_OWN_FAILURE
        }
    }
}

enum Failure {
    Launch(LaunchError),
    Other(anyhow::Error),
}

impl<E: Into<anyhow::Error>> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure::Other(e.into())
    }
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

const FORWARDED: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn run(args: TraceArgs, verbose: u8) -> Result<i32, Failure> {
    let path = launch::resolve(&args.command[0]).map_err(Failure::Launch)?;
    let creds = if args.keep_root {
        None
    } else {
        launch::sudo_credentials().map_err(Failure::Launch)?
    };
    let opts = LoadOptions {
        ring_buffer_bytes: args.ring_buffer,
        max_tracked: args.max_processes,
        track_rss: true,
        rss_interval_ns: args.rss_interval.saturating_mul(1_000_000),
        ..LoadOptions::default()
    };
    let mut probes = Probes::load(&opts)?;
    if verbose > 0 {
        eprintln!(
            "spacetime: programs loaded in {:.1} ms; ring buffer {} KiB",
            probes.load_ms,
            probes.ring_buffer_bytes >> 10
        );
        for m in &probes.mechanisms {
            eprintln!("spacetime:   {m}");
        }
    }
    let taskstats = open_taskstats(&args);
    let _delayacct = DelayAcct::configure(args.delayacct);
    let mut handled = vec![libc::SIGCHLD];
    handled.extend(FORWARDED);
    let sigfd = crate::signals::signal_fd(&handled)?;
    // SAFETY: prctl with an integer argument.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        log::warn!("cannot become a child subreaper: orphans will not be waited for");
    }
    let held = launch::spawn_held(&path, &args.command, creds.as_ref()).map_err(Failure::Launch)?;
    let root_pid = held.pid as u32;
    if let Err(e) = probes.track(root_pid) {
        // SAFETY: killing and reaping our own child.
        unsafe {
            libc::kill(held.pid, libc::SIGKILL);
            libc::waitpid(held.pid, std::ptr::null_mut(), 0);
        }
        return Err(e.into());
    }
    let release_ns = monotonic_ns();
    if let Err(e) = held.release() {
        // SAFETY: reaping our own child, which exits right after a failed exec.
        unsafe { libc::waitpid(root_pid as i32, std::ptr::null_mut(), 0) };
        return Err(Failure::Launch(e));
    }
    let ring = probes.take_events()?;
    let mut tree = Tree::new(root_pid, std::process::id());
    // SAFETY: sysconf cannot fail for _SC_PAGESIZE.
    let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let width = terminal_width(&io::stderr());
    let mut memory = Memory::new(MemoryOptions {
        kernel_rss: probes.rss_tracking,
        pss_interval_ns: args.pss_interval.saturating_mul(1_000_000),
        page_size,
        quiet: args.quiet,
        width,
        started_ns: release_ns,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut logger = probes.take_logger();
    let loop_opts = LoopOptions {
        root_pid,
        stop_on_root_exit: args.stop_on_root_exit,
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
    if probes.rss_tracking && tree.live() > 0 {
        live_memory(&probes, &mut tree, &mut memory);
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
    let t0_ns = tree.root().map_or(release_ns, |r| r.start_ns);
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
                cross_check(&tree, &collector, clock_offset(), page_size);
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
    // Measured last, with the programs still attached: the figures cover the whole trace.
    let own_cost = OwnCost::measure(&probes);
    let report = Report::build(
        &tree,
        &per_process,
        Meta {
            command: args
                .command
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
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
        },
    );
    if let Some(path) = &args.json {
        write_json(path, &report)?;
    }
    let title = report.command.join(" ");
    if let Some(path) = &args.perfetto {
        let opts = perfetto::Options {
            title: &title,
            t0_ns,
            end_ns,
            page_size,
        };
        perfetto::write(path, &tree, &memory.timeline, &opts)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    let stderr = io::stderr();
    let chart = (!args.no_chart)
        .then(|| memory_chart(&memory.timeline, t0_ns, end_ns, width, stderr.is_terminal()));
    let text = report::text::render(&report, width, args.top, verbose > 0, chart.as_deref());
    let _ = stderr.lock().write_all(text.as_bytes());
    Ok(outcome.root_status.map_or(0, |s| s.shell_code()))
}

fn write_json(path: &std::path::Path, report: &Report) -> anyhow::Result<()> {
    use anyhow::Context;
    let file =
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut w = io::BufWriter::new(file);
    serde_json::to_writer(&mut w, report).with_context(|| format!("writing {}", path.display()))?;
    w.write_all(b"\n")?;
    w.flush()
        .with_context(|| format!("writing {}", path.display()))
}

fn terminal_width(stderr: &io::Stderr) -> usize {
    if stderr.is_terminal() {
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ fills a winsize.
        if unsafe { libc::ioctl(stderr.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } == 0
            && ws.ws_col > 0
        {
            return ws.ws_col as usize;
        }
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(120)
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
}

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
    while !(root_status.is_some() && (stop_on_root_exit || no_children)) {
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
                    } else if from_process {
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
    Ok(Outcome {
        root_status,
        end_ns: crate::trace::monotonic_ns(),
    })
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
fn forward(signo: libc::c_int, root_pid: u32, root_alive: bool, tree: &Tree) {
    let targets: Vec<u32> = if root_alive {
        vec![root_pid]
    } else {
        tree.processes()
            .iter()
            .filter(|p| p.end_ns.is_none())
            .map(|p| p.pid)
            .collect()
    };
    for pid in targets {
        // SAFETY: plain syscall.
        unsafe { libc::kill(pid as libc::pid_t, signo) };
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
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    let real = ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128;
    Clock {
        realtime_offset_ns: real - monotonic_ns() as i128,
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
    fn configure(enable: bool) -> DelayAcct {
        if !enable {
            if !delayacct_on() {
                eprintln!("spacetime: delay accounting is off (sysctl kernel.task_delayacct=0): delays read 0; --delayacct turns it on for the trace");
            }
            return DelayAcct { restore: None };
        }
        match crate::taskstats::set_delayacct(true) {
            Ok(old) => DelayAcct {
                restore: (!old).then_some(old),
            },
            Err(e) => {
                eprintln!("spacetime: cannot switch delay accounting on: {e}");
                DelayAcct { restore: None }
            }
        }
    }
}

impl Drop for DelayAcct {
    fn drop(&mut self) {
        if let Some(old) = self.restore {
            if let Err(e) = crate::taskstats::set_delayacct(old) {
                eprintln!(
                    "spacetime: could not restore kernel.task_delayacct={}: {e}",
                    old as u8
                );
            }
        }
    }
}
