//! Records built by hand for unit tests, in one place: the model's and the reports' tests
//! build their headers, forks and execs here rather than each spelling the structs out.

use spacetime_common::{flags, kind, EventHeader, ForkEvent};

use super::{Comm, Event, Exec};

/// A header of `kind` about process `p` (tgid, its leader's start), at `ts`; the thread is
/// the leader (pid = tgid), session 0, no flags.
pub(crate) fn hdr(kind: u16, p: (u32, u64), ts: u64) -> EventHeader {
    EventHeader {
        kind,
        session: 0,
        flags: 0,
        ts_ns: ts,
        tgid: p.0,
        pid: p.0,
        leader_start_ns: p.1,
    }
}

/// `parent` forked process `child` (pid = tgid) at `ts`, with the fork's `flags`.
pub(crate) fn fork(parent: (u32, u64), child: (u32, u64), ts: u64, flags: u32) -> ForkEvent {
    ForkEvent {
        hdr: EventHeader {
            flags,
            ..hdr(kind::FORK, parent, ts)
        },
        child_pid: child.0,
        child_tgid: child.0,
        child_start_ns: child.1,
        ..ForkEvent::default()
    }
}

/// Process `p` started thread `tid` at `ts`.
pub(crate) fn thread(p: (u32, u64), tid: u32, ts: u64) -> ForkEvent {
    ForkEvent {
        child_pid: tid,
        child_tgid: p.0,
        child_start_ns: ts,
        ..fork(p, p, ts, flags::FORK_THREAD)
    }
}

/// `p` exec'd `exe` at `ts`: uid 0, no comm, `args` the first bytes of an argument area of
/// `total` bytes.
pub(crate) fn exec(p: (u32, u64), ts: u64, exe: &str, args: &[u8], total: usize) -> Exec {
    Exec {
        hdr: hdr(kind::EXEC, p, ts),
        old_pid: p.0,
        uid: 0,
        cgroup_id: 0,
        comm: Comm::default(),
        filename: exe.as_bytes().to_vec(),
        args_len: total as u32,
        args: args.to_vec(),
    }
}

/// [`fork`] as a record of the stream.
pub(crate) fn fork_record(parent: (u32, u64), child: (u32, u64), ts: u64, f: u32) -> Event {
    Event::Fork(fork(parent, child, ts, f))
}
