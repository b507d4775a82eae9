//! The proof the agent asks before it traces a process for a client: the process a pidfd
//! pins is the client's own child, runs as the client's user, and has not exec'd yet (it
//! still runs the client's program). Everything is read while the pidfd pins the process,
//! and the pidfd is asked last whether the process still lives: a pid read from /proc
//! cannot have passed to another process in between.

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
    os::unix::fs::MetadataExt,
};

/// What the client is, as the kernel told at connect (SO_PEERCRED).
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
}

/// The proven process: its pid as the agent's namespace numbers it, and how many PID
/// namespaces below the agent's it lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proven {
    pub pid: u32,
    pub level: u32,
}

/// Why a process is refused: one sentence for the client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("what was passed is not a process descriptor (pidfd)")]
    NotPidfd,
    #[error("the process has already exited")]
    Exited,
    #[error("process {0} is not a child of the client")]
    NotChild(u32),
    #[error("process {0} does not run as the client's user")]
    OtherUser(u32),
    #[error("process {0} has already exec'd (it no longer runs the client's program)")]
    Execd(u32),
    #[error("process {pid} could not be checked: {why}")]
    Unreadable { pid: u32, why: String },
}

/// The `Pid:` and `NSpid:` lines of a pidfd's fdinfo: the pid in our namespace (-1 once
/// the process is gone, 0 outside our namespace) and its depth below ours.
pub fn parse_fdinfo(text: &str) -> Option<(i64, u32)> {
    let mut pid = None;
    let mut level = 0;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Pid:") {
            pid = v.trim().parse::<i64>().ok();
        } else if let Some(v) = line.strip_prefix("NSpid:") {
            level = v.split_whitespace().count().saturating_sub(1) as u32;
        }
    }
    pid.map(|p| (p, level))
}

/// From /proc/PID/status: the parent's pid and the real, effective, saved and fs uids.
pub fn parse_status(text: &str) -> Option<(u32, [u32; 4])> {
    let mut ppid = None;
    let mut uids = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("PPid:") {
            ppid = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("Uid:") {
            let v: Vec<u32> = v
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            uids = <[u32; 4]>::try_from(v).ok();
        }
    }
    Some((ppid?, uids?))
}

/// The file a process runs, as (device, inode).
fn exe_id(pid: u32) -> io::Result<(u64, u64)> {
    let m = std::fs::metadata(format!("/proc/{pid}/exe"))?;
    Ok((m.dev(), m.ino()))
}

/// Checks that `pidfd` pins `peer`'s own child, of `peer`'s uid (any, for root), not yet
/// exec'd.
pub fn prove(peer: Peer, pidfd: &OwnedFd) -> Result<Proven, Refusal> {
    let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd()))
        .map_err(|_| Refusal::NotPidfd)?;
    let (pid, level) = parse_fdinfo(&fdinfo).ok_or(Refusal::NotPidfd)?;
    if pid <= 0 {
        return Err(Refusal::Exited);
    }
    let pid = pid as u32;
    let unreadable = |e: io::Error| Refusal::Unreadable {
        pid,
        why: e.to_string(),
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(unreadable)?;
    let (ppid, uids) = parse_status(&status).ok_or(Refusal::Unreadable {
        pid,
        why: "no PPid or Uid line".into(),
    })?;
    if ppid != peer.pid {
        return Err(Refusal::NotChild(pid));
    }
    if peer.uid != 0 && uids.iter().any(|&u| u != peer.uid) {
        return Err(Refusal::OtherUser(pid));
    }
    let own = exe_id(pid).map_err(unreadable)?;
    let parent = exe_id(peer.pid).map_err(unreadable)?;
    if own != parent {
        return Err(Refusal::Execd(pid));
    }
    // Last: alive now means every read above was about this very process.
    if !alive(pidfd) {
        return Err(Refusal::Exited);
    }
    Ok(Proven { pid, level })
}

/// Whether process `pid` lives in this process's PID namespace.
pub fn same_pid_namespace(pid: u32) -> bool {
    let ns = |p: &str| std::fs::metadata(format!("/proc/{p}/ns/pid")).map(|m| (m.dev(), m.ino()));
    matches!((ns(&pid.to_string()), ns("self")), (Ok(a), Ok(b)) if a == b)
}

/// Whether the process a pidfd pins still runs (signal 0 sends nothing).
fn alive(pidfd: &OwnedFd) -> bool {
    // SAFETY: plain syscall on a descriptor we own; no siginfo.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    r == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_and_status_lines() {
        let fdinfo =
            "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nPid:\t4242\nNSpid:\t4242\t7\n";
        assert_eq!(parse_fdinfo(fdinfo), Some((4242, 1)));
        assert_eq!(parse_fdinfo("Pid:\t-1\nNSpid:\t-1\n"), Some((-1, 0)));
        assert_eq!(parse_fdinfo("pos:\t0\nflags:\t0100002\n"), None);
        let status = "Name:\tx\nPPid:\t17\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(parse_status(status), Some((17, [1000; 4])));
        assert_eq!(parse_status("PPid:\t17\nUid:\t1 2\n"), None);
    }

    /// A held child of this test passes; a pidfd of this very process (not its own child)
    /// and a plain file are refused.
    #[test]
    fn own_child_passes_and_others_are_refused() {
        // SAFETY: getuid/getpid cannot fail.
        let peer = Peer {
            pid: std::process::id(),
            uid: unsafe { libc::getuid() },
        };
        let held = crate::run::launch::spawn_held(
            std::path::Path::new("/bin/true"),
            &["/bin/true".into()],
            None,
            None,
        )
        .expect("fork a held child");
        let fd = pidfd(held.pid as u32);
        let proven = prove(peer, &fd).expect("our held child is proven");
        assert_eq!(proven.pid, held.pid as u32, "the child's pid");
        let child = held.release().expect("exec /bin/true");
        // Exec'd now (or exited): refused either way.
        let after = prove(peer, &fd);
        assert!(
            matches!(
                after,
                Err(Refusal::Execd(_)) | Err(Refusal::Exited) | Err(Refusal::Unreadable { .. })
            ),
            "an exec'd child was accepted: {after:?}"
        );
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        assert_eq!(
            prove(peer, &pidfd(std::process::id())),
            Err(Refusal::NotChild(std::process::id())),
            "this process is not its own child"
        );
        let file = std::fs::File::open("/proc/self/status").expect("open a file");
        assert_eq!(prove(peer, &OwnedFd::from(file)), Err(Refusal::NotPidfd));
    }

    fn pidfd(pid: u32) -> OwnedFd {
        // SAFETY: plain syscall; the result is ours.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        assert!(fd >= 0, "pidfd_open({pid}): {}", io::Error::last_os_error());
        // SAFETY: a fresh descriptor.
        unsafe { std::os::fd::FromRawFd::from_raw_fd(fd as i32) }
    }
}
