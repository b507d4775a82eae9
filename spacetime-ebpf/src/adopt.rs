//! `adopt_mms`: a task iterator userspace runs once after `trace -p` has tracked the running
//! processes. A process that predates the attach had no fork or exec for the kernel to start
//! following its mm at; this starts it, with the counters read exactly as at a fork or exec,
//! so its RSS from the attach on (its first point even if it never changes again) is in its
//! series, the tree-wide sum and the tree's peak. Untracked tasks cost one hash lookup each,
//! once; `trace -- CMD` never loads it.

use core::ffi::c_void;

use crate::{
    conf, mem, rss,
    task::{read, Task},
    TRACKED,
};

pub fn try_adopt<const FETCH: bool>(ctx: *mut c_void) -> Result<(), i32> {
    // struct bpf_iter__task { struct bpf_iter_meta *meta; struct task_struct *task; }
    // SAFETY: the iterator's context; the task is null once, after the last task.
    let task = unsafe { *(ctx as *const u64).add(1) };
    if task == 0 {
        return Ok(());
    }
    // A plain number: the kernel reads below are at offsets only known at load.
    let task = Task(mem::launder(task).ok_or(-1)?);
    let tgid = task.tgid()?;
    // Tracked and not followed yet; the iterator visits every thread: the leader adopts.
    // SAFETY: the value is copied out.
    let session = match unsafe { TRACKED.get(tgid) } {
        Some(t) if t.mm == 0 && t.ended == 0 => t.session as u16,
        _ => return Ok(()),
    };
    if task.pid()? != tgid {
        return Ok(());
    }
    let start_ns = task.leader_start_ns()?;
    rss::follow::<FETCH>(
        rss::Start::Adopt,
        task.0,
        task.mm()?,
        tgid,
        start_ns,
        session,
    )?;
    // A process whose last thread began exiting meanwhile may have passed the point where
    // its exit stops following its mm (rss_exit, exit_mm_release) before the claim above:
    // stop it here (`forget` claims the mm once, whichever comes first). `live` drops to 0
    // before either point.
    if read::<i32>(task.signal()?, conf!(off.signal_live))? == 0 {
        rss::forget::<FETCH>(tgid);
    }
    Ok(())
}
