//! The end of a client's run, in one round trip: the client's `Finish` is answered with every
//! record of the run, the final CPU records of its processes included, then the figures only
//! the agent reads ([`proto::Msg::Mms`], [`proto::Msg::End`]).
//!
//! A process's final CPU record goes at its last context switch, microseconds after its
//! exit, or, when the switch cannot prove the figures final, one RCU grace period after its
//! reap (12-22 ms idle, more under load). The client has reaped its processes before it asks
//! to finish: processes of the session still waiting for that record (their `REAPING`
//! entries) and already reaped are waited for here, the answer held back while the loop
//! polls at [`FINISH_POLL`], for at most [`RELEASE_WAIT`], at most [`MAX_AWAITED`] processes,
//! one map lookup a poll for those still waiting. A zombie not reaped (a process attached
//! to, whose parent is not the client) is not waited for.

use std::time::{Duration, Instant};

use super::daemon::Agent;
use crate::kernel::{loader::SessionId, remote::proto};

/// Longest the agent holds a finish back for final CPU records.
const RELEASE_WAIT: Duration = Duration::from_millis(1000);
/// How often the loop looks while a finish is held back: the records do not wake the agent
/// (the ring wakes it only past a fill threshold).
pub(super) const FINISH_POLL: Duration = Duration::from_millis(1);
/// Most processes one finish waits for (each was proven reaped, a pidfd and a read of
/// /proc, when the finish came).
const MAX_AWAITED: usize = 64;

/// A finish held back for final CPU records.
pub(super) struct Finishing {
    /// Processes (tgid, leader start) whose record has not gone yet.
    awaited: Vec<(u32, u64)>,
    until: Instant,
}

impl Agent {
    /// Client `i` ends its run in session `s`: answered now, or once the final CPU records
    /// of its reaped processes went (with `wait_release`, bounded).
    pub(super) fn finish(&mut self, i: usize, s: SessionId, wait_release: bool) {
        self.route();
        let awaited = match wait_release && self.probes.cpu_at_release {
            true => self.awaited_releases(i, s),
            false => Vec::new(),
        };
        if awaited.is_empty() {
            return self.end_run(i, s);
        }
        log::debug!(
            "session {s}: finish waits for {} final CPU records",
            awaited.len()
        );
        self.clients[i].finishing = Some(Finishing {
            awaited,
            until: Instant::now() + RELEASE_WAIT,
        });
    }

    /// The reaped processes of client `i`'s run whose final CPU record has not gone yet.
    fn awaited_releases(&self, i: usize, s: SessionId) -> Vec<(u32, u64)> {
        if self.clients[i].run.is_none() {
            return Vec::new();
        }
        let mut awaited = match self.probes.awaiting_release(s) {
            Ok(a) => a,
            Err(e) => {
                log::warn!("spacetime agent: processes waiting for their final records: {e}");
                return Vec::new();
            }
        };
        awaited.retain(|&(tgid, start_ns)| crate::run::pidfd::reaped(tgid, start_ns));
        awaited.truncate(MAX_AWAITED);
        awaited
    }

    /// Whether some finish is held back (the loop then polls at [`FINISH_POLL`]).
    pub(super) fn finishing(&self) -> bool {
        self.clients.iter().any(|c| c.finishing.is_some())
    }

    /// Answers every held-back finish whose records went (routed just before), or whose
    /// wait is over.
    pub(super) fn advance_finishing(&mut self) {
        let now = Instant::now();
        for i in 0..self.clients.len() {
            let Some(mut f) = self.clients[i].finishing.take() else {
                continue;
            };
            // One lookup a poll for a process still waiting, whatever a client holds: the
            // first still waiting stops the look.
            while let Some(&(tgid, start_ns)) = f.awaited.last() {
                if self.probes.awaits_release(tgid, start_ns) {
                    break;
                }
                f.awaited.pop();
            }
            let session = self.clients[i].session;
            match (session, f.awaited.is_empty() || now >= f.until) {
                (Some(s), true) => {
                    if !f.awaited.is_empty() {
                        log::debug!(
                            "session {s}: {} final CPU records did not come in time (tgid, start: {:?})",
                            f.awaited.len(),
                            &f.awaited[..f.awaited.len().min(4)]
                        );
                    }
                    // What the kernel wrote since the loop's drain.
                    self.route();
                    self.end_run(i, s);
                }
                (Some(_), false) => self.clients[i].finishing = Some(f),
                (None, _) => {}
            }
        }
    }

    /// Ends client `i`'s run: every record sent, then the figures only the agent reads.
    fn end_run(&mut self, i: usize, s: SessionId) {
        let Some(baseline) = self.clients[i].run.as_ref().map(|r| r.baseline) else {
            // Nothing tracked (the track was refused): an empty end.
            return self.clients[i].control(&proto::Msg::End(proto::End::default()));
        };
        // The mms before the tree's sum: a process growing between the two reads raises the
        // tree's peak past its own, never its own past the tree's.
        let mms = self.probes.followed_mms_of(s).unwrap_or_default();
        // A process no longer followed at that read wrote its last records (its peak, its
        // exit) before it: they end here, marked before the tree's sum, which covers them.
        let written = self.ring.written();
        let tree_rss = self.probes.tree_rss_of(s).unwrap_or_default();
        let counters = self
            .probes
            .counters_of(s)
            .map(|c| c.since(&baseline))
            .unwrap_or_default();
        // What the kernel wrote from the last drain to that mark, while the run is still the
        // client's (records of a session with no run go nowhere). The answer goes before the
        // untracking (map walks, 0.1-0.3 ms here): what a process still running writes
        // meanwhile is past the run's end, which its client would not take.
        self.route_to(Some(written));
        let Some(run) = self.clients[i].run.take() else {
            return;
        };
        let enobufs = self.taskstats_stats().enobufs - run.enobufs_at_start;
        let c = &mut self.clients[i];
        // What did not fit the queues' bounds (`queues`), the records sent just before
        // included.
        c.seal();
        let loss = c.take_loss();
        for chunk in mms.chunks(proto::MMS_PER_MESSAGE) {
            c.control(&proto::Msg::Mms(chunk.to_vec()));
        }
        if counters.stale_cleared > 0 {
            log::info!(
                "session {s}: the kernel cleared {} stale tracking entries during the run",
                counters.stale_cleared
            );
        }
        let end = proto::End {
            counters,
            dropped_records: loss.records,
            dropped_taskstats: loss.taskstats,
            taskstats_enobufs: enobufs,
            tree_rss,
        };
        c.control(&proto::Msg::End(end));
        c.write();
        self.end_session_run(s);
        self.follow_rss();
        self.share_tracking_map();
    }
}
