//! Types shared by spacetime's kernel programs and its userspace.
//!
//! Every struct here crosses the kernel/user boundary byte for byte: `#[repr(C)]`, `Copy`, and
//! laid out without implicit padding (explicit `_pad` fields) so both sides agree on every offset.
//! Figures carry their unit in their name (`_ns`, `_pages`).
#![no_std]

mod maps;
mod offsets;

/// Length of `task_struct.comm`.
pub const TASK_COMM_LEN: usize = 16;
/// Bytes of the exec filename carried in an [`ExecEvent`]; longer paths are cut and flagged.
pub const FILENAME_LEN: usize = 256;
/// Bytes of argv carried per record. A power of two so the kernel side can bound lengths with a
/// mask the verifier understands.
pub const ARGS_CHUNK: usize = 4096;
/// Sessions one loaded set of programs serves at once. Session 0 is the standalone one (a
/// `trace`, `bench` or `watch` that loaded its own programs, and every record in system mode);
/// an agent hands out `1..MAX_SESSIONS`.
pub const MAX_SESSIONS: u32 = 64;
/// Largest CPU count for which the kernel sums the per-CPU deltas of the RSS counters. Above it
/// the counters' shared part is used and the figure is flagged approximate.
pub const MAX_EXACT_CPUS: u32 = 64;

/// Kinds of records on the ring buffer (`EventHeader::kind`).
/// The frequency (per CPU) of the CPU clock the [`TickEvent`] program is attached with.
pub const CPU_TICK_HZ: u64 = 100;

pub mod kind {
    /// A task was created: a process ([`super::ForkEvent`]) or a thread.
    pub const FORK: u16 = 1;
    /// A program image started ([`super::ExecEvent`]); argv follows in `ARGS` records.
    pub const EXEC: u16 = 2;
    /// A continuation of an exec's argv ([`super::ArgsEvent`]).
    pub const ARGS: u16 = 3;
    /// A program image is about to be replaced by exec: its memory high-water marks
    /// ([`super::ImageEndEvent`]).
    pub const IMAGE_END: u16 = 4;
    /// A task exited ([`super::ExitEvent`]); `GROUP_DEAD` marks the end of the process.
    pub const EXIT: u16 = 5;
    /// An RSS point of a traced process and the tree-wide sum ([`super::RssEvent`]).
    pub const RSS: u16 = 10;
    /// A process's CPU figures are final: as `wait4` computes them ([`super::ReapEvent`]),
    /// sent at the last context switch of its tasks, or when it is freed. Once per process.
    pub const REAP: u16 = 16;
    /// The path of a cgroup, from the kernel's names, the first time a process execs in it
    /// ([`super::CgroupNameEvent`]): identity that outlives the cgroup.
    pub const CGROUP_NAME: u16 = 17;
    /// A traced thread's cumulative run time, sampled on a CPU clock tick ([`super::TickEvent`]):
    /// CPU over time.
    pub const TICK: u16 = 18;
}

