//! `trace -p PID[,PID…]`: attach to running processes, their existing descendants and every
//! later fork.
//!
//! Each pid is pinned by a pidfd first, and every /proc reading about it is trusted only once
//! the pinned process is proven to be the one read (its start time, still alive). A caller
//! that is not root (or root through sudo, for the invoking user) may attach only to a
//! process it could ptrace: [`crate::kernel::creds`] applies `PTRACE_MODE_READ`'s credential rule
//! (uids, gids, dumpable, capabilities).
//!
//! A process is tracked (TRACKED in the kernel) before its children are looked for in /proc,
//! so a child forked after that is caught by the kernel's fork record; the /proc walk repeats
//! until it finds no new descendant. Processes that predate the attach have no fork or exec
//! record: what /proc said of them (each [`Target`]) is what the run's tree adopts.

use std::io;

use crate::kernel::{
    creds::{Caller, Denied},
    events::Comm,
    loader::{Probes, SessionId},
    pidfd::{start_mono_ns, stat_fields, Identity, Pinned},
};
use crate::util::arg_area::{area_into_args, argv_of};

#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("pid {0}: no such process")]
    Gone(u32),
    #[error("pid {0} is a kernel thread: it has no memory or program to trace")]
    KernelThread(u32),
    #[error("pid {pid} is not uid {caller}'s to trace: {why} (only root traces what its user could not ptrace)")]
    NotYours { pid: u32, why: Denied, caller: u32 },
    #[error("pid {pid} is a thread of process {tgid}: attach to the process")]
    Thread { pid: u32, tgid: u32 },
    #[error("pid {0} is spacetime itself")]
    Own(u32),
    #[error("trace -p inside a PID namespace is not supported: /proc there does not give the kernel's pids")]
    Namespace,
    // Not `source` fields: the one-line message already says them, and a chain would repeat.
    #[error("pid {pid}: {err}")]
    Io { pid: u32, err: io::Error },
    #[error("tracking pid {pid}: {err}")]
    Track {
        pid: u32,
        err: crate::kernel::loader::LoadError,
    },
}

/// Parses `PID[,PID…]` (each a positive number).
pub fn parse_pids(s: &str) -> Result<Vec<u32>, String> {
    s.split(',')
        .map(|p| match p.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("{p:?} is not a pid")),
        })
        .collect()
}

/// Whose processes the caller may attach to: None for root acting as itself, else the
/// user's credentials (the invoking user's under sudo, without capabilities).
pub fn caller() -> Option<Caller> {
    let (euid, egid) = (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    );
    if euid != 0 {
        return Some(Caller::of(std::process::id(), euid, egid));
    }
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    let uid = num("SUDO_UID").filter(|&u| u != 0)?;
    Some(Caller {
        uid,
        gid: num("SUDO_GID").unwrap_or(uid),
        cap_permitted: 0,
    })
}

/// A running process, pinned, with what /proc said of it.
pub struct Target {
    pub pid: u32,
    pub ppid: u32,
    pub start_ns: u64,
    pub threads: u32,
    /// /proc/PID/exe's target, exact bytes.
    pub exe: Box<[u8]>,
    /// /proc/PID/cmdline without its final NUL (see [`crate::util::arg_area`]).
    pub args: Box<[u8]>,
    pub comm: Comm,
    pub pinned: Pinned,
}

/// A `Name:\tvalue…` line of /proc/PID/status, as numbers.
fn status_numbers(status: &str, name: &str) -> Vec<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(|v| {
            v.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Field 4 (ppid) of a stat line.
fn stat_ppid(stat: &[u8]) -> Option<u32> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

impl Target {
    /// Pins `pid`, reads it from /proc, checks the caller may attach, and proves the reading
    /// was of the pinned process.
    pub fn hold(pid: u32, caller: Option<Caller>) -> Result<Target, AttachError> {
        let io = |err| AttachError::Io { pid, err };
        if pid == std::process::id() {
            return Err(AttachError::Own(pid));
        }
        let pinned = Pinned::open(pid)
            .map_err(io)?
            .ok_or(AttachError::Gone(pid))?;
        let gone = |e: io::Error| match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ESRCH) => AttachError::Gone(pid),
            _ => io(e),
        };
        let stat = crate::util::proc_text::read(format!("/proc/{pid}/stat")).map_err(gone)?;
        let fields = stat_fields(&stat).ok_or(AttachError::Gone(pid))?;
        if fields.ending() {
            return Err(AttachError::Gone(pid));
        }
        let ticks = fields.start_ticks;
        let ppid = stat_ppid(&stat).unwrap_or(0);
        // The owner before the status (see `creds::Status::has_mm`).
        let owner = crate::kernel::creds::dumpable_owner(pid).map_err(gone)?;
        let status =
            crate::util::proc_text::read_to_string(format!("/proc/{pid}/status")).map_err(gone)?;
        let st = crate::kernel::creds::parse_status(&status).ok_or(AttachError::Gone(pid))?;
        if st.tgid != pid {
            return Err(AttachError::Thread { pid, tgid: st.tgid });
        }
        if let Some(caller) = caller {
            caller.may_read(&st, owner).map_err(|why| match why {
                Denied::Exiting => AttachError::Gone(pid),
                why => AttachError::NotYours {
                    pid,
                    why,
                    caller: caller.uid,
                },
            })?;
        }
        let threads = status_numbers(&status, "Threads:")
            .first()
            .copied()
            .unwrap_or(1);
        let exe = match std::fs::read_link(format!("/proc/{pid}/exe")) {
            Ok(p) => p.into_os_string().into_encoded_bytes(),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(AttachError::KernelThread(pid))
            }
            Err(e) => return Err(gone(e)),
        };
        let args = std::fs::read(format!("/proc/{pid}/cmdline")).map_err(gone)?;
        let comm = std::fs::read(format!("/proc/{pid}/comm")).map_err(gone)?;
        let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
        let start_ns = start_mono_ns(ticks);
        // Everything above was read while pinned: still the same process, so it was its.
        if pinned.identity(start_ns) != Identity::Same {
            return Err(AttachError::Gone(pid));
        }
        Ok(Target {
            pid,
            ppid,
            start_ns,
            threads: threads as u32,
            exe: exe.into_boxed_slice(),
            args: area_into_args(args),
            comm: Comm::new(comm),
            pinned,
        })
    }

    /// Its arguments, exact bytes.
    pub fn argv(&self) -> impl Iterator<Item = &[u8]> + Clone {
        argv_of(&self.args)
    }
}

