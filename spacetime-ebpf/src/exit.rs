//! sched_process_exit(task): a traced task exits. The last thread's exit ends the process: its
//! final image's memory figures are read here, while the mm is still attached (the tracepoint
//! fires before exit_mm() on 6.16+); on older kernels, which have already dropped it, they come
//! from exit_mm_release (exit_mm.rs).

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_uid_gid, bpf_ktime_get_ns, bpf_probe_read_kernel,
    },
    programs::RawTracePointContext,
};
use spacetime_common::{flags, kind, mode, stat, ExitEvent, Reaping, Tracked, TASK_COMM_LEN};

use crate::{
    atomics, conf, count, exit_mm, filter, mem, output, reap, session,
    task::{current_ids, Btf, Kernel, Task},
    zero, EXITED, EXIT_SCRATCH, TRACKED,
};

const EEXIST: i32 = 17;

pub fn try_exit<const FETCH: bool>(ctx: &RawTracePointContext) -> Result<(), i32> {
    // The record is built in per-CPU scratch memory, not on the stack: the verifier tracks
    // no contents of map memory, so paths that filled different fields merge instead of
    // being verified apart. (Slot 0 of a per-CPU array always exists.)
    let ev = EXIT_SCRATCH.get_ptr_mut(0).ok_or(-1)?;
    let cur = Btf::current(ctx.arg::<u64>(0));
    let (mm, bad) = cur.ptr(conf!(off.task_mm));
    let bad = bad != 0;
    // Before 6.16 the tracepoint fires after exit_mm(): exit_mm_release (exit_mm.rs) decided
    // whether this is the last thread, and read the final figures, while the mm was attached.
    // From 6.16 nothing stashes anything, and the verifier drops this path (the condition is
    // read-only configuration): it would otherwise walk the rest of the program once more for
    // each of its outcomes.
    let tp_has_group_dead = conf!(off.exit_tp_group_dead) != 0;
    // The task is the current one.
    let (pid, tgid) = current_ids();
    let stash = match mm.addr() == 0 && !tp_has_group_dead {
        true => exit_mm::get(pid),
        false => None,
    };
    // The kernel's own "last thread" flag, where the tracepoint passes it (6.16+).
    let tp_group_dead = tp_has_group_dead.then(|| ctx.arg::<u64>(1) & 0xff != 0);
    // SAFETY: per-CPU scratch value, exclusively ours while this program runs on this CPU.
    let r = exit::<FETCH>(
        unsafe { &mut *ev },
        cur,
        (pid, tgid),
        mm,
        stash,
        tp_group_dead,
        bad,
    );
    if stash.is_some() {
        // Whatever happened, no entry outlives its thread.
        exit_mm::forget(pid);
    }
    // rss_exit's counters for this exit's read, if it did not take them (see mem::MmStash).
    mem::stash_clear();
    r
}