/// Flag bits for the `flags` fields.
pub mod flags {
    /// FORK: the new task is a thread of the parent's process.
    pub const FORK_THREAD: u32 = 1 << 0;
    /// FORK: the new process shares its parent's address space until it execs (vfork,
    /// posix_spawn): memory read before its exec is the parent's.
    pub const FORK_SHARED_MM: u32 = 1 << 1;
    /// FORK: the new process is not traced: its session's process limit was reached
    /// ([`super::stat::SESSION_LIMIT`]) or the tracking map was full
    /// ([`super::stat::TRACK_FULL`]). Nothing of it or its descendants follows.
    pub const FORK_UNTRACKED: u32 = 1 << 2;
    /// EXEC: the filename did not fit [`super::FILENAME_LEN`].
    pub const EXEC_FILENAME_TRUNCATED: u32 = 1 << 0;
    /// EXEC: argv was longer than the configured maximum and was cut.
    pub const EXEC_ARGS_TRUNCATED: u32 = 1 << 1;
    /// EXEC: reading argv from the new image failed.
    pub const EXEC_ARGS_FAULT: u32 = 1 << 2;
    /// EXEC: the process took credentials its session's owner does not have (a setuid,
    /// setgid or file-capability program, or one its owner cannot read): it left the session
    /// here. The record carries no argv; nothing more of the process or its descendants
    /// follows (its exit neither).
    pub const EXEC_LEFT: u32 = 1 << 3;
    /// EXIT: the last thread of the process exited; the process is gone.
    pub const EXIT_GROUP_DEAD: u32 = 1 << 0;
    /// EXIT: `exit_code` is the thread group's exit code (exit_group or a fatal signal).
    pub const EXIT_GROUP_CODE: u32 = 1 << 1;
    /// MEM: the figures were read from a live mm.
    pub const MEM_VALID: u32 = 1 << 0;
    /// MEM: the RSS counters were summed exactly, per-CPU deltas included.
    pub const MEM_EXACT: u32 = 1 << 1;
    /// RSS: this point is a new tree-wide maximum.
    pub const RSS_TREE_PEAK: u32 = 1 << 0;
    /// RSS: not a point but the end of an mm that was followed since `hdr.ts_ns`: `rss_pages`
    /// is its exact maximum, the peak of the image that ran on it; `end_ns` is when following
    /// ended and `tree_rss_pages` the tree's sum without it.
    pub const RSS_MM_PEAK: u32 = 1 << 1;
    /// EXIT: a kernel read failed; the fields it would have filled are 0.
    pub const EXIT_READ_FAILED: u32 = 1 << 2;
    /// EXIT: the process did not pass the kernel-side filter. Only the header counts (the
    /// figures are not read): the record lets userspace forget the process (its uid or cgroup may have changed since it
    /// was let through) and match the exit's taskstats record; it is not reported.
    pub const EXIT_FILTERED: u32 = 1 << 3;
    /// EXIT (with [`EXIT_FILTERED`]): the process passed the uid filter but its watcher could
    /// not ptrace it at its exit ([`super::filter_flags::READABLE`]): a setuid, setgid or
    /// capability program, or one not dumpable. A bare marker, comm and cgroup left zero.
    pub const EXIT_HIDDEN: u32 = 1 << 4;
    /// EXIT: `min_flt` was read (unless [`EXIT_READ_FAILED`] says a read failed).
    pub const EXIT_MIN_FLT: u32 = 1 << 5;
    /// REAP: a kernel read failed; the fields it would have filled are 0.
    pub const REAP_READ_FAILED: u32 = 1 << 0;
    /// REAP: sent at the process's last task's final switch off its CPU: `hdr.ts_ns` is when
    /// the process stopped running for good, its exit's teardown done (without it, at the
    /// free, one RCU grace period after the reap).
    pub const REAP_AT_SWITCH: u32 = 1 << 1;
    /// RSS: a point the rate limit held back, sent late: `hdr.ts_ns` is still when it happened.
    pub const RSS_HELD: u32 = 1 << 2;
    /// CGROUP_NAME: a name was longer than [`super::CGROUP_NAME_LEN`] and is cut.
    pub const CGROUP_NAME_CUT: u32 = 1 << 0;
    /// CGROUP_NAME: the path is deeper than [`super::CGROUP_NAME_DEPTH`]: its top is missing.
    pub const CGROUP_NAME_DEEPER: u32 = 1 << 1;
}

