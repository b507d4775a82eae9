//! sched_process_fork(parent, child): a traced process created a task. A new process joins
//! the traced tree here, in the kernel, before it can run.

use aya_ebpf::programs::RawTracePointContext;
use aya_log_ebpf::warn;
use spacetime_common::{flags, kind, mode, stat, ForkEvent};

use crate::{
    conf, count, output, pidns, rss,
    task::{header, is_traced, Task},
    TRACKED,
};

pub fn try_fork(ctx: &RawTracePointContext) -> Result<(), i32> {
    let parent = Task(ctx.arg::<u64>(0));
    let child = Task(ctx.arg::<u64>(1));
    let ptgid = parent.tgid()?;
    if !is_traced(ptgid) {
        return Ok(());
    }
    let child_tgid = child.tgid()?;
    let child_start_ns = child.start_ns()?;
    let mut f = 0;
    if child_tgid == ptgid {
        f |= flags::FORK_THREAD;
    } else {
        if conf!(mode) == mode::TREE && TRACKED.insert(child_tgid, 1, 0).is_err() {
            count(stat::TRACK_FULL);
            warn!(
                ctx,
                "tracking map full: process {} is not traced", child_tgid
            );
        }
        let mm = child.mm()?;
        if mm != 0 && mm == parent.mm()? {
            f |= flags::FORK_SHARED_MM;
        } else {
            rss::follow(child.0, mm, child_tgid, child_start_ns)?;
        }
    }
    let mut hdr = header(kind::FORK, &parent, ptgid, parent.pid()?)?;
    hdr.flags = f;
    let ev = ForkEvent {
        hdr,
        child_pid: child.pid()?,
        child_tgid,
        child_start_ns,
        child_ns_tgid: if f & flags::FORK_THREAD == 0 {
            pidns::ns_tgid(&child)
        } else {
            0
        },
        _pad: 0,
    };
    output(&ev);
    Ok(())
}