#[inline(always)]
fn exit<const FETCH: bool>(
    ev: &mut ExitEvent,
    cur: Btf,
    (pid, tgid): (u32, u32),
    mm: Btf,
    stash: Option<&exit_mm::ExitMm>,
    tp_group_dead: Option<bool>,
    bad: bool,
) -> Result<(), i32> {
    // Kernel-side filter (filter.rs): a filtered process's exits still go, as bare markers,
    // so userspace forgets it even if its uid or cgroup changed since it was let in.
    let (entry, sess) = traced_entry(tgid);
    let tracked = sess.is_some();
    if !tracked && !filter::tree_filter() {
        return Ok(());
    }
    let sess = sess.unwrap_or(0);
    let filtered = !tracked || (filter::active() != 0 && !filter::passes(filter::active()));
    // Passed the filter, but its watcher could not ptrace it now: a marker all the same.
    let task = &Task(cur.addr());
    let hidden = !filtered && filter::hidden(task, mm.addr());
    // From here on every path sends the record and cleans up: a failed read leaves 0 and
    // flags the record (`err` collects the helpers' results, see `read_or_zero`).
    let mut err: i64 = if bad { -1 } else { 0 };
    let (signal, e) = cur.ptr(conf!(off.task_signal));
    err |= e;
    let (leader, e) = cur.ptr(conf!(off.task_group_leader));
    err |= e;
    let mut leader_start = 0u64;
    err |= leader.field(&mut leader_start, conf!(off.task_start_time));
    let last = if let Some(g) = tp_group_dead {
        g
    } else if let Some(s) = stash {
        // Before 6.16: decided by exit_mm_release (exit_mm.rs).
        s.last != 0
    } else {
        // `signal->live` was decremented before the tracepoint: zero means this is the last
        // thread (two threads exiting at once may both read zero: see `claim_group_exit`).
        let mut live = 0i32;
        let r = signal.field(&mut live, conf!(off.signal_live));
        err |= r;
        r == 0 && live == 0
    };
    zero::zero(ev);
    ev.hdr.kind = kind::EXIT;
    ev.hdr.session = sess;
    // SAFETY: plain helper calls.
    ev.hdr.ts_ns = unsafe { bpf_ktime_get_ns() };
    ev.hdr.tgid = tgid;
    ev.hdr.leader_start_ns = leader_start;
    // What only `watch` reads (uid, cgroup, the namespace's pid, the group's CPU times): a
    // trace's exits skip it (read-only configuration: the verifier drops the code).
    let watch = conf!(mode) == mode::SYSTEM || filter::tree_filter();
    if watch {
        // SAFETY: plain helper call.
        ev.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    }
    ev.hdr.pid = pid;
    if hidden {
        // Nothing of it but the header: not even its name.
        ev.cgroup_id = 0;
        ev.hdr.flags = flags::EXIT_FILTERED | flags::EXIT_HIDDEN;
        if last {
            ev.hdr.flags |= flags::EXIT_GROUP_DEAD;
        }
        output(ev, sess);
        return Ok(());
    }
    zero::current_comm(&mut ev.comm);
    if filtered {
        // A marker: userspace reads its header only. The same record as below, not a second
        // one (two would not fit 6.1's 512-byte stack).
        ev.hdr.flags = flags::EXIT_FILTERED;
        if last {
            ev.hdr.flags |= flags::EXIT_GROUP_DEAD;
        }
        output(ev, sess);
        return Ok(());
    }
    let group_dead = last
        && claim_group_exit::<FETCH>(entry, tgid, leader_start, sess, || {
            ends_alone(task, leader.addr(), signal, tp_group_dead.is_some())
        });
    if !cur.loads() && conf!(off.task_stime) == conf!(off.task_utime) + 8 {
        // Adjacent in every task_struct so far: one helper call (into no zeroed buffer, which
        // the compiler would clear with a memset call, see zero.rs); loads go one by one.
        let at = (task.0 + conf!(off.task_utime) as u64) as *const [u64; 2];
        // SAFETY: bpf_probe_read_kernel checks the address.
        match unsafe { bpf_probe_read_kernel(at) } {
            Ok([u, s]) => (ev.utime_ns, ev.stime_ns) = (u, s),
            Err(_) => err = -1,
        }
    } else {
        err |= cur.field(&mut ev.utime_ns, conf!(off.task_utime));
        err |= cur.field(&mut ev.stime_ns, conf!(off.task_stime));
    }
    err |= cur.field(&mut ev.runtime_ns, conf!(off.task_sum_exec_runtime));
    err |= cur.field(&mut ev.exit_code, conf!(off.task_exit_code));
    if conf!(off.task_min_flt) != 0 {
        // Valid unless the record says a read failed (no branch on the result, as above).
        err |= cur.field(&mut ev.min_flt, conf!(off.task_min_flt));
        ev.hdr.flags |= flags::EXIT_MIN_FLT;
    }
    if watch {
        let ids = bpf_get_current_uid_gid();
        ev.uid = ids as u32;
        ev.gid = (ids >> 32) as u32;
        if leader.addr() != 0 {
            ns_tgid(leader, ev);
        }
    }
    if group_dead {
        ev.hdr.flags |= flags::EXIT_GROUP_DEAD;
        err |= group_fields(signal, task, leader, ev, watch);
        if mm.addr() != 0 {
            if mem::read_final_mm(task.0, mm, &mut ev.mem).is_err() {
                err = -1;
            }
        } else if let Some(s) = stash {
            zero::copy(&mut ev.mem, &s.mem);
        }
        // The process's RSS stopped being followed just before, in rss_exit (rss.rs).
    }
    if err != 0 {
        ev.hdr.flags |= flags::EXIT_READ_FAILED;
        count(sess, stat::READ_FAIL);
    }
    output(ev, sess);
    Ok(())
}

