//! A service's place in the scheduler.

use std::io;

/// Puts the calling thread, and every thread it starts afterwards, under `SCHED_BATCH`. A
/// batch task keeps its fair share of the CPU, but its wake-ups never preempt the task that
/// runs: the fair class's wake-up preemption check returns early for a woken task whose
/// policy is not `SCHED_NORMAL`, leaving its turn to the tick (kernel/sched/fair.c,
/// `check_preempt_wakeup()`, `check_preempt_wakeup_fair()` from 6.7). The agent is
/// woken by what its clients send it, on their CPU (a socket's wake-up is synchronous): a
/// client that still has work to do (its exit after it closed the connection, its report
/// while the agent tidies up) then finishes it first, and one that waits for an answer
/// yields the CPU to the agent at once.
pub fn batch() -> io::Result<()> {
    // The kernel's `struct sched_param` is one int, the priority (0 outside the real-time
    // policies); libc's musl one adds fields the kernel never reads.
    let priority: libc::c_int = 0;
    // SAFETY: the system call reads one int of ours (its `struct sched_param`); pid 0 is
    // this thread. musl's `sched_setscheduler` returns ENOSYS on purpose (POSIX's
    // per-process meaning is not Linux's per-thread one), and rustix leaves it out for the
    // same reason: the system call itself, whose per-thread meaning is the one wanted.
    let r = unsafe {
        libc::syscall(
            libc::SYS_sched_setscheduler,
            0,
            libc::SCHED_BATCH,
            &priority as *const libc::c_int,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}
