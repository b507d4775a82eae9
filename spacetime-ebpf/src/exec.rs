//! sched_prepare_exec / sched_process_exec: a traced process replaces its program image.
//! prepare_exec (the point of no return) closes the old image with its memory peak (on
//! kernels without it, `exec_mm_release` does, see exec_mm.rs);
//! process_exec opens the new one with its filename and full argv, read from the new mm's
//! argument area and streamed in chunks when it does not fit one record.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_uid_gid, bpf_probe_read_kernel_str_bytes,
        generated::{bpf_probe_read_user, bpf_ringbuf_output},
    },
    programs::RawTracePointContext,
};
use spacetime_common::{
    flags, kind, mode, stat, ArgsEvent, ExecEvent, ImageEndEvent, ARGS_CHUNK, ARGS_EVENT_FIXED,
    EXEC_EVENT_FIXED, FILENAME_LEN,
};

use crate::{
    conf, count, creds, filter, mem, output, rss, tail,
    task::{current_ids, header, read, Btf, Kernel, Task},
    wakeup_flags, ARGS_CARRY, ARGS_SCRATCH, EVENTS, EXEC_SCRATCH, TAILS, TRACKED,
};

/// Upper bound of argv records per exec, whatever the configuration says (256 KiB).
const MAX_CHUNKS: u32 = 64;

pub fn try_prepare_exec<const FETCH: bool>(ctx: &RawTracePointContext) -> Result<(), i32> {
    // The task is the current one.
    let cur = Btf::current(ctx.arg::<u64>(0));
    let task = Task(cur.addr());
    let (pid, tgid) = current_ids();
    let Some(session) = filter::wanted(tgid) else {
        return Ok(());
    };
    rss::forget::<FETCH>(tgid);
    let r = cur
        .follow(conf!(off.task_mm))
        .and_then(|mm| image_end(&task, tgid, pid, mm, session));
    // Taken by image_end's read unless it failed first (see mem::MmStash).
    mem::stash_clear();
    r
}

/// Sends the memory figures of `mm`, the image `task` (of process `tgid` in `session`) is
/// leaving by exec.
/// Its caller stops following the mm's RSS first (`rss::forget`): exec releases the mm right
/// after, and a new mm may then get its address, so following ends while it is still ours.
/// Kernel threads (no mm) send nothing.
#[inline(always)]
pub fn image_end(
    task: &Task,
    tgid: u32,
    pid: u32,
    mm: impl Kernel,
    session: u16,
) -> Result<(), i32> {
    if mm.addr() == 0 {
        return Ok(());
    }
    // An image its watcher could not ptrace (a setuid program execing another): its figures
    // are not told (filter.rs).
    if conf!(mode) == mode::SYSTEM && filter::hidden(task, mm.addr()) {
        count(session, stat::FILTERED);
        return Ok(());
    }
    let mut slot = core::mem::MaybeUninit::uninit();
    let ev: &mut ImageEndEvent = crate::zero::zeroed(&mut slot);
    ev.hdr = header(kind::IMAGE_END, session, task, tgid, pid)?;
    mem::read_final_mm(task.0, mm, &mut ev.mem)?;
    output(ev, session);
    Ok(())
}

/// Sends `len` bytes of the record at `data`; a full ring buffer is counted as `session`'s
/// loss.
#[inline(always)]
fn output_bytes(data: *mut c_void, len: usize, session: u16) {
    // SAFETY: `data` points at a scratch map value of at least `len` bytes.
    let ret = unsafe {
        bpf_ringbuf_output(
            &EVENTS as *const _ as *mut c_void,
            data,
            len as u64,
            wakeup_flags(),
        )
    };
    if ret < 0 {
        count(session, stat::RINGBUF_LOST);
    }
}

