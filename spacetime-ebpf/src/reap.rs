//! A process's final CPU figures, as `wait4` returns them: `thread_group_cputime()` of the
//! group (threads already released add theirs to the signal struct in `__exit_signal()`, the
//! leader's are its own until it is released), then `cputime_adjust()` against
//! `signal->prev_cputime`, which userspace runs on the inputs sent here.
//!
//! Those inputs are final once every thread other than the leader is released and the leader
//! has done its final context switch: a dead task's slice is folded into its
//! `se.sum_exec_runtime` when it is dequeued, before `sched_switch` fires for it, and it never
//! runs again. So the record goes at the last dead task's `sched_switch` (`prev_state` ==
//! `TASK_DEAD`): the leader's, or a thread's that was released after the leader switched out.
//! A later `cputime_adjust()` with final inputs returns what one from the state read here
//! returns (it is idempotent once its inputs stop moving), so the wait may come before or
//! after.
//!
//! What the switch cannot prove final (a concurrent release moving the figures, a leader
//! still switching out on another CPU, a ptraced thread not yet released) waits for
//! `sched_process_free` of the leader instead: one RCU grace period after its release, when
//! everything is in the signal struct. The first of the two to remove the process's entry
//! sends the one record. In system mode with no filter, a process whose leader ends alone has
//! no entry: the leader's final switch sends it, or adds the entry for the free when it cannot
//! (see `unclaimed`).
//!
//! Call order (kernel/exit.c, 6.1 to 6.18): the last thread's `sched_process_exit` (which
//! adds the entry, but for `unclaimed` processes); each non-leader thread is released in its
//! own `exit_notify()` (unless ptraced), then switches out for the last time; the leader is
//! released by its parent's `wait_task_zombie()` (after `getrusage()` ran `cputime_adjust()`)
//! or by autoreap; one RCU grace period after both its release and its final switch,
//! `sched_process_free` fires.

use core::mem::MaybeUninit;

use aya_ebpf::{helpers::bpf_ktime_get_ns, programs::RawTracePointContext};
use spacetime_common::{flags, kind, mode, stat, ReapEvent, Reaping, Tracked};

use crate::{
    conf, count, filter, output, session,
    task::{header, read, read_or_zero, Task},
    zero::zeroed,
    EXITED, TRACKED,
};

/// `TASK_DEAD` in `task_struct.__state` (include/linux/sched.h; the same value since 4.14).
pub const TASK_DEAD: u32 = 0x80;

/// Process `tgid`, if its exit was seen and its final figures have not gone: its leader's
/// start as [`Tracked::ended_mark`] makes it, and its session. Tree mode's wait in their
/// `TRACKED` entries, system mode's in `EXITED`.
#[inline(always)]
fn waiting(tgid: u32) -> Option<(u64, u16)> {
    if conf!(mode) == mode::TREE {
        // SAFETY: the value is copied out.
        match unsafe { TRACKED.get(tgid) } {
            Some(t) if t.ended != 0 => Some((t.ended, t.session as u16)),
            _ => None,
        }
    } else {
        // SAFETY: as above.
        unsafe { EXITED.get(tgid) }
            .map(|w| (Tracked::ended_mark(w.leader_start_ns), w.session as u16))
    }
}

/// Removes process `tgid`'s wait (found by [`waiting`]): whether this removal did, the one
/// whose caller sends the record.
#[inline(always)]
fn take(tgid: u32, session: u16) -> bool {
    if conf!(mode) != mode::TREE {
        return EXITED.remove(tgid).is_ok();
    }
    if TRACKED.remove(tgid).is_err() {
        return false;
    }
    session::ended(session, -1);
    true
}

