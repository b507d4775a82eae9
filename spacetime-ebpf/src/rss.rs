//! kmem:rss_stat(mm, member): an mm's RSS counter changed. For the traced processes this keeps
//! each mm's exact RSS, the tree-wide sum and its peak (with when it happened) in the kernel,
//! and sends RSS points at a bounded rate: at most one per process per `rss_interval_ns`. A
//! new maximum (of the mm or of the tree) the rate holds back is sent late, dated when it
//! happened: when growth stops, before a later point of the mm, or when following ends. An
//! untracked mm costs one hash lookup.

use aya_ebpf::{helpers::bpf_ktime_get_ns, programs::RawTracePointContext};
use spacetime_common::{
    flags, kind, mode, rss_layout, stat, switch, EventHeader, MmState, RssEvent, MAX_EXACT_CPUS,
};

use crate::{
    atomics, conf, count, exit_mm, mem, output,
    task::{current_ids, read, traced, Task},
    zero::zeroed,
    MM_STATE, SESSION_LIMITS, SWITCHES, TRACKED, TREE_RSS,
};

/// Index of `member` among the counters that make up RSS, if it is one of them.
#[inline(always)]
fn rss_slot(member: u32) -> Option<usize> {
    if member == conf!(off.rss_file_idx) {
        Some(0)
    } else if member == conf!(off.rss_anon_idx) {
        Some(1)
    } else if member == conf!(off.rss_shmem_idx) {
        Some(2)
    } else {
        None
    }
}

/// The exact value (pages) of RSS counter `member` of `mm`.
#[inline(always)]
pub fn counter_pages(mm: u64, member: u32) -> Result<i64, i32> {
    let base = mm + conf!(off.mm_rss_stat) as u64 + conf!(off.rss_stride) as u64 * member as u64;
    if conf!(rss_layout) == rss_layout::ATOMIC_ARRAY {
        return read::<i64>(base, 0);
    }
    let nr_cpus = conf!(nr_cpus);
    if nr_cpus == 0 || nr_cpus > MAX_EXACT_CPUS {
        return read::<i64>(base, conf!(off.pcpu_count));
    }
    let (mut v, counters) = mem::percpu_counter(base)?;
    for cpu in 0..MAX_EXACT_CPUS {
        if cpu >= nr_cpus {
            break;
        }
        let off = mem::cpu_offset(cpu).ok_or(-1)?;
        v += read::<i32>(counters.wrapping_add(off), 0)? as i64;
    }
    Ok(v)
}

/// Adds `delta` pages to the tree-wide RSS of `session`; returns the new sum and whether it
/// is a new peak (then recorded with its time and process). Without `FETCH` the peak is
/// raised by a read and a store: two CPUs raising it at once can leave the lower (the figure
/// is then approximate, and said so).
#[inline(always)]
fn tree_add<const FETCH: bool>(session: u32, delta: i64, now: u64, tgid: u32) -> (i64, bool) {
    let Some(t) = TREE_RSS.get_ptr_mut(session) else {
        return (0, false);
    };
    // SAFETY: fields of our own map value, updated with atomics (several CPUs at once).
    unsafe {
        let sum = atomics::add_and_read::<FETCH>(&raw mut (*t).rss_pages, delta);
        let peak = &raw mut (*t).peak_pages;
        // An aligned 64-bit load is atomic; BPF has no separate atomic load.
        let mut cur = core::ptr::read_volatile(peak);
        // Bounded: each failed exchange means another CPU raised the peak meanwhile.
        for _ in 0..4 {
            if sum <= cur {
                return (sum, false);
            }
            if !FETCH {
                core::ptr::write_volatile(peak, sum);
            } else if let Err(seen) = atomics::compare_exchange(peak, cur, sum) {
                cur = seen;
                continue;
            }
            (*t).peak_ts_ns = now;
            (*t).peak_tgid = tgid;
            return (sum, true);
        }
        (sum, false)
    }
}

/// Index of the anonymous pages in `MmState::rss_pages`.
const ANON: usize = 1;

fn send(st: &MmState, now: u64, tree_pages: i64, peak: bool) {
    let flags = if peak { flags::RSS_TREE_PEAK } else { 0 };
    let pages = (st.total_pages, st.rss_pages[ANON]);
    record(st, flags, now, pages, tree_pages, 0);
}

