//! What the agent does for each request of a client: open a session (hello), track its held
//! child (track), attach to its running processes (attach), send what is pending (flush),
//! end the run (finish, in [`super::finish`]). Every check that keeps a client to what it could ptrace is made
//! here or in what these call ([`super::verify`], [`crate::run::attach`]), and every
//! per-user limit is counted against the client's principal ([`super::users`]).

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use spacetime_common::MAX_SESSIONS;

use super::{
    clients::RunState,
    daemon::{refuse, Agent},
    verify,
    watchers::{NoWatch, Seat},
};
use crate::{
    kernel::{
        creds::Caller,
        loader::SessionId,
        remote::proto::{self, CpuClockState, Msg, Refusal, Welcome},
    },
    run::attach::AttachError,
};

/// Sessions one non-root user (principal) may hold at once.
pub const SESSIONS_PER_USER: usize = 8;

/// How long rss_stat stays attached after the last session that needed it (see
/// [`Agent::follow_rss`]): a program that finds no followed mm on every RSS change of the
/// machine meanwhile.
pub const RSS_LINGER: Duration = Duration::from_secs(2);
/// Sessions kept for users who hold few: once fewer than this many are free, a user who
/// holds [`FEW_SESSIONS`] or more is refused another.
const RESERVED_SESSIONS: usize = 16;
const FEW_SESSIONS: usize = 2;

impl Agent {
    pub(super) fn handle(&mut self, i: usize, msg: Msg, fd: Option<OwnedFd>) {
        match (msg, self.clients[i].session) {
            (
                Msg::Hello {
                    version,
                    want,
                    max_processes,
                },
                None,
            ) => {
                self.clients[i].max_processes = max_processes;
                self.hello(i, version, want)
            }
            (Msg::Track, Some(s)) if self.clients[i].seat.is_none() => match fd {
                Some(fd) => self.track(i, s, fd),
                None => refuse(
                    &mut self.clients[i],
                    Refusal::Protocol,
                    "no process descriptor came with the request",
                ),
            },
            (Msg::Attach { pids }, Some(s)) if self.clients[i].seat.is_none() => {
                self.attach(i, s, &pids)
            }
            (Msg::Flush { seq }, Some(_)) if self.clients[i].finishing.is_none() => {
                self.route();
                self.clients[i].control(&Msg::Flushed { seq });
            }
            (Msg::Finish { wait_release }, Some(s)) if self.clients[i].finishing.is_none() => {
                self.finish(i, s, wait_release)
            }
            (other, _) => {
                log::debug!("client {}: unexpected {other:?}", self.clients[i].peer.pid);
                refuse(
                    &mut self.clients[i],
                    Refusal::Protocol,
                    "a message out of order",
                );
            }
        }
    }

    /// A free session for client `i`, within its user's share; Err: why not.
    fn session_for(&self, i: usize) -> Result<SessionId, (Refusal, String)> {
        let principal = self.clients[i].principal;
        let held = self
            .clients
            .iter()
            .filter(|c| c.principal == principal && c.session.is_some())
            .count();
        let taken: Vec<u16> = self.clients.iter().filter_map(|c| c.session).collect();
        let free = (MAX_SESSIONS as usize - 1).saturating_sub(taken.len());
        if principal != 0 && held >= SESSIONS_PER_USER {
            let why = format!("user {principal} already has {SESSIONS_PER_USER} sessions with the agent, the most one user may have");
            return Err((Refusal::UserLimit, why));
        }
        if principal != 0 && held >= FEW_SESSIONS && free < RESERVED_SESSIONS {
            let why = format!("the agent keeps its last {RESERVED_SESSIONS} sessions for users with fewer than {FEW_SESSIONS}; user {principal} has {held}: try again later");
            return Err((Refusal::UserLimit, why));
        }
        (1..MAX_SESSIONS as u16)
            .find(|s| !taken.contains(s))
            .ok_or_else(|| {
                let why = "the agent serves as many sessions as it can; try again later";
                (Refusal::Busy, why.into())
            })
    }

