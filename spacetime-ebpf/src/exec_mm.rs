//! fentry on `exec_mm_release(task, old_mm)`: exec_mmap() calls it with the image's old mm,
//! after exec's point of no return and before the mm is dropped. On kernels without the
//! sched_prepare_exec tracepoint (before 6.10) this is where an image replaced by exec has its
//! peak read.

use aya_ebpf::programs::FEntryContext;

use crate::{exec::image_end, rss, task::Task};

pub fn try_exec_mm_release<const FETCH: bool>(ctx: &FEntryContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let (pid, tgid) = task.pid_tgid()?;
    let Some(session) = crate::filter::wanted(tgid) else {
        return Ok(());
    };
    rss::forget::<FETCH>(tgid);
    let r = image_end(&task, tgid, pid, ctx.arg::<u64>(1), session);
    // Taken by image_end's read unless it failed first (see mem::MmStash).
    crate::mem::stash_clear();
    r
}
