//! sched_process_exit(task): a traced task exits. The last thread's exit ends the process: its
//! final image's memory figures are read here, while the mm is still attached (the tracepoint
//! fires before exit_mm() on 6.16+; older kernels have already dropped it).

use aya_ebpf::programs::RawTracePointContext;
use spacetime_common::{flags, kind, mode, ExitEvent};

use crate::{
    conf, mem, output,
    task::{header, is_traced, read, Task},
    TRACKED,
};

pub fn try_exit(ctx: &RawTracePointContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let tgid = task.tgid()?;
    if !is_traced(tgid) {
        return Ok(());
    }
    let signal = task.signal()?;
    // `signal->live` was decremented before the tracepoint: zero means this is the last thread.
    let group_dead = read::<i32>(signal, conf!(off.signal_live))? == 0;
    let mut ev = ExitEvent {
        hdr: header(kind::EXIT, &task, tgid, task.pid()?)?,
        utime_ns: read::<u64>(task.0, conf!(off.task_utime))?,
        stime_ns: read::<u64>(task.0, conf!(off.task_stime))?,
        runtime_ns: read::<u64>(task.0, conf!(off.task_sum_exec_runtime))?,
        exit_code: read::<u32>(task.0, conf!(off.task_exit_code))?,
        ..ExitEvent::default()
    };
    if group_dead {
        ev.hdr.flags |= flags::EXIT_GROUP_DEAD;
        let sflags = read::<u32>(signal, conf!(off.signal_flags))?;
        if sflags & conf!(off.signal_group_exit_flag) != 0 {
            ev.exit_code = read::<u32>(signal, conf!(off.signal_group_exit_code))?;
            ev.hdr.flags |= flags::EXIT_GROUP_CODE;
        }
        ev.signal_maxrss_pages = read::<u64>(signal, conf!(off.signal_maxrss))?;
        let mm = task.mm()?;
        if mm != 0 {
            ev.mem = mem::read_mm(task.0, mm)?;
        }
    }
    output(&ev);
    if group_dead && conf!(mode) == mode::TREE {
        let _ = TRACKED.remove(tgid);
    }
    Ok(())
}
