//! fentry on `exit_mm_release(task, mm)`: exit_mm() calls it before it detaches and drops the
//! mm. On kernels whose sched_process_exit fires after exit_mm() (before 6.16), this is where
//! an exiting thread learns whether it is the last one, and the last reads the final image's
//! memory figures. Both wait in [`EXIT_MEM`] for the same thread's exit record (exit.rs), which
//! then carries them as on newer kernels.

use aya_ebpf::programs::FEntryContext;
use spacetime_common::{stat, MemStats};

use crate::{
    conf, count, mem,
    task::{is_traced, read, Task},
    EXIT_MEM,
};

/// What exit_mm_release found for one exiting thread.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ExitMm {
    /// The final image's figures (last thread only, when read).
    pub mem: MemStats,
    /// Non-zero for the last thread of the process.
    pub last: u32,
    pub _pad: u32,
}

pub fn try_exit_mm_release(ctx: &FEntryContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let tgid = task.tgid()?;
    if !is_traced(tgid) {
        return Ok(());
    }
    let mm = ctx.arg::<u64>(1);
    if mm == 0 {
        return Ok(());
    }
    // do_exit() decremented `signal->live` before exit_mm(): zero means the last thread. By the
    // time the tracepoint fires, later, a thread that was not the last may see zero too (the
    // last one exited meanwhile), so the decision is taken here.
    let last = read::<i32>(task.signal()?, conf!(off.signal_live))? == 0;
    let mut stash = ExitMm {
        mem: MemStats::default(),
        last: last as u32,
        _pad: 0,
    };
    if last {
        // A failed read leaves the figures invalid; the decision still counts.
        stash.mem = mem::read_mm(task.0, mm).unwrap_or_default();
    }
    if EXIT_MEM.insert(task.pid()?, stash, 0).is_err() {
        count(stat::READ_FAIL);
    }
    Ok(())
}

/// What [`try_exit_mm_release`] stashed for thread `pid`, if anything; [`forget`] it after use.
#[inline(always)]
pub fn get(pid: u32) -> Option<&'static ExitMm> {
    // SAFETY: only this thread's exit uses the entry; it is removed after that.
    unsafe { EXIT_MEM.get(pid) }
}

/// Removes thread `pid`'s entry.
#[inline(always)]
pub fn forget(pid: u32) {
    let _ = EXIT_MEM.remove(pid);
}