/// System mode with no filter: a process that ends with its leader alone needs no entry for
/// its record to go once. Its exit adds none (exit.rs, `ends_alone`), and its leader's final
/// switch sends the record unclaimed: no other thread is left to switch after it. A leader
/// switching with no entry and nothing unreleased but itself was alone: another thread that
/// took the process's entry did so after the leader had switched out (`switched_out`). One
/// case sends twice: a process of threads whose leader its parent reaped before the leader's
/// final switch, with a released thread's switch taking the entry in between; both records
/// carry final figures, and userspace keeps the first. Filtered watches keep their entries: a
/// release record goes only for a process whose exit passed the filter.
#[inline(always)]
pub fn unclaimed() -> bool {
    conf!(mode) == mode::SYSTEM && filter::none()
}

/// sched_switch of a dead task (`prev_state` was checked by the caller).
pub fn try_dead_switch(ctx: &RawTracePointContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(1));
    let tgid = task.tgid()?;
    let entry = waiting(tgid);
    if entry.is_none() && !unclaimed() {
        return Ok(());
    }
    let leader = read::<u64>(task.0, conf!(off.task_group_leader))?;
    let leader_start_ns = read::<u64>(leader, conf!(off.task_start_time))?;
    let signal = task.signal()?;
    // Some: the entry to take; None: the leader's own switch, unclaimed.
    let session = match entry {
        Some((mark, session)) if mark == Tracked::ended_mark(leader_start_ns) => Some(session),
        // No entry, or an earlier process's with the same pid (whose free was not seen). The
        // leader alone: nothing left unreleased but itself, so no thread can be added either
        // (a leader that exits before its threads switches out dead with them still there).
        _ if unclaimed()
            && leader == task.0
            && read::<i32>(signal, conf!(off.signal_nr_threads))? <= 1 =>
        {
            None
        }
        _ => return Ok(()),
    };
    let mut slot = MaybeUninit::uninit();
    let ev: &mut ReapEvent = zeroed(&mut slot);
    ev.hdr.kind = kind::REAP;
    ev.hdr.flags = flags::REAP_AT_SWITCH;
    ev.hdr.session = session.unwrap_or(0);
    // SAFETY: plain helper call.
    ev.hdr.ts_ns = unsafe { bpf_ktime_get_ns() };
    ev.hdr.tgid = tgid;
    ev.hdr.pid = tgid;
    ev.hdr.leader_start_ns = leader_start_ns;
    // A read that failed leaves the record to the free, as figures that moved do.
    let fin = final_figures(&task, leader, signal, ev).unwrap_or(false);
    match (fin, session) {
        (true, Some(session)) => {
            // One record per process: the removal that succeeds sends it.
            if take(tgid, session) {
                output(ev, session);
            }
        }
        (true, None) => output(ev, 0),
        // Moving or unreadable: the free will read it whole (its entry waits for it).
        (false, Some(_)) => {}
        (false, None) => wait_for_free(tgid, leader_start_ns),
    }
    Ok(())
}

/// The process's final CPU figures into `ev` at a dead task's switch, if they are final and
/// were read whole.
#[inline(always)]
fn final_figures(task: &Task, leader: u64, signal: u64, ev: &mut ReapEvent) -> Result<bool, i32> {
    // The signal struct's sums change only under `stats_lock` (a release adds a thread's
    // figures and decrements nr_threads there): read between two equal, even sequences.
    let seq = read::<u32>(signal, conf!(off.signal_stats_seq))?;
    if seq & 1 != 0 {
        return Ok(false);
    }
    let unreleased = match read::<i32>(signal, conf!(off.signal_nr_threads))? {
        // The leader was released already (its parent reaped it before this switch).
        0 => 0,
        1 if leader == task.0 => leader,
        // This thread was released; the leader left must have switched out for good.
        // (Never an unclaimed switch: that one is the leader's.)
        1 if switched_out(leader)? => leader,
        _ => return Ok(false),
    };
    let mut err = signal_figures(signal, ev);
    if unreleased != 0 {
        let (mut u, mut s, mut r) = (0u64, 0u64, 0u64);
        err |= read_or_zero(&mut u, unreleased, conf!(off.task_utime));
        err |= read_or_zero(&mut s, unreleased, conf!(off.task_stime));
        err |= read_or_zero(&mut r, unreleased, conf!(off.task_sum_exec_runtime));
        ev.utime_ns += u;
        ev.stime_ns += s;
        ev.rtime_ns += r;
    }
    Ok(err == 0 && read::<u32>(signal, conf!(off.signal_stats_seq))? == seq)
}

