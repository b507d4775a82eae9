//! sched_process_free(p): a task's last reference is going (an RCU callback after
//! `release_task()`). For a group leader this is the end of the process: every other thread
//! was released before it (a leader is reaped only once its group is empty), the leader did
//! its final schedule, and when the parent's wait4 reaped it, `signal->prev_cputime` holds the
//! user/system split that wait4 returned. Unlike an fentry on `release_task`, the tracepoint
//! also fires for a leader released by its last thread's `release_task()` looping on it
//! (leader exited first, SIGCHLD ignored), and raw tracepoints load where fentry is refused.
//!
//! Call order (kernel/exit.c, 6.1 to 6.18): the last thread's `sched_process_exit`; then the
//! parent's `wait_task_zombie()` runs `thread_group_cputime_adjusted()` and calls
//! `release_task(leader)` (or an autoreaped leader releases itself in `exit_notify()`), which
//! frees the pid; one RCU grace period later, `delayed_put_task_struct()` fires this
//! tracepoint. The signal struct lives until the task's last reference is dropped, after it.

use aya_ebpf::programs::RawTracePointContext;
use spacetime_common::{flags, kind, mode, stat, ReapEvent};

use crate::{
    conf, count, filter, output,
    task::{header, read, read_or_zero, Task},
    EXITED, REAPING,
};

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
    // goes only if it is this process's.
    let map = if conf!(mode) == mode::TREE {
        &REAPING
    } else {
        &EXITED
    };
    // SAFETY: the value is copied out.
    let session = match unsafe { map.get(tgid) } {
        Some(w) if w.leader_start_ns == start => Some(w.session as u16),
        _ => None,
    };
    if session.is_some() {
        let _ = map.remove(tgid);
    } else if conf!(mode) == mode::TREE || filter::active() != 0 {
        // Traced processes only, and only the one whose group exit was seen. With a uid or
        // cgroup filter, likewise only a process whose group exit passed it (exit.rs claims
        // only those): the task freed here is not the current one, so the filter cannot be
        // asked again, and another user's process must not be told of.
        return Ok(());
    }
    let session = session.unwrap_or(0);
    let mut ev = ReapEvent {
        hdr: header(kind::REAP, session, &task, tgid, tgid)?,
        ..ReapEvent::default()
    };
    // release_task()'s __exit_signal() added every thread's figures, the leader's included,
    // to the signal struct: what thread_group_cputime() summed at the wait is all there now.
    let mut signal = 0u64;
    let mut err = read_or_zero(&mut signal, task.0, conf!(off.task_signal));
    err |= read_or_zero(
        &mut ev.rtime_ns,
        signal,
        conf!(off.signal_sum_sched_runtime),
    );
    err |= read_or_zero(&mut ev.utime_ns, signal, conf!(off.signal_utime));
    err |= read_or_zero(&mut ev.stime_ns, signal, conf!(off.signal_stime));
    err |= read_or_zero(&mut ev.prev_utime_ns, signal, conf!(off.signal_prev_utime));
    err |= read_or_zero(&mut ev.prev_stime_ns, signal, conf!(off.signal_prev_stime));
    if err != 0 {
        ev.hdr.flags |= flags::REAP_READ_FAILED;
        count(session, stat::READ_FAIL);
    }
    output(&ev, session);
    Ok(())
}
