//! `spacetime watch`: every process exit on the system, with its peak memory, argv and
//! ancestry, as a table or JSON lines, optionally served as OpenMetrics.
//!
//! The kernel programs run in [`mode::SYSTEM`] and report every fork, exec, image end and exit.
//! [`table`] keeps the live processes (seeded from /proc by [`procfs`]) so that an exit record,
//! which carries the figures, can be printed with the exe and argv of the image that ended,
//! its parent chain and thread count. [`filter`] selects, [`output`] writes, [`metrics`] counts
//! and serves, [`coverage`] matches every exit against the kernel's taskstats records.
//!
//! Nothing is read from /proc per exit and nothing is allocated per exit beyond formatting: the
//! entry moves out of the table, the line is written from borrowed data.

pub mod args;
mod cgroup;
mod coverage;
mod exit;
mod filter;
mod metrics;
mod output;
mod procfs;
mod summary;
mod table;

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::{Duration, Instant},
};

use anyhow::Context;
use aya::maps::{MapData, RingBuf};
use spacetime_common::{flags, mode, ExitEvent};
use tokio::io::{unix::AsyncFd, Interest};

pub use args::WatchArgs;

use crate::{
    cli::EXIT_OWN_FAILURE,
    events::{decode, Event},
    loader::{KernelLogger, LoadOptions, Probes},
    taskstats::{ListenerOptions, TaskstatsListener},
    tree::ExitStatus,
};
use cgroup::Cgroups;
use coverage::Coverage;
use exit::{comm_str, last_image_peak_pages, ns_pid, process_times, ExitView};
use filter::Filter;
use metrics::Metrics;
use output::{page_size, Output};
use table::{Ancestor, Table, TableOptions};

/// How often the ring buffer is drained when the kernel has not woken us.
const DRAIN_INTERVAL: Duration = Duration::from_millis(50);
/// How often loss counters are read and stale taskstats records expired.
const HOUSEKEEPING: Duration = Duration::from_secs(1);
/// How long to wait for the last taskstats records when stopping.
const TASKSTATS_GRACE: Duration = Duration::from_millis(300);

/// Entry point of the subcommand: returns the process exit status.
pub fn main(args: WatchArgs, verbose: u8) -> i32 {
    match run(args, verbose) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("spacetime: {e:#}");
            EXIT_OWN_FAILURE
        }
    }
}

fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// CLOCK_REALTIME - CLOCK_MONOTONIC: turns record timestamps into wall-clock time.
fn wall_offset_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME) - clock_ns(libc::CLOCK_MONOTONIC)
}

/// Blocks SIGINT, SIGTERM and SIGHUP and returns a signalfd reporting them: each ends the
/// watch cleanly. Called before the runtime exists, so no thread keeps them unblocked.
fn signal_fd() -> io::Result<OwnedFd> {
    // SAFETY: sigset manipulation on a local set; signalfd returns a new descriptor.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Why the watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Signal(i32),
    Duration,
    Count,
    /// The reader of the output went away (EPIPE).
    OutputClosed,
}