/// An unclaimed process whose figures were moving at its leader's switch: an entry for its
/// free to send the record (system mode: session 0). A full map loses the record, counted.
#[inline(always)]
fn wait_for_free(tgid: u32, leader_start_ns: u64) {
    let waiting = Reaping {
        leader_start_ns,
        session: 0,
        _pad: 0,
    };
    if EXITED.insert(tgid, waiting, 0).is_err() {
        count(0, stat::REAP_FULL);
    }
}

/// Whether a dead task has done its final switch: `TASK_DEAD` and off its CPU.
#[inline(always)]
fn switched_out(t: u64) -> Result<bool, i32> {
    let state = read::<u32>(t, conf!(off.task_state))?;
    let on_cpu = read::<i32>(t, conf!(off.task_on_cpu))?;
    Ok(state == TASK_DEAD && on_cpu == 0)
}

/// The signal struct's sums and its last adjusted split into `ev`; the reads' results ORed.
#[inline(always)]
fn signal_figures(signal: u64, ev: &mut ReapEvent) -> i64 {
    let mut err = read_or_zero(
        &mut ev.rtime_ns,
        signal,
        conf!(off.signal_sum_sched_runtime),
    );
    err |= read_or_zero(&mut ev.utime_ns, signal, conf!(off.signal_utime));
    err |= read_or_zero(&mut ev.stime_ns, signal, conf!(off.signal_stime));
    err |= read_or_zero(&mut ev.prev_utime_ns, signal, conf!(off.signal_prev_utime));
    err |= read_or_zero(&mut ev.prev_stime_ns, signal, conf!(off.signal_prev_stime));
    err
}

/// sched_process_free(p): a task's last reference is going (an RCU callback after both
/// `release_task()` and its final switch). For a group leader this is the end of the process:
/// every other thread was released before it (a leader is reaped only once its group is
/// empty), and `__exit_signal()` added every thread's figures, the leader's included, to the
/// signal struct. Unlike an fentry on `release_task`, the tracepoint also fires for a leader
/// released by its last thread's `release_task()` looping on it (leader exited first, SIGCHLD
/// ignored), and raw tracepoints load where fentry is refused.
pub fn try_process_free(ctx: &RawTracePointContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let leader = read::<u64>(task.0, conf!(off.task_group_leader))?;
    // A thread, or a leader replaced by a thread's exec (de_thread): not the process's end.
    if leader != task.0 {
        return Ok(());
    }
    let tgid = task.tgid()?;
    let start = task.start_ns()?;
    // The pid was freed a grace period ago: a new process may have it already, so the entry
    // goes only if it is this process's. No entry: its record went at a switch already, or
    // it is not a process whose exit was seen.
    let session = match waiting(tgid) {
        Some((mark, session)) if mark == Tracked::ended_mark(start) => session,
        _ => return Ok(()),
    };
    if !take(tgid, session) {
        return Ok(());
    }
    let mut slot = MaybeUninit::uninit();
    let ev: &mut ReapEvent = zeroed(&mut slot);
    ev.hdr = header(kind::REAP, session, &task, tgid, tgid)?;
    let mut signal = 0u64;
    let mut err = read_or_zero(&mut signal, task.0, conf!(off.task_signal));
    err |= signal_figures(signal, ev);
    if err != 0 {
        ev.hdr.flags |= flags::REAP_READ_FAILED;
        count(session, stat::READ_FAIL);
    }
    output(ev, session);
    Ok(())
}