/// Indexes of the per-CPU `STATS` counters in a session's [`SessionStats`]. Loss that
/// belongs to no session is session 0's.
pub mod stat {
    /// Records dropped because the ring buffer was full.
    pub const RINGBUF_LOST: u32 = 0;
    /// Processes that could not be tracked because the tracking map was full.
    pub const TRACK_FULL: u32 = 1;
    /// Kernel reads that failed (a field could not be read).
    pub const READ_FAIL: u32 = 2;
    /// Records not sent because the process did not pass the kernel-side filter
    /// ([`super::KernelFilter`]): fork, exec (with its argv) and image-end records. Its exits
    /// still go, as bare [`super::flags::EXIT_FILTERED`] headers.
    pub const FILTERED: u32 = 3;
    /// Processes whose group exit could not wait for their final CPU figures (no room left to
    /// keep them waiting: `EXITED` in system mode, `TRACKED` before 5.12): they keep their
    /// exit-time CPU figures.
    pub const REAP_FULL: u32 = 4;
    /// Processes not traced because their session had as many live processes as its limit
    /// ([`super::SessionLimit`]); their fork records carry [`super::flags::FORK_UNTRACKED`].
    pub const SESSION_LIMIT: u32 = 5;
    /// Entries of `TRACKED` for a pid that a process with an untraced parent was given: left
    /// by a process whose exit was not seen, or put there for a pid that was no live process.
    /// The fork removed them before the newcomer could run (fork.rs): counted, not lost.
    pub const STALE_CLEARED: u32 = 6;
    /// Number of counters per session.
    pub const COUNT: u32 = 7;
}

/// A session's failure counters on one CPU (`STATS`, one per session), indexed by [`stat`]:
/// one value, so that a run's start zeroes them and its end reads them in one map call each.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionStats {
    pub counts: [u64; stat::COUNT as usize],
}

/// Slots of the kernel's `PIDNS` array (see `spacetime-ebpf/src/pidns.rs`).
pub mod pidns_slot {
    /// The PID namespace level fork records number new processes at: spacetime's, in
    /// [`super::mode::TREE`] only (0: the kernel's pid is the one shown, nothing to read).
    pub const FORK_LEVEL: u32 = 0;
    /// The kernel (initial namespace) pid of the last task that ran `own_pid`.
    pub const KERNEL_PID: u32 = 1;
    /// That task's PID namespace level: 0 for the initial one.
    pub const LEVEL: u32 = 2;
    pub const COUNT: u32 = 3;
}

/// Which processes the kernel side reports.
pub mod mode {
    /// Only processes in the tracking map and the processes they fork.
    pub const TREE: u32 = 0;
    /// Every process on the system.
    pub const SYSTEM: u32 = 1;
}

/// How `mm_struct.rss_stat` is laid out on the running kernel.
pub mod rss_layout {
    /// `struct percpu_counter rss_stat[NR_MM_COUNTERS]` (Linux 6.2 and later).
    pub const PERCPU_COUNTER: u32 = 0;
    /// `struct mm_rss_stat { atomic_long_t count[NR_MM_COUNTERS]; }` (before 6.2).
    pub const ATOMIC_ARRAY: u32 = 1;
}

pub use maps::{switch, tail, MmState, Reaping, SessionCount, SessionLimit, Tracked, TreeRss};
pub use offsets::KernelOffsets;

/// Configuration of the kernel programs, written into their read-only data before load.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// [`mode`].
    pub mode: u32,
    /// [`rss_layout`].
    pub rss_layout: u32,
    /// Possible CPUs (`/sys/devices/system/cpu/possible`), for summing per-CPU counters.
    pub nr_cpus: u32,
    /// Largest number of argv records per exec (each [`ARGS_CHUNK`] bytes).
    pub max_arg_chunks: u32,
    /// Records are sent without waking userspace (a wake-up is a self-IPI, costly under
    /// virtualization) until this many bytes wait unread; userspace also drains on a timer.
    pub wakeup_bytes: u32,
    pub _pad: u32,
    pub off: KernelOffsets,
    /// Least time between two RSS points of one process (new tree-wide maxima always go).
    pub rss_interval_ns: u32,
    /// Follow RSS changes (kmem:rss_stat) of traced processes: 1, or 0 for off.
    pub track_rss: u32,
}