/// Sends a point: `(rss_pages, anon_pages)` at `ts_ns`, the tree's sum then.
fn record(st: &MmState, flags: u32, ts_ns: u64, pages: (i64, i64), tree_pages: i64, end_ns: u64) {
    let (rss_pages, anon_pages) = pages;
    let ev = RssEvent {
        hdr: EventHeader {
            kind: kind::RSS,
            session: st.session as u16,
            flags,
            ts_ns,
            tgid: st.tgid,
            pid: st.tgid,
            leader_start_ns: st.leader_start_ns,
        },
        rss_pages: rss_pages.max(0) as u64,
        tree_rss_pages: tree_pages.max(0) as u64,
        end_ns,
        anon_pages: anon_pages.max(0) as u64,
    };
    output(&ev, st.session as u16);
}

/// Sends the held-back point, if any, and forgets it.
#[inline(always)]
fn flush_held(st: &mut MmState) {
    if st.held_ns != 0 {
        let pages = (st.held_pages, st.held_anon_pages);
        record(
            st,
            flags::RSS_HELD,
            st.held_ns,
            pages,
            st.held_tree_pages,
            0,
        );
        st.sent_pages = st.held_pages;
        st.held_ns = 0;
    }
}

/// Without fetch atomics: the mm's three counters read again (each exact), so its total is
/// exact at every change whatever ran on other CPUs; what is added to `total_pages` (and so
/// to the tree's sum) is the difference from what it held. Two threads of one mm changing it
/// at once can both add from the same old total: the tree's sum is then off until the mm's
/// next change, which adds the difference back. Returns (delta, exact total): the caller
/// adds the delta to the tree's sum, then to `total_pages`.
#[inline(always)]
fn recount(mm: u64, st: &mut MmState) -> Result<(i64, i64), i32> {
    let file = counter_pages(mm, conf!(off.rss_file_idx))?;
    let anon = counter_pages(mm, conf!(off.rss_anon_idx))?;
    let shmem = counter_pages(mm, conf!(off.rss_shmem_idx))?;
    // SAFETY: aligned fields of our own map value; each store is whole.
    unsafe {
        core::ptr::write_volatile(&raw mut st.rss_pages, [file, anon, shmem]);
        let total = file + anon + shmem;
        let delta = total - core::ptr::read_volatile(&raw const st.total_pages);
        Ok((delta, total))
    }
}

