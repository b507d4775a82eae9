//! sched_prepare_exec / sched_process_exec: a traced process replaces its program image.
//! prepare_exec (the point of no return) closes the old image with its memory peak (on
//! kernels without it, `exec_mm_release` does, see exec_mm.rs);
//! process_exec opens the new one with its filename and full argv, read from the new mm's
//! argument area and streamed in chunks when it does not fit one record.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_uid_gid,
        bpf_probe_read_kernel_str_bytes,
        generated::{bpf_probe_read_user, bpf_ringbuf_output},
    },
    programs::RawTracePointContext,
};
use spacetime_common::{
    flags, kind, mode, stat, ArgsEvent, ExecEvent, ImageEndEvent, ARGS_CHUNK, ARGS_EVENT_FIXED,
    EXEC_EVENT_FIXED, FILENAME_LEN,
};

use crate::{
    conf, count, creds, filter, mem, output, rss,
    task::{header, read, Task},
    wakeup_flags, ARGS_SCRATCH, EVENTS, EXEC_SCRATCH, TRACKED,
};

/// Upper bound of argv records per exec, whatever the configuration says (256 KiB).
const MAX_CHUNKS: u32 = 64;

pub fn try_prepare_exec(ctx: &RawTracePointContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let tgid = task.tgid()?;
    let Some(session) = filter::wanted(tgid) else {
        return Ok(());
    };
    rss::forget(tgid);
    let mm = task.mm()?;
    image_end(&task, tgid, mm, session)
}

/// Sends the memory figures of `mm`, the image `task` (of process `tgid` in `session`) is
/// leaving by exec.
/// Its caller stops following the mm's RSS first (`rss::forget`): exec releases the mm right
/// after, and a new mm may then get its address, so following ends while it is still ours.
/// Kernel threads (no mm) send nothing.
#[inline(always)]
pub fn image_end(task: &Task, tgid: u32, mm: u64, session: u16) -> Result<(), i32> {
    if mm == 0 {
        return Ok(());
    }
    let ev = ImageEndEvent {
        hdr: header(kind::IMAGE_END, session, task, tgid, task.pid()?)?,
        mem: mem::read_mm(task.0, mm)?,
    };
    output(&ev, session);
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

pub fn try_exec(ctx: &RawTracePointContext) -> Result<(), i32> {
    let task = Task(ctx.arg::<u64>(0));
    let tgid = task.tgid()?;
    let Some(session) = filter::wanted(tgid) else {
        return Ok(());
    };
    let old_pid = ctx.arg::<u64>(1) as u32;
    let bprm = ctx.arg::<u64>(2);
    let ev = EXEC_SCRATCH.get_ptr_mut(0).ok_or(-1)?;
    // SAFETY: per-CPU scratch value, exclusively ours while this program runs on this CPU.
    let ev = unsafe { &mut *ev };
    ev.hdr = header(kind::EXEC, session, &task, tgid, task.pid()?)?;
    ev.old_pid = old_pid;
    ev.comm = bpf_get_current_comm().unwrap_or_default();
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

    let mm = task.mm()?;
    if conf!(mode) == mode::TREE && creds::left(session, &task, mm) {
        return leave(ev, tgid, session);
    }
    let arg_start = read::<u64>(mm, conf!(off.mm_arg_start))?;
    let arg_end = read::<u64>(mm, conf!(off.mm_arg_end))?;
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
    // Straight-line rather than a loop: the verifier then walks each chunk once instead of
    // comparing loop states at every iteration (64 iterations took ~150 ms to verify).
    macro_rules! chunks {
        ($($i:literal)*) => {$(
            if !send_chunk(chunk, $i, args_len, arg_start) {
                return Ok(());
            }
        )*};
    }
    chunks!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59
            60 61 62 63);
    Ok(())
}

/// The process took credentials its session's owner lacks (creds.rs): it stops being traced
/// here, before its new image runs; the record says so, without the new image's argv.
#[inline(always)]
fn leave(ev: &mut ExecEvent, tgid: u32, session: u16) -> Result<(), i32> {
    rss::forget(tgid);
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
    let offset = i * ARGS_CHUNK as u32;
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