/// Most uids and cgroups the kernel-side filter holds; more fall back to userspace filtering.
pub const FILTER_MAX_UIDS: usize = 8;
pub const FILTER_MAX_CGROUPS: usize = 8;

/// Which parts of [`KernelFilter`] are on (`KernelFilter::flags`).
pub mod filter_flags {
    /// Only processes whose real uid is one of `uids`.
    pub const UID: u32 = 1 << 0;
    /// Only processes in one of `cgroups` or below it.
    pub const CGROUP: u32 = 1 << 1;
    /// Tree mode used as a filter (`watch --pid-tree`): records of untracked processes are
    /// counted as filtered.
    pub const COUNT_UNTRACKED: u32 = 1 << 2;
    /// Only processes the watcher (`owner_*`) could ptrace: their real, effective and saved
    /// uids and gids are its, they hold no permitted capability it lacks, they are dumpable.
    /// An exec into anything else sends no exec record; an exit, an
    /// [`super::flags::EXIT_HIDDEN`] marker. An agent's non-root watch.
    pub const READABLE: u32 = 1 << 3;
}

/// A cgroup v2 directory: its id (inode number) and depth below the root (level 0).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CgroupRef {
    pub id: u64,
    pub level: u32,
    pub _pad: u32,
}

/// The kernel-side filter (`watch --uid`, `--cgroup`, `--pid-tree`), written into the programs'
/// read-only data before load, as libbpf-tools' exitsnoop does: a process that does not pass
/// is not sent (no fork, exec, argv or image-end record; its exits only as
/// [`flags::EXIT_FILTERED`] markers, figures unread). Every part is tested against the current task, which the
/// fork, exec and exit tracepoints all run in.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelFilter {
    /// [`filter_flags`].
    pub flags: u32,
    pub n_uids: u32,
    pub uids: [u32; FILTER_MAX_UIDS],
    pub n_cgroups: u32,
    pub _pad: u32,
    pub cgroups: [CgroupRef; FILTER_MAX_CGROUPS],
    /// The watcher, for [`filter_flags::READABLE`].
    pub owner_uid: u32,
    pub owner_gid: u32,
    pub owner_caps: u64,
}

/// Start of every record. `tgid` and `leader_start_ns` identify the process: pids are reused,
/// (tgid, start time of its group leader) are not.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    pub kind: u16,
    /// The session of the traced process the record is about (0 in system mode and for a
    /// standalone trace).
    pub session: u16,
    pub flags: u32,
    /// CLOCK_MONOTONIC, as `bpf_ktime_get_ns`.
    pub ts_ns: u64,
    pub tgid: u32,
    pub pid: u32,
    /// Start time of the thread group leader (CLOCK_MONOTONIC).
    pub leader_start_ns: u64,
}

/// A new task. The header names the parent (the forking thread and its process); the child is
/// described here.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ForkEvent {
    pub hdr: EventHeader,
    pub child_pid: u32,
    pub child_tgid: u32,
    pub child_start_ns: u64,
    /// A new process's pid as spacetime's PID namespace numbers it; 0 when spacetime runs in
    /// the initial namespace (`child_tgid` is then that pid), for a thread, or when unknown.
    pub child_ns_tgid: u32,
    pub _pad: u32,
}

/// Memory figures of one mm, in pages.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MemStats {
    /// `mm->hiwater_rss`: raised lazily, only before RSS drops.
    pub hiwater_rss_pages: u64,
    /// Current RSS by counter.
    pub rss_file_pages: u64,
    pub rss_anon_pages: u64,
    pub rss_shmem_pages: u64,
    pub hiwater_vm_pages: u64,
    pub total_vm_pages: u64,
    /// [`flags`] `MEM_*`.
    pub flags: u32,
    /// Sum of the per-CPU deltas included in the RSS counters above (6.2+): what the kernel's
    /// own approximate reading (`get_mm_rss`, used by taskstats and `hiwater_rss`) leaves out.
    pub percpu_delta_pages: i32,
}

