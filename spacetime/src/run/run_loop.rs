//! One traced run's part of the event loop ([`super::event_loop`]): records into the tree,
//! the memory timeline and the taskstats matcher; children reaped; signals forwarded; the
//! run ends when the traced command and everything it started are gone (or at the root's
//! exit, on request), then waits for the last release records (final CPU figures).

use std::{io, time::Duration};

use super::event_loop::{self, Consumer, NoSource};
use crate::kernel::counters::CounterSource;
use crate::kernel::grace::GracePeriods;
use crate::kernel::source::{Io, Records};
use crate::{
    kernel::{
        events::Event,
        taskstats::{TaskstatsError, TaskstatsListener, TaskstatsRecord},
    },
    model::{
        crosscheck::Collector,
        memory::Memory,
        tree::{ExitStatus, Key, Tree},
    },
    report::status::StatusLine,
    util::clock::monotonic_ns,
};
use rustc_hash::FxHashSet;
use spacetime_common::flags;

/// How often the end polls for them: first at short steps (a record from a last switch is
/// microseconds away; tokio's timer counts milliseconds, so these are short blocking sleeps of
/// the loop's own thread), then every 2 ms.
const RELEASE_STEPS: [Duration; 2] = [Duration::from_micros(100), Duration::from_millis(2)];
const SHORT_STEPS: u32 = 10;

pub(super) struct Outcome {
    pub root_status: Option<ExitStatus>,
    /// The first SIGINT, SIGTERM or SIGHUP spacetime received during the run.
    pub stop_signal: Option<libc::c_int>,
    /// When the run stopped: the root's exit with `stop_on_root_exit`, the signal that
    /// stopped an attach, else the loop's end.
    pub end_ns: u64,
    /// Processes whose exit came after the stop (running then).
    pub exited_after: FxHashSet<Key>,
    pub decode_errors: u64,
    /// The stop as records are judged against it (see [`TracedRun::cutoff`]).
    cutoff: Option<u64>,
}

/// Where decoded records go.
pub(super) struct Sink<'a> {
    pub tree: &'a mut Tree,
    pub memory: &'a mut Memory,
    /// The live status line, and when the run started (its clock).
    pub status: &'a mut StatusLine<io::Stderr>,
    pub started_ns: u64,
    /// Exits go to the taskstats matcher as they are applied.
    pub collector: &'a mut Collector,
    pub decode_errors: u64,
}

#[derive(Clone, Copy)]
pub(super) struct LoopOptions {
    /// The root as spacetime's PID namespace numbers it: our child.
    pub root_pid: u32,
    pub stop_on_root_exit: bool,
    /// Release records come (see [`wait_for_release_records`]).
    pub await_release: bool,
    /// An earlier run of the session left processes running, which may have become our
    /// children: once every process of this run has exited, children left are not its own.
    pub earlier_left: bool,
    /// `trace -p`: the processes are not our children. The run ends when every one of them
    /// has ended (the root alone with `stop_on_root_exit`), or on a signal, which stops the
    /// run and is not passed on.
    pub attached: bool,
}

/// Whether an attached run is over: its root ended and, unless stopping there, every process
/// attached to or forked since.
fn attached_done(stop_on_root_exit: bool, tree: &Tree) -> bool {
    let root_ended = tree.root().is_some_and(|r| r.end_ns.is_some());
    root_ended && (stop_on_root_exit || tree.live() + tree.pending_adoptions() == 0)
}

/// The loop's state for one traced run.
struct TracedRun<'s, 'a> {
    sink: &'s mut Sink<'a>,
    opts: LoopOptions,
    root_status: Option<ExitStatus>,
    no_children: bool,
    /// The first stop signal (not SIGCHLD) received.
    stop_signal: Option<libc::c_int>,
    /// When an attached run was stopped by a signal.
    stopped: Option<u64>,
    /// When the run stopped (the root's exit with `stop_on_root_exit`, the signal that stopped
    /// an attach): what happened later to the processes left (an exit, a fork, an exec, a
    /// memory point) is not the run's; what the kernel holds of their memory is read at the
    /// end (their peaks so far, the tree's).
    cutoff: Option<u64>,
    /// Processes whose exit came after the stop: running at the stop, not gone unseen.
    exited_after: FxHashSet<Key>,
}

impl TracedRun<'_, '_> {
    /// Whether a record is the run's: anything before the stop; after it, only the final CPU
    /// of a process that exited before it.
    fn within(&self, ev: &Event) -> bool {
        let Some(cut) = self.cutoff else {
            return true;
        };
        let h = ev.header();
        match ev {
            _ if h.ts_ns <= cut => true,
            Event::Reap(_) => {
                let key = Key::of(h);
                self.sink.tree.get(&key).is_some_and(|p| p.end_ns.is_some())
            }
            _ => false,
        }
    }
}

impl Consumer for TracedRun<'_, '_> {
    type Extra = NoSource;