// Inlined into its program: a BPF-to-BPF call in a program that tail-calls needs Linux 5.10.
#[inline(always)]
pub fn try_exec<const FETCH: bool>(ctx: &RawTracePointContext) -> Result<(), i32> {
    let cur = Btf::current(ctx.arg::<u64>(0));
    let task = Task(cur.addr());
    // The task is the current one (after de_thread, with its new pid).
    let (pid, tgid) = current_ids();
    let Some(session) = filter::wanted(tgid) else {
        return Ok(());
    };
    let old_pid = ctx.arg::<u64>(1) as u32;
    let bprm = ctx.arg::<u64>(2);
    let ev = EXEC_SCRATCH.get_ptr_mut(0).ok_or(-1)?;
    // SAFETY: per-CPU scratch value, exclusively ours while this program runs on this CPU.
    let ev = unsafe { &mut *ev };
    ev.hdr = header(kind::EXEC, session, &task, tgid, pid)?;
    ev.old_pid = old_pid;
    crate::zero::current_comm(&mut ev.comm);
    ev.uid = bpf_get_current_uid_gid() as u32;
    // SAFETY: plain helper call.
    ev.cgroup_id = unsafe { bpf_get_current_cgroup_id() };

    let filename = read::<u64>(bprm, conf!(off.binprm_filename))?;
    // SAFETY: kernel string, bounded by the buffer.
    match unsafe { bpf_probe_read_kernel_str_bytes(filename as *const u8, &mut ev.filename) } {
        Ok(s) if s.len() + 1 >= FILENAME_LEN => ev.hdr.flags |= flags::EXEC_FILENAME_TRUNCATED,
        Ok(_) => {}
        Err(_) => ev.filename[0] = 0,
    }

    let mm = cur.follow(conf!(off.task_mm))?;
    if conf!(mode) == mode::TREE && creds::left(session, &task, mm.addr()) {
        return leave::<FETCH>(ev, tgid, session);
    }
    // A watcher that could not ptrace the new program is not told of it (filter.rs).
    if conf!(mode) == mode::SYSTEM && filter::hidden(&task, mm.addr()) {
        count(session, stat::FILTERED);
        return Ok(());
    }
    let arg_start = mm.get::<u64>(conf!(off.mm_arg_start))?;
    let arg_end = mm.get::<u64>(conf!(off.mm_arg_end))?;
    let total = arg_end.saturating_sub(arg_start);
    let max_chunks = conf!(max_arg_chunks).clamp(1, MAX_CHUNKS) as u64;
    let cap = max_chunks * ARGS_CHUNK as u64;
    let args_len = if total > cap {
        ev.hdr.flags |= flags::EXEC_ARGS_TRUNCATED;
        cap
    } else {
        total
    } as u32;
    ev.args_len = args_len;

    let first = if args_len == 0 {
        0
    } else {
        chunk_len(args_len.min(ARGS_CHUNK as u32))
    };
    // SAFETY: reads user memory of the current task into our buffer; failure is reported.
    let ret = unsafe {
        bpf_probe_read_user(
            ev.args.as_mut_ptr() as *mut c_void,
            first,
            arg_start as *const c_void,
        )
    };
    if ret < 0 {
        ev.hdr.flags |= flags::EXEC_ARGS_FAULT;
        ev.args_len = 0;
        ev.args_here = 0;
        output_bytes(ev as *mut _ as *mut c_void, EXEC_EVENT_FIXED, session);
        return Ok(());
    }
    ev.args_here = first;
    output_bytes(
        ev as *mut _ as *mut c_void,
        EXEC_EVENT_FIXED + first as usize,
        session,
    );

    if args_len as usize <= ARGS_CHUNK {
        return Ok(());
    }
    let hdr = ev.hdr;
    let chunk = ARGS_SCRATCH.get_ptr_mut(0).ok_or(-1)?;
    // SAFETY: as above.
    let chunk = unsafe { &mut *chunk };
    chunk.hdr = hdr;
    chunk.hdr.kind = kind::ARGS;
    let carry = ARGS_CARRY.get_ptr_mut(0).ok_or(-1)?;
    // SAFETY: per-CPU scratch value, as above.
    unsafe {
        *carry = ArgsCarry {
            arg_start,
            args_len,
            next: 1,
        }
    };
    more_args(ctx, session);
    Ok(())
}

/// Where the argv chunks after the first stand, between tail calls of [`try_exec_args`].
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ArgsCarry {
    pub arg_start: u64,
    pub args_len: u32,
    /// The next chunk to send.
    pub next: u32,
}

