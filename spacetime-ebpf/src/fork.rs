//! sched_process_fork(parent, child): a traced process created a task. A new process joins
//! the traced tree here, in the kernel, before it can run.

use aya_ebpf::programs::RawTracePointContext;
use spacetime_common::{flags, kind, mode, stat, ForkEvent, Tracked};

use crate::{
    conf, count, filter, output, pidns, rss, session,
    task::{current_ids, header, Task},
    TRACKED,
};

pub fn try_fork<const FETCH: bool>(ctx: &RawTracePointContext) -> Result<(), i32> {
    let parent = Task(ctx.arg::<u64>(0));
    let child = Task(ctx.arg::<u64>(1));
    // The parent is the current task.
    let (ppid, ptgid) = current_ids();
    // The parent's session, from the lookup that tells whether it is traced: the child's.
    let Some(sess) = filter::wanted(ptgid) else {
        return clear_stale(&child, ptgid);
    };
    // Every read that can fail comes before the child joins TRACKED: a child tracked without
    // its fork record would be a process nobody knows about.
    let (child_pid, child_tgid) = child.pid_tgid()?;
    let child_start_ns = child.start_ns()?;
    let mut hdr = header(kind::FORK, sess, &parent, ptgid, ppid)?;
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
        if conf!(mode) == mode::TREE && !track_child::<FETCH>(child_tgid, sess) {
            hdr.flags |= flags::FORK_UNTRACKED;
            // An entry left for this pid (a stale one) must not trace the child either.
            forget_stale(child_tgid);
        }
        if hdr.flags & (flags::FORK_SHARED_MM | flags::FORK_UNTRACKED) == 0 {
            // A failure (counted) leaves the child's RSS unfollowed, not the child untraced.
            let how = rss::Start::New;
            let _ = rss::follow::<FETCH>(how, child.0, mm, child_tgid, child_start_ns, sess);
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
    output(&ev, sess);
    Ok(())
}

/// A new process whose parent is not traced: an entry for its pid can only be stale (its
/// process gone without its exit seen, or a pid tracked by userspace that was no live
/// process), and would make the newcomer traced in a session that is not its own. One lookup
/// per fork of an untraced process (a thread makes no new process: nothing to do).
#[inline(always)]
fn clear_stale(child: &Task, ptgid: u32) -> Result<(), i32> {
    if conf!(mode) != mode::TREE {
        return Ok(());
    }
    let child_tgid = child.tgid()?;
    if child_tgid != ptgid {
        forget_stale(child_tgid);
    }
    Ok(())
}

/// Removes `tgid`'s entry from `TRACKED` if there is one, counted as its session's
/// `STALE_CLEARED`. The lookup comes first: a removal takes the bucket's lock, a miss does
/// not. An entry of an ended process traces nothing and waits for that process's release
/// record (the pid is free again one grace period before it, see reap.rs): it stays.
#[inline(always)]
fn forget_stale(tgid: u32) {
    // SAFETY: the value is copied out.
    let sess = match unsafe { TRACKED.get(tgid) } {
        Some(t) if t.ended == 0 => t.session as u16,
        _ => return,
    };
    if TRACKED.remove(tgid).is_ok() {
        count(sess, stat::STALE_CLEARED);
    }
}

/// Tracks a new process in its parent's session, if the session's limit and the map allow:
/// whether it is tracked. A refusal is counted for the session, not logged: a log call here
/// doubled the instructions the verifier walks for this program (4.8 k of 8.4 k).
#[inline(always)]
fn track_child<const FETCH: bool>(child_tgid: u32, sess: u16) -> bool {
    if !session::admit::<FETCH>(sess) {
        count(sess, stat::SESSION_LIMIT);
        return false;
    }
    let t = Tracked {
        mm: 0,
        session: sess as u32,
        _pad: 0,
        ended: 0,
    };
    if TRACKED.insert(child_tgid, t, 0).is_err() {
        session::release(sess);
        count(sess, stat::TRACK_FULL);
        return false;
    }
    true
}
