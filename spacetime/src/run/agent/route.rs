//! The agent's routing: each ring record to the client of the session its header names (the
//! kernel wrote the session), each watch client's own records to it, and each taskstats
//! datagram to the client whose live process it is about.
//!
//! taskstats datagrams name a pid only, so the agent keeps which session each traced
//! process belongs to ([`Owners`]): learnt from the fork records of tracked children and
//! from the processes it tracked itself, with their start times, and forgotten once the
//! process is reaped (its free record), when its session's run ends, or when it left the
//! trace. A datagram goes to a session only about a process it owns now, whose pid record
//! says the start the agent knows, and, for a client that is not root, whose uid is the
//! client's: nothing about a pid the session no longer owns reaches it.

use std::collections::HashMap;

use spacetime_common::{flags, kind};

use super::{registry::Registry, watchers::Watchers};
use crate::kernel::{
    events::Event,
    loader::SessionId,
    ring::Ring,
    taskstats::{ListenerStats, RecordKind, TaskstatsListener, TaskstatsRecord, ThreadGroups},
};

/// A traced process, as the agent routes its taskstats records.
#[derive(Clone, Copy, Debug)]
struct Owner {
    session: SessionId,
    /// CLOCK_MONOTONIC ns.
    start_ns: u64,
    /// The routing pass during which its free record came: forgotten once that pass and
    /// the next are over (its last datagram was sent before its exit, so it is read by
    /// then).
    reaped_in: Option<u64>,
}

/// Which session owns each traced process (by tgid).
#[derive(Default)]
struct Owners {
    map: HashMap<u32, Owner>,
    pass: u64,
    /// The thread group each datagram's records are about (before 5.19, from its thread's
    /// start).
    groups: ThreadGroups,
}

impl Owners {
    /// `tgid`, started at `start_ns`, is traced in `session` from now on.
    pub fn learn(&mut self, tgid: u32, start_ns: u64, session: SessionId) {
        self.map.insert(
            tgid,
            Owner {
                session,
                start_ns,
                reaped_in: None,
            },
        );
    }

    /// Forgets every process of `session` (its run ended).
    pub fn forget_session(&mut self, session: SessionId) {
        self.map.retain(|_, o| o.session != session);
    }

    /// Thread `tid` of `tgid` started (a tracked process's: its fork record).
    fn thread_started(&mut self, tid: u32, tgid: u32) {
        if self.map.contains_key(&tgid) {
            self.groups.started(tid, tgid);
        }
    }

    /// Forgets `tgid` at once if it is the process started at `start_ns`.
    fn forget(&mut self, tgid: u32, start_ns: u64) {
        if self.map.get(&tgid).is_some_and(|o| o.start_ns == start_ns) {
            self.map.remove(&tgid);
        }
    }

    /// The process (`tgid`, `start_ns`) was reaped: forgotten after the next pass.
    fn reaped(&mut self, tgid: u32, start_ns: u64) {
        let pass = self.pass;
        if let Some(o) = self.map.get_mut(&tgid).filter(|o| o.start_ns == start_ns) {
            o.reaped_in.get_or_insert(pass);
        }
    }

    /// Ends a routing pass: processes reaped before it are forgotten.
    fn end_pass(&mut self) {
        let pass = self.pass;
        self.map
            .retain(|_, o| o.reaped_in.is_none_or(|at| at + 1 > pass));
        let map = &self.map;
        self.groups.retain(|tgid| map.contains_key(&tgid));
        self.pass += 1;
    }

    /// The session of the process a datagram's records are about, if the agent traces it
    /// and the records fit what it knows of it (its leader's start, to the second).
    fn session_of(&mut self, records: &[TaskstatsRecord]) -> Option<SessionId> {
        // Each record's group read once (a thread's is forgotten as it is read), without a
        // list per datagram.
        let (mut first, mut same) = (None, true);
        for r in records {
            let t = self.groups.of(r);
            same &= *first.get_or_insert(t) == t;
        }
        let tgid = first?;
        let o = self.map.get(&tgid)?;
        let start_s =
            (o.start_ns as i64 + crate::util::clock::realtime_offset_ns()) / 1_000_000_000;
        let fits = records
            .iter()
            .filter(|r| r.kind == RecordKind::Pid && r.ac_pid == tgid)
            .all(|r| {
                let btime = r.ac_btime64.unwrap_or(u64::from(r.ac_btime)) as i64;
                // btime is the fill time less the elapsed seconds, each cut to the second.
                (btime - start_s).abs() <= 2
            });
        (fits && same).then_some(o.session)
    }

