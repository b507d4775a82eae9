//! Modes that report what the kernel accounts: rusage, credentials.

use super::*;

/// `rusage` (see USAGE).
pub(super) fn rusage(args: &[OsString], rec: &mut Recorder) -> ! {
    // Arguments that are not numbers (a test's token) are skipped.
    let spins: Vec<u64> = args[2..]
        .iter()
        .filter_map(|a| a.to_str()?.parse().ok())
        .collect();
    let mut pids = Vec::with_capacity(spins.len());
    let mut user = Vec::with_capacity(spins.len());
    let mut sys = Vec::with_capacity(spins.len());
    let mut reaped = Vec::with_capacity(spins.len());
    for &us in &spins {
        let pid = fork();
        if pid == 0 {
            burn_cpu_us(us);
            exit(0);
        }
        let ru = wait4_rusage(pid);
        reaped.push(spacetime_tests::monotonic_ns());
        pids.push(i64::from(pid));
        user.push(timeval_us(ru.ru_utime));
        sys.push(timeval_us(ru.ru_stime));
    }
    rec.begin("rusage")
        .ints("pids", &pids)
        .ints("user_us", &user)
        .ints("sys_us", &sys)
        .ints("reaped_ns", &reaped)
        .finish();
    exit(0)
}

/// `rusage-threads` (see USAGE).
pub(super) fn rusage_threads(args: &[OsString], rec: &mut Recorder) -> ! {
    let us: u64 = parse(args, 2, "US");
    let shapes = ["group", "leader-first", "joined"];
    let (mut pids, mut user, mut sys, mut reaped) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for shape in shapes {
        let pid = fork();
        if pid == 0 {
            threaded_exit(shape, us);
        }
        let ru = wait4_rusage(pid);
        reaped.push(spacetime_tests::monotonic_ns());
        pids.push(i64::from(pid));
        user.push(timeval_us(ru.ru_utime));
        sys.push(timeval_us(ru.ru_stime));
    }
    rec.begin("rusage-threads")
        .ints("pids", &pids)
        .ints("user_us", &user)
        .ints("sys_us", &sys)
        .ints("reaped_ns", &reaped)
        .finish();
    exit(0)
}

/// `rusage-of` (see USAGE).
pub(super) fn rusage_of(args: &[OsString], rec: &mut Recorder) -> ! {
    let argv = exec_argv(args, 2);
    let argv_ptrs = ptrs(&argv);
    let pid = fork();
    if pid == 0 {
        // SAFETY: a NUL-terminated path and a null-terminated array of such strings, alive for the call.
        unsafe { libc::execv(argv[0].as_ptr(), argv_ptrs.as_ptr()) };
        exit(127);
    }
    let ru = wait4_rusage(pid);
    let reaped = spacetime_tests::monotonic_ns();
    rec.begin("rusage-of")
        .int("child", i64::from(pid))
        .int("user_us", timeval_us(ru.ru_utime))
        .int("sys_us", timeval_us(ru.ru_stime))
        .int("reaped_ns", reaped)
        .finish();
    exit(0)
}

/// `whoami` (see USAGE).
pub(super) fn whoami(rec: &mut Recorder) -> ! {
    // SAFETY: a system call without pointers into memory it could misuse.
    let (uid, euid, gid, egid) = unsafe {
        (
            libc::getuid(),
            libc::geteuid(),
            libc::getgid(),
            libc::getegid(),
        )
    };
    let mut groups = vec![0 as libc::gid_t; 4096];
    // SAFETY: a buffer of groups.len() gids to fill.
    let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
    if n < 0 {
        sys_die("getgroups");
    }
    let groups: Vec<i64> = groups[..n as usize].iter().map(|&g| i64::from(g)).collect();
    rec.begin("whoami")
        .int("uid", i64::from(uid))
        .int("euid", i64::from(euid))
        .int("gid", i64::from(gid))
        .int("egid", i64::from(egid))
        .ints("groups", &groups)
        .finish();
    exit(0)
}
