//! Modes whose memory is shared or left behind: fillfill, a child left holding memory, a
//! copy-on-write fork, the page cache, and the trees `trace -p` attaches to.

use super::*;

/// Maps `mib` MiB of private anonymous memory, writes every byte of it (as st's fill.c does:
/// RSS grows page by page, at the pace of a byte loop), then unmaps it.
pub(super) fn fill_and_unmap(mib: usize) {
    let len = mib << 20;
    if len == 0 {
        return;
    }
    let p = map_anon(len);
    // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
    unsafe {
        for off in 0..len {
            std::ptr::write_volatile(p.add(off), b'F');
        }
        libc::munmap(p.cast(), len);
    }
}

/// st's fillfill.c: fill and free MIB MiB, then a child fills and frees twice that.
pub(super) fn fillfill(rec: &mut Recorder, mib: usize) -> ! {
    fill_and_unmap(mib);
    let child = fork();
    if child == 0 {
        fill_and_unmap(2 * mib);
        rec.begin("fillfill")
            .str("role", "child")
            .int("mib", 2 * mib as i64)
            .finish();
        exit(0)
    }
    let ok = wait_ok(child);
    rec.begin("fillfill")
        .str("role", "parent")
        .int("mib", mib as i64)
        .int("failed", i64::from(!ok))
        .finish();
    exit(0)
}

/// A child that outlives the root while holding MIB MiB: it records its VmHWM, then tells the
/// root (through a pipe) that it may exit, and holds its memory for MS ms, or until `gate`
/// exists or its directory is gone: a test that still needs it running opens the gate (a
/// `Gate` of the tests' library) when done, at any speed.
pub(super) fn leave_child(
    rec: &mut Recorder,
    mib: usize,
    ms: u64,
    gate: Option<std::path::PathBuf>,
) -> ! {
    let mut fds = [0; 2];
    // SAFETY: an array of two descriptors to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        sys_die("pipe");
    }
    let child = fork();
    if child == 0 {
        // SAFETY: closes a descriptor this process owns and does not use after.
        unsafe { libc::close(fds[0]) };
        touch(mib);
        // Warm the sleep, gate and recording paths, then fold pending RSS counts (as "hold"
        // does): nothing after the record raises the peak.
        let open = || gate.as_deref().is_some_and(spacetime_tests::gate::is_open);
        let until = std::time::Instant::now() + Duration::from_millis(ms);
        let _ = open();
        rec.warm_up();
        std::thread::sleep(Duration::from_millis(1));
        fold_rss_counters(rec.fold);
        rec.begin("leave-child")
            .str("role", "child")
            .int("mib", mib as i64)
            .finish();
        // SAFETY: writes from a buffer valid for the length given.
        if unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) } != 1 {
            sys_die("write pipe");
        }
        while std::time::Instant::now() < until && !open() {
            std::thread::sleep(Duration::from_millis(20));
        }
        exit(0)
    }
    // SAFETY: closes a descriptor this process owns and does not use after.
    unsafe { libc::close(fds[1]) };
    let mut b = [0u8; 1];
    // SAFETY: reads into a buffer valid for the length given.
    if unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) } != 1 {
        sys_die("read pipe");
    }
    rec.begin("leave-child")
        .str("role", "root")
        .int("child", i64::from(child))
        .finish();
    exit(0)
}

pub(super) fn pipe_pair() -> [libc::c_int; 2] {
    let mut fds = [0; 2];
    // SAFETY: an array of two descriptors to fill.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        sys_die("pipe");
    }
    fds
}

pub(super) fn send_byte(fd: libc::c_int) {
    // SAFETY: writes from a buffer valid for the length given.
    if unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) } != 1 {
        sys_die("write pipe");
    }
}

pub(super) fn recv_byte(fd: libc::c_int) {
    let mut b = [0u8; 1];
    // SAFETY: reads into a buffer valid for the length given.
    if unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) } != 1 {
        sys_die("read pipe");
    }
}

/// Touches MIB MiB, then forks a child that only reads them: the pages stay shared
/// (copy-on-write), yet each process's RSS counts them. Both hold until both have recorded
/// their VmHWM, so the tree's summed RSS reaches about 2×MIB while its distinct pages are
/// about MIB.
pub(super) fn cow_fork(rec: &mut Recorder, mib: usize) -> ! {
    let len = mib << 20;
    let p = map_anon(len);
    // SAFETY: a system call without pointers into memory it could misuse.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    for off in (0..len).step_by(page) {
        // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
    }
    let (ready, done) = (pipe_pair(), pipe_pair());
    let child = fork();
    if child == 0 {
        let mut sum = 0u64;
        for off in (0..len).step_by(page) {
            // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
            sum += u64::from(unsafe { std::ptr::read_volatile(p.add(off)) });
        }
        rec.begin("cow-fork")
            .str("role", "child")
            .int("mib", mib as i64)
            .int("pages_read", sum as i64)
            .finish();
        send_byte(ready[1]);
        recv_byte(done[0]);
        exit(0)
    }
    recv_byte(ready[0]);
    rec.begin("cow-fork")
        .str("role", "parent")
        .int("mib", mib as i64)
        .finish();
    send_byte(done[1]);
    let ok = wait_ok(child);
    exit(if ok { 0 } else { 1 })
}

