//! The agent's one set of kernel programs and what it switches in them for its clients:
//! rss_stat while some session shows memory over time (and a linger after), the CPU clock
//! while some session shows CPU over time, delay accounting while some client asked for it,
//! and each session's share of the tracking map. What the clients want is the registry's
//! to say ([`super::registry::Registry::want_rss`] and the like); this owns what is switched.

use std::time::{Duration, Instant};

use super::{clients::Client, registry::Registry, verify::Peer};
use crate::{
    kernel::{
        creds::Caller,
        loader::{KernelCounters, LoadError, Probes, SessionId},
    },
    run::delayacct::DelayAcct,
};

/// How long rss_stat stays attached after the last session that needed it (see
/// [`AgentPrograms::follow_rss`]): a program that finds no followed mm on every RSS change of the
/// machine meanwhile.
pub const RSS_LINGER: Duration = Duration::from_secs(2);

/// The agent's one set of programs, which every trace session shares, and what is switched
/// in it for them.
pub(super) struct AgentPrograms {
    pub probes: Probes,
    rss_following: bool,
    /// Since when no session needs rss_stat while it is still attached (it lingers).
    rss_unwanted_since: Option<Instant>,
    /// `--rss-linger`.
    rss_linger: Duration,
    /// Delay accounting switched on for clients (restored when dropped).
    delayacct: Option<DelayAcct>,
    /// Processes per non-root session, and per non-root user.
    session_limit: u32,
}

impl AgentPrograms {
    pub fn new(probes: Probes, rss_linger: Duration, session_limit: u32) -> AgentPrograms {
        AgentPrograms {
            probes,
            rss_following: false,
            rss_unwanted_since: None,
            rss_linger,
            delayacct: None,
            session_limit,
        }
    }

    /// Whether rss_stat is attached though no session needs it (the loop then looks on
    /// every round whether its linger is over).
    pub fn rss_lingering(&self) -> bool {
        self.rss_unwanted_since.is_some()
    }

    /// rss_stat runs only while some session that shows memory over time traces or may (a
    /// trace session is open: its run then need not wait for the attach, nor its end for
    /// the detach), and for `--rss-linger` (default [`RSS_LINGER`]) after the last: a
    /// tracepoint's first probe attached within a grace period of its last one's removal
    /// waits for that grace period to end (the kernel's 1->0->1 transition,
    /// `tp_rcu_cond_sync`), and the agent served no one meanwhile: 15-25 ms of every
    /// back-to-back trace. `want`: some session needs it now.
    pub fn follow_rss(&mut self, want: bool) {
        let now = Instant::now();
        let on = match (want, self.rss_following) {
            (true, _) => {
                self.rss_unwanted_since = None;
                true
            }
            (false, false) => return,
            (false, true) => {
                let since = *self.rss_unwanted_since.get_or_insert(now);
                now.duration_since(since) < self.rss_linger
            }
        };
        if on == self.rss_following {
            return;
        }
        match self.probes.set_rss_following(on) {
            Ok(()) => {
                self.rss_following = on;
                self.rss_unwanted_since = None;
            }
            Err(e) => {
                log::warn!("spacetime agent: switching rss_stat: {e}");
                // A detach tried again after another linger, not on every round.
                if !on {
                    self.rss_unwanted_since = Some(now);
                }
            }
        }
    }

    /// rss_stat on before an attach that shows memory: adopting the running processes' mms
    /// needs it.
    pub fn follow_rss_for_attach(&mut self, memory: bool) {
        if memory {
            if let Err(e) = self.probes.set_rss_following(true) {
                log::warn!("spacetime agent: switching rss_stat on: {e}");
            }
        }
        self.rss_following = self.probes.rss_following();
    }

    /// The CPU clock program runs while some open trace session shows CPU over time
    /// (`want`), and not otherwise: no linger (unlike rss_stat's), since attaching it again
    /// waits for no tracepoint's grace period (a perf event per CPU: 0.07-0.15 ms on 2
    /// CPUs, detaching 0.05), and nothing ticks on a machine nobody traces this way. Returns
    /// the CPUs it runs on (0: detached), or why it cannot run.
    pub fn follow_ticks(&mut self, want: bool) -> Result<usize, String> {
        let (was, at) = (self.probes.cpu_ticking(), Instant::now());
        let r = self.probes.set_cpu_ticking(want);
        let us = at.elapsed().as_micros();
        match (&r, was) {
            (Ok(n), 0) if *n > 0 => {
                log::info!("spacetime agent: CPU clock attached on {n} CPUs in {us} µs")
            }
            (Ok(0), n) if n > 0 => log::info!("spacetime agent: CPU clock detached in {us} µs"),
            (Err(e), _) => log::warn!("spacetime agent: switching the CPU clock: {e}"),
            _ => {}
        }
        r
    }

