//! fentry on `exit_mm_release(task, mm)`: exit_mm() calls it before it detaches and drops the
//! mm. On kernels whose sched_process_exit fires after exit_mm() (before 6.16), this is where
//! an exiting thread learns whether it is the last one, and the last reads the final image's
//! memory figures. Both wait in [`EXIT_MEM`] for the same thread's exit record (exit.rs), which
//! then carries them as on newer kernels.

use core::mem::MaybeUninit;

use aya_ebpf::programs::FEntryContext;
use spacetime_common::{stat, MemStats};

use crate::{
    conf, count, mem, rss,
    task::{read, traced, Task},
    zero::zeroed,
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
    /// Non-zero when `last` is the kernel's own `group_dead` (taskstats_exit), not a reading
    /// of `signal->live`.
    pub known: u32,
}

pub fn try_exit_mm_release<const FETCH: bool>(ctx: &FEntryContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let tgid = task.tgid()?;
    let Some(session) = traced(tgid) else {
        return Ok(());
    };
    let mm = ctx.arg::<u64>(1);
    if mm == 0 {
        return Ok(());
    }
    let pid = task.pid()?;
    // The kernel's own answer, when taskstats_exit (called just before) passed it on. Else
    // `signal->live`, which do_exit() decremented before exit_mm(): zero means the last
    // thread, but a thread that is not the last reads zero too once the last one has passed.
    let known = get(pid).filter(|s| s.known != 0).map(|s| s.last != 0);
    let last = match known {
        Some(l) => l,
        None => read::<i32>(task.signal()?, conf!(off.signal_live))? == 0,
    };
    let mut slot = MaybeUninit::uninit();
    let stash: &mut ExitMm = zeroed(&mut slot);
    stash.last = last as u32;
    stash.known = known.is_some() as u32;
    if last {
        // A failed read leaves the figures invalid; the decision still counts.
        let _ = mem::read_mm(task.0, mm, &mut stash.mem);
    }
    if EXIT_MEM.insert(pid, *stash, 0).is_err() {
        count(session, stat::READ_FAIL);
    }
    // The mm is released right after: following its RSS ends while the address is still its
    // own (a new mm may get it once freed).
    if last {
        rss::forget::<FETCH>(tgid);
    }
    Ok(())
}

/// fentry on `taskstats_exit(tsk, group_dead)`: do_exit() passes the kernel's own "last
/// thread" flag (the result of `atomic_dec_and_test(&signal->live)`), before exit_mm(). On
/// kernels whose exit tracepoint lacks it (before 6.16) this is the exact answer.
pub fn try_taskstats_exit(ctx: &FEntryContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let tgid = task.tgid()?;
    let Some(session) = traced(tgid) else {
        return Ok(());
    };
    let group_dead = ctx.arg::<u64>(1) as u32 != 0;
    let mut slot = MaybeUninit::uninit();
    let stash: &mut ExitMm = zeroed(&mut slot);
    stash.last = group_dead as u32;
    stash.known = 1;
    if EXIT_MEM.insert(task.pid()?, *stash, 0).is_err() {
        count(session, stat::READ_FAIL);
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
