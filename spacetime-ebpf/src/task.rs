//! Reads of kernel structures at BTF-resolved offsets, and the record header every event
//! starts with.

use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel, generated,
};
use spacetime_common::{mode, stat, EventHeader};

use crate::{conf, count, TRACKED};

/// Reads a `T` at `base + off`. Failures are counted and surface as `Err`.
#[inline(always)]
pub fn read<T>(base: u64, off: u32) -> Result<T, i32> {
    // SAFETY: bpf_probe_read_kernel checks the address; a bad one returns an error.
    unsafe { bpf_probe_read_kernel((base + off as u64) as *const T) }
        .inspect_err(|_| count(0, stat::READ_FAIL))
}

/// Reads a `T` at `base + off` into `dst`; on failure the helper zeroes `dst`. Returns the
/// helper's result (0 or a negative error) for the caller to OR together and check once: a
/// branch per read would make the verifier walk a path per failure, and 6.1's gives up
/// ("program too large") on a record with a dozen of them.
#[inline(always)]
pub fn read_or_zero<T>(dst: &mut T, base: u64, off: u32) -> i64 {
    // SAFETY: `dst` is a valid, writable `T`; the helper checks the source address.
    unsafe {
        generated::bpf_probe_read_kernel(
            (dst as *mut T).cast(),
            core::mem::size_of::<T>() as u32,
            (base + off as u64) as *const core::ffi::c_void,
        )
    }
}

/// What [`Kernel`] reads: a scalar field of 4 or 8 bytes, which one load reads whole (the
/// verifier refuses a load past the field's end, and BPF has none wider than 8 bytes).
pub trait Field: Copy {}
impl Field for u32 {}
impl Field for i32 {}
impl Field for u64 {}
impl Field for i64 {}

/// An address kernel fields are read at: a plain one (`u64`), read through
/// bpf_probe_read_kernel, or a [`Btf`] pointer.
pub trait Kernel: Copy {
    fn addr(self) -> u64;
    /// Whether each field is a plain load: then reading fields one by one costs nothing
    /// over one wider read.
    fn loads(self) -> bool;
    /// The `T` at `self + off`; failures counted, as [`read`].
    fn get<T: Field>(self, off: u32) -> Result<T, i32>;
    /// The `T` at `self + off` into `dst`, as [`read_or_zero`].
    fn field<T: Field>(self, dst: &mut T, off: u32) -> i64;
}

impl Kernel for u64 {
    #[inline(always)]
    fn addr(self) -> u64 {
        self
    }
    #[inline(always)]
    fn loads(self) -> bool {
        false
    }
    #[inline(always)]
    fn get<T: Field>(self, off: u32) -> Result<T, i32> {
        read(self, off)
    }
    #[inline(always)]
    fn field<T: Field>(self, dst: &mut T, off: u32) -> i64 {
        read_or_zero(dst, self, off)
    }
}

/// A pointer whose kernel type the verifier knows, where the kernel's BPF can say
/// (`bpf_get_current_task_btf`, 5.11+, `off.direct_loads`): the current task, or a pointer
/// field loaded through another `Btf`, nothing else (the type keeps plain addresses out).
/// Its fields are then plain loads, which the verifier checks against the kernel's BTF
/// (offsets are read-only configuration: constants to it) and the JIT guards: a fault loads
/// 0, as the helper's failure leaves, but uncounted. Only a NULL pointer can fault here (each
/// is the current task or a structure it holds while the tracepoint runs), and the callers
/// test those that can be. A load costs a nanosecond where the helper's call costs 14-29
/// (BENCHMARKS.md). Without direct loads, the helper reads the same fields at the same
/// addresses.
#[derive(Clone, Copy)]
pub struct Btf(u64);

impl Btf {
    /// The current task; `arg` is the same task as the tracepoint passed it.
    #[inline(always)]
    pub fn current(arg: u64) -> Btf {
        if !direct() {
            return Btf(arg);
        }
        // SAFETY: plain helper call (5.11+, which `direct_loads` stands for).
        Btf(unsafe { generated::bpf_get_current_task_btf() } as u64)
    }

    /// The pointer at `self + off` (0 and an error on failure, as [`read_or_zero`]).
    #[inline(always)]
    pub fn ptr(self, off: u32) -> (Btf, i64) {
        let mut p = 0u64;
        let err = self.field(&mut p, off);
        (Btf(p), err)
    }

