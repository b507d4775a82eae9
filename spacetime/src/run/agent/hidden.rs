//! A non-root watch's taskstats records wait for their exits. The kernel sends a thread's
//! taskstats record just before the exit tracepoint runs for it (do_exit: `taskstats_exit`,
//! then `sched_process_exit`), and only the exit says whether the watcher could ptrace the
//! thread then (an `EXIT_HIDDEN` marker when it could not: a setuid program, say, whose I/O
//! counters /proc/PID/io withholds from that user). So each datagram waits until the exit
//! record of every thread it is about has come: it goes if each was shown, and is dropped if
//! one was hidden or if they have not come within [`WAIT`] (the safe side).

use std::{
    collections::{HashMap, VecDeque},
    time::{Duration, Instant},
};

use spacetime_common::{flags, kind};

use crate::kernel::taskstats::{RecordKind, TaskstatsRecord};

/// How long a datagram waits for its exits, and an exit for its datagram.
const WAIT: Duration = Duration::from_secs(1);
/// Most datagrams waiting, and most threads whose exit waits for its datagram.
const MOST: usize = 16384;

struct Waiting {
    datagram: Vec<u8>,
    /// The threads its pid records are about.
    pids: Vec<u32>,
    since: Instant,
}

/// One set's datagrams waiting for their exits, and exits waiting for their datagrams.
#[derive(Default)]
pub(super) struct Held {
    /// Per thread pid, in the order they came: shown or not, and when.
    exits: HashMap<u32, VecDeque<(bool, Instant)>>,
    waiting: VecDeque<Waiting>,
}

impl Held {
    /// A record of the set's ring: an exit says whether its thread was shown.
    pub fn exit(&mut self, record: &[u8]) {
        let Some(h) = record.get(..24) else { return };
        if u16::from_le_bytes([h[0], h[1]]) != kind::EXIT {
            return;
        }
        let f = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        let pid = u32::from_le_bytes([h[20], h[21], h[22], h[23]]);
        if self.exits.len() >= MOST && !self.exits.contains_key(&pid) {
            // Its datagram, if any, is dropped: the safe side.
            return;
        }
        let shown = f & flags::EXIT_FILTERED == 0;
        self.exits
            .entry(pid)
            .or_default()
            .push_back((shown, Instant::now()));
    }

    /// A datagram about the watcher's uid, parsed into `records`: it waits.
    pub fn datagram(&mut self, datagram: &[u8], records: &[TaskstatsRecord]) {
        let pids: Vec<u32> = records
            .iter()
            .filter(|r| r.kind == RecordKind::Pid)
            .map(|r| r.ac_pid)
            .collect();
        if pids.is_empty() || self.waiting.len() >= MOST {
            return;
        }
        self.waiting.push_back(Waiting {
            datagram: datagram.to_vec(),
            pids,
            since: Instant::now(),
        });
    }

    /// Ends a routing pass (the ring drained after the datagrams were read): datagrams whose
    /// exits all came and were shown go to `ready`; those with one hidden, or waiting past
    /// [`WAIT`], are dropped, as are exits whose datagram did not come within it.
    pub fn end_pass(&mut self, ready: &mut Vec<Vec<u8>>) {
        let now = Instant::now();
        let mut still = VecDeque::new();
        for w in self.waiting.drain(..) {
            let came = w
                .pids
                .iter()
                .all(|p| self.exits.get(p).is_some_and(|q| !q.is_empty()));
            if !came {
                if now.duration_since(w.since) < WAIT {
                    still.push_back(w);
                }
                continue;
            }
            let mut shown = true;
            for p in &w.pids {
                if let Some(q) = self.exits.get_mut(p) {
                    shown &= q.pop_front().is_some_and(|(s, _)| s);
                }
            }
            if shown {
                ready.push(w.datagram);
            }
        }
        self.waiting = still;
        self.exits.retain(|_, q| {
            q.retain(|&(_, t)| now.duration_since(t) < WAIT);
            !q.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exit(pid: u32, f: u32) -> Vec<u8> {
        let mut r = vec![0u8; 64];
        r[..2].copy_from_slice(&kind::EXIT.to_le_bytes());
        r[4..8].copy_from_slice(&f.to_le_bytes());
        r[20..24].copy_from_slice(&pid.to_le_bytes());
        r
    }

    fn pid_record(pid: u32) -> TaskstatsRecord {
        TaskstatsRecord {
            kind: RecordKind::Pid,
            ac_pid: pid,
            ..TaskstatsRecord::default()
        }
    }

    /// A datagram goes once its thread's exit came shown, in the pass it came or the next;
    /// one whose exit was hidden never goes; one whose exit never comes does not either.
    #[test]
    fn a_datagram_goes_only_after_its_exit_was_shown() {
        let mut h = Held::default();
        let mut ready = Vec::new();
        h.datagram(b"shown", &[pid_record(10)]);
        h.datagram(b"hidden", &[pid_record(11)]);
        h.datagram(b"no exit yet", &[pid_record(12)]);
        h.end_pass(&mut ready);
        assert!(ready.is_empty(), "nothing before the exits");
        h.exit(&exit(10, flags::EXIT_GROUP_DEAD));
        h.exit(&exit(11, flags::EXIT_FILTERED | flags::EXIT_HIDDEN));
        h.end_pass(&mut ready);
        assert_eq!(ready, vec![b"shown".to_vec()]);
        // An exit read before its datagram (the datagram read in the next pass).
        h.exit(&exit(12, 0));
        h.end_pass(&mut ready);
        assert_eq!(ready.len(), 2, "{ready:?}");
        // Each exit serves one datagram: a second about pid 10 waits for an exit of its own.
        h.datagram(b"again", &[pid_record(10)]);
        h.end_pass(&mut ready);
        assert_eq!(ready.len(), 2);
        assert!(h.waiting.len() == 1 && h.exits.is_empty());
    }
}
