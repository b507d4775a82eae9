//! `watch --uid`, `--cgroup`, `--pid-tree` in the kernel: a process that does not pass is not
//! sent (no fork, exec, argv or image-end record), so another user's huge argv never reaches
//! userspace. Read-only globals set at load, as libbpf-tools' exitsnoop does. Every test is
//! on the current task: the fork (parent; the child inherits uid and cgroup), exec and exit
//! tracepoints all run in the task concerned.

use aya_ebpf::helpers::{bpf_get_current_uid_gid, generated::bpf_get_current_ancestor_cgroup_id};
use spacetime_common::{filter_flags, stat, KernelFilter, FILTER_MAX_CGROUPS, FILTER_MAX_UIDS};

use crate::{
    conf, count,
    creds::{foreign, Owner},
    task::{traced, Task},
};

/// Written by userspace before load (`EbpfLoader::override_global`); all zero: no filter.
#[no_mangle]
// SAFETY: KernelFilter is #[repr(C)] integers (spacetime-common): all-zero is a value.
static FILTER: KernelFilter = unsafe { core::mem::zeroed() };

/// Reads one field of [`FILTER`] (volatile, as `conf!`, so the zeroed initializer is not
/// folded into the code).
macro_rules! filt {
    ($($field:tt)+) => {
        // SAFETY: FILTER is plain data in .rodata.
        unsafe { core::ptr::read_volatile(&FILTER.$($field)+) }
    };
}

/// The session of process `tgid` (the current task's) if it is reported. The record it would
/// have caused is counted as filtered when it is not.
#[inline(always)]
pub fn wanted(tgid: u32) -> Option<u16> {
    let flags = filt!(flags);
    let Some(session) = traced(tgid) else {
        if flags & filter_flags::COUNT_UNTRACKED != 0 {
            count(0, stat::FILTERED);
        }
        return None;
    };
    if flags & (filter_flags::UID | filter_flags::CGROUP) == 0 || passes(flags) {
        return Some(session);
    }
    count(session, stat::FILTERED);
    None
}

/// The uid and cgroup tests alone (the exit program sends a filtered group exit as a marker).
#[inline(always)]
pub fn passes(flags: u32) -> bool {
    if flags & filter_flags::UID != 0 && !uid_passes() {
        return false;
    }
    flags & filter_flags::CGROUP == 0 || cgroup_passes()
}

/// Whether the watcher could not ptrace `task` (with `mm`, 0 if gone) when only such
/// processes are shown ([`filter_flags::READABLE`]: an agent's non-root watch).
#[inline(always)]
pub fn hidden(task: &Task, mm: u64) -> bool {
    if filt!(flags) & filter_flags::READABLE == 0 {
        return false;
    }
    // Credentials the kernel does not describe: nothing can be shown safely.
    if conf!(off.task_real_cred) == 0 {
        return true;
    }
    let owner = Owner {
        uid: filt!(owner_uid),
        gid: filt!(owner_gid),
        caps: filt!(owner_caps),
    };
    foreign(0, task, mm, &owner)
}

/// Tree mode used as a filter (`watch --pid-tree`).
#[inline(always)]
pub fn tree_filter() -> bool {
    filt!(flags) & filter_flags::COUNT_UNTRACKED != 0
}

/// Whether there is no filter at all: every process is reported.
#[inline(always)]
pub fn none() -> bool {
    filt!(flags) == 0
}

/// Whether the filter has uid or cgroup tests.
#[inline(always)]
pub fn active() -> u32 {
    filt!(flags) & (filter_flags::UID | filter_flags::CGROUP)
}

#[inline(always)]
fn uid_passes() -> bool {
    let uid = bpf_get_current_uid_gid() as u32;
    let n = filt!(n_uids) as usize;
    for i in 0..FILTER_MAX_UIDS {
        if i >= n {
            break;
        }
        if filt!(uids[i]) == uid {
            return true;
        }
    }
    false
}

/// In one of the cgroups or below it: the current task's ancestor at that cgroup's level is
/// that cgroup (`bpf_get_current_ancestor_cgroup_id`, tracing programs since 5.13).
#[inline(always)]
fn cgroup_passes() -> bool {
    let n = filt!(n_cgroups) as usize;
    for i in 0..FILTER_MAX_CGROUPS {
        if i >= n {
            break;
        }
        let c = filt!(cgroups[i]);
        // SAFETY: plain helper call; 0 when the task is not that deep.
        if unsafe { bpf_get_current_ancestor_cgroup_id(c.level as i32) } == c.id {
            return true;
        }
    }
    false
}
