//! The event loop of `spacetime watch`: ring-buffer records into the table, exits through the
//! filter to the output and the metrics; taskstats records into the coverage check; signals,
//! `--duration`, `--count`, and metrics scrapes.

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
    sync::Arc,
    time::{Duration, Instant},
};

use spacetime_common::{flags, ExitEvent, ReapEvent};

use super::{
    args::WatchArgs, cgroup::Cgroups, exec::ExecLines, filter::Filter, output::Output, reap,
    summary, Stop,
};
use crate::{
    kernel::source::KernelSource,
    kernel::{
        counters::CounterSource,
        events::Event,
        taskstats::{TaskstatsError, TaskstatsListener, TaskstatsRecord},
    },
    model::{
        cputime::split_runtime,
        exit_view::{comm_bytes, last_image_peak_pages, ns_pid, process_times, ExitView},
        matcher::{BpfEnd, Coverage},
        table::{Ancestor, Table},
        tree::ExitStatus,
    },
    report::metrics::{self, Metrics},
    run::event_loop::{self, Consumer, Source},
};

/// How often loss counters are read and stale taskstats records expired.
const HOUSEKEEPING: Duration = Duration::from_secs(1);
/// How long to wait for the last taskstats records when stopping.
const TASKSTATS_GRACE: Duration = Duration::from_millis(300);

pub(super) struct Io {
    pub(super) sigfd: OwnedFd,
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
    /// `--events exec`: the lines waiting for their argv.
    pub(super) exec_lines: ExecLines,
}

/// The metrics listener: accepts unless paused after an accept() error.
pub(super) struct MetricsListener {
    listener: tokio::net::TcpListener,
    slots: crate::run::metrics_http::Slots,
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
            slots: crate::run::metrics_http::Slots::default(),
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

impl Source for Option<MetricsListener> {
    type Item = io::Result<tokio::net::TcpStream>;

    async fn next(&mut self) -> Self::Item {
        match self {
            Some(l) => l.accept().await,
            None => std::future::pending().await,
        }
    }
}

/// The watch as the event loop drives it.
struct Looping<'w> {
    w: &'w mut Watch,
    last_housekeeping: Instant,
    enobufs_seen: u64,
    /// `--duration`'s end, CLOCK_MONOTONIC ns.
    deadline_ns: Option<u64>,
}

impl Consumer for Looping<'_> {
    type Extra = Option<MetricsListener>;

    fn event(&mut self, ev: Event) {
        let w = &mut *self.w;
        if w.late {
            // Stopped: exits only cancel out their taskstats records (see `consume`).
            if let (Event::Exit(x), Some(c)) = (&ev, w.coverage.as_mut()) {
                if x.hdr.flags & flags::EXIT_GROUP_DEAD != 0 {
                    c.late_bpf_exit(x.hdr.pid, end_of(x, w.wall_offset_ns, Instant::now()));
                }
            }
            return;
        }
        match ev {
            Event::Fork(f) => w.table.fork(&f),
            Event::Exec(e) => {
                let (tgid, start) = (e.hdr.tgid, e.hdr.leader_start_ns);
                let (uid, cgroup_id) = (e.uid, e.cgroup_id);
                // A waiting exec line of this process is for the image this one ends.
                w.write_execs(false, Some(tgid));
                w.table.exec(e);
                w.exec_lines.seen(tgid, start, uid, cgroup_id);
            }
            Event::Args(a) => w.table.args(a),
            Event::ImageEnd(m) => w.table.image_end(&m),
            Event::Exit(x) => w.exit(&x, Instant::now()),
            // RSS over time is trace's; watch does not turn it on.
            Event::Rss(_) => {}
            Event::Reap(r) => w.reap(&r),
            Event::CgroupName(c) => w.cgroups.named(c.cgroup_id, &c.path),
            // CPU over time is trace's; watch does not load its program.
            Event::Tick(_) => {}
        }
    }

    fn decode_errors(&mut self) -> &mut u64 {
        &mut self.w.metrics.decode_errors
    }

    fn taking(&self) -> bool {
        self.w.stop.is_none()
    }

    /// Rows whose release came go out, and the output is flushed.
    fn drained(&mut self) {
        let w = &mut *self.w;
        if !w.late {
            w.write_execs(false, None);
            w.write_ready(Instant::now(), false);
        }
        if let Err(e) = w.out.flush() {
            w.output_failed(e);
        }
    }

    fn signal(&mut self, signo: libc::c_int, _from_process: bool) {
        // SIGHUP with -o FILE: the log was rotated (logrotate's postrotate, systemd's
        // ExecReload); write on into FILE made anew. Without -o it stops, as a hangup does.
        if signo == libc::SIGHUP {
            match self.w.out.reopen() {
                Ok(true) => return,
                Ok(false) => {}
                Err(e) => return self.w.output_failed(e),
            }
        }
        self.w.stop.get_or_insert(Stop::Signal(signo));
    }

    fn taskstats(&mut self, batch: &mut Vec<TaskstatsRecord>) {
        self.w.taskstats(batch);
    }

    fn taskstats_failed(&mut self, e: &TaskstatsError) {
        crate::errln!("spacetime: taskstats stopped: {e}");
    }

    fn tick(&mut self, taskstats: Option<&TaskstatsListener>, counters: &dyn CounterSource) {
        // Through an agent that went away nothing more comes: the watch ends, and says so.
        if counters.gone().is_some() {
            self.w.stop.get_or_insert(Stop::AgentGone);
        }
        if self.last_housekeeping.elapsed() >= HOUSEKEEPING {
            self.last_housekeeping = Instant::now();
            self.w.table.verify_early(super::procfs::start_of);
            self.w
                .housekeeping(counters, taskstats, &mut self.enobufs_seen);
        }
    }

    fn next_due(&self) -> Option<u64> {
        self.deadline_ns
    }

    fn due(&mut self) {
        self.w.stop.get_or_insert(Stop::Duration);
    }

    fn extra(&mut self, conn: io::Result<tokio::net::TcpStream>, l: &Option<MetricsListener>) {
        self.w.scrape(conn, l.as_ref());
    }

    fn done(&self) -> bool {
        self.w.stop.is_some()
    }
}