fn run(args: WatchArgs, verbose: u8) -> anyhow::Result<()> {
    let filter = Filter::from_args(&args)?;
    let mut out =
        Output::open(args.output.as_deref(), args.json, args.wide).with_context(|| {
            format!(
                "opening {}",
                args.output
                    .as_ref()
                    .map_or("stdout".into(), |p| p.display().to_string())
            )
        })?;
    let metrics_listener = match args.metrics {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .with_context(|| format!("--metrics: listening on {addr}"))?;
            l.set_nonblocking(true)?;
            Some(l)
        }
        None => None,
    };
    let sigfd = signal_fd().context("setting up signal handling")?;
    let mut probes = Probes::load(&LoadOptions {
        mode: mode::SYSTEM,
        ring_buffer_bytes: args.ring_buffer,
        ..LoadOptions::default()
    })?;
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
    let ring = probes.take_events()?;
    // Opened after the programs are attached: every taskstats record has its BPF exit.
    let taskstats = if args.no_taskstats {
        None
    } else {
        match TaskstatsListener::open(ListenerOptions::default()) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("spacetime: no taskstats cross-check: {e}");
                None
            }
        }
    };
    let mut table = Table::new(TableOptions {
        max_processes: args.max_processes.max(1),
        ancestry: args.ancestry,
        images: args.images,
        threads: args.threads,
    });
    let seeded =
        procfs::seed(&mut table, filter.pid_tree(), args.max_processes).context("reading /proc")?;
    let cgroups = Cgroups::open();
    if verbose > 0 && !cgroups.available() {
        eprintln!("spacetime: no cgroup2 mount: cgroups are shown as ids");
    }
    out.set_wall_offset(wall_offset_ns());
    out.header()?;
    out.flush()?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let metrics_listener = match metrics_listener {
        Some(l) => {
            let _guard = rt.enter();
            let l = tokio::net::TcpListener::from_std(l)?;
            eprintln!(
                "spacetime: OpenMetrics on http://{}/metrics",
                l.local_addr()?
            );
            Some(l)
        }
        None => None,
    };
    eprintln!(
        "spacetime: watching every exit on the system ({seeded} processes running); \
         Ctrl-C to stop"
    );
    let mut w = Watch {
        metrics: Metrics::new(taskstats.is_some()),
        coverage: taskstats.as_ref().map(|_| Coverage::default()),
        table,
        filter,
        out,
        cgroups,
        peaks: summary::Peaks::default(),
        ancestry: Vec::new(),
        wall_offset_ns: wall_offset_ns(),
        page: page_size(),
        threads: args.threads,
        count: args.count,
        stop: None,
        late: false,
    };
    let started = Instant::now();
    let mut logger = probes.take_logger();
    let io = Io {
        ring,
        sigfd,
        taskstats,
        metrics: metrics_listener,
        duration: args.duration,
    };
    let stop = rt.block_on(w.consume(io, &probes, logger.as_mut()))?;
    let elapsed = started.elapsed();
    if let Some(e) = w
        .out
        .flush()
        .err()
        .filter(|e| e.kind() != io::ErrorKind::BrokenPipe)
    {
        eprintln!("spacetime: writing the output: {e}");
    }
    let coverage_note = match &w.coverage {
        None => Some("not checked".to_string()),
        Some(c) if c.version > 0 && c.version < 12 => Some(format!(
            "{} matched (taskstats version {} cannot mark process ends: unmatched records \
             not counted)",
            w.metrics.matched, c.version
        )),
        Some(_) => None,
    };
    if verbose > 0 {
        eprintln!("spacetime: stopped: {stop:?}");
    }
    eprint!(
        "{}",
        summary::render(&summary::Final {
            elapsed,
            metrics: &w.metrics,
            peaks: &w.peaks,
            table: w.table.stats,
            filtered: !w.filter.is_empty(),
            coverage_note,
        })
    );
    Ok(())
}

struct Io {
    ring: RingBuf<MapData>,
    sigfd: OwnedFd,
    taskstats: Option<TaskstatsListener>,
    metrics: Option<tokio::net::TcpListener>,
    duration: Option<Duration>,
}

struct Watch {
    table: Table,
    filter: Filter,
    out: Output,
    cgroups: Cgroups,
    metrics: Metrics,
    coverage: Option<Coverage>,
    peaks: summary::Peaks,
    ancestry: Vec<Ancestor>,
    wall_offset_ns: i64,
    page: u64,
    threads: bool,
    count: Option<u64>,
    stop: Option<Stop>,
    /// Stopped: records only cancel out taskstats records (see `consume`).
    late: bool,
}