/// The exiting process's session if it is traced, and in tree mode its entry, which the claim
/// of its group exit marks (one lookup for both). An entry whose exit was seen traces nothing.
#[inline(always)]
fn traced_entry(tgid: u32) -> (Option<*mut Tracked>, Option<u16>) {
    if conf!(mode) == mode::SYSTEM {
        return (None, Some(0));
    }
    // SAFETY: read through a pointer the lookup checked; `ended` changes only by an aligned
    // compare-and-exchange.
    let entry = TRACKED
        .get_ptr_mut(tgid)
        .filter(|&t| unsafe { (*t).ended } == 0);
    // SAFETY: as above; the session never changes.
    (entry, entry.map(|t| unsafe { (*t).session } as u16))
}

/// Whether this exit is the process's one group exit. Before 6.16 two threads exiting at once
/// can both pass the last-thread test; the first to claim the process wins. Tree mode: marking
/// its entry `ended` is the claim (`end_tracked`), its session's slot is given back, and the
/// entry waits for the final CPU figures (reap.rs). System mode: inserting into `EXITED` is
/// the claim; an entry of an earlier process with the same pid (whose free was not seen) is
/// replaced. A process that ends `alone` (called in system mode only) needs no claim, and its
/// release record no entry.
#[inline(always)]
fn claim_group_exit<const FETCH: bool>(
    entry: Option<*mut Tracked>,
    tgid: u32,
    leader_start: u64,
    sess: u16,
    alone: impl FnOnce() -> bool,
) -> bool {
    // Kernels where reap.rs does not run (no sched_process_free) would never empty the maps.
    let reaps = conf!(off.signal_prev_utime) != 0;
    if conf!(mode) == mode::TREE {
        let Some(entry) = entry else {
            return false;
        };
        if !end_tracked::<FETCH>(entry, tgid, leader_start, sess, reaps) {
            return false;
        }
        session::release(sess);
        return true;
    }
    if !reaps || alone() {
        return true;
    }
    let waiting = Reaping {
        leader_start_ns: leader_start,
        session: sess as u32,
        _pad: 0,
    };
    match EXITED.insert(tgid, waiting, BPF_NOEXIST as u64) {
        Ok(()) => true,
        Err(e) if e == -EEXIST => {
            // SAFETY: the value is copied out.
            match unsafe { EXITED.get(tgid) } {
                Some(s) if s.leader_start_ns == leader_start => false,
                _ => {
                    let _ = EXITED.insert(tgid, waiting, 0);
                    true
                }
            }
        }
        // Map full: no duplicate detection for this one, and no final figures.
        Err(_) => {
            count(sess, stat::REAP_FULL);
            true
        }
    }
}

/// Whether the process ends with its leader alone, no other thread left to release, and its
/// release record needs no entry (reap.rs, `unclaimed`). Only where the exit knows for sure
/// that it is the last (6.16+'s tracepoint says so; before, two threads exiting at once can
/// both read themselves last, and the entry is what tells them apart). Nothing can add a
/// thread to a process whose last thread exits.
#[inline(always)]
fn ends_alone(task: &Task, leader: u64, signal: Btf, exact_last: bool) -> bool {
    if !exact_last || !reap::unclaimed() || leader != task.0 {
        return false;
    }
    if conf!(off.signal_nr_threads) == 0 {
        return false;
    }
    let mut threads = 0i32;
    signal.field(&mut threads, conf!(off.signal_nr_threads)) == 0 && threads == 1
}

/// Marks the tree-mode process `tgid`'s entry ended (its leader started at `leader_start`):
/// whether this call did, the claim of its group exit. With fetch atomics, a
/// compare-and-exchange on the entry in place. Without (before 5.12), the entry's removal
/// (atomic in the kernel) claims, and an ended entry takes its place: a full map then only
/// costs the process its release record (it keeps its exit figures), counted.
#[inline(always)]
fn end_tracked<const FETCH: bool>(
    entry: *mut Tracked,
    tgid: u32,
    leader_start: u64,
    sess: u16,
    reaps: bool,
) -> bool {
    let mark = Tracked::ended_mark(leader_start);
    if !reaps {
        // No release record will ever take an ended entry away.
        return TRACKED.remove(tgid).is_ok();
    }
    if FETCH {
        // SAFETY: an aligned u64 of our own map value (the lookup checked the pointer).
        if !unsafe { atomics::claim_u64(&raw mut (*entry).ended, mark) } {
            return false;
        }
    } else {
        if TRACKED.remove(tgid).is_err() {
            return false;
        }
        let ended = Tracked {
            mm: 0,
            session: sess as u32,
            _pad: 0,
            ended: mark,
        };
        // BPF_NOEXIST: the pid is the zombie's until its release, so nothing else can have
        // taken it meanwhile; a full map is the one failure.
        if TRACKED.insert(tgid, ended, BPF_NOEXIST as u64).is_err() {
            count(sess, stat::REAP_FULL);
            return true;
        }
    }
    session::ended(sess, 1);
    true
}