impl Watch {
    /// The watch before its first record; `taskstats`: a listener is open; `reaps`: release
    /// records come.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        args: &WatchArgs,
        table: Table,
        filter: Filter,
        out: Output,
        cgroups: Cgroups,
        taskstats: bool,
        taskstats_since_ns: u64,
        reaps: bool,
    ) -> Watch {
        let mut metrics = Metrics::new(taskstats, args.metrics_comm_limit);
        metrics.histograms = args.metrics_histograms;
        for label in &args.metrics_label {
            metrics.by_identity.push(metrics::identity::ByIdentity::new(
                *label,
                args.metrics_comm_limit,
            ));
        }
        Watch {
            metrics,
            coverage: taskstats.then(Coverage::default),
            table,
            filter,
            out,
            cgroups,
            peaks: summary::Peaks::default(),
            ancestry: Vec::new(),
            wall_offset_ns: crate::util::clock::realtime_offset_ns(),
            page: crate::util::clock::page_size(),
            threads: args.threads,
            count: args.count,
            stop: None,
            late: false,
            taskstats_since_ns,
            waiting: reap::Waiting::default(),
            reaps,
            exec_lines: ExecLines::new(args.events.exec),
        }
    }

    pub(super) async fn consume(
        &mut self,
        mut io: Io,
        kernel: &mut dyn KernelSource,
    ) -> anyhow::Result<Stop> {
        let deadline_ns = io
            .duration
            .map(|d| crate::util::clock::monotonic_ns().saturating_add(d.as_nanos() as u64));
        let mut looping = Looping {
            w: self,
            last_housekeeping: Instant::now(),
            enobufs_seen: 0,
            deadline_ns,
        };
        let mut lio = kernel.io(io.sigfd.as_raw_fd());
        looping.w.housekeeping(
            lio.counters,
            lio.taskstats.as_deref(),
            &mut looping.enobufs_seen,
        );
        event_loop::run(&mut lio, &mut looping, &mut io.metrics).await?;
        let stop = looping.w.stop.unwrap_or(Stop::Duration);
        // What the kernel already wrote is reported, unless the count was reached or the
        // reader is gone.
        if matches!(stop, Stop::Signal(_) | Stop::Duration) {
            looping.w.stop = None;
            // Through an agent, what its programs wrote is fetched first.
            lio.ring.sync();
            event_loop::drain(&mut *lio.ring, &mut looping);
            // Exec lines still waiting for argv go out with what arrived, rows still waiting
            // for a release with their exit figures.
            looping.w.write_execs(true, None);
            looping.w.write_ready(Instant::now(), true);
        }
        if let Some(l) = lio.taskstats.as_deref_mut() {
            // Taskstats records of the exits reported may still be on their way. Exits after
            // the stop only cancel out their taskstats records: they were not reported.
            tokio::time::sleep(TASKSTATS_GRACE).await;
            let mut ts_buf = Vec::new();
            if l.drain(&mut ts_buf).is_ok() {
                looping.w.taskstats(&mut ts_buf);
            }
            looping.w.stop = None;
            looping.w.late = true;
            event_loop::drain(&mut *lio.ring, &mut looping);
        }
        let Looping {
            w,
            mut enobufs_seen,
            ..
        } = looping;
        w.housekeeping(lio.counters, lio.taskstats.as_deref(), &mut enobufs_seen);
        if let Some(c) = w.coverage.as_mut() {
            let _ = c.expire(Instant::now(), true);
        }
        w.sync_coverage();
        Ok(stop)
    }

    /// Loss counters, stale taskstats records, clock and terminal width.
    fn housekeeping(
        &mut self,
        counters: &dyn CounterSource,
        taskstats: Option<&TaskstatsListener>,
        enobufs_seen: &mut u64,
    ) {
        if let Some(c) = counters.current() {
            if c.ringbuf_lost > self.metrics.ringbuf_lost {
                let whose = match counters.through_agent() {
                    true => "the agent's ring buffer was full",
                    false => "the ring buffer was full (raise --ring-buffer)",
                };
                crate::errln!(
                    "spacetime: {} records lost: {whose}",
                    c.ringbuf_lost - self.metrics.ringbuf_lost
                );
            }
            if c.agent_queue_full > self.metrics.agent_queue_full {
                crate::errln!(
                    "spacetime: {} records lost: the agent's queue for this watch was full (the watch read too slowly)",
                    c.agent_queue_full - self.metrics.agent_queue_full
                );
            }
            self.metrics.ringbuf_lost = c.ringbuf_lost;
            self.metrics.agent_queue_full = c.agent_queue_full;
            self.metrics.read_failures = c.read_failures;
            self.metrics.kernel_filtered = c.filtered;
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
        self.metrics.argv_evicted = self.table.stats.argv_evicted;
        self.wall_offset_ns = crate::util::clock::realtime_offset_ns();
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

    pub(super) fn output_failed(&mut self, e: io::Error) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            self.stop = Some(Stop::OutputClosed);
        } else {
            crate::errln!("spacetime: writing the output: {e}");
            self.stop = Some(Stop::OutputFailed);
        }
    }

    fn exit(&mut self, x: &ExitEvent, now: Instant) {
        if x.hdr.flags & flags::EXIT_FILTERED != 0 {
            self.filtered_exit(x, now);
            return;
        }
        self.write_execs(false, Some(x.hdr.tgid));
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

    /// An exit the kernel-side filter kept out: only the table and the taskstats cross-check
    /// hear of it.
    fn filtered_exit(&mut self, x: &ExitEvent, now: Instant) {
        if x.hdr.flags & flags::EXIT_GROUP_DEAD == 0 {
            self.metrics.seen_threads += 1;
            self.coverage_thread(x, now);
            return;
        }
        self.metrics.seen_processes += 1;
        if x.hdr.flags & flags::EXIT_HIDDEN != 0 {
            self.metrics.hidden += 1;
        }
        self.table.forget(x);
        if let Some(c) = self
            .coverage
            .as_mut()
            .filter(|_| x.hdr.ts_ns >= self.taskstats_since_ns)
        {
            c.bpf_exit(x.hdr.pid, end_of(x, self.wall_offset_ns, now), ());
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
            left_ns,
            ..
        } = w;
        let x = &x;
        let comm = comm_bytes(&x.comm);
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
            comm,
            image: &e.image,
            start_ns: Some(x.hdr.leader_start_ns),
            image_start_ns: if e.exec_ns != 0 {
                e.exec_ns
            } else {
                x.hdr.leader_start_ns
            },
            end_ns: left_ns.unwrap_or(x.hdr.ts_ns),
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
        let Some(p) = self.table.thread_owner(x) else {
            return;
        };
        let comm = comm_bytes(&x.comm);
        let cg = Arc::clone(self.cgroups.get(x.cgroup_id));
        let (user_ns, sys_ns) = split_runtime(x.runtime_ns, x.utime_ns, x.stime_ns);
        let view = ExitView {
            thread: true,
            pid: x.hdr.tgid,
            tid: x.hdr.pid,
            ppid: p.ppid,
            ns_pid: ns_pid(x),
            comm,
            image: &p.image,
            start_ns: start,
            image_start_ns: if p.exec_ns != 0 {
                p.exec_ns
            } else {
                p.start_ns
            },
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
fn end_of(x: &ExitEvent, wall_offset_ns: i64, now: Instant) -> BpfEnd {
    BpfEnd::of_exit(
        x.hdr.tgid,
        x.hdr.pid,
        x.hdr.leader_start_ns,
        x.hdr.ts_ns,
        wall_offset_ns,
        now,
    )
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
        tokio::spawn(crate::run::metrics_http::serve(conn, figures, slot));
    }
}
