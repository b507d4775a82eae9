//! sched_process_exit(task): a traced task exits. The last thread's exit ends the process: its
//! final image's memory figures are read here, while the mm is still attached (the tracepoint
//! fires before exit_mm() on 6.16+); on older kernels, which have already dropped it, they come
//! from exit_mm_release (exit_mm.rs).

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_uid_gid,
        bpf_probe_read_kernel,
    },
    programs::RawTracePointContext,
};
use spacetime_common::{flags, kind, mode, ExitEvent, TASK_COMM_LEN};

use crate::{
    conf, exit_mm, mem, output, rss,
    task::{header, is_traced, read, Task},
    TRACKED,
};

pub fn try_exit(ctx: &RawTracePointContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let mm = task.mm()?;
    // Before 6.16 the tracepoint fires after exit_mm(): exit_mm_release (exit_mm.rs) decided
    // whether this is the last thread, and read the final figures, while the mm was attached.
    let pid = task.pid()?;
    let stash = if mm == 0 { exit_mm::get(pid) } else { None };
    // The kernel's own "last thread" flag, where the tracepoint passes it (6.16+).
    let tp_group_dead = (conf!(off.exit_tp_group_dead) != 0).then(|| ctx.arg::<u64>(1) & 0xff != 0);
    let r = exit(&task, mm, stash, tp_group_dead);
    if stash.is_some() {
        // Whatever happened, no entry outlives its thread.
        exit_mm::forget(pid);
    }
    r
}

#[inline(always)]
fn exit(
    task: &Task,
    mm: u64,
    stash: Option<&exit_mm::ExitMm>,
    tp_group_dead: Option<bool>,
) -> Result<(), i32> {
    let tgid = task.tgid()?;
    if !is_traced(tgid) {
        return Ok(());
    }
    let signal = task.signal()?;
    let group_dead = if let Some(g) = tp_group_dead {
        g
    } else if let Some(s) = stash {
        // Before 6.16: decided by exit_mm_release (exit_mm.rs).
        s.last != 0
    } else {
        // `signal->live` was decremented before the tracepoint: zero means this is the last
        // thread (two threads exiting at once may both read zero).
        read::<i32>(signal, conf!(off.signal_live))? == 0
    };
    let mut ev = ExitEvent {
        hdr: header(kind::EXIT, task, tgid, task.pid()?)?,
        utime_ns: read::<u64>(task.0, conf!(off.task_utime))?,
        stime_ns: read::<u64>(task.0, conf!(off.task_stime))?,
        runtime_ns: read::<u64>(task.0, conf!(off.task_sum_exec_runtime))?,
        exit_code: read::<u32>(task.0, conf!(off.task_exit_code))?,
        // SAFETY: plain helper calls.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        comm: bpf_get_current_comm().unwrap_or_default(),
        ..ExitEvent::default()
    };
    let ids = bpf_get_current_uid_gid();
    ev.uid = ids as u32;
    ev.gid = (ids >> 32) as u32;
    let leader = read::<u64>(task.0, conf!(off.task_group_leader))?;
    ns_tgid(leader, &mut ev);
    if group_dead {
        ev.hdr.flags |= flags::EXIT_GROUP_DEAD;
        let sflags = read::<u32>(signal, conf!(off.signal_flags))?;
        if sflags & conf!(off.signal_group_exit_flag) != 0 {
            ev.exit_code = read::<u32>(signal, conf!(off.signal_group_exit_code))?;
            ev.hdr.flags |= flags::EXIT_GROUP_CODE;
        }
        ev.signal_maxrss_pages = read::<u64>(signal, conf!(off.signal_maxrss))?;
        let comm_off = conf!(off.task_comm);
        if leader != task.0 && comm_off != 0 {
            let at = (leader + comm_off as u64) as *const [u8; TASK_COMM_LEN];
            // SAFETY: bpf_probe_read_kernel checks the address.
            if let Ok(c) = unsafe { bpf_probe_read_kernel(at) } {
                ev.comm = c;
            }
        }
        group_times(signal, task, leader, &mut ev);
        if mm != 0 {
            ev.mem = mem::read_mm(task.0, mm)?;
        } else if let Some(s) = stash {
            ev.mem = s.mem;
        }
    }
    output(&ev);
    if group_dead {
        rss::forget(tgid);
    }
    if group_dead && conf!(mode) == mode::TREE {
        let _ = TRACKED.remove(tgid);
    }
    Ok(())
}

/// The process's id in its own PID namespace: `leader->thread_pid->numbers[level].nr`.
#[inline(always)]
fn ns_tgid(leader: u64, ev: &mut ExitEvent) {
    if conf!(off.task_thread_pid) == 0 {
        return;
    }
    let Ok(pid) = read::<u64>(leader, conf!(off.task_thread_pid)) else {
        return;
    };
    if pid == 0 {
        return;
    }
    let Ok(level) = read::<u32>(pid, conf!(off.pid_level)) else {
        return;
    };
    // MAX_PID_NS_LEVEL is 32.
    if level > 32 {
        return;
    }
    let at = conf!(off.pid_numbers) as u64 + level as u64 * conf!(off.upid_size) as u64;
    if let Ok(nr) = read::<u32>(pid, at as u32) {
        ev.ns_tgid = nr;
        ev.ns_level = level;
    }
}

/// CPU time of the whole process at the last thread's exit: released threads (accumulated in
/// `signal`), this thread, and the leader if it exited earlier (it is released only when the
/// process is reaped).
#[inline(always)]
fn group_times(signal: u64, task: &Task, leader: u64, ev: &mut ExitEvent) {
    if conf!(off.signal_sum_sched_runtime) == 0 {
        return;
    }
    // One read, one check: checking the three results at once lets the compiler OR the
    // error codes together, and 6.1's verifier cannot follow that (it then sees a value that
    // was never read on the failure path).
    let Ok(u) = read::<u64>(signal, conf!(off.signal_utime)) else {
        return;
    };
    let Ok(s) = read::<u64>(signal, conf!(off.signal_stime)) else {
        return;
    };
    let Ok(r) = read::<u64>(signal, conf!(off.signal_sum_sched_runtime)) else {
        return;
    };
    let (mut u, mut s, mut r) = (u + ev.utime_ns, s + ev.stime_ns, r + ev.runtime_ns);
    if leader != task.0 {
        if let Ok(lu) = read::<u64>(leader, conf!(off.task_utime)) {
            if let Ok(ls) = read::<u64>(leader, conf!(off.task_stime)) {
                if let Ok(lr) = read::<u64>(leader, conf!(off.task_sum_exec_runtime)) {
                    u += lu;
                    s += ls;
                    r += lr;
                }
            }
        }
    }
    ev.group_utime_ns = u;
    ev.group_stime_ns = s;
    ev.group_runtime_ns = r;
}
