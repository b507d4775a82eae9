//! The end of a client's run, in one round trip: the client's `Finish` is answered with every
//! record of the run, the final CPU records of its processes included, then the figures only
//! the agent reads ([`Msg::Mms`](crate::kernel::remote::proto::Msg::Mms), [`Msg::End`](crate::kernel::remote::proto::Msg::End)).
//!
//! A process's final CPU record goes at its last context switch, microseconds after its
//! exit, or, when the switch cannot prove the figures final, one RCU grace period after its
//! reap (12-22 ms idle, more under load). The client has reaped its processes before it asks
//! to finish: processes of the session still waiting for that record (their ended
//! `TRACKED` entries) and already reaped are waited for here, the answer held back while the loop
//! polls at [`FINISH_POLL`], for at most a release wait ([`GracePeriods`]: 1 s, longer while
//! the grace period that frees them has not ended), at most [`MAX_AWAITED`] processes,
//! one map lookup a poll for those still waiting. A zombie not reaped (a process attached
//! to, whose parent is not the client) is not waited for.
//!
//! The [`Finisher`] holds the finishes held back, and says which are due; the answer itself
//! is the agent's (`requests`: `Agent::end_run`).

use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use super::registry::ClientId;
use crate::kernel::{
    grace::{GracePeriods, Wait},
    loader::{Probes, SessionId},
};

/// How often the loop looks while a finish is held back: the records do not wake the agent
/// (the ring wakes it only past a fill threshold).
pub(super) const FINISH_POLL: Duration = Duration::from_millis(1);
/// Most processes one finish waits for (each was proven reaped, a pidfd and a read of
/// /proc, when the finish came).
const MAX_AWAITED: usize = 64;

/// A finish held back for final CPU records.
struct Finishing {
    session: SessionId,
    /// Processes (tgid, leader start) whose record has not gone yet.
    awaited: Vec<(u32, u64)>,
    wait: Wait,
}

/// The finishes held back, one at most per client.
#[derive(Default)]
pub(super) struct Finisher {
    held: BTreeMap<ClientId, Finishing>,
    grace: GracePeriods,
}

impl Finisher {
    /// Whether some finish is held back (the loop then polls at [`FINISH_POLL`]).
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// Whether client `id`'s finish is held back (nothing else of it is read meanwhile).
    pub fn holds(&self, id: ClientId) -> bool {
        self.held.contains_key(&id)
    }

    /// The reaped processes of session `s`'s run whose final CPU record has not gone yet.
    pub fn awaited_releases(probes: &Probes, s: SessionId) -> Vec<(u32, u64)> {
        let mut awaited = match probes.awaiting_release(s) {
            Ok(a) => a,
            Err(e) => {
                log::warn!("spacetime agent: processes waiting for their final records: {e}");
                return Vec::new();
            }
        };
        awaited.retain(|&(tgid, start_ns)| crate::kernel::pidfd::reaped(tgid, start_ns));
        awaited.truncate(MAX_AWAITED);
        awaited
    }

    /// Holds client `id`'s finish of its run in session `s` back until the final CPU
    /// records of `awaited` went, or the wait for them is over.
    pub fn hold(&mut self, id: ClientId, s: SessionId, awaited: Vec<(u32, u64)>) {
        log::debug!(
            "session {s}: finish waits for {} final CPU records",
            awaited.len()
        );
        let wait = self.grace.wait();
        self.held.insert(
            id,
            Finishing {
                session: s,
                awaited,
                wait,
            },
        );
    }

    /// Forgets client `id`'s finish (the client is gone).
    pub fn forget(&mut self, id: ClientId) {
        self.held.remove(&id);
    }

    /// The held-back finishes to answer now, no longer held: those whose records went, or
    /// whose wait is over.
    pub fn due(&mut self, probes: &Probes) -> Vec<(ClientId, SessionId)> {
        let now = Instant::now();
        let mut due = Vec::new();
        let grace = &self.grace;
        self.held.retain(|&id, f| {
            // One lookup a poll for a process still waiting, whatever a client holds: the
            // first still waiting stops the look.
            while let Some(&(tgid, start_ns)) = f.awaited.last() {
                if probes.awaits_release(tgid, start_ns) {
                    break;
                }
                f.awaited.pop();
            }
            if !f.awaited.is_empty() && !grace.over(&f.wait, now) {
                return true;
            }
            if !f.awaited.is_empty() {
                log::debug!(
                    "session {}: {} final CPU records did not come in time (tgid, start: {:?})",
                    f.session,
                    f.awaited.len(),
                    &f.awaited[..f.awaited.len().min(4)]
                );
            }
            due.push((id, f.session));
            false
        });
        due
    }
}