pub fn try_rss_stat<const FETCH: bool>(ctx: &RawTracePointContext) -> Result<(), i32> {
    let mm = ctx.arg::<u64>(0);
    let Some(st) = MM_STATE.get_ptr_mut(mm) else {
        return Ok(());
    };
    let member = ctx.arg::<u64>(1) as u32;
    let Some(slot) = rss_slot(member) else {
        return Ok(());
    };
    let value = counter_pages(mm, member)?;
    // SAFETY: our own map value; concurrent updates of one mm go through the atomics.
    let st = unsafe { &mut *st };
    let (delta, counted) = if FETCH {
        // SAFETY: a valid pointer into that map value, swapped atomically.
        let old = unsafe { atomics::swap(&raw mut st.rss_pages[slot], value) };
        (value - old, 0)
    } else {
        recount(mm, st)?
    };
    if delta == 0 {
        return Ok(());
    }
    // The tree's sum takes the change before the mm's total and peak show it: a run's end
    // reads the mms, then the tree, so whatever of this mm it sees is in the tree's sum and
    // peak already (tree_add's add is sequentially consistent with fetch atomics, see
    // atomics.rs; before 5.12 x86 still keeps stores in order, arm64 does not promise it).
    // The other way round, a process growing at the end showed a peak above the tree's (the
    // emulated 6.1 guest, where a program runs long enough for the end's reads to fall inside).
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let (tree_pages, tree_peak) = tree_add::<FETCH>(st.session, delta, now, st.tgid);
    let total = if FETCH {
        // SAFETY: a valid pointer into that map value, added to atomically.
        unsafe { atomics::add_and_read::<FETCH>(&raw mut st.total_pages, delta) }
    } else {
        // SAFETY: as above; the add is a plain one before 5.12 (see `recount`).
        unsafe { atomics::add(&raw mut st.total_pages, delta) };
        counted
    };
    // The mm's own maximum: the exact peak of the image running on it (hiwater_rss is only
    // raised lazily, from the counters' approximate shared parts).
    let new_peak = total > st.peak_pages;
    if new_peak {
        st.peak_pages = total;
    }
    st.last_ns = now;
    st.last_tree_pages = tree_pages;
    // Points go at a bounded rate (a record per change would be one per page fault while
    // memory grows), but a maximum is only held back, never dropped: the held point goes out
    // when growth stops, before a later point would hide it, or when following ends. A newer
    // point covers the held one's value (this mm only grew since), not its time: growth that
    // stopped long before this change (a sleep at the peak, then a few pages at exit) would
    // show the value sent before the hold until now. So a held point goes first unless it is
    // the last moments' (continuous growth), or the tree's sum fell since (it may be the
    // tree's peak).
    let interval = conf!(rss_interval_ns) as u64;
    if now.wrapping_sub(st.last_sent_ns) >= interval {
        if st.held_tree_pages > tree_pages || now.wrapping_sub(st.held_ns) > interval >> 3 {
            flush_held(st);
        }
        st.held_ns = 0;
        st.last_sent_ns = now;
        st.sent_pages = total;
        send(st, now, tree_pages, tree_peak);
    } else if new_peak || tree_peak {
        if st.held_tree_pages > tree_pages {
            flush_held(st);
        }
        st.held_ns = now;
        st.held_pages = total;
        st.held_tree_pages = tree_pages;
        st.held_anon_pages = st.rss_pages[ANON];
    } else if delta < 0 {
        flush_held(st);
    }
    Ok(())
}

/// sched_process_exec: follow the new image's mm. A program of its own on the tracepoint, so
/// the verifier explores its CPU loop apart from the argv loop of the exec record.
pub fn try_exec<const FETCH: bool>(ctx: &RawTracePointContext) -> Result<(), i32> {
    if conf!(track_rss) == 0 {
        return Ok(());
    }
    let task = Task(ctx.arg::<u64>(0));
    // The task is the current one.
    let (_, tgid) = current_ids();
    let Some(session) = traced(tgid) else {
        return Ok(());
    };
    follow::<FETCH>(
        Start::Replace,
        task.0,
        task.mm()?,
        tgid,
        task.leader_start_ns()?,
        session,
    )
}

/// sched_process_exit, before the exit record: the last thread's exit ends the process's
/// mm, which stops being followed (where the tracepoint fires after exit_mm(), before 6.16,
/// exit_mm_release has already done it, while the mm was still the process's). The last thread is told as exit.rs tells it: the
/// tracepoint's `group_dead` (6.16+), else what exit_mm_release found, else `signal->live`.
pub fn try_exit<const FETCH: bool>(ctx: &RawTracePointContext) -> Result<(), i32> {
    if conf!(track_rss) == 0 {
        return Ok(());
    }
    let task = Task(ctx.arg::<u64>(0));
    // The task is the current one.
    let (pid, tgid) = current_ids();
    // SAFETY: the value is copied out. Untraced and unfollowed processes stop here.
    match unsafe { TRACKED.get(tgid) } {
        Some(t) if t.mm != 0 => {}
        _ => return Ok(()),
    }
    let last = if conf!(off.exit_tp_group_dead) != 0 {
        ctx.arg::<u64>(1) & 0xff != 0
    } else if let Some(s) = exit_mm::get(pid).filter(|_| task.mm() == Ok(0)) {
        s.last != 0
    } else {
        read::<i32>(task.signal()?, conf!(off.signal_live))? == 0
    };
    if last {
        forget::<FETCH>(tgid);
    }
    Ok(())
}

/// How following an mm starts: what the process's entry in TRACKED may already name.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// An exec: the mm of the image it replaced, if followed, is forgotten first.
    Replace,
    /// A fork: the child was tracked a moment ago and follows no mm yet.
    New,
    /// A process that predates the attach (adopt.rs): only if no mm of it is followed yet,
    /// as a fork or exec that got there first has the newer mm.
    Adopt,
}