/// Chunks each run of `exec_args` sends: 2 × 32 tail calls cover the 63 after the first
/// (the kernel allows 33 tail calls per event).
const CHUNKS_PER_CALL: u32 = 2;

/// Hands the rest of argv to `exec_args` (a tail call: it replaces this program). Apart, the
/// verifier walks a chunk's code once instead of once per chunk of an unrolled sequence
/// (63 of them cost 13.6 ms of the exec program's 16 ms of verification). A tail call that
/// does not happen (no slot, the limit reached) loses the rest, counted; the exec record's
/// `args_len` tells userspace argv is incomplete.
#[inline(always)]
fn more_args(ctx: &RawTracePointContext, session: u16) {
    // SAFETY: the slot holds exec_args, a raw tracepoint program of the same type.
    unsafe { TAILS.tail_call(ctx, tail::EXEC_ARGS) };
    count(session, stat::READ_FAIL);
}

/// `exec_args`: the next [`CHUNKS_PER_CALL`] chunks of argv, then itself again while some
/// remain.
pub fn try_exec_args(ctx: &RawTracePointContext) -> Result<(), i32> {
    let carry = ARGS_CARRY.get_ptr_mut(0).ok_or(-1)?;
    let chunk = ARGS_SCRATCH.get_ptr_mut(0).ok_or(-1)?;
    // SAFETY: per-CPU scratch values, exclusively this event's while it runs on this CPU.
    let (carry, chunk) = unsafe { (&mut *carry, &mut *chunk) };
    let first = carry.next;
    if first >= MAX_CHUNKS {
        return Ok(());
    }
    for i in 0..CHUNKS_PER_CALL {
        if !send_chunk(chunk, first + i, carry.args_len, carry.arg_start) {
            return Ok(());
        }
    }
    carry.next = first + CHUNKS_PER_CALL;
    more_args(ctx, chunk.hdr.session);
    Ok(())
}

/// The process took credentials its session's owner lacks (creds.rs): it stops being traced
/// here, before its new image runs; the record says so, without the new image's argv.
#[inline(always)]
fn leave<const FETCH: bool>(ev: &mut ExecEvent, tgid: u32, session: u16) -> Result<(), i32> {
    rss::forget::<FETCH>(tgid);
    if TRACKED.remove(tgid).is_ok() {
        crate::session::release(session);
    }
    ev.hdr.flags |= flags::EXEC_LEFT;
    ev.args_len = 0;
    ev.args_here = 0;
    output_bytes(ev as *mut _ as *mut c_void, EXEC_EVENT_FIXED, session);
    Ok(())
}

/// A length of 1..=ARGS_CHUNK bytes (`n` must be in that range), in a form every verifier
/// can bound: a mask, on a value the compiler cannot see through (it would drop a mask it
/// proves redundant). 6.1's verifier loses the bound of a plain `min` in this code.
#[inline(always)]
fn chunk_len(n: u32) -> u32 {
    let n = n.wrapping_sub(1);
    // SAFETY: a volatile read of a local.
    let n = unsafe { core::ptr::read_volatile(&n) };
    (n & (ARGS_CHUNK as u32 - 1)) + 1
}

/// Sends chunk `i` of the argument area; false when there is nothing more to send.
#[inline(always)]
fn send_chunk(chunk: &mut ArgsEvent, i: u32, args_len: u32, arg_start: u64) -> bool {
    let offset = i.wrapping_mul(ARGS_CHUNK as u32);
    if offset >= args_len {
        return false;
    }
    let n = chunk_len((args_len - offset).min(ARGS_CHUNK as u32));
    // SAFETY: reads user memory of the current task into our scratch buffer.
    let ret = unsafe {
        bpf_probe_read_user(
            chunk.data.as_mut_ptr() as *mut c_void,
            n,
            (arg_start + offset as u64) as *const c_void,
        )
    };
    let session = chunk.hdr.session;
    if ret < 0 {
        count(session, stat::READ_FAIL);
        return false;
    }
    chunk.offset = offset;
    chunk.len = n;
    output_bytes(
        chunk as *mut _ as *mut c_void,
        ARGS_EVENT_FIXED + n as usize,
        session,
    );
    true
}
