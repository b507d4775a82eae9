//! Acting on a process only once it is proven to be the one meant. A pid alone names whoever
//! holds it now: after the traced process exited unseen (its exit record lost), a stranger may
//! hold it. A pidfd pins one process; while it is held, `/proc/PID/stat` shows that process's
//! start time (or a newer one's, which then does not match), so a match proves identity, and
//! the signal goes through the pidfd, never through the pid.
//!
//! The tree keys processes by `task->start_time` (CLOCK_MONOTONIC ns); stat's field 22 is
//! `task->start_boottime` in clock ticks. They differ by the time spent suspended before the
//! fork, which is taken as the suspended time now (CLOCK_BOOTTIME − CLOCK_MONOTONIC): after
//! a suspend during the trace the times no longer match and nothing is signalled, the safe
//! side. A tick is 10 ms: a process that took the pid within the same tick as the original
//! started cannot be told apart by /proc (the kernel frees a pid only at the end of its
//! holder's life, and hands it out again only after a full cycle of pid_max, or when root
//! steers it).

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
};

/// What `/proc/PID/stat` says about a pinned process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// The process started at the expected time and has not exited.
    Same,
    /// Gone, a zombie, or another process holding the pid.
    Other,
}

/// `task->flags` bit of a task that has begun to exit (include/linux/sched.h).
const PF_EXITING: u64 = 0x4;

/// What a stat line says of a process's life and of its address space's layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatFields {
    /// Field 3.
    pub state: u8,
    /// Field 9: `task->flags`.
    pub flags: u64,
    /// Field 22: start time, clock ticks since boot.
    pub start_ticks: u64,
    /// Fields 26-28 and 45-51 (start and end of code, stack, data and brk start, argument
    /// and environment areas): a fork copies them, an exec builds new ones (shown to a reader
    /// allowed to ptrace the process, root here; 0 otherwise).
    pub layout: [u64; 10],
}

impl StatFields {
    /// Gone, a zombie, or on its way out.
    pub fn ending(&self) -> bool {
        matches!(self.state, b'Z' | b'X') || self.flags & PF_EXITING != 0
    }
}

/// Parses a stat line (the name may hold spaces and parentheses: fields count from its
/// last `)`).
pub fn stat_fields(stat: &[u8]) -> Option<StatFields> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // rest's field i is the line's field i + 3.
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    let num = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    let mut layout = [0u64; 10];
    for (slot, field) in layout
        .iter_mut()
        .zip([26, 27, 28, 45, 46, 47, 48, 49, 50, 51])
    {
        // Kernels before 3.5 end the line before field 45: those read 0.
        *slot = num(field).unwrap_or(0);
    }
    Some(StatFields {
        state: *f.first()?.as_bytes().first()?,
        flags: num(9)?,
        start_ticks: num(22)?,
        layout,
    })
}

/// CLOCK_MONOTONIC ns of a /proc start time in clock ticks since boot.
pub fn start_mono_ns(ticks: u64) -> u64 {
    let tick = 1_000_000_000 / crate::util::clock::ticks_per_s().max(1);
    (ticks * tick).saturating_sub(crate::util::clock::boottime_offset_ns())
}

/// The start times in clock ticks since boot that stat may show for a process started at
/// `start_mono_ns`: one tick, or two when it lies within the clocks' reading error of a tick
/// boundary.
fn expected_ticks(start_mono_ns: u64) -> (u64, u64) {
    // The kernel reads both clocks at fork; ours are read a few hundred ns apart.
    const ERROR_NS: i128 = 1_000_000;
    let tick = 1_000_000_000 / crate::util::clock::ticks_per_s() as i128;
    let suspended = crate::util::clock::boottime_offset_ns() as i128;
    let boot = start_mono_ns as i128 + suspended;
    let at = |ns: i128| (ns.max(0) / tick) as u64;
    (at(boot - ERROR_NS), at(boot + ERROR_NS))
}

/// A process pinned by a pidfd.
#[derive(Debug)]
pub struct Pinned {
    fd: OwnedFd,
    pid: u32,
}