/// Drops FILE from the page cache, reads it through a small buffer, and records how much of
/// it the page cache held before and after (mincore): the difference was brought in, and
/// charged, by this process, while its own RSS stays small.
pub(super) fn page_cache(rec: &mut Recorder, path: &std::ffi::OsStr) -> ! {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap_or_else(|_| sys_die("open FILE"));
    let len = f.metadata().unwrap_or_else(|_| sys_die("stat FILE")).len() as usize;
    let fd = f.as_raw_fd();
    // SAFETY: advice on a descriptor this process opened.
    if unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) } != 0 {
        sys_die("posix_fadvise");
    }
    let before = cached_bytes(fd, len);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        // SAFETY: reads into a buffer valid for the length given.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            sys_die("read FILE");
        }
        if n == 0 {
            break;
        }
    }
    let after = cached_bytes(fd, len);
    rec.begin("page-cache")
        .int("file_bytes", len as i64)
        .int("cached_before_bytes", before as i64)
        .int("cached_after_bytes", after as i64)
        .finish();
    exit(0)
}

/// The bytes of the file's first `len` that are in the page cache (mincore over a mapping
/// that is never touched, so it adds no RSS).
fn cached_bytes(fd: libc::c_int, len: usize) -> usize {
    // SAFETY: a system call without pointers into memory it could misuse.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a new anonymous mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        sys_die("mmap FILE");
    }
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: a vector of one byte per page of the mapping, for the mapping made above.
    if unsafe { libc::mincore(p, len, vec.as_mut_ptr()) } != 0 {
        sys_die("mincore");
    }
    // SAFETY: unmaps the mapping made above, not used after.
    unsafe { libc::munmap(p, len) };
    vec.iter().filter(|&&b| b & 1 != 0).count() * page
}

/// A process to attach to: it holds N MiB (its RSS recorded) until the byte on stdin, then
/// grows by M MiB.
pub(super) fn attach_grow(rec: &mut Recorder, n: usize, m: usize) -> ! {
    touch(n);
    rec.warm_up();
    fold_rss_counters(rec.fold);
    rec.begin("attach-grow")
        .str("role", "ready")
        .int("mib", n as i64)
        .finish();
    let line = b"ready\n";
    // SAFETY: writes from a buffer valid for the length given.
    if unsafe { libc::write(1, line.as_ptr().cast(), line.len()) } != line.len() as isize {
        sys_die("write stdout");
    }
    recv_byte(0);
    touch(m);
    fold_rss_counters(rec.fold);
    rec.begin("attach-grow")
        .str("role", "end")
        .int("mib", (n + m) as i64)
        .finish();
    exit(0)
}

/// A tree to attach to: what it touched before the byte on stdin predates the attach, what
/// it forks after follows it.
pub(super) fn attach_tree(rec: &mut Recorder, n: usize, m: usize, k: usize) -> ! {
    touch(n);
    let (pre, touched) = (pipe_pair(), pipe_pair());
    let child = fork();
    if child == 0 {
        // Only the parent writes: its end, if the parent dies, ends this wait.
        // SAFETY: closes a descriptor this process owns and does not use after.
        unsafe { libc::close(pre[1]) };
        touch(n / 2);
        // The paths to the wait faulted in now (code faults map up to 16 pages each) and the
        // RSS counts folded: nothing the child runs before its wait raises its VmHWM.
        rec.warm_up();
        fold_rss_counters(rec.fold);
        send_byte(touched[1]);
        recv_byte(pre[0]);
        rec.begin("attach-tree")
            .str("role", "pre")
            .int("mib", (n / 2) as i64)
            .finish();
        exit(5)
    }
    // "ready" only once the child's memory is final: a reader takes both VmHWMs as the truth.
    recv_byte(touched[0]);
    rec.warm_up();
    fold_rss_counters(rec.fold);
    let line = format!("ready {child}\n");
    // SAFETY: writes from a buffer valid for the length given.
    if unsafe { libc::write(1, line.as_ptr().cast(), line.len()) } != line.len() as isize {
        sys_die("write stdout");
    }
    recv_byte(0);
    let mut post = Vec::new();
    for i in 0..k {
        let c = fork();
        if c == 0 {
            touch(m);
            rec.begin("attach-tree")
                .str("role", "post")
                .int("mib", m as i64)
                .int("code", 10 + i as i64)
                .finish();
            exit(10 + i as i32)
        }
        post.push(c);
    }
    for c in post {
        let mut st = 0;
        // SAFETY: a valid status to fill (or null), for a child of this process.
        if unsafe { libc::waitpid(c, &mut st, 0) } != c {
            sys_die("waitpid");
        }
    }
    send_byte(pre[1]);
    let mut st = 0;
    // SAFETY: a valid status to fill (or null), for a child of this process.
    if unsafe { libc::waitpid(child, &mut st, 0) } != child {
        sys_die("waitpid");
    }
    rec.begin("attach-tree")
        .str("role", "parent")
        .int("mib", n as i64)
        .finish();
    exit(7)
}
