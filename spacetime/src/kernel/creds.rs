//! Whether one user may learn about another process: the credential part of ptrace's
//! `PTRACE_MODE_READ` rule (kernel/ptrace.c, `__ptrace_may_access` and the capability
//! module's `cap_ptrace_access_check`), applied from /proc by a root process that acts for
//! that user (the agent for its clients, `trace -p` under sudo for the invoking user).
//!
//! The caller may read a process when the process's real, effective and saved uids are all
//! the caller's, and so are its real, effective and saved gids; when the process is dumpable
//! (a setuid, setgid or file-capability exec, or an exec of a file the user cannot read,
//! clears that; /proc shows it as the owner of /proc/PID/status: root when not dumpable); and
//! the process holds no permitted capability the caller lacks. What ptrace adds beyond (LSMs,
//! Yama's scope, CAP_SYS_PTRACE in the target's user namespace) is not applied: each can only
//! refuse more.

use std::os::unix::fs::MetadataExt;

/// Who asks, as ptrace compares it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caller {
    pub uid: u32,
    pub gid: u32,
    /// Its permitted capabilities (a bit per capability, as /proc shows `CapPrm`).
    pub cap_permitted: u64,
}

/// What /proc/PID/status says of a process that the rule and the agent's checks need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// The state letter (`R`, `S`, `Z`…).
    pub state: u8,
    pub tgid: u32,
    pub pid: u32,
    pub ppid: u32,
    /// Real, effective, saved and filesystem uids.
    pub uids: [u32; 4],
    /// Real, effective, saved and filesystem gids.
    pub gids: [u32; 4],
    pub cap_permitted: u64,
    /// It has an mm (the `VmSize` line): an exiting task past `exit_mm()`, a zombie or a
    /// kernel thread has none, and the kernel then shows its /proc files as root's
    /// (`task_dump_owner`, fs/proc/base.c) whatever its dumpable flag was. Read the owner
    /// ([`dumpable_owner`]) before the status: an mm gone by the owner's read is gone by the
    /// status's.
    pub has_mm: bool,
}

/// Why the caller may not read a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("it runs as uid {0}")]
    OtherUser(u32),
    #[error("it runs as gid {0}")]
    OtherGroup(u32),
    #[error(
        "it is not dumpable (a setuid, setgid or capability program, or one its user cannot read)"
    )]
    NotDumpable,
    #[error("it is exiting (its memory is gone, so the kernel no longer shows whose it is)")]
    Exiting,
    #[error("it holds capabilities its user lacks")]
    Capabilities,
}

fn ids(v: &str) -> Option<[u32; 4]> {
    let v: Vec<u32> = v
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    <[u32; 4]>::try_from(v).ok()
}

/// Parses /proc/PID/status (None when a line the rule needs is missing or malformed).
pub fn parse_status(text: &str) -> Option<Status> {
    let mut s = Status::default();
    let mut seen = 0u8;
    for line in text.lines() {
        let Some((key, v)) = line.split_once(':') else {
            continue;
        };
        let v = v.trim();
        let bit = match key {
            "State" => {
                s.state = *v.as_bytes().first()?;
                1
            }
            "Tgid" => {
                s.tgid = v.parse().ok()?;
                2
            }
            "Pid" => {
                s.pid = v.parse().ok()?;
                4
            }
            "PPid" => {
                s.ppid = v.parse().ok()?;
                8
            }
            "Uid" => {
                s.uids = ids(v)?;
                16
            }
            "Gid" => {
                s.gids = ids(v)?;
                32
            }
            "CapPrm" => {
                s.cap_permitted = u64::from_str_radix(v, 16).ok()?;
                64
            }
            "VmSize" => {
                s.has_mm = true;
                0
            }
            _ => 0,
        };
        seen |= bit;
    }
    (seen == 127).then_some(s)
}

/// Reads and parses /proc/PID/status.
pub fn status(pid: u32) -> std::io::Result<Status> {
    let path = format!("/proc/{pid}/status");
    crate::util::proc_text::with_one_piece_text(path, parse_status)?.ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/status lacks a line it always has"),
        )
    })
}

/// Whether process `pid` is dumpable: the kernel makes the files of /proc/PID owned by root
/// when it is not (`task_dump_owner`; /proc/PID itself keeps the effective ids), by its
/// effective uid and gid when it is.
pub fn dumpable_owner(pid: u32) -> std::io::Result<(u32, u32)> {
    let m = std::fs::metadata(format!("/proc/{pid}/status"))?;
    Ok((m.uid(), m.gid()))
}