    fn hello(&mut self, i: usize, version: u32, asked: u8) {
        let want = asked & proto::want::KIND;
        let (uid, principal) = (self.clients[i].peer.uid, self.clients[i].principal);
        if version != proto::VERSION {
            let why = format!(
                "this agent speaks protocol version {}, the client {version}: use the same spacetime for both",
                proto::VERSION
            );
            return refuse(&mut self.clients[i], Refusal::Version, &why);
        }
        if want != proto::want::TRACE && want != proto::want::WATCH {
            let why = "the agent does not serve that";
            return refuse(&mut self.clients[i], Refusal::NotServed, why);
        }
        // The kernel programs number processes as the agent's namespace does.
        match verify::same_pid_namespace(self.clients[i].peer.pid) {
            Ok(true) => {}
            Ok(false) => {
                return refuse(
                    &mut self.clients[i],
                    Refusal::Namespace,
                    "the client runs in another PID namespace than the agent's",
                )
            }
            Err(e) => {
                let why = format!("the agent could not read the client's PID namespace: {e}");
                return refuse(&mut self.clients[i], Refusal::Failed, &why);
            }
        }
        let s = match self.session_for(i) {
            Ok(s) => s,
            Err((code, why)) => return refuse(&mut self.clients[i], code, &why),
        };
        if want == proto::want::WATCH {
            let owner = Caller::of(self.clients[i].peer.pid, uid, self.clients[i].peer.gid);
            match self.watchers.join(owner, principal) {
                Ok(ready) => {
                    self.clients[i].session = Some(s);
                    self.clients[i].seat = Some(Seat {
                        uid,
                        baseline: None,
                        last: Default::default(),
                    });
                    if ready {
                        self.welcome_watch(i);
                    }
                }
                Err(e) => {
                    let code = match e {
                        NoWatch::OtherUid { .. } | NoWatch::OtherCredentials { .. } => {
                            Refusal::UserLimit
                        }
                        NoWatch::Full(_) => Refusal::Busy,
                    };
                    refuse(&mut self.clients[i], code, &e.to_string())
                }
            }
            return;
        }
        self.clients[i].session = Some(s);
        self.clients[i].delayacct = asked & proto::want::DELAYACCT != 0;
        self.update_delayacct();
        let memory = asked & proto::want::NO_MEMORY == 0;
        self.clients[i].memory = memory;
        // Set at every hello: the slot may have served a client that asked otherwise.
        if let Err(e) = self.probes.set_session_memory(s, memory) {
            log::warn!("spacetime agent: memory following of session {s}: {e}");
        }
        self.clients[i].cpu = asked & proto::want::CPU_OVER_TIME != 0;
        // Attached before the welcome, so the welcome can say it runs: the client's track
        // request, read after, finds it ticking, and so does the whole run.
        let ticking = self.follow_ticks();
        let cpu_clock = match (self.clients[i].cpu, ticking) {
            (false, _) => CpuClockState::NotAsked,
            (true, Ok(cpus)) => CpuClockState::Ticking { cpus: cpus as u32 },
            (true, Err(why)) => CpuClockState::Failed(why.into_bytes()),
        };
        let welcome = Welcome {
            session: s,
            cpu_clock,
            ..self.welcome.clone()
        };
        self.clients[i].control(&Msg::Welcome(welcome));
        // Sent first: attaching rss_stat (0.4 ms here) then overlaps the client's start
        // instead of delaying its track, and its run does not wait for it.
        self.clients[i].write();
        self.follow_rss();
    }

    /// Welcomes watch client `i` once its uid's set is loaded: the set's figures, and whose
    /// exits it sees.
    fn welcome_watch(&mut self, i: usize) {
        let c = &self.clients[i];
        let (Some(s), Some(mut seat)) = (c.session, c.seat) else {
            return;
        };
        let Some(p) = self.watchers.probes_of(seat.uid) else {
            return;
        };
        let welcome = Welcome {
            session: s,
            cpu_at_release: p.cpu_at_release,
            mechanisms: p
                .mechanisms
                .iter()
                .map(|m| m.clone().into_bytes())
                .collect(),
            load_us: (p.load_ms * 1e3) as u64,
            sees_uid: match seat.uid {
                0 => proto::SEES_ALL,
                u => u,
            },
            ..self.welcome.clone()
        };
        seat.baseline = Some(p.counters().unwrap_or_default());
        let c = &mut self.clients[i];
        c.seat = Some(seat);
        c.control(&Msg::Welcome(welcome));
    }

    /// A watch set finished loading: its waiting clients are welcomed, or told why not.
    pub(super) fn watch_loaded(&mut self) {
        while let Some((uid, loaded)) = self.watchers.finished() {
            let waiting: Vec<usize> = (0..self.clients.len())
                .filter(|&i| {
                    self.clients[i]
                        .seat
                        .is_some_and(|s| s.uid == uid && s.baseline.is_none())
                })
                .collect();
            for i in waiting {
                match &loaded {
                    Ok(()) => {
                        self.watchers.join_loaded(uid);
                        self.welcome_watch(i)
                    }
                    Err(e) => {
                        self.clients[i].seat = None;
                        let why = format!("the agent could not load programs for the watch: {e}");
                        refuse(&mut self.clients[i], Refusal::Failed, &why);
                    }
                }
            }
        }
    }

