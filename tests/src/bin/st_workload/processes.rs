//! Modes that make processes and threads: trees, storms, orphans, signals.

use super::*;

/// `exit-together` (see USAGE).
pub(super) fn exit_together(args: &[OsString], rec: &mut Recorder) -> ! {
    // Several threads end at once: before 6.16 more than one of them can pass the
    // kernel-side "last thread" test, and the process must still end once.
    let n: usize = parse(args, 2, "N");
    rec.begin("exit-together").int("threads", n as i64).finish();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    for _ in 1..n {
        let b = std::sync::Arc::clone(&barrier);
        std::thread::spawn(move || {
            b.wait();
            // SAFETY: exit(2) ends this thread only; nothing it owns is used after.
            unsafe { libc::syscall(libc::SYS_exit, 0) };
        });
    }
    barrier.wait();
    // SAFETY: exit(2) ends this thread only; nothing it owns is used after.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    exit(0)
}

/// `threads` (see USAGE).
pub(super) fn threads(args: &[OsString], rec: &mut Recorder) -> ! {
    let n: usize = parse(args, 2, "N");
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
    let handles: Vec<_> = (0..n)
        .map(|_| {
            let b = barrier.clone();
            std::thread::Builder::new()
                .spawn(move || {
                    let tid = gettid();
                    // All N threads are alive at once, so their tids are distinct.
                    b.wait();
                    tid
                })
                .unwrap_or_else(|e| die(&format!("spawn thread: {e}")))
        })
        .collect();
    let tids: Vec<i64> = handles
        .into_iter()
        .map(|h| h.join().unwrap_or_else(|_| die("thread panicked")))
        .collect();
    // join() returns when a thread clears its tid, before its exit is done: wait
    // until the kernel has released them, so every worker's exit precedes the main
    // thread's and the main thread is the process's last (its end).
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count()) > 1
        && std::time::Instant::now() < until
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    rec.begin("threads")
        .int("threads", n as i64)
        .ints("tids", &tids)
        .finish();
    exit(0)
}

/// `orphan` (see USAGE).
pub(super) fn orphan(args: &[OsString], rec: &mut Recorder) -> ! {
    let ms: u64 = parse(args, 2, "MS");
    // The grandchild's MS start once the root and the child have both exited (its end of
    // file), however late a busy machine lets them go.
    let [both_gone, held] = super::pipe_pair();
    let child = fork();
    if child == 0 {
        // SAFETY: a system call without pointers into memory it could misuse.
        let me = unsafe { libc::getpid() };
        let grandchild = fork();
        if grandchild == 0 {
            super::truth::close(&[held]);
            super::truth::wait_eof(both_gone);
            std::thread::sleep(Duration::from_millis(ms));
            rec.begin("orphan")
                .str("role", "grandchild")
                .int("parent_at_fork", i64::from(me))
                .int("ms", ms as i64)
                .finish();
            exit(0)
        }
        rec.begin("orphan")
            .str("role", "child")
            .int("grandchild", i64::from(grandchild))
            .finish();
        exit(0)
    }
    let ok = wait_ok(child);
    rec.begin("orphan")
        .str("role", "root")
        .int("child", i64::from(child))
        .int("failed", i64::from(!ok))
        .finish();
    exit(0)
}

/// `storm` and `spawn` (see USAGE).
pub(super) fn storm(args: &[OsString], rec: &mut Recorder) -> ! {
    let mode = args[1].to_str().unwrap_or_else(|| die("MODE"));
    let n: usize = parse(args, 2, "N");
    let argv = exec_argv(args, 3);
    let argv_ptrs = ptrs(&argv);
    let mut pids: Vec<i64> = Vec::with_capacity(n);
    let mut failed = 0i64;
    if mode == "storm" {
        for _ in 0..n {
            let pid = fork();
            if pid == 0 {
                // SAFETY: a NUL-terminated path and a null-terminated array of such strings, alive for the call.
                unsafe { libc::execv(argv[0].as_ptr(), argv_ptrs.as_ptr()) };
                exit(127);
            }
            pids.push(i64::from(pid));
            failed += i64::from(!wait_ok(pid));
        }
    } else {
        for _ in 0..n {
            let mut pid: libc::pid_t = 0;
            // SAFETY: environ is the C library's, NUL-terminated and only read here.
            let r = unsafe {
                libc::posix_spawn(
                    &mut pid,
                    argv[0].as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    argv_ptrs.as_ptr() as *const *mut libc::c_char,
                    environ,
                )
            };
            if r != 0 {
                eprintln!(
                    "st-workload: posix_spawn {:?}: {}",
                    argv[0],
                    std::io::Error::from_raw_os_error(r)
                );
                failed += 1;
                continue;
            }
            pids.push(i64::from(pid));
        }
        failed += pids.iter().filter(|&&p| !wait_ok(p as libc::pid_t)).count() as i64;
    }
    rec.begin(mode)
        .int("children", n as i64)
        .int("failed", failed)
        .ints("pids", &pids)
        .finish();
    exit(0)
}

