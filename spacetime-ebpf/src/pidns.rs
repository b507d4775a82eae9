//! PID namespaces. The kernel programs key every process by its pid in the initial namespace
//! (`task->tgid`); spacetime may run inside a PID namespace, where `fork()` returns the
//! namespace's pid and /proc shows only those. `own_pid` tells userspace the kernel pid of the
//! task that runs it, and spacetime's namespace level; each traced fork then also carries the
//! child's pid as spacetime's namespace numbers it.

use aya_ebpf::{helpers::bpf_get_current_pid_tgid, macros::map, maps::Array};
use spacetime_common::{mode, pidns_slot};

use crate::{
    conf,
    task::{read, Task},
};

/// [`pidns_slot`]: the level fork records translate to (0: nothing to translate), and the
/// kernel pid and level of the last task that ran `own_pid`. Written by `own_pid` only.
#[map]
pub static PIDNS: Array<u32> = Array::with_max_entries(pidns_slot::COUNT, 0);

/// Run with BPF_PROG_TEST_RUN by spacetime's freshly forked child (a raw tracepoint test run
/// executes in the calling task's context), never attached: records the caller's kernel pid
/// and its namespace level.
pub fn own_pid() {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let level = match conf!(off.task_thread_pid) {
        0 => 0,
        _ => {
            // SAFETY: plain helper call.
            let task = unsafe { aya_ebpf::helpers::bpf_get_current_task() };
            level_of(&Task(task)).unwrap_or(0)
        }
    };
    if let Some(p) = PIDNS.get_ptr_mut(pidns_slot::LEVEL) {
        // SAFETY: a slot of an array map.
        unsafe { *p = level };
    }
    // watch sees every fork on the system and needs no namespace pid in them.
    if conf!(mode) == mode::TREE {
        if let Some(p) = PIDNS.get_ptr_mut(pidns_slot::FORK_LEVEL) {
            // SAFETY: as above.
            unsafe { *p = level };
        }
    }
    if let Some(p) = PIDNS.get_ptr_mut(pidns_slot::KERNEL_PID) {
        // SAFETY: as above.
        unsafe { *p = tgid };
    }
}

/// The level of `task`'s PID namespace (0 for the initial one).
#[inline(always)]
fn level_of(task: &Task) -> Result<u32, i32> {
    let pid = read::<u64>(task.0, conf!(off.task_thread_pid))?;
    if pid == 0 {
        return Err(-1);
    }
    read::<u32>(pid, conf!(off.pid_level))
}

/// A new process's pid in spacetime's namespace, for a fork record; 0 when spacetime runs in
/// the initial namespace (the kernel pid is the one shown) or when it cannot be read.
#[inline(always)]
pub fn ns_tgid(child: &Task) -> u32 {
    let want = match PIDNS.get(pidns_slot::FORK_LEVEL) {
        Some(&l) if l > 0 && l <= 32 && conf!(off.task_thread_pid) != 0 => l,
        _ => return 0,
    };
    let Ok(pid) = read::<u64>(child.0, conf!(off.task_thread_pid)) else {
        return 0;
    };
    if pid == 0 {
        return 0;
    }
    // A child always lives in spacetime's namespace or one below it; below, `numbers[want]`
    // is still its pid as spacetime's namespace sees it.
    match read::<u32>(pid, conf!(off.pid_level)) {
        Ok(level) if level >= want => {}
        _ => return 0,
    }
    let at = conf!(off.pid_numbers) as u64 + want as u64 * conf!(off.upid_size) as u64;
    read::<u32>(pid, at as u32).unwrap_or(0)
}
