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

use rustc_hash::FxHashSet;
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

/// Field 3 (state) and field 22 (start time, clock ticks) of a stat line; the name (field 2)
/// may hold spaces and parentheses, so fields count from its last `)`.
pub fn parse_stat(stat: &[u8]) -> Option<(u8, u64)> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    let mut f = rest.split_ascii_whitespace();
    let state = f.next()?.bytes().next()?;
    // Fields 4..=21 lie between the state and the start time.
    let start = f.nth(18)?.parse().ok()?;
    Some((state, start))
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

    /// Whether the pinned process is the one started at `start_mono_ns` (CLOCK_MONOTONIC ns,
    /// the tree's key), alive.
    pub fn identity(&self, start_mono_ns: u64) -> Identity {
        let Ok(stat) = std::fs::read(format!("/proc/{}/stat", self.pid)) else {
            return Identity::Other;
        };
        match parse_stat(&stat) {
            Some((state, ticks))
                if !matches!(state, b'Z' | b'X') && {
                    let (lo, hi) = expected_ticks(start_mono_ns);
                    (lo..=hi).contains(&ticks)
                } =>
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

/// Sends `signo` to the process (`pid`, started at `start_mono_ns`) if it is proven to be
/// that one; returns whether it was sent.
pub fn signal_if_same(pid: u32, start_mono_ns: u64, signo: libc::c_int) -> bool {
    match Pinned::open(pid) {
        Ok(Some(p)) if p.identity(start_mono_ns) == Identity::Same => p.signal(signo).is_ok(),
        _ => false,
    }
}

/// The processes of `tree` whose exit was never seen and that are gone (not proven alive):
/// their exit records were lost, so how they ended is unknown.
pub fn gone_unseen(tree: &crate::model::tree::Tree) -> FxHashSet<crate::model::tree::Key> {
    tree.processes()
        .iter()
        .filter(|p| p.end_ns.is_none())
        .filter_map(|p| p.key)
        .filter(|k| !alive(k.tgid, k.start_ns))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_hostile_name() {
        let line = b"42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 12345 1000 200";
        assert_eq!(parse_stat(line), Some((b'S', 12345)));
        assert_eq!(parse_stat(b"42 (x"), None);
    }

    #[test]
    fn own_process_is_proven_and_a_wrong_start_is_not() {
        // Our own start time, from the kernel's view of it.
        let stat = std::fs::read("/proc/self/stat").expect("stat");
        let (_, ticks) = parse_stat(&stat).expect("parse");
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
