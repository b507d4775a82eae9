//! perf_event (software CPU clock, ~100 Hz on every CPU): the tick interrupted a task; if it
//! is a traced thread, its cumulative run time (`se.sum_exec_runtime`) goes to userspace, a
//! point of CPU over time. An untraced task (or the idle one) costs one hash lookup.

use aya_ebpf::{helpers::bpf_get_current_task, programs::PerfEventContext};
use spacetime_common::{kind, TickEvent};

use crate::{
    conf, output,
    task::{current_ids, header, read, traced, Task},
};

pub fn try_cpu_tick(_ctx: &PerfEventContext) -> Result<(), i32> {
    let (pid, tgid) = current_ids();
    if tgid == 0 {
        return Ok(());
    }
    let Some(sess) = traced(tgid) else {
        return Ok(());
    };
    // SAFETY: plain helper call; the pointer is only read through bpf_probe_read_kernel.
    let task = Task(unsafe { bpf_get_current_task() });
    // A failed read is counted (READ_FAIL, in `read`) and sends nothing: the thread's next
    // point, or its exit, carries its run time.
    let runtime_ns = read::<u64>(task.0, conf!(off.task_sum_exec_runtime))?;
    let ev = TickEvent {
        hdr: header(kind::TICK, sess, &task, tgid, pid)?,
        runtime_ns,
    };
    output(&ev, sess);
    Ok(())
}