/// Starts following `mm` of `task` for process (`tgid`, `leader_start_ns`) of `session`. Its
/// pages so far (an exec's stack, a fork's copied counters) come from one read.
#[inline(always)]
pub fn follow<const FETCH: bool>(
    how: Start,
    task: u64,
    mm: u64,
    tgid: u32,
    leader_start_ns: u64,
    session: u16,
) -> Result<(), i32> {
    start_following::<FETCH>(how, task, mm, (tgid, leader_start_ns, session))
}

/// Whether new mms are followed: `rss_stat` may be detached while the programs stay loaded
/// (then a followed mm's figures would go stale).
#[inline(always)]
fn rss_paused() -> bool {
    matches!(SWITCHES.get(switch::RSS_PAUSED), Some(&p) if p != 0)
}

#[inline(always)]
fn start_following<const FETCH: bool>(
    how: Start,
    task: u64,
    mm: u64,
    (tgid, leader_start_ns, session): (u32, u64, u16),
) -> Result<(), i32> {
    // Only a traced process (in TRACKED, whose value names its followed mm) is followed.
    if conf!(track_rss) == 0 || conf!(mode) != mode::TREE || mm == 0 || rss_paused() {
        return Ok(());
    }
    // A session that asked for no memory over time (an agent's client with a `time -f`
    // format): its mms cost rss_stat a lookup that misses, not a read and an update.
    if matches!(SESSION_LIMITS.get(session as u32), Some(l) if l.no_memory != 0) {
        return Ok(());
    }
    if how == Start::Replace {
        forget::<FETCH>(tgid);
    }
    // The new mm's first read must not take what `forget` stashed for the old one.
    mem::stash_clear();
    let mut mslot = core::mem::MaybeUninit::uninit();
    let m: &mut spacetime_common::MemStats = zeroed(&mut mslot);
    mem::read_mm(task, mm, m)?;
    let rss_pages = [
        m.rss_file_pages as i64,
        m.rss_anon_pages as i64,
        m.rss_shmem_pages as i64,
    ];
    let total_pages = rss_pages[0] + rss_pages[1] + rss_pages[2];
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let mut slot = core::mem::MaybeUninit::uninit();
    let st: &mut MmState = zeroed(&mut slot);
    st.tgid = tgid;
    st.session = session as u32;
    st.leader_start_ns = leader_start_ns;
    st.rss_pages = rss_pages;
    st.total_pages = total_pages;
    st.last_sent_ns = now;
    st.peak_pages = total_pages;
    st.since_ns = now;
    st.sent_pages = total_pages;
    st.last_ns = now;
    if how == Start::Adopt {
        return claim_unfollowed::<FETCH>(mm, st);
    }
    // Here the claim cannot be refused (the entry's mm is overwritten), so the pages join the
    // tree's sum first and the state goes into the map whole: no lookup after the insert
    // (taken back if the map or the entry is missing; a tree peak seen meanwhile had these
    // pages, which are the process's).
    let (tree_pages, peak) = tree_add::<FETCH>(session as u32, total_pages, now, tgid);
    st.last_tree_pages = tree_pages;
    // By reference: a copy of the record built in place would be a `memset` call again (see
    // zero.rs).
    #[allow(clippy::needless_borrows_for_generic_args)]
    let inserted = MM_STATE.insert(mm, &*st, 0);
    if inserted.is_err() {
        tree_add::<FETCH>(session as u32, -total_pages, now, tgid);
        count(session, stat::TRACK_FULL);
        return Ok(());
    }
    // The process's entry in TRACKED names the mm followed: one map instead of a second one
    // keyed by tgid. No entry: the process is not tracked (a full map, counted by fork).
    let Some(entry) = TRACKED.get_ptr_mut(tgid) else {
        let _ = MM_STATE.remove(mm);
        tree_add::<FETCH>(session as u32, -total_pages, now, tgid);
        return Ok(());
    };
    // An aligned store is atomic; `forget` claims the value.
    // SAFETY: an aligned u64 of our own map value.
    unsafe { core::ptr::write_volatile(&raw mut (*entry).mm, mm) };
    send(st, now, tree_pages, peak);
    Ok(())
}