    /// The pointer at `self + off`; a failure counted, as [`read`].
    #[inline(always)]
    pub fn follow(self, off: u32) -> Result<Btf, i32> {
        self.get::<u64>(off).map(Btf)
    }
}

impl Kernel for Btf {
    #[inline(always)]
    fn addr(self) -> u64 {
        self.0
    }
    #[inline(always)]
    fn loads(self) -> bool {
        direct()
    }
    #[inline(always)]
    fn get<T: Field>(self, off: u32) -> Result<T, i32> {
        if direct() {
            return Ok(load(self.0, off));
        }
        read(self.0, off)
    }
    #[inline(always)]
    fn field<T: Field>(self, dst: &mut T, off: u32) -> i64 {
        if direct() {
            *dst = load(self.0, off);
            return 0;
        }
        read_or_zero(dst, self.0, off)
    }
}

/// Whether [`Btf`] pointers load their fields directly.
#[inline(always)]
fn direct() -> bool {
    conf!(off.direct_loads) != 0
}

#[inline(always)]
fn load<T: Field>(base: u64, off: u32) -> T {
    // SAFETY: the verifier proved that `base + off` is a `T`-sized field of the type `base`
    // points to, and the JIT turns a faulting load into 0.
    unsafe { core::ptr::read_volatile((base + off as u64) as *const T) }
}

/// The current task's pid and tgid, numbered as `task->pid` and `task->tgid` (the initial
/// namespace's). The fork, exec and exit tracepoints run in the task concerned (fork: the
/// parent): one helper call instead of two kernel reads.
#[inline(always)]
pub fn current_ids() -> (u32, u32) {
    let v = bpf_get_current_pid_tgid();
    (v as u32, (v >> 32) as u32)
}

pub struct Task(pub u64);

impl Task {
    #[inline(always)]
    pub fn pid(&self) -> Result<u32, i32> {
        read::<u32>(self.0, conf!(off.task_pid))
    }
    #[inline(always)]
    pub fn tgid(&self) -> Result<u32, i32> {
        read::<u32>(self.0, conf!(off.task_tgid))
    }
    /// pid and tgid: one read where they are adjacent (every task_struct so far).
    #[inline(always)]
    pub fn pid_tgid(&self) -> Result<(u32, u32), i32> {
        if conf!(off.task_tgid) == conf!(off.task_pid) + 4 {
            let [pid, tgid] = read::<[u32; 2]>(self.0, conf!(off.task_pid))?;
            return Ok((pid, tgid));
        }
        Ok((self.pid()?, self.tgid()?))
    }
    #[inline(always)]
    pub fn mm(&self) -> Result<u64, i32> {
        read::<u64>(self.0, conf!(off.task_mm))
    }
    #[inline(always)]
    pub fn signal(&self) -> Result<u64, i32> {
        read::<u64>(self.0, conf!(off.task_signal))
    }
    #[inline(always)]
    pub fn start_ns(&self) -> Result<u64, i32> {
        read::<u64>(self.0, conf!(off.task_start_time))
    }
    /// Start time of the thread group leader: with the tgid, the process's identity.
    #[inline(always)]
    pub fn leader_start_ns(&self) -> Result<u64, i32> {
        let leader = read::<u64>(self.0, conf!(off.task_group_leader))?;
        Task(leader).start_ns()
    }
}

/// The session of this process if it is one we report (session 0 in system mode).
#[inline(always)]
pub fn traced(tgid: u32) -> Option<u16> {
    if conf!(mode) == mode::SYSTEM {
        return Some(0);
    }
    // SAFETY: the value is copied out. An entry whose exit was seen only waits for its
    // release record (reap.rs): its process is traced no more.
    match unsafe { TRACKED.get(tgid) } {
        Some(t) if t.ended == 0 => Some(t.session as u16),
        _ => None,
    }
}

/// The header of a record about `task`, whose own ids are `tgid` and `pid` (`pid == tgid`
/// only for its group's leader).
#[inline(always)]
pub fn header(
    kind: u16,
    session: u16,
    task: &Task,
    tgid: u32,
    pid: u32,
) -> Result<EventHeader, i32> {
    Ok(EventHeader {
        kind,
        session,
        flags: 0,
        // SAFETY: plain helper call.
        ts_ns: unsafe { bpf_ktime_get_ns() },
        tgid,
        pid,
        leader_start_ns: match pid == tgid {
            // A group's leader is its own (and de_thread gives an exec'ing thread the
            // leader's start): one read instead of two for every single-threaded process.
            true => task.start_ns()?,
            false => task.leader_start_ns()?,
        },
    })
}