/// Every process's parent, from one pass over /proc: (pid, ppid).
fn all_parents() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let stat = crate::util::proc_text::read(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, stat_ppid(&stat)?))
        })
        .collect()
}

/// What attaching found.
pub struct Attached {
    /// The pids asked for, then their descendants, each pinned and tracked.
    pub targets: Vec<Target>,
    /// Descendants left out: gone before they were pinned, or another user's.
    pub skipped: Vec<(u32, AttachError)>,
    /// When tracking began (CLOCK_MONOTONIC ns).
    pub attach_ns: u64,
    /// The kernel follows the RSS of the processes attached to from the attach on.
    pub memory_followed: bool,
}

/// Tracks `target` in the kernel and proves it was still the pinned process afterwards.
fn track(probes: &mut Probes, t: &Target, session: SessionId) -> Result<(), AttachError> {
    track_pinned(probes, &t.pinned, t.start_ns, session)
}

/// Has the kernel track the pinned process (started at `start_ns`, CLOCK_MONOTONIC) in
/// `session`, then proves that after the entry went in it was still that process, alive and
/// not exiting: its exit then comes later and removes the entry. Otherwise the entry is
/// removed here (an entry for a process already past its exit would make the next holder of
/// its pid traced) and the process is refused as gone. Shared by `trace -p` and the agent.
pub fn track_pinned(
    probes: &mut Probes,
    pinned: &Pinned,
    start_ns: u64,
    session: SessionId,
) -> Result<(), AttachError> {
    let pid = pinned.pid();
    probes
        .track_in(pid, session)
        .map_err(|err| AttachError::Track { pid, err })?;
    if pinned.identity(start_ns) != Identity::Same {
        let _ = probes.untrack(pid);
        return Err(AttachError::Gone(pid));
    }
    Ok(())
}

/// Pins and tracks each of `pids` (all must be there and the caller's), then their
/// descendants, until a walk of /proc finds no new one; all in `session` (0 for `trace -p`
/// itself).
pub fn attach(
    probes: &mut Probes,
    pids: &[u32],
    session: SessionId,
) -> Result<Attached, AttachError> {
    attach_as(probes, pids, session, caller())
}

/// [`attach`] for `caller` (None: root, any process; Some: only processes it could ptrace,
/// see [`crate::kernel::creds`]), which need not be this process (the agent attaches for its
/// clients).
pub fn attach_as(
    probes: &mut Probes,
    pids: &[u32],
    session: SessionId,
    caller: Option<Caller>,
) -> Result<Attached, AttachError> {
    if !crate::kernel::pidns::in_initial_namespace() {
        return Err(AttachError::Namespace);
    }
    let attach_ns = crate::util::clock::monotonic_ns();
    let mut targets = Vec::new();
    for &pid in pids {
        if targets.iter().any(|t: &Target| t.pid == pid) {
            continue;
        }
        let t = Target::hold(pid, caller)?;
        track(probes, &t, session)?;
        targets.push(t);
    }
    let mut skipped = Vec::new();
    // Bounded: a tree forking faster than it is walked is caught by the kernel anyway, since
    // each walk looks only below processes already tracked.
    for _ in 0..8 {
        let known: std::collections::HashSet<u32> = targets.iter().map(|t| t.pid).collect();
        let skip: std::collections::HashSet<u32> = skipped.iter().map(|(p, _)| *p).collect();
        let new: Vec<u32> = descendants(&known)
            .into_iter()
            .filter(|p| !known.contains(p) && !skip.contains(p))
            .collect();
        if new.is_empty() {
            break;
        }
        for pid in new {
            match Target::hold(pid, caller).and_then(|t| track(probes, &t, session).map(|()| t)) {
                Ok(t) => targets.push(t),
                Err(e) => skipped.push((pid, e)),
            }
        }
    }
    // Every process is tracked now: the kernel follows their mms from here on (a fork or
    // exec since then has already started following the newer mm).
    let memory_followed = match probes.adopt_running() {
        Ok(followed) => followed,
        Err(e) => {
            crate::errln!("spacetime: the memory of processes older than the attach is not followed over time: {e}");
            false
        }
    };
    Ok(Attached {
        targets,
        skipped,
        attach_ns,
        memory_followed,
    })
}

