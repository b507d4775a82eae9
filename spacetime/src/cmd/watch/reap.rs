//! Exits waiting for their release record. A process's CPU time is final only once its tasks
//! have switched out for the last time: the exit record, read inside the exit path, misses the
//! running slice, which for a short process is nearly all of it. So a process's row waits for
//! its release record, sent at that last switch (microseconds later) or when the process is
//! freed (one RCU grace period after the parent's wait or the autoreap: 12-22 ms on an idle
//! machine here, over a second on a starved one). A row still without it after
//! [`RELEASE_WAIT`] waits on until a grace period begun then has ended and its callbacks had
//! their time ([`crate::kernel::grace`]; a process reaped by then has been freed), at most
//! [`crate::kernel::grace::RELEASE_CAP`] in all; then it goes out with the exit-time figure
//! (`cpu_final: false`): a zombie nobody reaped, or a lost record.

use std::{collections::VecDeque, time::Instant};

use spacetime_common::{ExitEvent, ReapEvent};

use crate::kernel::grace::{GracePeriods, Wait, RELEASE_WAIT};
use crate::model::cputime::{self, Split};
use crate::model::table::{Ancestor, Entry};

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
    /// When its exit came, and past [`RELEASE_WAIT`] without its release, the grace period
    /// it waits for.
    since: Instant,
    grace: Option<Wait>,
}

/// Rows in exit order.
#[derive(Default)]
pub struct Waiting {
    rows: VecDeque<Exited>,
    /// Rows whose release came in time, and those that went out without it.
    pub released: u64,
    pub timed_out: u64,
    /// Asked only for rows past [`RELEASE_WAIT`]: most releases come at the last switch.
    grace: GracePeriods,
}

impl Waiting {
    pub fn push(&mut self, x: ExitEvent, e: Entry, ancestry: Vec<Ancestor>, now: Instant) {
        self.rows.push_back(Exited {
            x,
            e,
            ancestry,
            cpu: None,
            left_ns: None,
            since: now,
            grace: None,
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
        let grace = &mut self.grace;
        let i = self
            .rows
            .iter_mut()
            .position(|w| all || w.cpu.is_some() || waited_out(grace, w, now))?;
        let w = self.rows.remove(i)?;
        if w.cpu.is_some() {
            self.released += 1;
        } else {
            self.timed_out += 1;
        }
        Some(w)
    }
}

/// Whether `w` has waited for its release as long as it may (see the module's comment).
fn waited_out(grace: &mut GracePeriods, w: &mut Exited, now: Instant) -> bool {
    if now.saturating_duration_since(w.since) < RELEASE_WAIT {
        return false;
    }
    let wait = *w.grace.get_or_insert_with(|| grace.wait_begun(w.since));
    grace.over(&wait, now)
}

#[cfg(test)]
mod tests {
    use spacetime_common::{flags, kind, EventHeader};

    use std::time::Duration;

    use super::*;
    use crate::kernel::grace::{AFTER_GRACE, RELEASE_CAP};
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

    /// Past the wait, a row without its release goes once a grace period begun then has
    /// ended (the kernel's, here), or at the cap.
    #[test]
    fn a_row_without_its_free_record_goes_after_a_later_grace_period() {
        use rustix::thread::{membarrier, MembarrierCommand};
        // Where the kernel refuses grace periods (nohz_full CPUs), the wait alone holds.
        let grace_periods = membarrier(MembarrierCommand::Global).is_ok();
        let start = Instant::now()
            .checked_sub(RELEASE_WAIT)
            .expect("a second since boot");
        let mut w = Waiting::default();
        let (x, e) = exit(11, 100);
        w.push(x, e, Vec::new(), start);
        assert!(w.next_ready(start + RELEASE_WAIT / 2, false).is_none());
        // Past the wait: the period it needs begins now, so it cannot have ended AFTER_GRACE
        // before this instant.
        let first = w.next_ready(Instant::now(), false);
        assert!(
            first.is_none() || !grace_periods,
            "went before a grace period begun past the wait had ended"
        );
        let asked = Instant::now();
        let row = match first {
            Some(row) => row,
            None => loop {
                if let Some(row) = w.next_ready(Instant::now() + AFTER_GRACE, false) {
                    break row;
                }
                // Bounded only so a stalled kernel fails the test instead of hanging it.
                assert!(
                    asked.elapsed() < Duration::from_secs(120),
                    "no grace period ended"
                );
                std::thread::sleep(Duration::from_millis(1));
            },
        };
        assert_eq!(row.cpu, None);
        assert_eq!((w.released, w.timed_out), (0, 1));
        let (x, e) = exit(12, 100);
        w.push(x, e, Vec::new(), start);
        assert!(
            w.next_ready(start + RELEASE_CAP, false).is_some(),
            "at the cap, whatever grace periods do"
        );
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
