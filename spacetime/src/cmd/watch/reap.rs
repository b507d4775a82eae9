//! Exits waiting for their release record. A process's CPU time is final only once its tasks
//! have switched out for the last time: the exit record, read inside the exit path, misses the
//! running slice, which for a short process is nearly all of it. So a process's row waits for
//! its release record (sent at that last switch, microseconds later, or when the process is
//! freed, one RCU grace period after the parent's wait or the autoreap), at most
//! [`REAP_WAIT`]; then it goes out with the exit-time figure
//! (`cpu_final: false`).

use std::{
    collections::VecDeque,
    time::{Duration, Instant},
};

use spacetime_common::{ExitEvent, ReapEvent};

use crate::model::cputime::{self, Split};
use crate::model::table::{Ancestor, Entry};

/// Longest a row waits for its process's release record. When it comes at a free, that is one
/// RCU grace period after the reap: 12-22 ms on an idle machine here, up to 260 ms with both CPUs busy.
pub const REAP_WAIT: Duration = Duration::from_millis(1000);

/// A process's group exit, its table entry and ancestry at that moment, and its CPU time once
/// released.
pub struct Exited {
    pub x: ExitEvent,
    pub e: Entry,
    pub ancestry: Vec<Ancestor>,
    pub cpu: Option<Split>,
    /// When its last task left the CPU for good, where the release record said so
    /// ([`cputime::left_cpu_ns`]): its end, past its exit's teardown.
    pub left_ns: Option<u64>,
    due: Instant,
}

/// Rows in exit order.
#[derive(Default)]
pub struct Waiting {
    rows: VecDeque<Exited>,
    /// Rows whose release came in time, and those that went out without it.
    pub released: u64,
    pub timed_out: u64,
}

impl Waiting {
    pub fn push(&mut self, x: ExitEvent, e: Entry, ancestry: Vec<Ancestor>, now: Instant) {
        self.rows.push_back(Exited {
            x,
            e,
            ancestry,
            cpu: None,
            left_ns: None,
            due: now + REAP_WAIT,
        });
    }

    /// The release of a waiting process: its final CPU time. Releases of processes whose
    /// exit went out already (or was never seen) are ignored.
    pub fn reap(&mut self, r: &ReapEvent) {
        let key = (r.hdr.tgid, r.hdr.leader_start_ns);
        if let Some(w) = self
            .rows
            .iter_mut()
            .find(|w| (w.x.hdr.tgid, w.x.hdr.leader_start_ns) == key && w.cpu.is_none())
        {
            w.cpu = Some(cputime::at_release(r));
            w.left_ns = cputime::left_cpu_ns(r, w.x.hdr.ts_ns);
        }
    }

    /// The next row ready to go: released, past its wait, or every row with `all`.
    pub fn next_ready(&mut self, now: Instant, all: bool) -> Option<Exited> {
        let i = self
            .rows
            .iter()
            .position(|w| all || w.cpu.is_some() || now >= w.due)?;
        let w = self.rows.remove(i)?;
        if w.cpu.is_some() {
            self.released += 1;
        } else {
            self.timed_out += 1;
        }
        Some(w)
    }
}

#[cfg(test)]
mod tests {
    use spacetime_common::{flags, kind, EventHeader};

    use super::*;
    use crate::model::table::{Table, TableOptions};

    fn exit(pid: u32, start: u64) -> (ExitEvent, Entry) {
        let x = ExitEvent {
            hdr: EventHeader {
                kind: kind::EXIT,
                session: 0,
                flags: flags::EXIT_GROUP_DEAD,
                ts_ns: start + 10,
                tgid: pid,
                pid,
                leader_start_ns: start,
            },
            ..ExitEvent::default()
        };
        let mut t = Table::new(TableOptions {
            max_processes: 8,
            ancestry: false,
            images: false,
            threads: false,
        });
        let e = t
            .exit(&x, &mut Vec::new())
            .expect("a group exit makes an entry");
        (x, e)
    }

    fn free(pid: u32, start: u64, rtime_ns: u64) -> ReapEvent {
        ReapEvent {
            hdr: EventHeader {
                kind: kind::REAP,
                tgid: pid,
                pid,
                leader_start_ns: start,
                ..EventHeader::default()
            },
            rtime_ns,
            ..ReapEvent::default()
        }
    }

    #[test]
    fn a_row_waits_for_its_free_record_then_goes_with_it() {
        let now = Instant::now();
        let mut w = Waiting::default();
        let (x, e) = exit(10, 100);
        w.push(x, e, Vec::new(), now);
        assert!(
            w.next_ready(now, false).is_none(),
            "waits for the release record"
        );
        // Another process with the same pid (reused) does not release it.
        w.reap(&free(10, 999, 5));
        assert!(w.next_ready(now, false).is_none());
        w.reap(&free(10, 100, 700_000));
        let row = w.next_ready(now, false).expect("released");
        assert_eq!(
            row.cpu,
            Some(Split {
                user_ns: 700_000,
                sys_ns: 0
            })
        );
        assert_eq!((w.released, w.timed_out), (1, 0));
    }

    #[test]
    fn a_row_without_its_free_record_goes_after_the_wait() {
        let now = Instant::now();
        let mut w = Waiting::default();
        let (x, e) = exit(11, 100);
        w.push(x, e, Vec::new(), now);
        assert!(w.next_ready(now + REAP_WAIT / 2, false).is_none());
        let row = w.next_ready(now + REAP_WAIT, false).expect("past the wait");
        assert_eq!(row.cpu, None);
        assert_eq!((w.released, w.timed_out), (0, 1));
    }

    #[test]
    fn stopping_writes_every_row() {
        let now = Instant::now();
        let mut w = Waiting::default();
        for pid in [1, 2, 3] {
            let (x, e) = exit(pid, 100);
            w.push(x, e, Vec::new(), now);
        }
        let mut n = 0;
        while w.next_ready(now, true).is_some() {
            n += 1;
        }
        assert_eq!(n, 3);
    }
}
