//! The event loop of `spacetime watch`: ring-buffer records into the table, exits through the
//! filter to the output and the metrics; taskstats records into the coverage check; signals,
//! `--duration`, `--count`, and metrics scrapes.

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
    sync::Arc,
    time::{Duration, Instant},
};

use aya::maps::{MapData, RingBuf};
use spacetime_common::{flags, ExitEvent, ReapEvent};
use tokio::io::{unix::AsyncFd, Interest};

use super::{
    cgroup::Cgroups,
    exit::{comm_str, last_image_peak_pages, ns_pid, process_times, ExitView},
    filter::Filter,
    metrics::{self, Metrics},
    output::Output,
    reap, summary,
    table::{Ancestor, Table},
    Stop,
};
use crate::{
    core::matcher::{Coverage, End},
    cputime::split_runtime,
    events::{decode, Event},
    loader::{KernelLogger, Probes},
    taskstats::{TaskstatsListener, TaskstatsRecord},
    tree::ExitStatus,
};

/// How often the ring buffer is drained when the kernel has not woken us.
const DRAIN_INTERVAL: Duration = Duration::from_millis(50);
/// How often loss counters are read and stale taskstats records expired.
const HOUSEKEEPING: Duration = Duration::from_secs(1);
/// How long to wait for the last taskstats records when stopping.
const TASKSTATS_GRACE: Duration = Duration::from_millis(300);

pub(super) struct Io {
    pub(super) ring: RingBuf<MapData>,
    pub(super) sigfd: OwnedFd,
    pub(super) taskstats: Option<TaskstatsListener>,
    pub(super) metrics: Option<MetricsListener>,
    pub(super) duration: Option<Duration>,
}

pub(super) struct Watch {
    pub(super) table: Table,
    pub(super) filter: Filter,
    pub(super) out: Output,
    pub(super) cgroups: Cgroups,
    pub(super) metrics: Metrics,
    pub(super) coverage: Option<Coverage>,
    pub(super) peaks: summary::Peaks,
    pub(super) ancestry: Vec<Ancestor>,
    pub(super) wall_offset_ns: i64,
    pub(super) page: u64,
    pub(super) threads: bool,
    pub(super) count: Option<u64>,
    pub(super) stop: Option<Stop>,
    /// Stopped: records only cancel out taskstats records (see `consume`).
    pub(super) late: bool,
    /// Exits before this (CLOCK_MONOTONIC) are not cross-checked: the taskstats listener was
    /// not registered yet.
    pub(super) taskstats_since_ns: u64,
    /// Process rows waiting for their release record (final CPU time).
    pub(super) waiting: reap::Waiting,
    /// The kernel sends release records (fentry release_task attached).
    pub(super) reaps: bool,
}

/// The metrics listener: accepts unless paused after an accept() error.
pub(super) struct MetricsListener {
    listener: tokio::net::TcpListener,
    slots: metrics::http::Slots,
    /// After an accept() error (out of descriptors: the pending connection stays queued and
    /// accept() would fail again at once), no accept until then; the pause doubles while the
    /// errors go on.
    paused_until: Option<tokio::time::Instant>,
    pause: Duration,
}

/// First pause after an accept() error, and the longest.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(2);

impl MetricsListener {
    pub(super) fn new(listener: tokio::net::TcpListener) -> MetricsListener {
        MetricsListener {
            listener,
            slots: metrics::http::Slots::default(),
            paused_until: None,
            pause: ACCEPT_PAUSE,
        }
    }

    async fn accept(&mut self) -> io::Result<tokio::net::TcpStream> {
        if let Some(until) = self.paused_until {
            tokio::time::sleep_until(until).await;
            self.paused_until = None;
        }
        match self.listener.accept().await {
            Ok((c, _)) => {
                self.pause = ACCEPT_PAUSE;
                Ok(c)
            }
            Err(e) => {
                self.paused_until = Some(tokio::time::Instant::now() + self.pause);
                self.pause = (self.pause * 2).min(ACCEPT_PAUSE_MAX);
                Err(e)
            }
        }
    }
}

async fn accept(l: &mut Option<MetricsListener>) -> io::Result<tokio::net::TcpStream> {
    match l {
        Some(l) => l.accept().await,
        None => std::future::pending().await,
    }
}