/// Follows `mm` with state `st` for a process that predates the attach, unless an mm of it
/// is followed already: the claim comes before the pages join the tree's sum.
#[inline(always)]
fn claim_unfollowed<const FETCH: bool>(mm: u64, st: &mut MmState) -> Result<(), i32> {
    // BPF_NOEXIST: an mm already there is followed for someone (a racing exec).
    #[allow(clippy::needless_borrows_for_generic_args)]
    if MM_STATE.insert(mm, &*st, 1).is_err() {
        return Ok(());
    }
    let Some(entry) = TRACKED.get_ptr_mut(st.tgid) else {
        let _ = MM_STATE.remove(mm);
        return Ok(());
    };
    // SAFETY: an aligned u64 of our own map value.
    let followed = unsafe { &raw mut (*entry).mm };
    // The claim: an exec or fork that started following meanwhile keeps its mm. Without
    // fetch atomics a read then a store: an exec in between (one racing `trace -p`'s attach)
    // would lose its mm to the older one.
    // SAFETY: as above.
    let ok = unsafe {
        match FETCH {
            true => atomics::claim_u64(followed, mm),
            false if core::ptr::read_volatile(followed) == 0 => {
                core::ptr::write_volatile(followed, mm);
                true
            }
            false => false,
        }
    };
    if !ok {
        let _ = MM_STATE.remove(mm);
        return Ok(());
    }
    let now = st.last_ns;
    let (tree_pages, peak) = tree_add::<FETCH>(st.session, st.total_pages, now, st.tgid);
    if let Some(p) = MM_STATE.get_ptr_mut(mm) {
        // SAFETY: our own map value.
        unsafe { (*p).last_tree_pages = tree_pages };
    }
    send(st, now, tree_pages, peak);
    Ok(())
}

/// Stops following the mm of `tgid` (exec replaced it, or the process exited): a point held
/// back and the last value go out if they have not, then its pages leave the tree-wide sum.
#[inline(always)]
pub fn forget<const FETCH: bool>(tgid: u32) {
    // Whatever an earlier event left is not this mm's (see `mem::MmStash`).
    mem::stash_clear();
    let Some(slot) = TRACKED.get_ptr_mut(tgid) else {
        return;
    };
    // Taking the mm out of the process's entry is the claim: two threads that both see
    // themselves last (before 6.16) take its pages out of the tree's sum once. Without fetch
    // atomics the claim is the removal from MM_STATE below (atomic in the kernel).
    // SAFETY: an aligned u64 of our own map value.
    let mm = unsafe {
        let followed = &raw mut (*slot).mm;
        if FETCH {
            atomics::swap_u64(followed, 0)
        } else {
            let mm = core::ptr::read_volatile(followed);
            core::ptr::write_volatile(followed, 0);
            mm
        }
    };
    if mm == 0 {
        return;
    }
    let Some(st) = MM_STATE.get_ptr_mut(mm) else {
        return;
    };
    // The value stays readable after its removal while this program runs: a preallocated
    // map's freed element goes to this CPU's free list, which only this CPU takes from
    // (another only when its own is empty: a full map).
    if !FETCH && MM_STATE.remove(mm).is_err() {
        return;
    }
    // SAFETY: our own map value, about to be removed (or just removed, see above).
    let st = unsafe { &mut *st };
    flush_held(st);
    if st.total_pages != st.sent_pages {
        let pages = (st.total_pages, st.rss_pages[ANON]);
        record(
            st,
            flags::RSS_HELD,
            st.last_ns,
            pages,
            st.last_tree_pages,
            0,
        );
    }
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_ns() };
    let (tree_pages, _) = tree_add::<FETCH>(st.session, -st.total_pages, now, tgid);
    // Dated by when following began: userspace gives it to the image running then.
    let pages = (st.peak_pages, 0);
    record(st, flags::RSS_MM_PEAK, st.since_ns, pages, tree_pages, now);
    // Exact while rss_stat is attached: every change of the counters ran it. (Paused, the
    // agent follows no session's mms: their sessions ended and took them out.)
    if !rss_paused() {
        mem::stash(mm, &st.rss_pages);
    }
    if FETCH {
        let _ = MM_STATE.remove(mm);
    }
}