    fn event(&mut self, ev: Event) {
        if !self.within(&ev) {
            if let Event::Exit(x) = &ev {
                self.exited_after.insert(Key::of(&x.hdr));
            }
            return;
        }
        let sink = &mut *self.sink;
        sink.memory.observe(&ev);
        let exit = match &ev {
            Event::Exit(x) => Some(*x),
            Event::Fork(f) if f.hdr.flags & flags::FORK_THREAD != 0 => {
                sink.collector.thread_started(f.child_pid, f.hdr.tgid);
                None
            }
            _ => None,
        };
        sink.tree.apply(ev);
        // After the tree: a process whose fork record was lost is in it from its exit on.
        if let Some(x) = exit {
            sink.collector.exit(&x, sink.tree);
        }
        if self.opts.stop_on_root_exit && self.cutoff.is_none() {
            // As the kernel dated the root's exit: deterministic, whatever the order in which
            // the other processes' records reach us.
            self.cutoff = self.sink.tree.root().and_then(|r| r.end_ns.get());
        }
    }

    fn decode_errors(&mut self) -> &mut u64 {
        &mut self.sink.decode_errors
    }

    fn before_signal(&mut self, signo: libc::c_int, from_process: bool) {
        // CMD may have exited with its SIGCHLD still queued: reaped first, it is not taken
        // for alive, and its forks are all in the ring drained next.
        if signo == libc::SIGCHLD || from_process {
            self.no_children = reap(self.opts.root_pid, &mut self.root_status);
        }
    }

    fn signal(&mut self, signo: libc::c_int, from_process: bool) {
        if signo == libc::SIGCHLD {
            return;
        }
        self.stop_signal.get_or_insert(signo);
        if self.opts.attached {
            // Ctrl-C or a kill ends the trace, not the processes attached to.
            let at = *self.stopped.get_or_insert_with(monotonic_ns);
            self.cutoff.get_or_insert(at);
        } else if from_process {
            let alive = self.root_status.is_none();
            forward(signo, self.opts.root_pid, alive, self.sink.tree);
        }
    }

    fn taskstats(&mut self, batch: &mut Vec<TaskstatsRecord>) {
        self.sink.collector.keep(self.sink.tree, batch);
    }

    fn taskstats_failed(&mut self, e: &TaskstatsError) {
        log::warn!("taskstats: {e}; the cross-check stops here");
    }

    fn tick(&mut self, _: Option<&TaskstatsListener>, _: &dyn CounterSource) {
        // Also picks up new processes for sampling (only due ones are read).
        self.sink.memory.sample(monotonic_ns(), self.sink.tree);
        let s = &mut *self.sink;
        s.status.tick(
            monotonic_ns().saturating_sub(s.started_ns),
            s.tree.live(),
            s.tree.processes().len(),
            s.memory.timeline.current_rss(),
        );
        self.no_children = reap(self.opts.root_pid, &mut self.root_status);
    }

    fn next_due(&self) -> Option<u64> {
        self.sink.memory.next_due()
    }

    fn tick_reads(&self, now_ns: u64) -> bool {
        self.sink.memory.may_read(now_ns)
    }

    fn due(&mut self) {
        self.sink.memory.sample(monotonic_ns(), self.sink.tree);
    }

    fn done(&self) -> bool {
        let o = &self.opts;
        if o.attached {
            return self.stopped.is_some() || attached_done(o.stop_on_root_exit, self.sink.tree);
        }
        self.root_status.is_some()
            && (o.stop_on_root_exit
                || self.no_children
                || (o.earlier_left && self.sink.tree.live() == 0))
    }
}

/// Runs until the root and every process it started are gone (or the root, on request).
pub(super) async fn consume(
    opts: LoopOptions,
    sink: &mut Sink<'_>,
    mut io: Io<'_>,
) -> io::Result<Outcome> {
    let await_release = opts.await_release;
    let mut run = TracedRun {
        sink,
        opts,
        root_status: None,
        no_children: false,
        stop_signal: None,
        stopped: None,
        cutoff: None,
        exited_after: FxHashSet::default(),
    };
    run.no_children = reap(run.opts.root_pid, &mut run.root_status);
    event_loop::run(&mut io, &mut run, &mut NoSource).await?;
    // The command's own end: what follows (release records, the last fetch) is spacetime's,
    // and through an agent that went silent it can take seconds.
    let loop_end_ns = monotonic_ns();
    // Processes that exited in the last moments send their final CPU time at their last
    // switch, or at worst one grace period after their reap. Those never reaped
    // (--stop-on-root-exit) may keep their exit figures: the wait is bounded. Through an
    // agent, records wait in its ring until fetched: the run's end fetches them all in one
    // round trip, and the agent waits for the final CPU records itself.
    run.no_children = reap(run.opts.root_pid, &mut run.root_status);
    if io.ring.end_of_run(await_release) {
        wait_for_release_records(io.ring, &mut run).await;
    }
    // Every exit was recorded before its process became reapable: one last drain has it all
    // (taskstats first, as on the tick).
    event_loop::take_taskstats(&mut io, &mut run);
    io.flush_log();
    if run.opts.attached {
        // Not our child: its status is the kernel's exit record's.
        run.root_status = run.sink.tree.root().and_then(|r| r.exit.get());
    }
    let end_ns = match (run.stopped, run.opts.stop_on_root_exit) {
        (Some(at), _) => at,
        // As the kernel dated the root's exit.
        (None, true) => run
            .sink
            .tree
            .root()
            .and_then(|r| r.end_ns.get())
            .unwrap_or_else(monotonic_ns),
        (None, false) => loop_end_ns,
    };
    Ok(Outcome {
        root_status: run.root_status,
        stop_signal: run.stop_signal,
        end_ns,
        exited_after: std::mem::take(&mut run.exited_after),
        decode_errors: run.sink.decode_errors,
        cutoff: run.cutoff,
    })
}

