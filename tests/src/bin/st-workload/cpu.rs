//! CPU modes: rusage, rusage-of (what wait4 returns, the truth for CPU figures).

use super::*;

/// `rusage` (see USAGE).
pub(super) fn mode_rusage(rec: &mut Recorder, args: &[OsString]) {
    // Arguments that are not numbers (a test's token) are skipped.
    let spins: Vec<u64> = args[2..]
        .iter()
        .filter_map(|a| a.to_str()?.parse().ok())
        .collect();
    let mut pids = Vec::with_capacity(spins.len());
    let mut user = Vec::with_capacity(spins.len());
    let mut sys = Vec::with_capacity(spins.len());
    for &us in &spins {
        let pid = fork();
        if pid == 0 {
            burn_cpu_us(us);
            exit(0);
        }
        let ru = wait4_rusage(pid);
        pids.push(i64::from(pid));
        user.push(timeval_us(ru.ru_utime));
        sys.push(timeval_us(ru.ru_stime));
    }
    rec.begin("rusage")
        .ints("pids", &pids)
        .ints("user_us", &user)
        .ints("sys_us", &sys)
        .finish();
    exit(0)
}

/// `rusage-of` (see USAGE).
pub(super) fn mode_rusage_of(rec: &mut Recorder, args: &[OsString]) {
    let argv = exec_argv(args, 2);
    let argv_ptrs = ptrs(&argv);
    let pid = fork();
    if pid == 0 {
        unsafe { libc::execv(argv[0].as_ptr(), argv_ptrs.as_ptr()) };
        exit(127);
    }
    let ru = wait4_rusage(pid);
    rec.begin("rusage-of")
        .int("child", i64::from(pid))
        .int("user_us", timeval_us(ru.ru_utime))
        .int("sys_us", timeval_us(ru.ru_stime))
        .finish();
    exit(0)
}