    /// Processes known: bounded by the tracking map (each is tracked or was, one pass ago).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// The agent's routing: its ring buffer, its taskstats listener, and which session owns
/// each traced process.
pub(super) struct Router {
    ring: Ring,
    taskstats: Option<TaskstatsListener>,
    owners: Owners,
    /// The programs send each process's final CPU at its release (see `route_record`).
    cpu_at_release: bool,
    /// The taskstats datagrams of a pass and the records of one, kept between passes: the
    /// daemon's allocator unmaps a freed group, and a fresh records list of a few KiB was a
    /// mapping made and unmade for every exit on the system.
    datagrams: Datagrams,
    records: Vec<TaskstatsRecord>,
}

/// Datagrams end to end in one buffer (see `Router::datagrams`).
#[derive(Default)]
struct Datagrams {
    bytes: Vec<u8>,
    /// Where each ends in `bytes`.
    ends: Vec<usize>,
}

impl Datagrams {
    fn push(&mut self, d: &[u8]) {
        self.bytes.extend_from_slice(d);
        self.ends.push(self.bytes.len());
    }

    fn iter(&self) -> impl Iterator<Item = &[u8]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(&self.ends).map(|(a, &b)| &self.bytes[a..b])
    }

    /// Empty, with room for a usual pass kept and what a storm's took beyond it given back.
    fn clear(&mut self) {
        const KEPT: usize = 64 << 10;
        self.bytes.clear();
        self.ends.clear();
        self.bytes.shrink_to(KEPT);
        self.ends.shrink_to(KEPT / 512);
    }
}

impl Router {
    pub fn new(ring: Ring, taskstats: Option<TaskstatsListener>, cpu_at_release: bool) -> Router {
        Router {
            ring,
            taskstats,
            owners: Owners::default(),
            cpu_at_release,
            datagrams: Datagrams::default(),
            records: Vec::new(),
        }
    }

    /// What the loop polls for records.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Where the kernel has written to in the ring (see [`Ring::written`]).
    pub fn written(&self) -> u64 {
        self.ring.written()
    }

    /// The taskstats listener's figures (zero without one).
    pub fn taskstats_stats(&self) -> ListenerStats {
        self.taskstats
            .as_ref()
            .map(|t| t.stats())
            .unwrap_or_default()
    }

    /// `tgid`, started at `start_ns`, is traced in `session` from now on.
    pub fn learn(&mut self, tgid: u32, start_ns: u64, session: SessionId) {
        self.owners.learn(tgid, start_ns, session);
    }

    /// Forgets every process of `session` (its run ended).
    pub fn forget_session(&mut self, session: SessionId) {
        self.owners.forget_session(session);
    }

    /// Sends every waiting record and taskstats datagram to its session's client, the
    /// ring's records only up to `until` (a position from [`Router::written`]) when given.
    pub fn route(&mut self, clients: &mut Registry, watchers: &mut Watchers, until: Option<u64>) {
        // taskstats first: a datagram read now has its process's fork in the ring (or
        // already routed), so its tgid is known when it is routed below.
        let mut datagrams = std::mem::take(&mut self.datagrams);
        self.drain_taskstats(&mut datagrams);
        // What was written when the drain began, at most a ring's worth: storms that write
        // as fast as the agent reads never keep it from its other clients.
        let end = until.unwrap_or_else(|| self.ring.written());
        while let Some(item) = self.ring.next_record_before(end) {
            route_record(&item, clients, &mut self.owners, self.cpu_at_release);
        }
        watchers.drain(clients);
        let mut records = std::mem::take(&mut self.records);
        for d in datagrams.iter() {
            records.clear();
            crate::kernel::taskstats::parse_messages(
                d,
                &mut records,
                &mut ListenerStats::default(),
            );
            let session = self.owners.session_of(&records);
            if let Some(c) = session.and_then(|s| clients.running_mut(s)) {
                if c.peer.uid == 0 || of_uid(&records, c.peer.uid) {
                    c.taskstats(d);
                } else {
                    log::debug!("a datagram of another uid for session {:?}", c.session);
                }
            }
            watchers.offer(d, &records);
        }
        watchers.deliver_taskstats(clients);
        self.owners.end_pass();
        records.clear();
        datagrams.clear();
        self.records = records;
        self.datagrams = datagrams;
    }

    /// Appends the datagrams the listener holds (none more after it fails).
    fn drain_taskstats(&mut self, datagrams: &mut Datagrams) {
        if let Some(t) = self.taskstats.as_mut() {
            if let Err(e) = t.drain_datagrams(&mut |d| datagrams.push(d)) {
                log::warn!("spacetime agent: taskstats: {e}; no more exit records");
                self.taskstats = None;
            }
        }
    }
}

/// Whether every record that carries an identity is of `uid` (a thread group's record
/// carries none: it goes with its pid record).
pub(super) fn of_uid(records: &[TaskstatsRecord], uid: u32) -> bool {
    records.iter().any(|r| r.ac_pid != 0)
        && records.iter().all(|r| r.ac_pid == 0 || r.ac_uid == uid)
}

