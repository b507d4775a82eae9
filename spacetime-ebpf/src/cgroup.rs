//! `watch`'s identity of a cgroup, read while the cgroup exists: the first time a reported
//! process execs in a cgroup, the cgroup's path from the kernel's own names (kernfs nodes,
//! leaf up), as Tetragon reads a container's at exec. Userspace would otherwise resolve the
//! id only when it writes the row, and a cgroup removed right after its last process is gone
//! by then. A separate program, attached only for `watch`, before the exec record's own: the
//! name comes first, and the verifier walks this code apart from the exec's. At exec only:
//! at exit it cost a third of the exit record's own kernel time for nothing new (a process
//! that never execs in its cgroup has a parent that did, or is named the lazy way).

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_probe_read_kernel_str_bytes},
    macros::map,
    maps::{LruHashMap, PerCpuArray},
    programs::RawTracePointContext,
};
use spacetime_common::{flags, kind, stat, CgroupNameEvent, CGROUP_NAME_DEPTH, CGROUP_NAME_LEN};

use crate::{
    conf, count, filter, output,
    task::{header, read, traced, Task},
};

/// Cgroups whose path was sent: each is sent once while it stays here.
#[map]
static CGROUP_NAMED: LruHashMap<u64, u8> = LruHashMap::with_max_entries(4096, 0);

#[map]
static CGROUP_SCRATCH: PerCpuArray<CgroupNameEvent> = PerCpuArray::with_max_entries(1, 0);

/// sched_process_exec passes the task first.
pub fn try_name(ctx: &RawTracePointContext) -> Result<(), i32> {
    // What nearly every run does: find the cgroup already sent, and stop.
    // SAFETY: plain helper call; the task is current in the exec tracepoint.
    let id = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: the value is not kept.
    if unsafe { CGROUP_NAMED.get(id) }.is_some() {
        return Ok(());
    }
    let task = Task(ctx.arg::<u64>(0));
    let tgid = task.tgid()?;
    // The exec and exit records' own filter (without counting what they count): the path
    // of a cgroup goes only with a process that is reported.
    let Some(session) = traced(tgid) else {
        return Ok(());
    };
    let active = filter::active();
    if active != 0 && !filter::passes(active) {
        return Ok(());
    }
    let ev = CGROUP_SCRATCH.get_ptr_mut(0).ok_or(-1)?;
    // SAFETY: per-CPU scratch value, exclusively ours while this program runs on this CPU.
    let ev = unsafe { &mut *ev };
    ev.hdr = header(kind::CGROUP_NAME, session, &task, tgid, task.pid()?)?;
    ev.cgroup_id = id;
    ev.flags = 0;
    let cset = read::<u64>(task.0, conf!(off.task_cgroups))?;
    let cgrp = read::<u64>(cset, conf!(off.css_set_dfl_cgrp))?;
    let mut kn = read::<u64>(cgrp, conf!(off.cgroup_kn))?;
    let mut depth = 0u32;
    for i in 0..CGROUP_NAME_DEPTH {
        let parent = read::<u64>(kn, conf!(off.kernfs_parent))?;
        // The root's name is not part of the path.
        if parent == 0 {
            kn = 0;
            break;
        }
        let name = read::<u64>(kn, conf!(off.kernfs_name))?;
        // SAFETY: a kernel string, bounded by the buffer.
        match unsafe { bpf_probe_read_kernel_str_bytes(name as *const u8, &mut ev.names[i]) } {
            Ok(s) if s.len() + 1 >= CGROUP_NAME_LEN => ev.flags |= flags::CGROUP_NAME_CUT,
            Ok(_) => {}
            Err(e) => {
                count(session, stat::READ_FAIL);
                return Err(e);
            }
        }
        depth += 1;
        kn = parent;
    }
    if kn != 0 && read::<u64>(kn, conf!(off.kernfs_parent))? != 0 {
        ev.flags |= flags::CGROUP_NAME_DEEPER;
    }
    ev.depth = depth;
    // Marked sent only once the path is whole: a failed read tries again at the next exec.
    let _ = CGROUP_NAMED.insert(id, 1, 0);
    output(ev, session);
    Ok(())
}
