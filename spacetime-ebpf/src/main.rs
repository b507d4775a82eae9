//! spacetime's kernel programs: fork, exec and exit of the traced tree, with the memory
//! high-water marks of every program image, sent to userspace through one ring buffer.
//! Raw tracepoints everywhere; on kernels where the tracepoints miss the mm (6.1), fentry
//! programs on `exit_mm_release` and `exec_mm_release` read it instead (userspace picks).
//!
//! Entry points are thin: each delegates to a `try_*` function in the file named after its
//! probe. Kernel fields are read at offsets userspace resolved from the running kernel's BTF
//! and wrote into [`CONFIG`] before load.
#![no_std]
#![no_main]
// Atomic read-modify-write on map values (the bpfel target's core has no CAS-based atomics).
// The programs that use the fetching ones come twice: `NAME` and `NAME_nofetch`, the same
// code built without them for kernels before 5.12 (see `atomics`); userspace loads one.
#![feature(core_intrinsics)]
#![allow(internal_features)]

mod adopt;
mod atomics;
mod cgroup;
mod cpu_tick;
mod creds;
mod exec;
mod exec_mm;
mod exit;
mod exit_mm;
mod filter;
mod fork;
mod mem;
mod pidns;
mod reap;
mod rss;
mod session;
mod task;
mod zero;

use aya_ebpf::{
    bindings::{BPF_F_NO_PREALLOC, BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP},
    macros::{fentry, map, perf_event, raw_tracepoint},
    maps::{Array, HashMap, PerCpuArray, ProgramArray, RingBuf},
    programs::{FEntryContext, PerfEventContext, RawTracePointContext},
};
use aya_log_ebpf::debug;
use spacetime_common::{
    stat, switch, tail, ArgsEvent, Config, ExecEvent, ExitEvent, MmState, Reaping, SessionCount,
    SessionLimit, SessionStats, Tracked, TreeRss, MAX_EXACT_CPUS, MAX_SESSIONS,
};

/// Written by userspace before load (`EbpfLoader::override_global`); read-only afterwards.
#[no_mangle]
// SAFETY: Config is #[repr(C)] integers (spacetime-common): all-zero is a value.
static CONFIG: Config = unsafe { core::mem::zeroed() };

/// System mode: the one-shot of each process's group exit (exit.rs), until its final CPU
/// figures go (reap.rs): tgid → start time of the group leader. (Tree mode's processes wait
/// in their `TRACKED` entries.) Allocated on use: a failed insert skips the duplicate check
/// and costs the process its final figures (counted).
#[map]
static EXITED: HashMap<u32, Reaping> = HashMap::with_max_entries(16384, BPF_F_NO_PREALLOC);

/// Records to userspace. Userspace sizes it (4 MiB by default).
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(4 << 20, 0);

/// Processes (tgids) being traced, each with its session and the mm whose RSS is followed (0:
/// none; see `rss`). Userspace inserts the roots; forks add children into the parent's
/// session; the last thread's exit marks the entry ended (`Tracked::ended`, exit.rs), in
/// place: one map operation fewer per exit than moving it to a map of its own (0.6 µs of
/// sched_process_exit's 2.0 under make, measured), and the release record removes it
/// (reap.rs). Userspace sizes it.
#[map]
static TRACKED: HashMap<u32, Tracked> = HashMap::with_max_entries(65536, 0);

/// Each session's live tracked processes, counted with atomics (fork.rs, exit.rs).
#[map]
static SESSIONS: Array<SessionCount> = Array::with_max_entries(MAX_SESSIONS, 0);

/// Each session's process limit and the processes userspace tracked into it.
#[map]
static SESSION_LIMITS: Array<SessionLimit> = Array::with_max_entries(MAX_SESSIONS, 0);

/// Settings userspace changes while the programs are loaded ([`switch`]).
#[map]
static SWITCHES: Array<u32> = Array::with_max_entries(switch::COUNT, 0);