impl Watch {
    pub(super) async fn consume(
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
                guard = sig.readable() => {
                    let mut guard = guard?;
                    if let Some(signo) = read_signal(sig.get_ref().as_raw_fd()) {
                        self.stop = Some(Stop::Signal(signo));
                    }
                    guard.clear_ready();
                }
                conn = accept(&mut io.metrics) => self.scrape(conn, io.metrics.as_ref()),
                _ = &mut sleep, if deadline.is_some() => self.stop = Some(Stop::Duration),
                _ = tick.tick() => {
                    self.drain(ring.get_mut());
                    // Taskstats sends a datagram per exit: waking up for each would cost more
                    // than the exit itself, so they wait in the socket's buffer for the tick.
                    if let Some(l) = io.taskstats.as_mut() {
                        match l.drain(&mut ts_buf) {
                            Ok(_) => self.taskstats(&mut ts_buf),
                            Err(e) => {
                                crate::errln!("spacetime: taskstats stopped: {e}");
                                io.taskstats = None;
                            }
                        }
                    }
                    if let Some(l) = logger.as_mut() {
                        l.flush();
                    }
                    if last_housekeeping.elapsed() >= HOUSEKEEPING {
                        last_housekeeping = Instant::now();
                        self.table.verify_early(super::procfs::start_of);
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
            // Rows still waiting for a release go out with their exit figures.
            self.write_ready(Instant::now(), true);
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
            let _ = c.expire(Instant::now(), true);
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
                crate::errln!(
                    "spacetime: {} records lost: the ring buffer was full (raise --ring-buffer)",
                    c.ringbuf_lost - self.metrics.ringbuf_lost
                );
            }
            self.metrics.ringbuf_lost = c.ringbuf_lost;
            self.metrics.read_failures = c.read_failures;
        }
        if let Some(l) = taskstats {
            let e = l.stats().enobufs;
            if e > *enobufs_seen {
                crate::errln!(
                    "spacetime: taskstats dropped records ({} receive overruns): coverage \
                     figures will show taskstats gaps",
                    e - *enobufs_seen
                );
            }
            *enobufs_seen = e;
            self.metrics.enobufs = e;
        }
        if let Some(c) = self.coverage.as_mut() {
            let _ = c.expire(Instant::now(), false);
        }
        self.sync_coverage();
        self.metrics.table_size = self.table.len() as u64;
        self.wall_offset_ns = crate::clock::realtime_offset_ns();
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

    fn taskstats(&mut self, buf: &mut Vec<TaskstatsRecord>) {
        let now = Instant::now();
        if let Some(c) = self.coverage.as_mut() {
            for r in buf.iter() {
                c.taskstats(r, now, ());
            }
        }
        buf.clear();
        // A backlog (after a stall) must not keep its memory.
        buf.shrink_to(1024);
    }

    /// Applies every record in the ring buffer, then flushes the output.
    fn drain(&mut self, ring: &mut RingBuf<MapData>) {
        let now = Instant::now();
        while self.stop.is_none() {
            let Some(item) = ring.next() else { break };
            if self.late {
                if let (Ok(Event::Exit(x)), Some(c)) = (decode(&item), self.coverage.as_mut()) {
                    if x.hdr.flags & flags::EXIT_GROUP_DEAD != 0 {
                        c.late_bpf_exit(x.hdr.pid, end_of(&x, self.wall_offset_ns, now));
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
                // RSS over time is trace's; watch does not turn it on.
                Ok(Event::Rss(_)) => {}
                Ok(Event::Reap(r)) => self.reap(&r),
                Err(e) => {
                    self.metrics.decode_errors += 1;
                    log::debug!("undecodable record: {e}");
                }
            }
        }
        if !self.late {
            self.write_ready(now, false);
        }
        if let Err(e) = self.out.flush() {
            self.output_failed(e);
        }
    }

    fn output_failed(&mut self, e: io::Error) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            self.stop = Some(Stop::OutputClosed);
        } else {
            crate::errln!("spacetime: writing the output: {e}");
            self.stop = Some(Stop::OutputFailed);
        }
    }

    fn exit(&mut self, x: &ExitEvent, now: Instant) {
        if x.hdr.flags & flags::EXIT_GROUP_DEAD == 0 {
            self.thread_exit(x, now);
            return;
        }
        let Some(e) = self.table.exit(x, &mut self.ancestry) else {
            self.metrics.seen_threads += 1;
            self.coverage_thread(x, now);
            return;
        };
        self.metrics.seen_processes += 1;
        if let Some(c) = self
            .coverage
            .as_mut()
            .filter(|_| x.hdr.ts_ns >= self.taskstats_since_ns)
        {
            c.bpf_exit(x.hdr.pid, end_of(x, self.wall_offset_ns, now), ());
        }
        let ancestry = std::mem::take(&mut self.ancestry);
        self.waiting.push(*x, e, ancestry, now);
        if !self.reaps {
            // No release records on this kernel: the exit's figures are all there is.
            self.write_ready(now, true);
        }
    }

    /// A process was released: its row can go out with its final CPU time.
    fn reap(&mut self, r: &ReapEvent) {
        self.waiting.reap(r);
    }

    /// Writes the rows whose release came, or that waited long enough (every row with `all`).
    pub(super) fn write_ready(&mut self, now: Instant, all: bool) {
        while self.stop.is_none() {
            let Some(w) = self.waiting.next_ready(now, all) else {
                break;
            };
            self.write_exit(w);
        }
        self.metrics.cpu_released = self.waiting.released;
        self.metrics.cpu_at_exit = self.waiting.timed_out;
    }

    fn write_exit(&mut self, w: reap::Exited) {
        let reap::Exited {
            x,
            e,
            ancestry,
            cpu,
            ..
        } = w;
        let x = &x;
        let comm = comm_str(&x.comm);
        let cg = Arc::clone(self.cgroups.get(x.cgroup_id));
        let last = last_image_peak_pages(&e, x);
        let peak_pages = match last {
            Some(p) => Some(p.max(e.left_peak_pages)),
            None => (e.left_peak_pages > 0).then_some(e.left_peak_pages),
        };
        let (user_ns, sys_ns) = match cpu {
            Some(c) => (c.user_ns, c.sys_ns),
            None => process_times(&e, x),
        };
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
            cpu_final: cpu.is_some(),
            exit: ExitStatus::from_wait(x.exit_code),
            peak_rss_bytes: peak_pages.map(|p| p * page),
            ru_maxrss_bytes: (x.mem.flags & flags::MEM_VALID != 0)
                .then_some(x.signal_maxrss_pages * page),
            last_image_peak_bytes: last.map(|p| p * page),
            threads: e.threads,
            uid: x.uid,
            gid: x.gid,
            cgroup: &cg.path,
            identity: &cg.identity,
            in_tree: e.in_tree,
            images: &e.images,
            images_dropped: e.images_dropped,
            ancestry: &ancestry,
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

    fn coverage_thread(&mut self, x: &ExitEvent, now: Instant) {
        if x.hdr.ts_ns < self.taskstats_since_ns {
            return;
        }
        if let Some(c) = self.coverage.as_mut() {
            c.bpf_thread_exit(x.hdr.pid, end_of(x, self.wall_offset_ns, now));
        }
    }

    fn thread_exit(&mut self, x: &ExitEvent, now: Instant) {
        self.metrics.seen_threads += 1;
        self.coverage_thread(x, now);
        let start = self.table.thread_exit(x);
        if !self.threads {
            return;
        }
        let Some(p) = self.table.get(x.hdr.tgid) else {
            return;
        };
        let comm = comm_str(&x.comm);
        let cg = Arc::clone(self.cgroups.get(x.cgroup_id));
        let (user_ns, sys_ns) = split_runtime(x.runtime_ns, x.utime_ns, x.stime_ns);
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
            cpu_final: false,
            exit: ExitStatus::from_wait(x.exit_code),
            peak_rss_bytes: None,
            ru_maxrss_bytes: None,
            last_image_peak_bytes: None,
            threads: p.threads,
            uid: x.uid,
            gid: x.gid,
            cgroup: &cg.path,
            identity: &cg.identity,
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

/// An exit record as the taskstats cross-check sees it: wall-clock time, and the thread's
/// elapsed time when it is the group leader (whose start the record carries).
fn end_of(x: &ExitEvent, wall_offset_ns: i64, now: Instant) -> End {
    End::of_exit(
        x.hdr.tgid,
        x.hdr.pid,
        x.hdr.leader_start_ns,
        x.hdr.ts_ns,
        wall_offset_ns,
        now,
    )
}

/// The first pending signal, if any (the rest stay pending: one is enough to stop).
fn read_signal(fd: libc::c_int) -> Option<i32> {
    let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: reads one siginfo into a properly sized buffer.
    let n = unsafe { libc::read(fd, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
    (n == size as isize).then_some(info.ssi_signo as i32)
}

impl Watch {
    /// A scrape: answered from a snapshot of the figures, unless too many are being served.
    fn scrape(&mut self, conn: io::Result<tokio::net::TcpStream>, l: Option<&MetricsListener>) {
        let (Ok(conn), Some(l)) = (conn, l) else {
            self.metrics.accept_errors += 1;
            return;
        };
        let Some(slot) = l.slots.take() else {
            // Closed unanswered: idle connections must not hold the endpoint.
            self.metrics.rejected_connections += 1;
            return;
        };
        self.metrics.table_size = self.table.len() as u64;
        let figures = Box::new(self.metrics.clone());
        tokio::spawn(metrics::http::serve(conn, figures, slot));
    }
}
