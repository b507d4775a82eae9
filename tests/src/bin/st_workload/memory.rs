//! Modes that touch memory and hold it: their truth is the process's own VmHWM.

use super::*;

/// `touch` (see USAGE).
pub(super) fn touch_mode(args: &[OsString], rec: &mut Recorder) -> ! {
    let mib: usize = parse(args, 2, "MIB");
    touch(mib);
    rec.begin("touch").int("mib", mib as i64).finish();
    exit(0)
}

/// `peak-free` (see USAGE).
pub(super) fn peak_free(args: &[OsString], rec: &mut Recorder) -> ! {
    // Reach a peak of BIG MiB, note the exact VmRSS there, free it, then use SMALL MiB:
    // the kernel's hiwater_rss (raised lazily, from approximate counts) may lag the
    // peak; spacetime must not.
    let big: usize = parse(args, 2, "BIG");
    let small: usize = parse(args, 3, "SMALL");
    let len = big << 20;
    let p = map_anon(len);
    // SAFETY: a system call without pointers into memory it could misuse.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    for off in (0..len).step_by(page) {
        // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
    }
    // The first pass warms the reading path (its text, its buffer); the second folds
    // this thread's pending RSS counts first (see fold_rss_counters), so VmRSS is exact.
    let mut at_peak = 0;
    for pass in 0..2 {
        if pass == 1 {
            fold_rss_counters(rec.fold);
        }
        let status = std::fs::read("/proc/self/status").unwrap_or_else(|_| die("status"));
        at_peak = status_kib(&status, b"VmRSS:");
    }
    // SAFETY: unmaps the mapping made above, not used after.
    unsafe { libc::munmap(p.cast(), len) };
    touch(small);
    rec.begin("peak-free")
        .int("peak_vmrss_kib", at_peak)
        .finish();
    exit(0)
}

/// `hold-together` (see USAGE).
pub(super) fn hold_together(args: &[OsString], rec: &mut Recorder) -> ! {
    // Concurrent holders that overlap by construction, not by timing: each keeps its
    // memory until every one of them has reached its peak (an emulated CPU can stall
    // one holder for seconds while another's sleep runs out).
    let n: usize = parse(args, 2, "N");
    let dir = args
        .get(3)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| die("missing DIR"));
    let mib: usize = parse(args, 4, "MIB");
    let ms: u64 = parse(args, 5, "MS");
    touch(mib);
    rec.warm_up();
    let me = dir.join(std::process::id().to_string());
    std::fs::write(&me, b"").unwrap_or_else(|_| die("create the ready file"));
    loop {
        let ready = std::fs::read_dir(&dir)
            .unwrap_or_else(|_| die("read DIR"))
            .count();
        if ready >= n {
            break;
        }
        // Waiting for the others' files: a poll, not a guess at how long they take.
        std::thread::sleep(Duration::from_millis(1));
    }
    // Everything this process will touch is touched (the wait allocated too): fold its
    // pending RSS counts into the mm (see fold_rss_counters) so the kernel's tree sum
    // sees all of it. Then all are at their peak, long enough for the sampled figures
    // (PSS) to see it too.
    fold_rss_counters(rec.fold);
    std::thread::sleep(Duration::from_millis(ms));
    rec.begin("hold-together").int("mib", mib as i64).finish();
    exit(0)
}

/// `hold` (see USAGE).
pub(super) fn hold(args: &[OsString], rec: &mut Recorder) -> ! {
    // Touch MIB MiB, keep them resident for MS ms, then exit.
    let mib: usize = parse(args, 2, "MIB");
    let ms: u64 = parse(args, 3, "MS");
    touch(mib);
    // Everything counted in the mm (and seen by kmem:rss_stat) for the whole hold: warm
    // the sleep and recording paths, then fold this thread's pending RSS counts (see
    // fold_rss_counters).
    rec.warm_up();
    std::thread::sleep(Duration::from_millis(1));
    fold_rss_counters(rec.fold);
    std::thread::sleep(Duration::from_millis(ms));
    rec.begin("hold")
        .int("mib", mib as i64)
        .int("ms", ms as i64)
        .finish();
    exit(0)
}

/// `grow-exec` (see USAGE).
pub(super) fn grow_exec(args: &[OsString], rec: &mut Recorder) -> ! {
    let mib: usize = parse(args, 2, "MIB");
    let argv = exec_argv(args, 3);
    let argv_ptrs = ptrs(&argv);
    touch(mib);
    rec.begin("grow-exec").int("mib", mib as i64).finish();
    execv(&argv, &argv_ptrs)
}

/// `fill` (see USAGE).
pub(super) fn fill_mode(args: &[OsString], rec: &mut Recorder) -> ! {
    let mib: usize = parse(args, 2, "MIB");
    fill_and_unmap(mib);
    rec.begin("fill").int("mib", mib as i64).finish();
    exit(0)
}