/// Kernels whose exit tracepoint fires after exit_mm() (before 6.16): whether an exiting
/// thread is the last, and the final image's figures, found by `exit_mm_release` and taken by
/// the same thread's exit record; keyed by thread id. An entry lives from exit_mm() to the
/// tracepoint, microseconds later. Userspace shrinks the map to one entry where it is unused.
#[map]
static EXIT_MEM: HashMap<u32, exit_mm::ExitMm> = HashMap::with_max_entries(1024, 0);

/// Per-CPU failure counters, one [`SessionStats`] per session.
#[map]
static STATS: PerCpuArray<SessionStats> = PerCpuArray::with_max_entries(MAX_SESSIONS, 0);

/// Per-CPU scratch space for records too large for the BPF stack.
#[map]
static EXEC_SCRATCH: PerCpuArray<ExecEvent> = PerCpuArray::with_max_entries(1, 0);
#[map]
static EXIT_SCRATCH: PerCpuArray<ExitEvent> = PerCpuArray::with_max_entries(1, 0);
#[map]
static ARGS_SCRATCH: PerCpuArray<ArgsEvent> = PerCpuArray::with_max_entries(1, 0);
/// Where an exec's argv chunks stand between the tail calls that send them (exec.rs).
#[map]
static ARGS_CARRY: PerCpuArray<exec::ArgsCarry> = PerCpuArray::with_max_entries(1, 0);

/// Programs reached by tail calls, never attached ([`tail`]); userspace fills the slots
/// before it attaches anything.
#[map]
static TAILS: ProgramArray = ProgramArray::with_max_entries(tail::COUNT, 0);

/// A per-CPU map used to learn each CPU's per-CPU area offset: the address of a CPU's element
/// minus the map's per-CPU base pointer. Slot 0 is the anchor, slot 1 launders pointers into
/// plain numbers (see `mem::launder`).
#[map]
static ANCHOR: PerCpuArray<u64> = PerCpuArray::with_max_entries(2, 0);

/// Each CPU's per-CPU area offset, learned once (see `mem::cpu_offset`).
#[map]
static CPU_OFFSETS: Array<u64> = Array::with_max_entries(MAX_EXACT_CPUS, 0);

/// The mm of each traced process, with its exact RSS (see `rss`). Userspace sizes it.
#[map]
static MM_STATE: HashMap<u64, MmState> = HashMap::with_max_entries(65536, 0);
/// An mm's exact counters from `rss::forget` to the read of its final figures (see
/// `mem::MmStash`).
#[map]
static MM_STASH: PerCpuArray<mem::MmStash> = PerCpuArray::with_max_entries(1, 0);
/// Each session's tree-wide RSS, its peak and when it happened.
#[map]
static TREE_RSS: Array<TreeRss> = Array::with_max_entries(MAX_SESSIONS, 0);

/// Reads one field of [`CONFIG`], e.g. `conf!(off.task_pid)`. The volatile read keeps the
/// compiler from folding the zeroed initializer into the code.
macro_rules! conf {
    ($($field:tt)+) => {
        // SAFETY: CONFIG is plain data in .rodata.
        unsafe { core::ptr::read_volatile(&$crate::CONFIG.$($field)+) }
    };
}
pub(crate) use conf;

/// Counts one of [`stat`] for `session` (0 for loss that belongs to no session).
#[inline(always)]
fn count(session: u16, index: u32) {
    // An out-of-range session has no slot: the lookup fails and nothing is counted.
    if let Some(p) = STATS.get_ptr_mut(u32::from(session)) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU; an index past the counters
        // counts nothing.
        if let Some(c) = unsafe { (*p).counts.get_mut(index as usize) } {
            *c += 1;
        }
    }
}

#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_process_fork(ctx: RawTracePointContext) -> i32 {
    match fork::try_fork::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => {
            // Rare by construction; reaches userspace with -vv / RUST_LOG=debug.
            debug!(&ctx, "sched_process_fork: error {}", e);
            e
        }
    }
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec(ctx: RawTracePointContext) -> i32 {
    match exec::try_exec::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => {
            // Rare by construction; reaches userspace with -vv / RUST_LOG=debug.
            debug!(&ctx, "sched_process_exec: error {}", e);
            e
        }
    }
}