impl MemStats {
    /// Current resident pages: the sum of the counters that make up RSS.
    pub fn rss_pages(&self) -> u64 {
        self.rss_file_pages
            .saturating_add(self.rss_anon_pages)
            .saturating_add(self.rss_shmem_pages)
    }

    /// The peak as the kernel defines it (`get_mm_hiwater_rss`): hiwater is only raised before
    /// RSS drops, so the current RSS may be higher.
    pub fn peak_rss_pages(&self) -> u64 {
        self.hiwater_rss_pages.max(self.rss_pages())
    }

    /// The peak as the kernel itself computes it, from the counters' shared parts only: what
    /// taskstats and `ru_maxrss` report.
    pub fn kernel_peak_rss_pages(&self) -> u64 {
        let approx = (self.rss_pages() as i64 - self.percpu_delta_pages as i64).max(0) as u64;
        self.hiwater_rss_pages.max(approx)
    }

    /// Peak virtual size (`get_mm_hiwater_vm`).
    pub fn peak_vm_pages(&self) -> u64 {
        self.hiwater_vm_pages.max(self.total_vm_pages)
    }
}

/// A program image starts. Sent with only `FILENAME_LEN + args_here` bytes of payload; argv
/// beyond `args_here` follows in [`ArgsEvent`]s.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ExecEvent {
    pub hdr: EventHeader,
    /// The pid of the thread that called execve (differs from `hdr.pid` when a non-leader
    /// thread execs and takes over the leader's pid).
    pub old_pid: u32,
    /// Total bytes of the argument area (NUL-separated argv), as the new image has it.
    pub args_len: u32,
    /// Bytes of argv carried in `args` of this record.
    pub args_here: u32,
    /// Real uid of the task (`bpf_get_current_uid_gid`).
    pub uid: u32,
    /// Its cgroup v2 id (`bpf_get_current_cgroup_id`).
    pub cgroup_id: u64,
    pub comm: [u8; TASK_COMM_LEN],
    pub filename: [u8; FILENAME_LEN],
    pub args: [u8; ARGS_CHUNK],
}

/// Bytes of an [`ExecEvent`] before its `args`.
pub const EXEC_EVENT_FIXED: usize = core::mem::size_of::<ExecEvent>() - ARGS_CHUNK;

/// Continuation of an exec's argv: `len` bytes at `offset` of the argument area.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct ArgsEvent {
    pub hdr: EventHeader,
    pub offset: u32,
    pub len: u32,
    pub data: [u8; ARGS_CHUNK],
}

/// Bytes of an [`ArgsEvent`] before its `data`.
pub const ARGS_EVENT_FIXED: usize = core::mem::size_of::<ArgsEvent>() - ARGS_CHUNK;

/// The image a task is leaving by exec, read at the point of no return.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageEndEvent {
    pub hdr: EventHeader,
    pub mem: MemStats,
}

