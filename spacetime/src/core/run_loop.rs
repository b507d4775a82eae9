//! One run's event loop: drains the ring buffer into the tree and the memory timeline, reads
//! taskstats records on the drain tick, reaps children, forwards signals, and stops when the
//! traced command and everything it started are gone (or at the root's exit, on request).

use std::{
    io,
    os::fd::{AsRawFd, RawFd},
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use tokio::io::{unix::AsyncFd, Interest};

use crate::{
    clock::monotonic_ns,
    crosscheck::Collector,
    events::decode,
    loader::{KernelLogger, Probes},
    memory::Memory,
    taskstats::{TaskstatsListener, TaskstatsRecord},
    tree::{ExitStatus, Tree},
};

/// How often the ring buffer is drained when the kernel has not woken us.
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(50);

/// Longest a run waits at its end for the free records of processes already reaped: each
/// comes one RCU grace period after the reap with the final CPU time. Measured here: 12-22 ms
/// on an idle machine, up to 260 ms with both CPUs busy.
const RELEASE_GRACE: Duration = Duration::from_millis(1000);

pub(super) struct Outcome {
    pub root_status: Option<ExitStatus>,
    pub end_ns: u64,
    pub decode_errors: u64,
}

/// Where decoded records go.
pub(super) struct Sink<'a> {
    pub tree: &'a mut Tree,
    pub memory: &'a mut Memory,
    /// Exits go to the taskstats matcher as they are applied.
    pub collector: &'a mut Collector,
    pub decode_errors: u64,
}

/// Where records come from.
pub(super) struct Sources<'a> {
    pub ring: &'a mut RingBuf<MapData>,
    /// The signalfd of SIGCHLD and the forwarded signals.
    pub sigfd: RawFd,
    pub logger: Option<&'a mut KernelLogger>,
    pub taskstats: Option<&'a mut TaskstatsListener>,
}

pub(super) struct LoopOptions {
    /// The root as spacetime's PID namespace numbers it: our child.
    pub root_pid: u32,
    pub stop_on_root_exit: bool,
    /// Free records come (see [`RELEASE_GRACE`]).
    pub await_release: bool,
    /// An earlier run of the session left processes running, which may have become our
    /// children: once every process of this run has exited, children left are not its own.
    pub earlier_left: bool,
}

/// Applies every record in the ring buffer.
pub(super) fn drain(ring: &mut RingBuf<MapData>, sink: &mut Sink) {
    while let Some(item) = ring.next() {
        match decode(&item) {
            Ok(ev) => {
                sink.memory.observe(&ev);
                if let crate::events::Event::Exit(x) = &ev {
                    sink.collector.exit(x);
                }
                sink.tree.apply(ev);
            }
            Err(e) => {
                sink.decode_errors += 1;
                log::debug!("undecodable record: {e}");
            }
        }
    }
}

/// Throws away what the ring buffer holds: records an earlier run's processes sent after it
/// ended (their free records). Returns how many.
pub(super) fn discard(ring: &mut RingBuf<MapData>) -> usize {
    let mut n = 0;
    while ring.next().is_some() {
        n += 1;
    }
    n
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
pub(super) fn live_memory(probes: &Probes, tree: &mut Tree, memory: &mut Memory) {
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

/// Reads taskstats records into `batch`; a failed listener stops the cross-check.
fn read_taskstats(
    taskstats: &mut Option<&mut TaskstatsListener>,
    batch: &mut Vec<TaskstatsRecord>,
) {
    if let Some(t) = taskstats.as_deref_mut() {
        if let Err(e) = t.drain(batch) {
            log::warn!("taskstats: {e}; the cross-check stops here");
            *taskstats = None;
        }
    }
}

/// Runs until the root and every process it started are gone (or the root, on request).
pub(super) async fn consume(
    opts: LoopOptions,
    sink: &mut Sink<'_>,
    Sources {
        ring,
        sigfd,
        mut logger,
        mut taskstats,
    }: Sources<'_>,
) -> io::Result<Outcome> {
    let root_pid = opts.root_pid;
    let mut batch = Vec::new();
    // SAFETY: both descriptors belong to the session, which keeps them open and unchanged
    // for longer than these registrations (dropped at the end of this function).
    let ready = unsafe { AsyncFd::register_with_interest(ring.as_raw_fd(), Interest::READABLE) }?;
    // SAFETY: as above.
    let sig = unsafe { AsyncFd::register_with_interest(sigfd, Interest::READABLE) }?;
    let mut root_status = None;
    let mut no_children = reap(root_pid, &mut root_status);
    // The kernel wakes us only when the ring fills up (wake-ups are costly per record), so
    // the ring is also drained on this tick.
    let mut tick = tokio::time::interval(DRAIN_INTERVAL);
    let done = |root: &Option<ExitStatus>, no_children: bool, tree: &Tree| {
        root.is_some()
            && (opts.stop_on_root_exit || no_children || (opts.earlier_left && tree.live() == 0))
    };
    while !done(&root_status, no_children, sink.tree) {
        tokio::select! {
            guard = ready.readable() => {
                let mut guard = guard?;
                drain(ring, sink);
                guard.clear_ready();
            }
            guard = sig.readable() => {
                let mut guard = guard?;
                for (signo, from_process) in read_signals(sigfd) {
                    if signo == libc::SIGCHLD {
                        no_children = reap(root_pid, &mut root_status);
                    } else if from_process {
                        // CMD may have exited with its SIGCHLD still queued (reaped first, it
                        // is not taken for alive), and forks may wait in the ring.
                        no_children = reap(root_pid, &mut root_status);
                        drain(ring, sink);
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
                read_taskstats(&mut taskstats, &mut batch);
                drain(ring, sink);
                sink.collector.keep(sink.tree, &mut batch);
                if let Some(l) = logger.as_mut() {
                    l.flush();
                }
                no_children = reap(root_pid, &mut root_status);
            }
        }
    }
    // Processes reaped in the last moments get their final CPU time one grace period later.
    // Those never reaped (--stop-on-root-exit) keep their exit figures: the wait is bounded.
    if opts.await_release {
        wait_for_free_records(ring, sink).await;
    }
    // Every exit was recorded before its process became reapable: one last drain has it all
    // (taskstats first, as on the tick).
    read_taskstats(&mut taskstats, &mut batch);
    drain(ring, sink);
    sink.collector.keep(sink.tree, &mut batch);
    if let Some(l) = logger {
        l.flush();
    }
    Ok(Outcome {
        root_status,
        end_ns: monotonic_ns(),
        decode_errors: sink.decode_errors,
    })
}

/// Drains until every exited process has its free record (final CPU time), or
/// [`RELEASE_GRACE`] has passed.
async fn wait_for_free_records(ring: &mut RingBuf<MapData>, sink: &mut Sink<'_>) {
    let waited = std::time::Instant::now();
    loop {
        drain(ring, sink);
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