    /// Delay accounting (a root-only sysctl) on while some client asked for it (`want`),
    /// and put back as it was after the last.
    pub fn follow_delayacct(&mut self, want: bool) {
        match (want, self.delayacct.is_some()) {
            (true, false) => self.delayacct = Some(DelayAcct::configure(true, false)),
            (false, true) => self.delayacct = None,
            _ => {}
        }
    }

    /// The most processes client `c`'s run may have tracked at once (0: no limit): the
    /// agent's for a non-root client, the client's own `--max-processes`, whichever is lower.
    fn limit_for(&self, c: &Client) -> u32 {
        let agents = if c.peer.uid == 0 {
            0
        } else {
            self.session_limit
        };
        match (agents, c.max_processes) {
            (0, own) | (own, 0) => own,
            (a, b) => a.min(b),
        }
    }

    /// Each non-root user's share of the tracking map: the session limit for all the user's
    /// runs together (those with a run, and `starting`, about to have one). What the runs
    /// have not taken yet is split evenly between them: each may grow to what it has now
    /// plus its part, so together they never pass the limit. Recomputed as runs start and
    /// end; the kernel checks each session's limit at each fork.
    pub fn share_tracking_map(&mut self, clients: &Registry, starting: Option<SessionId>) {
        let running =
            |c: &Client| c.session.is_some() && (c.run.is_some() || c.session == starting);
        // Per principal: its runs, and the processes they have tracked now.
        let mut runs: std::collections::HashMap<u32, (u32, i64)> = Default::default();
        let live = |s: Option<SessionId>| {
            s.and_then(|s| self.probes.live_processes_of(s).ok())
                .unwrap_or(0)
                .max(0)
        };
        for c in clients.iter().filter(|c| running(c)) {
            let e = runs.entry(c.principal).or_default();
            e.0 += 1;
            e.1 += live(c.session);
        }
        let shares: Vec<(SessionId, u32)> = clients
            .iter()
            .filter(|c| running(c))
            .filter_map(|c| {
                let share = match c.principal {
                    0 => 0,
                    p => {
                        let (n, taken) = runs[&p];
                        let left = (i64::from(self.session_limit) - taken).max(0);
                        (live(c.session) + left / i64::from(n)).max(1) as u32
                    }
                };
                let limit = match (self.limit_for(c), share) {
                    (0, s) | (s, 0) => s,
                    (a, b) => a.min(b),
                };
                Some((c.session?, limit))
            })
            .collect();
        for (s, limit) in shares {
            if let Err(e) = self.probes.set_session_limit(s, limit) {
                log::warn!("spacetime agent: the process limit of session {s}: {e}");
            }
        }
    }

    /// Sets session `s` up for a run of `peer`: nothing of an earlier run left, its owner's
    /// credentials for the exec check, its limit within its user's share. Returns the
    /// counters the run's own are counted from.
    pub fn prepare_run(
        &mut self,
        peer: Peer,
        s: SessionId,
        clients: &Registry,
    ) -> Result<KernelCounters, LoadError> {
        let owner = (peer.uid != 0).then(|| Caller::of(peer.pid, peer.uid, peer.gid));
        self.probes.reset_session(s)?;
        self.probes.set_session_owner(s, owner)?;
        self.share_tracking_map(clients, Some(s));
        // Just set to zero, with nothing of the session tracked to count more: not read
        // back (seven map reads on the way to every run's start).
        Ok(KernelCounters::default())
    }

    /// Forgets every process of session `s` in the kernel.
    pub fn untrack(&mut self, s: SessionId) {
        match self.probes.untrack_session(s) {
            Ok(n) => log::debug!("session {s}: {n} processes untracked"),
            Err(e) => log::warn!("spacetime agent: untracking session {s}: {e}"),
        }
    }
}
