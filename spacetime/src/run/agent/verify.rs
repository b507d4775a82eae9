//! The proof the agent asks before it traces a process for a client: the process a pidfd
//! pins is a process (a thread-group leader, not a thread), alive and not exiting, the
//! client's own child, one the client could ptrace ([`crate::kernel::creds`]), and it has not exec'd
//! yet (it still runs the client's program, in the address space the fork copied).
//! Everything is read while the pidfd pins the process, and the pidfd is asked last whether
//! the process still runs: a pid read from /proc cannot have passed to another process in
//! between. The insert into the kernel's map is then proven again
//! ([`crate::kernel::attach::track_pinned`]).

use std::{
    io,
    os::fd::{AsRawFd, OwnedFd},
    os::unix::fs::MetadataExt,
};

use crate::{
    kernel::creds::{self, Caller, Denied},
    kernel::pidfd::{stat_fields, Pinned, StatFields},
};

/// What the client is, as the kernel told at connect (SO_PEERCRED: pid in the agent's
/// namespace, effective uid and gid).
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The proven process: its pid as the agent's namespace numbers it, how many PID
/// namespaces below the agent's it lives in, and its start (CLOCK_MONOTONIC ns, from /proc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proven {
    pub pid: u32,
    pub level: u32,
    pub start_ns: u64,
}

/// Why a process is refused: one sentence for the client.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Unproven {
    #[error("what was passed is not a process descriptor (pidfd)")]
    NotPidfd,
    #[error("the descriptor passed is a thread's (PIDFD_THREAD): pass the process's")]
    ThreadPidfd,
    #[error("the process has already exited")]
    Exited,
    #[error("the process ended, or was no longer the one proven, once it was tracked")]
    EndedWhenTracked,
    #[error("{0} is a thread of process {1}, not a process")]
    NotLeader(u32, u32),
    #[error("process {0} is not a child of the client")]
    NotChild(u32),
    #[error("process {pid} may not be traced by the client: {why}")]
    Denied { pid: u32, why: Denied },
    #[error("process {0} has already exec'd (it no longer runs the client's program)")]
    Execd(u32),
    #[error("process {pid} could not be checked: {why}")]
    Unreadable { pid: u32, why: String },
}

/// `pidfd_open`'s flag for a thread's descriptor (Linux 6.9): the file's flags carry it.
const PIDFD_THREAD: u32 = libc::O_EXCL as u32;

/// The `Pid:`, `NSpid:` and `flags:` lines of a pidfd's fdinfo: the pid in our namespace
/// (-1 once the process is gone, 0 outside our namespace), its depth below ours, and the
/// file's flags (octal there).
pub fn parse_fdinfo(text: &str) -> Option<(i64, u32, u32)> {
    let mut pid = None;
    let mut level = 0;
    let mut flags = 0;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("Pid:") {
            pid = v.trim().parse::<i64>().ok();
        } else if let Some(v) = line.strip_prefix("NSpid:") {
            level = v.split_whitespace().count().saturating_sub(1) as u32;
        } else if let Some(v) = line.strip_prefix("flags:") {
            flags = u32::from_str_radix(v.trim(), 8).ok()?;
        }
    }
    pid.map(|p| (p, level, flags))
}

/// The file a process runs, as (device, inode).
fn exe_id(pid: u32) -> io::Result<(u64, u64)> {
    let m = std::fs::metadata(format!("/proc/{pid}/exe"))?;
    Ok((m.dev(), m.ino()))
}

fn stat_of(pid: u32) -> io::Result<StatFields> {
    crate::util::proc_text::with_one_piece(format!("/proc/{pid}/stat"), stat_fields)?
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a short stat"))
}

/// Checks that `pidfd` pins a live process (not a thread) that is `peer`'s own child, that
/// the client could ptrace, not yet exec'd; returns it with the pidfd as its pin.
pub fn prove(peer: Peer, pidfd: OwnedFd) -> Result<(Proven, Pinned), Unproven> {
    let fdinfo = format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd());
    let (pid, level, flags) = crate::util::proc_text::with_one_piece_text(fdinfo, parse_fdinfo)
        .ok()
        .flatten()
        .ok_or(Unproven::NotPidfd)?;
    if flags & PIDFD_THREAD != 0 {
        return Err(Unproven::ThreadPidfd);
    }
    if pid <= 0 {
        return Err(Unproven::Exited);
    }
    let pid = pid as u32;
    let pinned = Pinned::from_fd(pidfd, pid);
    let unreadable = |e: io::Error| Unproven::Unreadable {
        pid,
        why: e.to_string(),
    };
    // The owner before the status: a process past exit_mm() when its owner was read shows
    // no mm in the status read after it, and is told apart from a setuid one by that. Root
    // may read any process (`Caller::may_read`): neither its credentials nor the child's
    // owner are read for it.
    let owner = match peer.uid {
        0 => None,
        _ => Some(creds::dumpable_owner(pid).map_err(unreadable)?),
    };
    let status = creds::status(pid).map_err(unreadable)?;
    if status.tgid != pid {
        return Err(Unproven::NotLeader(pid, status.tgid));
    }
    if status.ppid != peer.pid {
        return Err(Unproven::NotChild(pid));
    }
    if let Some(owner) = owner {
        let caller = Caller::of(peer.pid, peer.uid, peer.gid);
        caller.may_read(&status, owner).map_err(|why| match why {
            // Its /proc files are root's because it is on its way out, not because of a
            // setuid exec: said as what it is.
            Denied::Exiting => Unproven::Exited,
            why => Unproven::Denied { pid, why },
        })?;
    }
    let own = stat_of(pid).map_err(unreadable)?;
    if own.ending() {
        return Err(Unproven::Exited);
    }
    // Not exec'd: the client's own address space (spacetime starts its held children with
    // CLONE_VM, and an exec always builds a new one: one system call), or else the same file
    // as the client, in the address space the fork copied (an exec, even of the same file,
    // builds a new stack and argument area: with address randomization, elsewhere).
    if !crate::kernel::pidfd::same_address_space(pid, peer.pid) {
        let parent = stat_of(peer.pid).map_err(unreadable)?;
        if exe_id(pid).map_err(unreadable)? != exe_id(peer.pid).map_err(unreadable)?
            || own.layout != parent.layout
        {
            return Err(Unproven::Execd(pid));
        }
    }
    // Last: running now means every read above was about this very process.
    if !pinned.running() {
        return Err(Unproven::Exited);
    }
    let proven = Proven {
        pid,
        level,
        start_ns: crate::kernel::pidfd::start_mono_ns(own.start_ticks),
    };
    Ok((proven, pinned))
}

