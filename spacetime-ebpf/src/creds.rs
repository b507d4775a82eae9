//! An exec that takes a traced process out of its session's owner's reach: a session an agent
//! traces for a user who is not root names that user (`SessionLimit::owner_uid`), and a
//! process whose exec gave it credentials the user lacks (a setuid, setgid or
//! file-capability program, or one the user cannot read, which leaves it not dumpable) is
//! one the user could not ptrace. It leaves the session there (exec.rs).

use spacetime_common::stat;

use crate::{
    conf, count,
    task::{read_or_zero, Task},
    SESSION_LIMITS,
};

/// `mm->flags & MMF_DUMPABLE_MASK` of a process its user may ptrace (`SUID_DUMP_USER`).
const DUMPABLE_USER: u64 = 1;
const DUMPABLE_MASK: u64 = 3;

/// Whether `task`, which just exec'd with `mm` in `session`, holds credentials the
/// session's owner does not (see [`foreign`]).
#[inline(always)]
pub fn left(session: u16, task: &Task, mm: u64) -> bool {
    if conf!(off.task_real_cred) == 0 {
        return false;
    }
    let Some(owner) = SESSION_LIMITS.get(session as u32) else {
        return false;
    };
    if owner.owner_uid == 0 {
        return false;
    }
    let who = Owner {
        uid: owner.owner_uid,
        gid: owner.owner_gid,
        caps: owner.owner_caps,
    };
    foreign(session, task, mm, &who)
}

/// Who may read a process, as ptrace compares it.
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub caps: u64,
}

/// Whether `owner` could not ptrace `task`: its real, effective or saved uid or gid is not
/// the owner's, it holds a permitted capability the owner lacks, or it is not dumpable
/// (`mm` 0: an exit past exit_mm(), before 6.16: not checked). A failed read counts as
/// foreign (the safe side), and is counted.
#[inline(always)]
pub fn foreign(session: u16, task: &Task, mm: u64, owner: &Owner) -> bool {
    let mut cred = 0u64;
    let mut err = read_or_zero(&mut cred, task.0, conf!(off.task_real_cred));
    let (mut uid, mut euid, mut suid) = (0u32, 0u32, 0u32);
    let (mut gid, mut egid, mut sgid) = (0u32, 0u32, 0u32);
    let (mut caps, mut mm_flags) = (0u64, DUMPABLE_USER);
    err |= read_or_zero(&mut uid, cred, conf!(off.cred_uid));
    err |= read_or_zero(&mut euid, cred, conf!(off.cred_euid));
    err |= read_or_zero(&mut suid, cred, conf!(off.cred_suid));
    err |= read_or_zero(&mut gid, cred, conf!(off.cred_gid));
    err |= read_or_zero(&mut egid, cred, conf!(off.cred_egid));
    err |= read_or_zero(&mut sgid, cred, conf!(off.cred_sgid));
    err |= read_or_zero(&mut caps, cred, conf!(off.cred_cap_permitted));
    if mm != 0 {
        err |= read_or_zero(&mut mm_flags, mm, conf!(off.mm_flags));
    }
    if err != 0 {
        count(session, stat::READ_FAIL);
        return true;
    }
    let (u, g) = (owner.uid, owner.gid);
    (uid != u || euid != u || suid != u)
        || (gid != g || egid != g || sgid != g)
        || caps & !owner.caps != 0
        || mm_flags & DUMPABLE_MASK != DUMPABLE_USER
}