/// A task exits. With `EXIT_GROUP_DEAD` it is the last thread and `mem` holds the final image's
/// figures (when the mm was still attached).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ExitEvent {
    pub hdr: EventHeader,
    pub mem: MemStats,
    /// Wait status as the parent would see it: `(code << 8)` or the signal number (| 0x80 for a
    /// core dump).
    pub exit_code: u32,
    pub _pad: u32,
    /// This thread's CPU time, as sampled by the tick (`task->utime`, `task->stime`).
    pub utime_ns: u64,
    pub stime_ns: u64,
    /// This thread's precise run time (`se.sum_exec_runtime`).
    pub runtime_ns: u64,
    /// `signal->maxrss` (pages): what `ru_maxrss` would report for the process.
    pub signal_maxrss_pages: u64,
    /// This thread's minor page faults (`task->min_flt`), with [`flags::EXIT_MIN_FLT`]: every
    /// copy-on-write copy is one, so a process that faulted little since a read of its PSS
    /// wrote little of what it shared then.
    pub min_flt: u64,
    /// Real uid and gid of the exiting task (`bpf_get_current_uid_gid`).
    pub uid: u32,
    pub gid: u32,
    /// The exiting task's cgroup v2 id (`bpf_get_current_cgroup_id`): the inode number of its
    /// cgroup directory.
    pub cgroup_id: u64,
    /// The process's id in its own PID namespace (the tgid in the initial one); 0 if unknown.
    pub ns_tgid: u32,
    /// Nesting level of that PID namespace (0: the initial one).
    pub ns_level: u32,
    /// `GROUP_DEAD` only: the whole process's CPU time as the kernel accounts it here: threads
    /// already released (`signal->utime`, `stime`, `sum_sched_runtime`) plus this thread and
    /// the group leader if it exited earlier. A thread still exiting concurrently (exit_group)
    /// may be missing; the per-thread records are exact. All 0 when unavailable.
    pub group_utime_ns: u64,
    pub group_stime_ns: u64,
    pub group_runtime_ns: u64,
    /// The process's name (its group leader's comm) with `GROUP_DEAD`, else the thread's.
    pub comm: [u8; TASK_COMM_LEN],
}

/// A process's CPU figures are final: every thread has exited and was released or did its
/// final context switch, the group leader has done its final switch (`sched_switch` of a dead
/// task, reap.rs), or failing that the process is freed (`sched_process_free`). `wait4` returns
/// `cputime_adjust({utime, stime, rtime}, prev)` (kernel/sched/cputime.c); userspace runs the
/// same computation on these inputs.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ReapEvent {
    pub hdr: EventHeader,
    /// `signal->sum_sched_runtime` and the leader's `se.sum_exec_runtime` if it is not yet
    /// released: every thread's runtime, as `thread_group_cputime()` sums it.
    pub rtime_ns: u64,
    /// Tick samples: `signal->utime`, `signal->stime` (plus the unreleased leader's).
    pub utime_ns: u64,
    pub stime_ns: u64,
    /// `signal->prev_cputime`: the last adjusted split (what the reaping wait4 returned).
    pub prev_utime_ns: u64,
    pub prev_stime_ns: u64,
}

/// Bytes kept of each name of a cgroup path (a docker scope's is 77).
pub const CGROUP_NAME_LEN: usize = 128;
/// Levels of a cgroup path sent, from the leaf up.
pub const CGROUP_NAME_DEPTH: usize = 8;

/// A cgroup's path, leaf first: `names[0]` is the cgroup's own name, `names[depth - 1]` the
/// one below the root. Sent once per cgroup (a kernel LRU remembers which were sent).
#[repr(C)]
#[derive(Copy, Clone)]
pub struct CgroupNameEvent {
    pub hdr: EventHeader,
    pub cgroup_id: u64,
    /// Names filled, at most [`CGROUP_NAME_DEPTH`].
    pub depth: u32,
    /// [`flags::CGROUP_NAME_CUT`], [`flags::CGROUP_NAME_DEEPER`].
    pub flags: u32,
    pub names: [[u8; CGROUP_NAME_LEN]; CGROUP_NAME_DEPTH],
}

/// An RSS point: the process's exact RSS and the tree-wide sum at `hdr.ts_ns`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RssEvent {
    pub hdr: EventHeader,
    pub rss_pages: u64,
    pub tree_rss_pages: u64,
    /// `RSS_MM_PEAK` only: when the mm stopped being followed (exec or exit); else 0.
    pub end_ns: u64,
    /// Of `rss_pages`, the anonymous ones (private to the mm unless it forked): the rest,
    /// file and shmem pages, may be shared with other processes. 0 for `RSS_MM_PEAK`.
    pub anon_pages: u64,
}