/// The process's id in its own PID namespace: `leader->thread_pid->numbers[level].nr`.
#[inline(always)]
fn ns_tgid(leader: Btf, ev: &mut ExitEvent) {
    if conf!(off.task_thread_pid) == 0 {
        return;
    }
    let (pid, e) = leader.ptr(conf!(off.task_thread_pid));
    if e != 0 || pid.addr() == 0 {
        return;
    }
    let Ok(level) = pid.get::<u32>(conf!(off.pid_level)) else {
        return;
    };
    // MAX_PID_NS_LEVEL is 32.
    if level > 32 {
        return;
    }
    if level == 0 {
        // The initial namespace's number is the tgid itself: one dependent read fewer.
        ev.ns_tgid = ev.hdr.tgid;
        ev.ns_level = 0;
        return;
    }
    let at = conf!(off.pid_numbers) as u64 + level as u64 * conf!(off.upid_size) as u64;
    // A variable index: the helper's read, not a load.
    if let Ok(nr) = pid.addr().get::<u32>(at as u32) {
        ev.ns_tgid = nr;
        ev.ns_level = level;
    }
}

/// The process-wide fields of a group exit: exit code, maxrss, the leader's comm, and for
/// `watch` the CPU times. Returns the reads' results ORed (see `read_or_zero`).
#[inline(always)]
fn group_fields(signal: Btf, task: &Task, leader: Btf, ev: &mut ExitEvent, watch: bool) -> i64 {
    let mut sflags = 0u32;
    let mut err = signal.field(&mut sflags, conf!(off.signal_flags));
    if sflags & conf!(off.signal_group_exit_flag) != 0 {
        err |= signal.field(&mut ev.exit_code, conf!(off.signal_group_exit_code));
        ev.hdr.flags |= flags::EXIT_GROUP_CODE;
    }
    err |= signal.field(&mut ev.signal_maxrss_pages, conf!(off.signal_maxrss));
    let comm_off = conf!(off.task_comm);
    let leader_at = leader.addr();
    if leader_at != 0 && leader_at != task.0 && comm_off != 0 {
        let at = (leader_at + comm_off as u64) as *const [u8; TASK_COMM_LEN];
        // SAFETY: bpf_probe_read_kernel checks the address.
        if let Ok(c) = unsafe { bpf_probe_read_kernel(at) } {
            ev.comm = c;
        }
    }
    if signal.addr() != 0 && watch {
        group_times(signal, task, leader, ev);
    }
    err
}

/// CPU time of the whole process at the last thread's exit: released threads (accumulated in
/// `signal`), this thread, and the leader if it exited earlier (it is released only when the
/// process is reaped).
#[inline(always)]
fn group_times(signal: Btf, task: &Task, leader: Btf, ev: &mut ExitEvent) {
    if conf!(off.signal_sum_sched_runtime) == 0 {
        return;
    }
    // One read, one check: checking the three results at once lets the compiler OR the
    // error codes together, and 6.1's verifier cannot follow that (it then sees a value that
    // was never read on the failure path).
    let Ok(u) = signal.get::<u64>(conf!(off.signal_utime)) else {
        return;
    };
    let Ok(s) = signal.get::<u64>(conf!(off.signal_stime)) else {
        return;
    };
    let Ok(r) = signal.get::<u64>(conf!(off.signal_sum_sched_runtime)) else {
        return;
    };
    let (mut u, mut s, mut r) = (u + ev.utime_ns, s + ev.stime_ns, r + ev.runtime_ns);
    if leader.addr() != 0 && leader.addr() != task.0 {
        if let Ok(lu) = leader.get::<u64>(conf!(off.task_utime)) {
            if let Ok(ls) = leader.get::<u64>(conf!(off.task_stime)) {
                if let Ok(lr) = leader.get::<u64>(conf!(off.task_sum_exec_runtime)) {
                    u += lu;
                    s += ls;
                    r += lr;
                }
            }
        }
    }
    ev.group_utime_ns = u;
    ev.group_stime_ns = s;
    ev.group_runtime_ns = r;
}