/// Processes below any of `roots` now.
fn descendants(roots: &std::collections::HashSet<u32>) -> Vec<u32> {
    let parents = all_parents();
    let mut found: Vec<u32> = Vec::new();
    let mut frontier: Vec<u32> = roots.iter().copied().collect();
    while let Some(p) = frontier.pop() {
        for &(child, _) in parents.iter().filter(|(_, pp)| *pp == p) {
            if !roots.contains(&child) && !found.contains(&child) {
                found.push(child);
                frontier.push(child);
            }
        }
    }
    found
}

impl Attached {
    /// Says on stderr what was attached to, and which descendants were left out because they
    /// are another user's (one that ended meanwhile is simply not there to trace).
    pub fn tell(&self, quiet: bool) {
        for (pid, e) in &self.skipped {
            match e {
                AttachError::Gone(_) => log::debug!("pid {pid} ended before it was attached"),
                _ if !quiet => crate::errln!("spacetime: not traced: {e}"),
                _ => {}
            }
        }
        if !quiet {
            crate::errln!(
                "spacetime: attached to pid {} and {} more; tracing until all have ended (Ctrl-C stops the trace, not them)",
                self.targets[0].pid,
                self.targets.len() - 1
            );
        }
    }

    /// What the report's mechanisms say of the attach.
    pub fn mechanism(&self) -> &'static str {
        if self.memory_followed {
            MECHANISM
        } else {
            MECHANISM_UNFOLLOWED
        }
    }
}

const MECHANISM: &str = "attached by pidfd to running processes: exe and argv of images older than the attach read from /proc then; their peaks exact at exit (the kernel's high-water mark covers their whole life); their RSS followed from the attach on (a task iterator run once starts following each mm, its exact RSS then the first point); processes forked since followed as for a started command";
const MECHANISM_UNFOLLOWED: &str = "attached by pidfd to running processes: exe and argv of images older than the attach read from /proc then; their peaks exact at exit (the kernel's high-water mark covers their whole life), their memory over time not followed; processes forked since followed as for a started command";

/// The VmHWM (pages) of a process still running, read through its pin once it is proven to
/// be the one meant.
pub fn vmhwm_pages(t: &Target, page_size: u64) -> Option<u64> {
    let status = crate::util::proc_text::read_to_string(format!("/proc/{}/status", t.pid)).ok()?;
    if t.pinned.identity(t.start_ns) != Identity::Same {
        return None;
    }
    let kib = status_numbers(&status, "VmHWM:").first().copied()?;
    Some(kib * 1024 / page_size.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pid_lists() {
        assert_eq!(parse_pids("12,34"), Ok(vec![12, 34]));
        assert_eq!(parse_pids(" 7"), Ok(vec![7]));
        assert!(parse_pids("0").is_err());
        assert!(parse_pids("1,x").is_err());
        assert!(parse_pids("").is_err());
    }

    #[test]
    fn own_process_reads_and_a_gone_pid_is_refused() {
        // A child of the test: ours, alive, with a known argv; its first line says it runs
        // past its exec (the parent of a vfork-style spawn resumes before argv is set up).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo; read x"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().expect("stdout")),
            &mut line,
        )
        .expect("sh's first line");
        let pid = child.id();
        let me = caller().unwrap_or(Caller {
            uid: 0,
            gid: 0,
            cap_permitted: 0,
        });
        let t = Target::hold(pid, Some(me)).expect("hold own child");
        assert_eq!(t.ppid, std::process::id());
        assert_eq!(
            t.argv().collect::<Vec<_>>(),
            [&b"sh"[..], b"-c", b"echo; read x"]
        );
        assert_eq!(t.comm.as_bytes(), b"sh");
        let other = Caller {
            uid: me.uid.wrapping_add(1),
            ..me
        };
        assert!(matches!(
            Target::hold(pid, Some(other)),
            Err(AttachError::NotYours { .. })
        ));
        child.kill().expect("kill own child");
        child.wait().expect("reap own child");
        assert!(matches!(
            Target::hold(pid, Some(me)),
            Err(AttachError::Gone(_))
        ));
        assert!(matches!(
            Target::hold(std::process::id(), None),
            Err(AttachError::Own(_))
        ));
    }
}