/// One ring record to its session's client; what it says of processes' lives updates the
/// owners: a tracked child joins, a reaped process goes (or, without free records, one whose
/// group exited), one that left the trace goes at once.
fn route_record(bytes: &[u8], clients: &mut Registry, owners: &mut Owners, cpu_at_release: bool) {
    let Some(head) = bytes.get(..4) else { return };
    let ty = u16::from_le_bytes([head[0], head[1]]);
    let session = u16::from_le_bytes([head[2], head[3]]);
    if session == 0 {
        return;
    }
    if ty == kind::EXEC {
        // Its header says all the owners need (the full decode would copy its arguments).
        if let Ok(h) = crate::kernel::events::decode_header(bytes) {
            if h.flags & flags::EXEC_LEFT != 0 {
                owners.forget(h.tgid, h.leader_start_ns);
            }
        }
    } else if matches!(ty, kind::FORK | kind::REAP | kind::EXIT) {
        match crate::kernel::events::decode(bytes) {
            Ok(Event::Fork(f))
                if f.hdr.flags & (flags::FORK_THREAD | flags::FORK_UNTRACKED) == 0 =>
            {
                owners.learn(f.child_tgid, f.child_start_ns, session)
            }
            Ok(Event::Fork(f)) if f.hdr.flags & flags::FORK_THREAD != 0 => {
                owners.thread_started(f.child_pid, f.hdr.tgid)
            }
            Ok(Event::Reap(r)) => owners.reaped(r.hdr.tgid, r.hdr.leader_start_ns),
            Ok(Event::Exit(x)) if !cpu_at_release && x.hdr.flags & flags::EXIT_GROUP_DEAD != 0 => {
                owners.reaped(x.hdr.tgid, x.hdr.leader_start_ns)
            }
            _ => {}
        }
    }
    if let Some(c) = clients.running_mut(session) {
        // Ticks go only to a session that asked for them (the program runs for another).
        if ty != kind::TICK || c.cpu {
            c.record(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process reaped in one pass is still routed in the next (its last datagram may be
    /// read then), and forgotten after it; another process on its pid is not its.
    #[test]
    fn a_reaped_process_is_forgotten_after_the_next_pass() {
        let mut o = Owners::default();
        o.learn(42, 1_000, 3);
        o.reaped(42, 999);
        o.end_pass();
        assert_eq!(o.len(), 1, "a reap of another start changes nothing");
        o.reaped(42, 1_000);
        o.end_pass();
        assert_eq!(o.len(), 1, "kept through the pass of its reap");
        o.end_pass();
        assert_eq!(o.len(), 0, "forgotten after the next");
        o.learn(43, 5, 4);
        o.learn(44, 5, 5);
        o.forget_session(4);
        assert_eq!(o.len(), 1);
    }

    /// Before 5.19 a thread's record names only its own pid: it goes to the session of the
    /// process the thread started in, and once a record names its group, threads are no
    /// longer remembered.
    #[test]
    fn an_old_threads_record_goes_to_its_process_session() {
        let start_ns: u64 = 1_000_000_000_000;
        let start_s = (start_ns as i64 + crate::util::clock::realtime_offset_ns()) / 1_000_000_000;
        let rec = |pid: u32, tgid: Option<u32>| TaskstatsRecord {
            kind: RecordKind::Pid,
            id: pid,
            ac_pid: pid,
            ac_tgid: tgid,
            ac_btime64: Some(start_s as u64),
            ..TaskstatsRecord::default()
        };
        let mut o = Owners::default();
        o.learn(42, start_ns, 3);
        o.thread_started(43, 42);
        o.thread_started(50, 77);
        assert_eq!(
            o.session_of(&[rec(43, None)]),
            Some(3),
            "the thread's process's"
        );
        assert_eq!(
            o.session_of(&[rec(50, None)]),
            None,
            "a thread of no traced process"
        );
        assert_eq!(o.session_of(&[rec(42, Some(42))]), Some(3));
        o.thread_started(44, 42);
        assert_eq!(
            o.session_of(&[rec(44, None)]),
            None,
            "records name their group now"
        );
    }

    /// A pass's datagrams come back whole and in order; cleared, a storm's room is given back
    /// down to what a usual pass keeps.
    #[test]
    fn datagrams_come_back_whole_and_a_storms_room_is_given_back() {
        let mut d = Datagrams::default();
        d.push(b"first");
        d.push(b"");
        d.push(b"third one");
        let got: Vec<&[u8]> = d.iter().collect();
        assert_eq!(got, [&b"first"[..], b"", b"third one"]);
        d.clear();
        assert_eq!(d.iter().count(), 0, "cleared");
        for _ in 0..1000 {
            d.push(&[7u8; 600]);
        }
        assert_eq!(d.iter().count(), 1000);
        assert!(d.iter().all(|x| x == [7u8; 600]), "each datagram as pushed");
        d.clear();
        assert!(
            d.bytes.capacity() <= 64 << 10,
            "a storm's {} bytes of room kept",
            d.bytes.capacity()
        );
    }
}