    /// The most processes client `i`'s run may have tracked at once (0: no limit): the
    /// agent's for a non-root client, the client's own `--max-processes`, whichever is lower.
    fn limit_for(&self, i: usize) -> u32 {
        let c = &self.clients[i];
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

    /// Sets session `s` up for a run of client `i`: nothing of an earlier run left, its
    /// owner's credentials for the exec check, its limit within its user's share. Returns
    /// the counters the run's own are counted from.
    fn prepare_run(
        &mut self,
        i: usize,
        s: SessionId,
    ) -> Result<crate::kernel::loader::KernelCounters, crate::kernel::loader::LoadError> {
        let peer = self.clients[i].peer;
        let owner = (peer.uid != 0).then(|| Caller::of(peer.pid, peer.uid, peer.gid));
        self.probes.reset_session(s)?;
        self.probes.set_session_owner(s, owner)?;
        self.share_tracking_map_with(Some(s));
        self.probes.counters_of(s)
    }

    fn track(&mut self, i: usize, s: SessionId, pidfd: OwnedFd) {
        let peer = self.clients[i].peer;
        if self.clients[i].run.is_some() {
            return refuse(
                &mut self.clients[i],
                Refusal::Protocol,
                "a run is already being traced in this session",
            );
        }
        let refused = |c: &mut super::clients::Client, code: Refusal, why: String| {
            log::info!("client pid {} uid {}: refused: {why}", peer.pid, peer.uid);
            c.control(&Msg::Refused {
                code,
                reason: why.into_bytes(),
            });
        };
        let (proven, pinned) = match verify::prove(peer, pidfd) {
            Ok(p) => p,
            Err(why) => return refused(&mut self.clients[i], Refusal::NotProven, why.to_string()),
        };
        let baseline = match self.prepare_run(i, s) {
            Ok(b) => b,
            Err(e) => {
                let why = format!("the agent could not track the process: {e}");
                return refused(&mut self.clients[i], Refusal::Failed, why);
            }
        };
        // The insert is proven after it took effect: a process that ended in between
        // leaves no entry behind.
        if let Err(e) =
            crate::run::attach::track_pinned(&mut self.probes, &pinned, proven.start_ns, s)
        {
            self.share_tracking_map();
            let (code, why) = match e {
                AttachError::Gone(_) => (
                    Refusal::NotProven,
                    verify::Unproven::EndedWhenTracked.to_string(),
                ),
                other => (
                    Refusal::Failed,
                    format!("the agent could not track the process: {other}"),
                ),
            };
            return refused(&mut self.clients[i], code, why);
        }
        self.owners.learn(proven.pid, proven.start_ns, s);
        self.clients[i].run = Some(RunState {
            baseline,
            enobufs_at_start: self.taskstats_stats().enobufs,
        });
        self.follow_rss();
        self.clients[i].control(&Msg::Tracked {
            kernel_pid: proven.pid,
            level: proven.level,
        });
    }

    /// Attaches to running processes for client `i`: a non-root client only to processes
    /// it could ptrace (see [`crate::kernel::creds`]), and only from the agent's PID
    /// namespace (its pids must mean the agent's).
    fn attach(&mut self, i: usize, s: SessionId, pids: &[u32]) {
        let peer = self.clients[i].peer;
        if self.clients[i].run.is_some() {
            return refuse(
                &mut self.clients[i],
                Refusal::Protocol,
                "a run is already being traced in this session",
            );
        }
        if !verify::same_pid_namespace(peer.pid).unwrap_or(false) {
            // Checked at the hello already: only a client gone since gets here.
            let reason =
                b"attaching through the agent needs the client in the agent's PID namespace"
                    .to_vec();
            let code = Refusal::Namespace;
            return self.clients[i].control(&Msg::Refused { code, reason });
        }
        let caller = (peer.uid != 0).then(|| Caller::of(peer.pid, peer.uid, peer.gid));
        let baseline = match self.prepare_run(i, s) {
            Ok(b) => b,
            Err(e) => {
                let reason = format!("the agent could not attach: {e}").into_bytes();
                let code = Refusal::Failed;
                return self.clients[i].control(&Msg::Refused { code, reason });
            }
        };
        // Adopting the running processes' mms needs rss_stat following.
        if self.clients[i].memory {
            if let Err(e) = self.probes.set_rss_following(true) {
                log::warn!("spacetime agent: switching rss_stat on: {e}");
            }
        }
        self.rss_following = self.probes.rss_following();
        let attached = match crate::run::attach::attach_as(&mut self.probes, pids, s, caller) {
            Ok(a) => a,
            Err(e) => {
                log::info!(
                    "client pid {} uid {}: attach refused: {e}",
                    peer.pid,
                    peer.uid
                );
                // Whatever was tracked before the refusal is forgotten.
                self.end_session_run(s);
                self.follow_rss();
                let code = match e {
                    AttachError::Track { .. } => Refusal::Failed,
                    _ => Refusal::NotProven,
                };
                let reason = e.to_string().into_bytes();
                return self.clients[i].control(&Msg::Refused { code, reason });
            }
        };
        for t in &attached.targets {
            self.owners.learn(t.pid, t.start_ns, s);
        }
        let pids: Vec<u32> = attached.targets.iter().map(|t| t.pid).collect();
        self.clients[i].run = Some(RunState {
            baseline,
            enobufs_at_start: self.taskstats_stats().enobufs,
        });
        self.follow_rss();
        self.clients[i].control(&Msg::Attached {
            pids,
            attach_ns: attached.attach_ns,
            memory_followed: attached.memory_followed,
        });
    }

    /// Forgets every process of session `s` in the kernel and here.
    pub(super) fn end_session_run(&mut self, s: SessionId) {
        match self.probes.untrack_session(s) {
            Ok(n) => log::debug!("session {s}: {n} processes untracked"),
            Err(e) => log::warn!("spacetime agent: untracking session {s}: {e}"),
        }
        self.owners.forget_session(s);
    }

    /// rss_stat runs only while some session that shows memory over time traces or may (a
    /// trace session is open: its run then need not wait for the attach, nor its end for
    /// the detach), and for `--rss-linger` (default [`RSS_LINGER`]) after the last: a tracepoint's first probe
    /// attached within a grace period of its last one's removal waits for that grace period
    /// to end (the kernel's 1->0->1 transition, `tp_rcu_cond_sync`), and the agent served no
    /// one meanwhile: 15-25 ms of every back-to-back trace. The loop calls it on every round
    /// while rss_stat lingers.
    pub(super) fn follow_rss(&mut self) {
        let want = self.clients.iter().any(|c| {
            c.memory && (c.run.is_some() || (c.session.is_some() && c.seat.is_none() && !c.closed))
        });
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

    /// The CPU clock program runs while some open trace session shows CPU over time, and
    /// not otherwise: no linger (unlike rss_stat's), since attaching it again waits for no
    /// tracepoint's grace period (a perf event per CPU: 0.07-0.15 ms on 2 CPUs, detaching
    /// 0.05), and nothing ticks on a machine nobody traces this way. Returns the CPUs it runs
    /// on (0: detached), or why it cannot run.
    pub(super) fn follow_ticks(&mut self) -> Result<usize, String> {
        let want = self
            .clients
            .iter()
            .any(|c| c.cpu && c.session.is_some() && c.seat.is_none() && !c.closed);
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

    /// Each non-root user's share of the tracking map: the session limit for all the user's
    /// runs together (those with a run, and `starting`, about to have one). What the runs
    /// have not taken yet is split evenly between them: each may grow to what it has now
    /// plus its part, so together they never pass the limit. Recomputed as runs start and
    /// end; the kernel checks each session's limit at each fork.
    pub(super) fn share_tracking_map(&mut self) {
        self.share_tracking_map_with(None);
    }

    fn share_tracking_map_with(&mut self, starting: Option<SessionId>) {
        let running = |c: &super::clients::Client| {
            c.session.is_some() && (c.run.is_some() || c.session == starting)
        };
        // Per principal: its runs, and the processes they have tracked now.
        let mut runs: std::collections::HashMap<u32, (u32, i64)> = Default::default();
        let live = |s: Option<SessionId>| {
            s.and_then(|s| self.probes.live_processes_of(s).ok())
                .unwrap_or(0)
                .max(0)
        };
        for c in self.clients.iter().filter(|c| running(c)) {
            let e = runs.entry(c.principal).or_default();
            e.0 += 1;
            e.1 += live(c.session);
        }
        let shares: Vec<(SessionId, u32)> = (0..self.clients.len())
            .filter(|&i| running(&self.clients[i]))
            .filter_map(|i| {
                let c = &self.clients[i];
                let share = match c.principal {
                    0 => 0,
                    p => {
                        let (n, taken) = runs[&p];
                        let left = (i64::from(self.session_limit) - taken).max(0);
                        (live(c.session) + left / i64::from(n)).max(1) as u32
                    }
                };
                let limit = match (self.limit_for(i), share) {
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

    /// Delay accounting (a root-only sysctl) on while some client asked for it, and put back
    /// as it was after the last.
    pub(super) fn update_delayacct(&mut self) {
        let want = self.clients.iter().any(|c| c.delayacct && !c.closed);
        match (want, self.delayacct.is_some()) {
            (true, false) => {
                self.delayacct = Some(crate::run::delayacct::DelayAcct::configure(true, false))
            }
            (false, true) => self.delayacct = None,
            _ => {}
        }
    }
}