/// Whether process `pid` lives in this process's PID namespace; an error when that cannot
/// be read (without CAP_SYS_PTRACE, another process's namespace links are closed to root
/// too): not the same thing as another namespace.
pub fn same_pid_namespace(pid: u32) -> io::Result<bool> {
    // A process's own PID namespace never changes (setns changes its children's): read once.
    static OWN: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();
    let ns = |p: &str| std::fs::metadata(format!("/proc/{p}/ns/pid")).map(|m| (m.dev(), m.ino()));
    let own = match OWN.get() {
        Some(&own) => own,
        None => {
            let own = ns("self")?;
            let _ = OWN.set(own);
            own
        }
    };
    Ok(ns(&pid.to_string())? == own)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_lines() {
        let fdinfo =
            "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\nPid:\t4242\nNSpid:\t4242\t7\n";
        assert_eq!(parse_fdinfo(fdinfo), Some((4242, 1, 0o2000002)));
        assert_eq!(parse_fdinfo("Pid:\t-1\nNSpid:\t-1\n"), Some((-1, 0, 0)));
        assert_eq!(parse_fdinfo("pos:\t0\nflags:\t0100002\n"), None);
        let thread = "flags:\t02000202\nPid:\t77\n";
        let (_, _, flags) = parse_fdinfo(thread).expect("parsed");
        assert_ne!(flags & PIDFD_THREAD, 0, "O_EXCL is the thread flag");
    }

    fn me() -> Peer {
        Peer {
            pid: std::process::id(),
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        }
    }

    /// A held child of this test passes; the same child once exec'd, a pidfd of this very
    /// process (not its own child) and a plain file are refused.
    #[test]
    fn own_child_passes_and_others_are_refused() {
        let peer = me();
        let held = crate::run::launch::spawn_held(
            std::path::Path::new("/bin/true"),
            &["/bin/true".into()],
            None,
            None,
        )
        .expect("fork a held child");
        assert!(
            crate::kernel::pidfd::same_address_space(held.pid as u32, std::process::id()),
            "a held child shares our address space until its exec (kcmp)"
        );
        let (proven, _pin) = prove(peer, pidfd(held.pid as u32)).expect("our held child");
        assert_eq!(proven.pid, held.pid as u32, "the child's pid");
        let fd = pidfd(held.pid as u32);
        let child = held.release().expect("exec /bin/true");
        // Exec'd now (or exited): refused either way.
        let after = prove(peer, fd);
        assert!(
            matches!(
                after,
                Err(Unproven::Execd(_)) | Err(Unproven::Exited) | Err(Unproven::Unreadable { .. })
            ),
            "an exec'd child was accepted: {after:?}"
        );
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        assert_eq!(
            prove(peer, pidfd(std::process::id())).err(),
            Some(Unproven::NotChild(std::process::id())),
            "this process is not its own child"
        );
        let file = std::fs::File::open("/proc/self/status").expect("open a file");
        assert_eq!(
            prove(peer, OwnedFd::from(file)).err(),
            Some(Unproven::NotPidfd)
        );
    }

    /// A child with a copy of its own (a plain fork, not spacetime's CLONE_VM) is proven by
    /// its file and layout instead; once it has exec'd, it is refused.
    #[test]
    fn a_forked_child_passes_by_its_file_and_layout() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("a pipe");
        // Raw: rustix has no fork.
        // SAFETY: the child only closes, reads and exits (async-signal-safe calls).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Its copy of the write end closed, the read ends when the parent's closes.
            drop(w);
            let _ = rustix::io::read(&r, &mut [0u8; 1]);
            // SAFETY: leaves without running anything of the test harness's (std's exit would
            // run its handlers in a copy of a threaded process).
            unsafe { libc::_exit(0) }
        }
        drop(r);
        let shared = crate::kernel::pidfd::same_address_space(pid as u32, std::process::id());
        let proof = prove(me(), pidfd(pid as u32));
        drop(w);
        let child = rustix::process::Pid::from_raw(pid).expect("a child's pid");
        rustix::process::waitpid(Some(child), rustix::process::WaitOptions::empty())
            .expect("reap the child");
        assert!(!shared, "a forked child has its own address space");
        assert!(
            proof.is_ok(),
            "a forked child was refused: {:?}",
            proof.err()
        );
    }

    fn pidfd(pid: u32) -> OwnedFd {
        let p = rustix::process::Pid::from_raw(pid as i32).expect("a pid above 0");
        rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty())
            .unwrap_or_else(|e| panic!("pidfd_open({pid}): {e}"))
    }
}