impl Caller {
    /// The caller `pid` with effective `uid` and `gid` (as SO_PEERCRED gives them) and the
    /// permitted capabilities its status shows now (none when it cannot be read).
    pub fn of(pid: u32, uid: u32, gid: u32) -> Caller {
        Caller {
            uid,
            gid,
            cap_permitted: status(pid).map(|s| s.cap_permitted).unwrap_or(0),
        }
    }

    /// Root acting for itself: every process.
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// The rule, on a status read and the owner of /proc/PID read while the process was
    /// pinned (the caller proves afterwards that the pinned process is still the one read).
    pub fn may_read(&self, s: &Status, owner: (u32, u32)) -> Result<(), Denied> {
        if self.is_root() {
            return Ok(());
        }
        if let Some(&u) = s.uids[..3].iter().find(|&&u| u != self.uid) {
            return Err(Denied::OtherUser(u));
        }
        if let Some(&g) = s.gids[..3].iter().find(|&&g| g != self.gid) {
            return Err(Denied::OtherGroup(g));
        }
        if owner != (self.uid, self.gid) {
            return Err(if s.has_mm {
                Denied::NotDumpable
            } else {
                Denied::Exiting
            });
        }
        if s.cap_permitted & !self.cap_permitted != 0 {
            return Err(Denied::Capabilities);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tsh\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t42\nNgid:\t0\nPid:\t42\nPPid:\t7\nTracerPid:\t0\nUid:\t1000\t1000\t1000\t1000\nGid:\t100\t100\t100\t100\nFDSize:\t64\nCapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nVmSize:\t    2304 kB\n";

    #[test]
    fn status_lines() {
        let s = parse_status(STATUS).expect("parsed");
        assert_eq!((s.state, s.tgid, s.pid, s.ppid), (b'S', 42, 42, 7));
        assert_eq!(s.uids, [1000; 4]);
        assert_eq!(s.gids, [100; 4]);
        assert_eq!(s.cap_permitted, 0);
        assert!(s.has_mm, "a VmSize line");
        assert!(
            !parse_status(&STATUS.replace("VmSize", "VmX"))
                .expect("parsed")
                .has_mm
        );
        assert_eq!(parse_status("Pid:\t1\n"), None, "lines missing");
        let bad = STATUS.replace("Uid:\t1000\t1000\t1000\t1000", "Uid:\t1000 x");
        assert_eq!(parse_status(&bad), None, "a malformed uid line");
    }

    /// Each part of the rule refuses on its own; root reads everything.
    #[test]
    fn the_rule() {
        let s = parse_status(STATUS).expect("parsed");
        let me = Caller {
            uid: 1000,
            gid: 100,
            cap_permitted: 0,
        };
        assert_eq!(me.may_read(&s, (1000, 100)), Ok(()));
        let mut setuid = s;
        setuid.uids = [1000, 0, 0, 0];
        assert_eq!(me.may_read(&setuid, (0, 100)), Err(Denied::OtherUser(0)));
        let mut setgid = s;
        setgid.gids = [100, 42, 42, 42];
        assert_eq!(
            me.may_read(&setgid, (1000, 42)),
            Err(Denied::OtherGroup(42))
        );
        assert_eq!(me.may_read(&s, (0, 0)), Err(Denied::NotDumpable));
        // Past exit_mm() (a zombie, or a task on its way out) the kernel shows root as the
        // owner whatever the dumpable flag: said as exiting, not as a setuid program.
        let exiting = Status { has_mm: false, ..s };
        assert_eq!(me.may_read(&exiting, (0, 0)), Err(Denied::Exiting));
        let mut caps = s;
        caps.cap_permitted = 1 << 13;
        assert_eq!(me.may_read(&caps, (1000, 100)), Err(Denied::Capabilities));
        let rich = Caller {
            cap_permitted: 1 << 13,
            ..me
        };
        assert_eq!(rich.may_read(&caps, (1000, 100)), Ok(()));
        let root = Caller {
            uid: 0,
            gid: 0,
            cap_permitted: 0,
        };
        assert_eq!(root.may_read(&setuid, (0, 0)), Ok(()));
    }
}