impl Pinned {
    /// Pins whichever process holds `pid` now (None if none does).
    pub fn open(pid: u32) -> io::Result<Option<Pinned>> {
        match open_pidfd(pid) {
            Ok(fd) => Ok(Some(Pinned { fd, pid })),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// A pidfd received from elsewhere (a client of the agent passed it), for `pid`, the pid
    /// its fdinfo names.
    pub fn from_fd(fd: OwnedFd, pid: u32) -> Pinned {
        Pinned { fd, pid }
    }

    /// The pinned pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Whether the pinned process has not exited: the kernel makes a pidfd readable once
    /// its process has exited (zombie or reaped), never before. A /proc reading made by pid
    /// before this says true was of the pinned process: its pid is freed only after it exits.
    pub fn running(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let mut pfd = [PollFd::new(&self.fd, PollFlags::IN)];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(poll(&mut pfd, Some(&now)), Ok(0))
    }

    /// Whether the pinned process is the one started at `start_mono_ns` (CLOCK_MONOTONIC ns,
    /// the tree's key), alive and not exiting.
    pub fn identity(&self, start_mono_ns: u64) -> Identity {
        let path = format!("/proc/{}/stat", self.pid);
        let Ok(fields) = crate::util::proc_text::with_one_piece(path, stat_fields) else {
            return Identity::Other;
        };
        match fields {
            Some(f)
                if !f.ending()
                    && {
                        let (lo, hi) = expected_ticks(start_mono_ns);
                        (lo..=hi).contains(&f.start_ticks)
                    }
                    && self.running() =>
            {
                Identity::Same
            }
            _ => Identity::Other,
        }
    }

    /// Sends `signo` to the pinned process (never to a pid).
    pub fn signal(&self, signo: libc::c_int) -> io::Result<()> {
        // Raw: rustix's Signal cannot say 0, the existence check cgroup_peak relies on.
        // SAFETY: plain syscall on a descriptor we own; no siginfo.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                signo,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// `kcmp`'s comparison of two processes' address spaces (include/uapi/linux/kcmp.h).
const KCMP_VM: libc::c_int = 1;

/// Whether processes `a` and `b` share one address space (a CLONE_VM child before its exec),
/// as `kcmp` tells; false when it cannot tell (a kernel without kcmp, a process gone).
pub fn same_address_space(a: u32, b: u32) -> bool {
    // Raw: rustix has no kcmp.
    // SAFETY: plain syscall on two pids; no pointers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::pid_t,
            b as libc::pid_t,
            KCMP_VM,
            0,
            0,
        )
    };
    r == 0
}

/// A pidfd for whichever process holds `pid` now (ESRCH: none does).
pub fn open_pidfd(pid: u32) -> io::Result<OwnedFd> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
    Ok(rustix::process::pidfd_open(
        pid,
        rustix::process::PidfdFlags::empty(),
    )?)
}

/// Whether the process (`pid`, started at `start_mono_ns`) is still alive: opened, proven,
/// closed.
pub fn alive(pid: u32, start_mono_ns: u64) -> bool {
    matches!(Pinned::open(pid), Ok(Some(p)) if p.identity(start_mono_ns) == Identity::Same)
}

/// Whether the process (`pid`, started at `start_mono_ns`) was reaped: no process holds the
/// pid, or another one does. A zombie, or a process still exiting, was not.
pub fn reaped(pid: u32, start_mono_ns: u64) -> bool {
    let Ok(Some(p)) = Pinned::open(pid) else {
        return true;
    };
    let path = format!("/proc/{}/stat", p.pid);
    let Ok(fields) = crate::util::proc_text::with_one_piece(path, stat_fields) else {
        return true;
    };
    let (lo, hi) = expected_ticks(start_mono_ns);
    !fields.is_some_and(|f| (lo..=hi).contains(&f.start_ticks))
}

/// Sends `signo` to the process (`pid`, started at `start_mono_ns`) if it is proven to be
/// that one; returns whether it was sent.
pub fn signal_if_same(pid: u32, start_mono_ns: u64, signo: libc::c_int) -> bool {
    match Pinned::open(pid) {
        Ok(Some(p)) if p.identity(start_mono_ns) == Identity::Same => p.signal(signo).is_ok(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_hostile_name() {
        let line = b"42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 200";
        let f = stat_fields(line).expect("parsed");
        assert_eq!((f.state, f.flags, f.start_ticks), (b'S', 4194560, 12345));
        assert_eq!(stat_fields(b"42 (x"), None);
    }

    #[test]
    fn own_process_is_proven_and_a_wrong_start_is_not() {
        // Our own start time, from the kernel's view of it.
        let stat = std::fs::read("/proc/self/stat").expect("stat");
        let ticks = stat_fields(&stat).expect("parse").start_ticks;
        let hz = crate::util::clock::ticks_per_s() as i128;
        let suspended = crate::util::clock::boottime_offset_ns() as i128;
        let start_mono = (ticks as i128 * (1_000_000_000 / hz) - suspended).max(0) as u64;
        let me = std::process::id();
        assert!(alive(me, start_mono), "own process not proven");
        assert!(
            !alive(me, start_mono + 5_000_000_000),
            "a later start time matched"
        );
        assert!(signal_if_same(me, start_mono, 0), "signal 0 to self");
        assert!(!signal_if_same(me, start_mono + 5_000_000_000, 0));
    }
}