/// Takes the records the kernel had written when the end's figures were read (up to `end`,
/// from [`crate::kernel::source::EndFigures::records_end`]), judged as the loop judged them. A
/// process that stopped being followed between the loop's last drain and the read of the
/// followed mms (one that exited right after a stop) has its last records there and nowhere
/// else: without them it would have neither its peak nor its mm.
pub(super) fn take_written(
    opts: LoopOptions,
    sink: &mut Sink<'_>,
    ring: &mut dyn Records,
    outcome: &mut Outcome,
    end: u64,
) {
    let mut run = TracedRun {
        sink,
        opts,
        root_status: outcome.root_status,
        no_children: false,
        stop_signal: outcome.stop_signal,
        stopped: None,
        cutoff: outcome.cutoff,
        exited_after: std::mem::take(&mut outcome.exited_after),
    };
    event_loop::drain_before(ring, &mut run, end);
    outcome.exited_after = std::mem::take(&mut run.exited_after);
    outcome.decode_errors = run.sink.decode_errors;
    outcome.cutoff = run.cutoff;
}

/// Processes still running (`--stop-on-root-exit`): their peak so far, held-back point and
/// last value, from the mms the kernel still follows.
pub(super) fn live_memory(
    states: Result<Vec<spacetime_common::MmState>, String>,
    tree: &mut Tree,
    memory: &mut Memory,
) {
    let states = match states {
        Ok(s) => s,
        Err(e) => {
            log::warn!("cannot read the followed mms: {e}; running processes have no peak");
            return;
        }
    };
    let live: std::collections::HashSet<crate::model::tree::Key> = tree
        .processes()
        .iter()
        .filter(|p| p.end_ns.is_none())
        .filter_map(|p| p.key.get())
        .collect();
    for r in crate::model::memory::live_mm_records(&states) {
        let key = crate::model::tree::Key::of(&r.hdr);
        if live.contains(&key) {
            let ev = crate::kernel::events::Event::Rss(r);
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

/// Drains until every exited process that was reaped has its release record (final CPU
/// time), or the wait is over ([`GracePeriods`]: 1 s, longer while the grace period that
/// frees them has not ended). Children of spacetime's (orphans it adopted as the
/// subreaper) are reaped first: that is spacetime's part. A zombie whose parent is alive may
/// stay one until after spacetime returns: not waited for (with --stop-on-root-exit, a double
/// fork's grandchild that exited after CMD kept the run a whole second).
async fn wait_for_release_records(ring: &mut dyn Records, run: &mut TracedRun<'_, '_>) {
    let waited = std::time::Instant::now();
    // Found reaped once, reaped for good.
    let mut reaped: FxHashSet<Key> = FxHashSet::default();
    let mut grace = GracePeriods::default();
    // Taken when a reaped process is found waiting, again when another is.
    let mut wait = None;
    for poll in 0.. {
        run.no_children = reap(run.opts.root_pid, &mut run.root_status);
        event_loop::drain(ring, run);
        let before = reaped.len();
        let missing = run
            .sink
            .tree
            .processes()
            .iter()
            .filter(|p| p.end_ns.is_some() && !p.cpu_final)
            .filter_map(|p| p.key.get().map(|k| (p.pid, k)))
            .filter(|&(pid, k)| {
                reaped.contains(&k) || {
                    let gone = crate::kernel::pidfd::reaped(pid, k.start_ns);
                    if gone {
                        reaped.insert(k);
                    }
                    gone
                }
            })
            .count();
        if missing > 0 && (wait.is_none() || reaped.len() > before) {
            wait = Some(grace.wait());
        }
        let over = wait.is_some_and(|w| grace.over(&w, std::time::Instant::now()));
        if missing == 0 || over {
            log::debug!(
                "waited {:?} for release records ({poll} polls); {missing} missing",
                waited.elapsed()
            );
            return;
        }
        if poll < SHORT_STEPS {
            std::thread::sleep(RELEASE_STEPS[0]);
        } else {
            tokio::time::sleep(RELEASE_STEPS[1]).await;
        }
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
        if !crate::kernel::pidfd::signal_if_same(p.pid, p.start_ns, signo) {
            log::debug!(
                "not forwarded to pid {}: not the traced process (gone)",
                p.pid
            );
        }
    }
}
