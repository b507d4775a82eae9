//! sched_process_fork(parent, child): a traced process created a task. A new process joins
//! the traced tree here, in the kernel, before it can run.

use aya_ebpf::programs::RawTracePointContext;
use aya_log_ebpf::warn;
use spacetime_common::{flags, kind, mode, stat, ForkEvent};

use crate::{
    conf, count, filter, output, pidns, rss,
    task::{header, Task},
    TRACKED,
};

pub fn try_fork(ctx: &RawTracePointContext) -> Result<(), i32> {
    let parent = Task(ctx.arg::<u64>(0));
    let child = Task(ctx.arg::<u64>(1));
    let ptgid = parent.tgid()?;
    if !filter::wanted(ptgid) {
        return Ok(());
    }
    // Every read that can fail comes before the child joins TRACKED: a child tracked without
    // its fork record would be a process nobody knows about.
    let child_tgid = child.tgid()?;
    let child_start_ns = child.start_ns()?;
    let child_pid = child.pid()?;
    let mut hdr = header(kind::FORK, &parent, ptgid, parent.pid()?)?;
    // The new process's pid in spacetime's PID namespace (0 on the host, or for a thread).
    let child_ns_tgid = if child_tgid == ptgid {
        0
    } else {
        pidns::ns_tgid(&child)
    };
    if child_tgid == ptgid {
        hdr.flags |= flags::FORK_THREAD;
    } else {
        let mm = child.mm()?;
        if mm != 0 && mm == parent.mm()? {
            hdr.flags |= flags::FORK_SHARED_MM;
        }
        if conf!(mode) == mode::TREE && TRACKED.insert(child_tgid, 0, 0).is_err() {
            count(stat::TRACK_FULL);
            warn!(
                ctx,
                "tracking map full: process {} is not traced", child_tgid
            );
        }
        if hdr.flags & flags::FORK_SHARED_MM == 0 {
            // A failure (counted) leaves the child's RSS unfollowed, not the child untraced.
            let _ = rss::follow(child.0, mm, child_tgid, child_start_ns);
        }
    }
    let ev = ForkEvent {
        hdr,
        child_pid,
        child_tgid,
        child_start_ns,
        child_ns_tgid,
        _pad: 0,
    };
    output(&ev);
    Ok(())
}