/// `burst` (see USAGE).
pub(super) fn burst(args: &[OsString], rec: &mut Recorder) -> ! {
    let n: usize = parse(args, 2, "N");
    let tag = args
        .get(3)
        .and_then(|t| t.to_str())
        .unwrap_or_else(|| die("missing TAG"));
    let me = CString::new("/proc/self/exe").unwrap_or_else(|_| die("CString"));
    let argv0 = CString::new(args[0].as_bytes()).unwrap_or_else(|_| die("argv[0]"));
    let quiet = CString::new("quiet-exit").unwrap_or_else(|_| die("CString"));
    let mut pids: Vec<i64> = Vec::with_capacity(n);
    let mut failed = 0i64;
    for i in 0..n {
        // Built before the fork: the child only execs.
        let code = CString::new((i % 256).to_string()).unwrap_or_else(|_| die("code"));
        let name = CString::new(format!("{tag}-{i}")).unwrap_or_else(|_| die("tag"));
        let argv = [argv0.as_ptr(), quiet.as_ptr(), code.as_ptr(), name.as_ptr()];
        let argv = [argv[0], argv[1], argv[2], argv[3], std::ptr::null()];
        let pid = fork();
        if pid == 0 {
            // SAFETY: a NUL-terminated path and a null-terminated array of such strings, alive for the call.
            unsafe { libc::execv(me.as_ptr(), argv.as_ptr()) };
            exit(127);
        }
        pids.push(i64::from(pid));
        let mut status = 0;
        // SAFETY: a valid status to fill (or null), for a child of this process.
        if unsafe { libc::waitpid(pid, &mut status, 0) } != pid
            || !libc::WIFEXITED(status)
            || libc::WEXITSTATUS(status) != (i % 256) as i32
        {
            failed += 1;
        }
    }
    rec.begin("burst")
        .int("children", n as i64)
        .int("failed", failed)
        .ints("pids", &pids)
        .finish();
    exit(0)
}

/// `forkloop` (see USAGE).
pub(super) fn forkloop(args: &[OsString], rec: &mut Recorder) -> ! {
    let ms: u64 = parse(args, 2, "MS");
    let until = std::time::Instant::now() + Duration::from_millis(ms);
    let mut forks = 0i64;
    while std::time::Instant::now() < until {
        let pid = fork();
        if pid == 0 {
            // SAFETY: _exit(2) ends the process here; nothing needs dropping.
            unsafe { libc::_exit(0) };
        }
        // SAFETY: a valid status to fill (or null), for a child of this process.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        forks += 1;
    }
    println!("forks {forks}");
    rec.begin("forkloop").int("forks", forks).finish();
    exit(0)
}

/// `thread-exec` (see USAGE).
/// The recorder moves to the thread that execs.
pub(super) fn thread_exec(args: &[OsString], mut rec: Recorder) -> ! {
    let argv = exec_argv(args, 2);
    // The main thread folds its own pending RSS counts (see fold_rss_counters) before
    // the exec thread measures, then spins (no syscall text to fault in) until the
    // exec kills it.
    let folded = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let go = folded.clone();
    let fold = rec.fold;
    let _ = std::thread::Builder::new()
        .spawn(move || {
            let argv_ptrs = ptrs(&argv);
            prefault_stack();
            while !go.load(std::sync::atomic::Ordering::Acquire) {
                std::hint::spin_loop();
            }
            rec.begin("thread-exec").finish();
            // The kernel kills the other threads and gives this one the leader's pid.
            execv(&argv, &argv_ptrs)
        })
        .unwrap_or_else(|e| die(&format!("spawn thread: {e}")));
    fold_rss_counters(fold);
    folded.store(true, std::sync::atomic::Ordering::Release);
    loop {
        std::hint::spin_loop();
    }
}

/// `kill` (see USAGE).
pub(super) fn kill(args: &[OsString], rec: &mut Recorder) -> ! {
    let sig: i32 = parse(args, 2, "SIG");
    rec.begin("kill").int("sig", i64::from(sig)).finish();
    // SAFETY: calls on this process's own signal state; the sigset_t is plain integers
    // (all-zero is a value) and outlives the calls that take it.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    eprintln!("st-workload: still alive after raise({sig})");
    exit(100)
}

/// `undumpable` (see USAGE).
pub(super) fn undumpable(args: &[OsString], rec: &mut Recorder) -> ! {
    let ms: u64 = parse(args, 2, "MS");
    // SAFETY: plain syscall on this process.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    std::thread::sleep(Duration::from_millis(ms));
    rec.begin("undumpable").int("ms", ms as i64).finish();
    exit(0)
}

/// `sleep` (see USAGE).
pub(super) fn sleep(args: &[OsString], rec: &mut Recorder) -> ! {
    let ms: u64 = parse(args, 2, "MS");
    std::thread::sleep(Duration::from_millis(ms));
    rec.begin("sleep").int("ms", ms as i64).finish();
    exit(0)
}