/// Fires at exec's point of no return, while the old image's mm is still in place (6.10+).
#[raw_tracepoint(tracepoint = "sched_prepare_exec")]
pub fn sched_prepare_exec(ctx: RawTracePointContext) -> i32 {
    match exec::try_prepare_exec::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => {
            // Rare by construction; reaches userspace with -vv / RUST_LOG=debug.
            debug!(&ctx, "sched_prepare_exec: error {}", e);
            e
        }
    }
}

/// Never attached: the argv chunks after an exec record's first, reached by tail calls from
/// sched_process_exec and from itself (see `exec`).
#[raw_tracepoint]
pub fn exec_args(ctx: RawTracePointContext) -> i32 {
    match exec::try_exec_args(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// `watch`: a cgroup's path, the first time a reported process of it execs (see `cgroup`).
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn cgroup_exec(ctx: RawTracePointContext) -> i32 {
    match cgroup::try_name(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// A second program on sched_process_exec: follows the new image's RSS (see `rss`).
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn rss_exec(ctx: RawTracePointContext) -> i32 {
    match rss::try_exec::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// Fires whenever an mm's RSS counter changes.
#[raw_tracepoint(tracepoint = "rss_stat")]
pub fn rss_stat(ctx: RawTracePointContext) -> i32 {
    match rss::try_rss_stat::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// A second program on sched_process_exit, attached before the first so its records come
/// first: the last thread's exit stops following the process's RSS (see `rss`). Apart, so
/// the verifier walks that code once instead of once per path of the exit record.
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn rss_exit(ctx: RawTracePointContext) -> i32 {
    match rss::try_exit::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn sched_process_exit(ctx: RawTracePointContext) -> i32 {
    match exit::try_exit::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => {
            // Rare by construction; reaches userspace with -vv / RUST_LOG=debug.
            debug!(&ctx, "sched_process_exit: error {}", e);
            e
        }
    }
}

/// Kernels whose exit tracepoint fires after exit_mm() (before 6.16): which thread is the last,
/// and its final image figures, read before the mm is released, for its exit record.
#[fentry(function = "exit_mm_release")]
pub fn exit_mm_release(ctx: FEntryContext) -> i32 {
    match exit_mm::try_exit_mm_release::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => {
            // Rare by construction; reaches userspace with -vv / RUST_LOG=debug.
            debug!(&ctx, "exit_mm_release: error {}", e);
            e
        }
    }
}

/// Every context switch of the machine: a dead task's last one may leave its process's CPU
/// figures final (see `reap`). Any other switch returns at the first compare.
#[raw_tracepoint(tracepoint = "sched_switch")]
pub fn dead_switch(ctx: RawTracePointContext) -> i32 {
    // sched_switch(preempt, prev, next, prev_state): prev_state since 5.18.
    if ctx.arg::<u64>(3) as u32 != reap::TASK_DEAD {
        return 0;
    }
    match reap::try_dead_switch(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// A task is freed: for a group leader whose final figures did not go at a switch, they go
/// now (see `reap`).
#[raw_tracepoint(tracepoint = "sched_process_free")]
pub fn sched_process_free(ctx: RawTracePointContext) -> i32 {
    match reap::try_process_free(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// Kernels whose exit tracepoint lacks `group_dead` (before 6.16): the kernel's own flag,
/// passed to taskstats_exit() before exit_mm().
#[fentry(function = "taskstats_exit")]
pub fn taskstats_exit(ctx: FEntryContext) -> i32 {
    match exit_mm::try_taskstats_exit(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// Kernels without sched_prepare_exec (before 6.10): the peak of an image replaced by exec,
/// read from the old mm after the point of no return.
#[fentry(function = "exec_mm_release")]
pub fn exec_mm_release(ctx: FEntryContext) -> i32 {
    match exec_mm::try_exec_mm_release::<true>(&ctx) {
        Ok(()) => 0,
        Err(e) => {
            // Rare by construction; reaches userspace with -vv / RUST_LOG=debug.
            debug!(&ctx, "exec_mm_release: error {}", e);
            e
        }
    }
}

/// A software CPU clock at ~100 Hz on each CPU (`trace` with CPU over time shown): the
/// running traced thread's run time (cpu_tick.rs).
#[perf_event]
pub fn cpu_tick(ctx: PerfEventContext) -> i32 {
    match cpu_tick::try_cpu_tick(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

/// Never attached: spacetime's child runs it once with BPF_PROG_TEST_RUN to learn its own
/// kernel pid and namespace level (see `pidns`).
#[raw_tracepoint]
pub fn own_pid(_ctx: RawTracePointContext) -> i32 {
    pidns::own_pid();
    0
}

/// A task iterator (no macro for it in aya-ebpf 0.2): userspace runs it once after `trace -p`
/// has tracked the running processes, to follow their mms from then on (see `adopt`).
#[no_mangle]
#[link_section = "iter/task"]
pub fn adopt_mms(ctx: *mut core::ffi::c_void) -> i32 {
    let _ = adopt::try_adopt::<true>(ctx);
    0
}

// The same programs without fetch atomics (kernels before 5.12, see `atomics`). They log no
// error: LLVM spills the logged error from paths where it is undefined, a register the
// verifier refuses to read (seen in exec_mm_release on 5.10).

#[raw_tracepoint(tracepoint = "sched_process_fork")]
pub fn sched_process_fork_nofetch(ctx: RawTracePointContext) -> i32 {
    match fork::try_fork::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn sched_process_exec_nofetch(ctx: RawTracePointContext) -> i32 {
    match exec::try_exec::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[raw_tracepoint(tracepoint = "sched_prepare_exec")]
pub fn sched_prepare_exec_nofetch(ctx: RawTracePointContext) -> i32 {
    match exec::try_prepare_exec::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn rss_exec_nofetch(ctx: RawTracePointContext) -> i32 {
    match rss::try_exec::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[raw_tracepoint(tracepoint = "rss_stat")]
pub fn rss_stat_nofetch(ctx: RawTracePointContext) -> i32 {
    match rss::try_rss_stat::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn rss_exit_nofetch(ctx: RawTracePointContext) -> i32 {
    match rss::try_exit::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn sched_process_exit_nofetch(ctx: RawTracePointContext) -> i32 {
    match exit::try_exit::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[fentry(function = "exit_mm_release")]
pub fn exit_mm_release_nofetch(ctx: FEntryContext) -> i32 {
    match exit_mm::try_exit_mm_release::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[fentry(function = "exec_mm_release")]
pub fn exec_mm_release_nofetch(ctx: FEntryContext) -> i32 {
    match exec_mm::try_exec_mm_release::<false>(&ctx) {
        Ok(()) => 0,
        Err(e) => e,
    }
}

#[no_mangle]
#[link_section = "iter/task"]
pub fn adopt_mms_nofetch(ctx: *mut core::ffi::c_void) -> i32 {
    let _ = adopt::try_adopt::<false>(ctx);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";

/// Wake-up flag for the next record: none until enough bytes wait unread (see
/// `Config::wakeup_bytes`).
#[inline(always)]
fn wakeup_flags() -> u64 {
    if EVENTS.query(BPF_RB_AVAIL_DATA as u64) >= conf!(wakeup_bytes) as u64 {
        BPF_RB_FORCE_WAKEUP as u64
    } else {
        BPF_RB_NO_WAKEUP as u64
    }
}

/// Sends a fixed-size record about a process of `session`; a full ring buffer is counted as
/// that session's loss, never silent.
#[inline(always)]
fn output<T>(ev: &T, session: u16) {
    if EVENTS.output::<T>(ev, wakeup_flags()).is_err() {
        count(session, stat::RINGBUF_LOST);
    }
}