/// A CPU clock tick (~100 Hz per CPU) found a traced thread running: the header names it
/// (`pid` is the thread), `runtime_ns` is its `se.sum_exec_runtime` then (cumulative, the
/// scheduler's nanoseconds, as folded at the last scheduler update).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TickEvent {
    pub hdr: EventHeader,
    pub runtime_ns: u64,
}

#[cfg(feature = "user")]
mod pod {
    use super::*;
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid Config.
    unsafe impl aya::Pod for Config {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid KernelFilter.
    unsafe impl aya::Pod for KernelFilter {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid KernelOffsets.
    unsafe impl aya::Pod for KernelOffsets {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid EventHeader.
    unsafe impl aya::Pod for EventHeader {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid ForkEvent.
    unsafe impl aya::Pod for ForkEvent {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid ExecEvent.
    unsafe impl aya::Pod for ExecEvent {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid ArgsEvent.
    unsafe impl aya::Pod for ArgsEvent {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid ImageEndEvent.
    unsafe impl aya::Pod for ImageEndEvent {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid ExitEvent.
    unsafe impl aya::Pod for ExitEvent {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid MmState.
    unsafe impl aya::Pod for MmState {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid Tracked.
    unsafe impl aya::Pod for Tracked {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid Reaping.
    unsafe impl aya::Pod for Reaping {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid SessionCount.
    unsafe impl aya::Pod for SessionCount {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid SessionLimit.
    unsafe impl aya::Pod for SessionLimit {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid TreeRss.
    unsafe impl aya::Pod for TreeRss {}
    // SAFETY: #[repr(C)], Copy, an integer array, no padding (size asserted below): every bit
    // pattern is a valid SessionStats.
    unsafe impl aya::Pod for SessionStats {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid RssEvent.
    unsafe impl aya::Pod for RssEvent {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid ReapEvent.
    unsafe impl aya::Pod for ReapEvent {}
    // SAFETY: #[repr(C)], Copy, only integers and integer arrays, padding explicit (sizes asserted
    // below): every bit pattern is a valid CgroupNameEvent.
    unsafe impl aya::Pod for CgroupNameEvent {}
    // SAFETY: #[repr(C)], Copy, only integers, no padding (size asserted below): every bit
    // pattern is a valid TickEvent.
    unsafe impl aya::Pod for TickEvent {}
}

// Layout checks: the kernel and userspace read these byte for byte.
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<EventHeader>() == 32);
    assert!(size_of::<ForkEvent>() == 56);
    assert!(size_of::<MemStats>() == 56);
    assert!(size_of::<ImageEndEvent>() == 88);
    assert!(size_of::<ExitEvent>() == 200);
    assert!(EXEC_EVENT_FIXED == 32 + 24 + TASK_COMM_LEN + FILENAME_LEN);
    assert!(
        size_of::<KernelFilter>() == 8 + 4 * FILTER_MAX_UIDS + 8 + 16 * FILTER_MAX_CGROUPS + 16
    );
    assert!(ARGS_EVENT_FIXED == 40);
    assert!(size_of::<KernelOffsets>() == 62 * 4);
    assert!(size_of::<Config>() == 24 + 62 * 4 + 8);
    assert!(size_of::<SessionLimit>() == 32);
    assert!(size_of::<CgroupNameEvent>() == 32 + 16 + CGROUP_NAME_LEN * CGROUP_NAME_DEPTH);
    assert!(size_of::<MmState>() == 128);
    assert!(size_of::<TreeRss>() == 32);
    assert!(size_of::<SessionStats>() == 8 * stat::COUNT as usize);
    assert!(size_of::<RssEvent>() == 64);
    assert!(size_of::<ReapEvent>() == 72);
    assert!(size_of::<TickEvent>() == 40);
    assert!(size_of::<Tracked>() == 24);
    assert!(size_of::<SessionCount>() == 16);
    assert!(size_of::<Reaping>() == 16);
    assert!(MAX_SESSIONS <= u16::MAX as u32);
};