/// Waits for a taskstats batch, or forever without a listener.
async fn taskstats_recv(
    l: &mut Option<TaskstatsListener>,
    buf: &mut Vec<crate::taskstats::TaskstatsRecord>,
) -> Result<usize, crate::taskstats::TaskstatsError> {
    match l {
        Some(l) => l.recv(buf).await,
        None => std::future::pending().await,
    }
}

async fn accept(l: &Option<tokio::net::TcpListener>) -> io::Result<tokio::net::TcpStream> {
    match l {
        Some(l) => l.accept().await.map(|(c, _)| c),
        None => std::future::pending().await,
    }
}

impl Watch {
    async fn consume(
        &mut self,
        mut io: Io,
        probes: &Probes,
        mut logger: Option<&mut KernelLogger>,
    ) -> anyhow::Result<Stop> {
        // SAFETY: both own their descriptor, which stays open and unchanged while registered.
        let mut ring = unsafe { AsyncFd::register_with_interest(io.ring, Interest::READABLE) }?;
        // SAFETY: as above.
        let sig = unsafe { AsyncFd::register_with_interest(io.sigfd, Interest::READABLE) }?;
        let deadline = io.duration.map(|d| tokio::time::Instant::now() + d);
        let sleep = tokio::time::sleep_until(
            deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(1 << 30)),
        );
        tokio::pin!(sleep);
        let mut tick = tokio::time::interval(DRAIN_INTERVAL);
        let mut last_housekeeping = Instant::now();
        let mut ts_buf = Vec::new();
        let mut enobufs_seen = 0;
        self.housekeeping(probes, io.taskstats.as_ref(), &mut enobufs_seen);
        while self.stop.is_none() {
            tokio::select! {
                guard = ring.readable_mut() => {
                    let mut guard = guard?;
                    self.drain(guard.get_inner_mut());
                    guard.clear_ready();
                }
                n = taskstats_recv(&mut io.taskstats, &mut ts_buf) => {
                    match n {
                        Ok(_) => self.taskstats(&mut ts_buf),
                        Err(e) => {
                            eprintln!("spacetime: taskstats stopped: {e}");
                            io.taskstats = None;
                        }
                    }
                }
                guard = sig.readable() => {
                    let mut guard = guard?;
                    if let Some(signo) = read_signal(sig.get_ref().as_raw_fd()) {
                        self.stop = Some(Stop::Signal(signo));
                    }
                    guard.clear_ready();
                }
                conn = accept(&io.metrics) => {
                    if let Ok(conn) = conn {
                        self.metrics.table_size = self.table.len() as u64;
                        tokio::spawn(metrics::serve(conn, self.metrics.render()));
                    }
                }
                _ = &mut sleep, if deadline.is_some() => self.stop = Some(Stop::Duration),
                _ = tick.tick() => {
                    self.drain(ring.get_mut());
                    if let Some(l) = logger.as_mut() {
                        l.flush();
                    }
                    if last_housekeeping.elapsed() >= HOUSEKEEPING {
                        last_housekeeping = Instant::now();
                        self.housekeeping(probes, io.taskstats.as_ref(), &mut enobufs_seen);
                    }
                }
            }
        }
        let stop = self.stop.unwrap_or(Stop::Duration);
        // What the kernel already wrote is reported, unless the count was reached or the
        // reader is gone.
        if matches!(stop, Stop::Signal(_) | Stop::Duration) {
            self.stop = None;
            self.drain(ring.get_mut());
        }
        if let Some(l) = io.taskstats.as_mut() {
            // Taskstats records of the exits reported may still be on their way. Exits after
            // the stop only cancel out their taskstats records: they were not reported.
            tokio::time::sleep(TASKSTATS_GRACE).await;
            if l.drain(&mut ts_buf).is_ok() {
                self.taskstats(&mut ts_buf);
            }
            self.stop = None;
            self.late = true;
            self.drain(ring.get_mut());
        }
        self.housekeeping(probes, io.taskstats.as_ref(), &mut enobufs_seen);
        if let Some(c) = self.coverage.as_mut() {
            c.expire(Instant::now(), true);
        }
        self.sync_coverage();
        Ok(stop)
    }

    /// Loss counters, stale taskstats records, clock and terminal width.
    fn housekeeping(
        &mut self,
        probes: &Probes,
        taskstats: Option<&TaskstatsListener>,
        enobufs_seen: &mut u64,
    ) {
        if let Ok(c) = probes.counters() {
            if c.ringbuf_lost > self.metrics.ringbuf_lost {
                eprintln!(
                    "spacetime: {} records lost: the ring buffer was full (raise --ring-buffer)",
                    c.ringbuf_lost - self.metrics.ringbuf_lost
                );
            }
            self.metrics.ringbuf_lost = c.ringbuf_lost;
        }
        if let Some(l) = taskstats {
            let e = l.stats().enobufs;
            if e > *enobufs_seen {
                eprintln!(
                    "spacetime: taskstats dropped records ({} receive overruns): coverage \
                     figures will show taskstats gaps",
                    e - *enobufs_seen
                );
            }
            *enobufs_seen = e;
            self.metrics.enobufs = e;
        }
        if let Some(c) = self.coverage.as_mut() {
            c.expire(Instant::now(), false);
        }
        self.sync_coverage();
        self.metrics.table_size = self.table.len() as u64;
        self.wall_offset_ns = wall_offset_ns();
        self.out.set_wall_offset(self.wall_offset_ns);
        self.out.refresh_width();
    }

    fn sync_coverage(&mut self) {
        if let Some(c) = &self.coverage {
            self.metrics.matched = c.stats.matched;
            self.metrics.bpf_only = c.stats.bpf_only;
            self.metrics.taskstats_only = c.stats.taskstats_only;
        }
    }

    fn taskstats(&mut self, buf: &mut Vec<crate::taskstats::TaskstatsRecord>) {
        let now = Instant::now();
        if let Some(c) = self.coverage.as_mut() {
            for r in buf.iter() {
                c.taskstats(r, now);
            }
        }
        buf.clear();
    }

    /// Applies every record in the ring buffer, then flushes the output.
    fn drain(&mut self, ring: &mut RingBuf<MapData>) {
        let now = Instant::now();
        while self.stop.is_none() {
            let Some(item) = ring.next() else { break };
            if self.late {
                if let (Ok(Event::Exit(x)), Some(c)) = (decode(&item), self.coverage.as_mut()) {
                    if x.hdr.flags & flags::EXIT_GROUP_DEAD != 0 {
                        let wall_us = (x.hdr.ts_ns as i64 + self.wall_offset_ns) / 1000;
                        c.late_bpf_exit(x.hdr.pid, wall_us);
                    }
                }
                continue;
            }
            match decode(&item) {
                Ok(Event::Fork(f)) => self.table.fork(&f),
                Ok(Event::Exec(e)) => self.table.exec(e),
                Ok(Event::Args(a)) => self.table.args(a),
                Ok(Event::ImageEnd(m)) => self.table.image_end(&m),
                Ok(Event::Exit(x)) => self.exit(&x, now),
                Err(e) => {
                    self.metrics.decode_errors += 1;
                    log::debug!("undecodable record: {e}");
                }
            }
        }
        if let Err(e) = self.out.flush() {
            self.output_failed(e);
        }
    }

    fn output_failed(&mut self, e: io::Error) {
        if e.kind() != io::ErrorKind::BrokenPipe {
            eprintln!("spacetime: writing the output: {e}");
        }
        self.stop = Some(Stop::OutputClosed);
    }

    fn exit(&mut self, x: &ExitEvent, now: Instant) {
        if x.hdr.flags & flags::EXIT_GROUP_DEAD == 0 {
            self.thread_exit(x);
            return;
        }
        self.metrics.seen_processes += 1;
        if let Some(c) = self.coverage.as_mut() {
            let wall_us = (x.hdr.ts_ns as i64 + self.wall_offset_ns) / 1000;
            c.bpf_exit(x.hdr.pid, wall_us, now);
        }
        let e = self.table.exit(x, &mut self.ancestry);
        let comm = comm_str(&x.comm);
        let cgroup = self.cgroups.path(x.cgroup_id).clone();
        let last = last_image_peak_pages(&e, x);
        let peak_pages = match last {
            Some(p) => Some(p.max(e.left_peak_pages)),
            None => (e.left_peak_pages > 0).then_some(e.left_peak_pages),
        };
        let (user_ns, sys_ns) = process_times(&e, x);
        let page = self.page;
        let view = ExitView {
            thread: false,
            pid: x.hdr.tgid,
            tid: x.hdr.pid,
            ppid: e.ppid,
            ns_pid: ns_pid(x),
            comm: &comm,
            image: &e.image,
            start_ns: Some(x.hdr.leader_start_ns),
            end_ns: x.hdr.ts_ns,
            user_ns,
            sys_ns,
            exit: ExitStatus::from_wait(x.exit_code),
            peak_rss_bytes: peak_pages.map(|p| p * page),
            ru_maxrss_bytes: (x.mem.flags & flags::MEM_VALID != 0)
                .then_some(x.signal_maxrss_pages * page),
            last_image_peak_bytes: last.map(|p| p * page),
            threads: e.threads,
            uid: x.uid,
            gid: x.gid,
            cgroup: &cgroup,
            in_tree: e.in_tree,
            images: &e.images,
            images_dropped: e.images_dropped,
            ancestry: &self.ancestry,
            known: e.known,
        };
        if !self.filter.matches(&view) {
            return;
        }
        self.metrics.observe(&view);
        self.peaks.observe(&view);
        let r = self.out.write(&view);
        self.after_write(r);
    }

    fn thread_exit(&mut self, x: &ExitEvent) {
        self.metrics.seen_threads += 1;
        let start = self.table.thread_exit(x);
        if !self.threads {
            return;
        }
        let Some(p) = self.table.get(x.hdr.tgid) else {
            return;
        };
        let comm = comm_str(&x.comm);
        let cgroup = self.cgroups.path(x.cgroup_id).clone();
        let (user_ns, sys_ns) = crate::tree::split_runtime(x.runtime_ns, x.utime_ns, x.stime_ns);
        let view = ExitView {
            thread: true,
            pid: x.hdr.tgid,
            tid: x.hdr.pid,
            ppid: p.ppid,
            ns_pid: ns_pid(x),
            comm: &comm,
            image: &p.image,
            start_ns: start,
            end_ns: x.hdr.ts_ns,
            user_ns,
            sys_ns,
            exit: ExitStatus::from_wait(x.exit_code),
            peak_rss_bytes: None,
            ru_maxrss_bytes: None,
            last_image_peak_bytes: None,
            threads: p.threads,
            uid: x.uid,
            gid: x.gid,
            cgroup: &cgroup,
            in_tree: p.in_tree,
            images: &[],
            images_dropped: 0,
            ancestry: &[],
            known: true,
        };
        if !self.filter.matches(&view) {
            return;
        }
        let r = self.out.write(&view);
        self.after_write(r);
    }

    fn after_write(&mut self, r: io::Result<()>) {
        if let Err(e) = r {
            self.output_failed(e);
            return;
        }
        if let Some(n) = self.count.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.stop = Some(Stop::Count);
            }
        }
    }
}

/// The first pending signal, if any (the rest stay pending: one is enough to stop).
fn read_signal(fd: libc::c_int) -> Option<i32> {
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reads one siginfo into a properly sized buffer.
    let n = unsafe { libc::read(fd, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
    (n == size as isize).then_some(info.ssi_signo as i32)
}
