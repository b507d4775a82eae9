//! What the agent does for each request of a client: open a session (hello), track its held
//! child (track), attach to its running processes (attach), send what is pending (flush),
//! end the run (finish: answered at once, or once [`super::finish`] says the run's final
//! records came). Every check that keeps a client to what it could ptrace is made here or in
//! what these call ([`super::verify`], [`crate::kernel::attach`]), and every per-user limit is
//! counted against the client's principal ([`super::registry`]).

use std::os::fd::OwnedFd;

use super::{
    clients::RunState,
    daemon::Agent,
    finish::Finisher,
    registry::ClientId,
    verify::{self, Peer},
    watchers::{NoWatch, Seat},
};
use crate::{
    kernel::attach::AttachError,
    kernel::{
        creds::Caller,
        loader::{KernelCounters, LoadError, SessionId},
        remote::proto::{self, CpuClockState, Msg, Refusal, Welcome},
    },
};

impl Agent {
    pub(super) fn handle(&mut self, id: ClientId, msg: Msg, fd: Option<OwnedFd>) {
        match (msg, self.clients[id].session) {
            (
                Msg::Hello {
                    version,
                    want,
                    max_processes,
                },
                None,
            ) => {
                self.clients[id].max_processes = max_processes;
                self.hello(id, version, want)
            }
            (Msg::Track, Some(s)) if self.clients[id].seat.is_none() => match fd {
                Some(fd) => self.track(id, s, fd),
                None => self.clients[id].refuse(
                    Refusal::Protocol,
                    "no process descriptor came with the request",
                ),
            },
            (Msg::Attach { pids }, Some(s)) if self.clients[id].seat.is_none() => {
                self.attach(id, s, &pids)
            }
            (Msg::Flush { seq }, Some(_)) if !self.finisher.holds(id) => {
                self.route();
                self.clients[id].control(&Msg::Flushed { seq });
            }
            (Msg::Finish { wait_release }, Some(s)) if !self.finisher.holds(id) => {
                self.finish(id, s, wait_release)
            }
            (other, _) => {
                log::debug!("client {}: unexpected {other:?}", self.clients[id].peer.pid);
                self.clients[id].refuse(Refusal::Protocol, "a message out of order");
            }
        }
    }

    fn hello(&mut self, id: ClientId, version: u32, asked: u8) {
        let want = asked & proto::want::KIND;
        if version != proto::VERSION {
            let why = format!(
                "this agent speaks protocol version {}, the client {version}: use the same spacetime for both",
                proto::VERSION
            );
            return self.clients[id].refuse(Refusal::Version, &why);
        }
        if want != proto::want::TRACE && want != proto::want::WATCH {
            let why = "the agent does not serve that";
            return self.clients[id].refuse(Refusal::NotServed, why);
        }
        // The kernel programs number processes as the agent's namespace does.
        match verify::same_pid_namespace(self.clients[id].peer.pid) {
            Ok(true) => {}
            Ok(false) => {
                return self.clients[id].refuse(
                    Refusal::Namespace,
                    "the client runs in another PID namespace than the agent's",
                )
            }
            Err(e) => {
                let why = format!("the agent could not read the client's PID namespace: {e}");
                return self.clients[id].refuse(Refusal::Failed, &why);
            }
        }
        let s = match self.clients.session_for(id) {
            Ok(s) => s,
            Err((code, why)) => return self.clients[id].refuse(code, &why),
        };
        match want == proto::want::WATCH {
            true => self.hello_watch(id, s),
            false => self.hello_trace(id, s, asked),
        }
    }

    /// Seats watch client `id` at its uid's set (loaded, or to be): welcomed once the set
    /// is ready.
    fn hello_watch(&mut self, id: ClientId, s: SessionId) {
        let (uid, principal) = (self.clients[id].peer.uid, self.clients[id].principal);
        let owner = Caller::of(self.clients[id].peer.pid, uid, self.clients[id].peer.gid);
        match self.watchers.join(owner, principal) {
            Ok(ready) => {
                self.clients[id].session = Some(s);
                self.clients[id].seat = Some(Seat {
                    uid,
                    baseline: None,
                    last: Default::default(),
                });
                if ready {
                    self.welcome_watch(id);
                }
            }
            Err(e) => {
                let code = match e {
                    NoWatch::OtherUid { .. } | NoWatch::OtherCredentials { .. } => {
                        Refusal::UserLimit
                    }
                    NoWatch::Full(_) => Refusal::Busy,
                };
                self.clients[id].refuse(code, &e.to_string())
            }
        }
    }

    /// Opens trace session `s` for client `id`, with what it asked for.
    fn hello_trace(&mut self, id: ClientId, s: SessionId, asked: u8) {
        self.clients[id].session = Some(s);
        self.clients[id].delayacct = asked & proto::want::DELAYACCT != 0;
        self.update_delayacct();
        let memory = asked & proto::want::NO_MEMORY == 0;
        self.clients[id].memory = memory;
        // Set at every hello: the slot may have served a client that asked otherwise.
        if let Err(e) = self.programs.probes.set_session_memory(s, memory) {
            log::warn!("spacetime agent: memory following of session {s}: {e}");
        }
        self.clients[id].cpu = asked & proto::want::CPU_OVER_TIME != 0;
        // Attached before the welcome, so the welcome can say it runs: the client's track
        // request, read after, finds it ticking, and so does the whole run.
        let ticking = self.follow_ticks();
        let cpu_clock = match (self.clients[id].cpu, ticking) {
            (false, _) => CpuClockState::NotAsked,
            (true, Ok(cpus)) => CpuClockState::Ticking { cpus: cpus as u32 },
            (true, Err(why)) => CpuClockState::Failed(why.into_bytes()),
        };
        let welcome = Welcome {
            session: s,
            cpu_clock,
            ..self.welcome.clone()
        };
        self.clients[id].control(&Msg::Welcome(welcome));
        // Sent first: attaching rss_stat (0.4 ms here) then overlaps the client's start
        // instead of delaying its track, and its run does not wait for it.
        self.clients[id].write();
        self.follow_rss();
    }

    /// Welcomes watch client `id` once its uid's set is loaded: the set's figures, and whose
    /// exits it sees.
    fn welcome_watch(&mut self, id: ClientId) {
        let c = &self.clients[id];
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
        let c = &mut self.clients[id];
        c.seat = Some(seat);
        c.control(&Msg::Welcome(welcome));
    }

    /// A watch set finished loading: its waiting clients are welcomed, or told why not.
    pub(super) fn watch_loaded(&mut self) {
        while let Some((uid, loaded)) = self.watchers.finished() {
            for id in self.clients.waiting_watches(uid) {
                match &loaded {
                    Ok(()) => {
                        self.watchers.join_loaded(uid);
                        self.welcome_watch(id)
                    }
                    Err(e) => {
                        self.clients[id].seat = None;
                        let why = format!("the agent could not load programs for the watch: {e}");
                        self.clients[id].refuse(Refusal::Failed, &why);
                    }
                }
            }
        }
    }

    /// Sets session `s` up for a run of `peer` ([`super::programs::AgentPrograms::prepare_run`])
    /// once the ring's waiting records are routed: the session has no run then, so what an
    /// earlier run of it left there (a release record written between that run's last read
    /// and its untracking) goes nowhere, never into this run as a process it did not have.
    fn prepare_run(&mut self, peer: Peer, s: SessionId) -> Result<KernelCounters, LoadError> {
        self.route();
        self.programs.prepare_run(peer, s, &self.clients)
    }

    fn track(&mut self, id: ClientId, s: SessionId, pidfd: OwnedFd) {
        let peer = self.clients[id].peer;
        if self.clients[id].run.is_some() {
            return self.clients[id].refuse(
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
            Err(why) => return refused(&mut self.clients[id], Refusal::NotProven, why.to_string()),
        };
        let baseline = match self.prepare_run(peer, s) {
            Ok(b) => b,
            Err(e) => {
                let why = format!("the agent could not track the process: {e}");
                return refused(&mut self.clients[id], Refusal::Failed, why);
            }
        };
        // The insert is proven after it took effect: a process that ended in between
        // leaves no entry behind.
        if let Err(e) = crate::kernel::attach::track_pinned(
            &mut self.programs.probes,
            &pinned,
            proven.start_ns,
            s,
        ) {
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
            return refused(&mut self.clients[id], code, why);
        }
        self.router.learn(proven.pid, proven.start_ns, s);
        self.clients[id].run = Some(RunState {
            baseline,
            enobufs_at_start: self.router.taskstats_stats().enobufs,
        });
        self.follow_rss();
        self.clients[id].control(&Msg::Tracked {
            kernel_pid: proven.pid,
            level: proven.level,
        });
    }

    /// Attaches to running processes for client `id`: a non-root client only to processes
    /// it could ptrace (see [`crate::kernel::creds`]), and only from the agent's PID
    /// namespace (its pids must mean the agent's).
    fn attach(&mut self, id: ClientId, s: SessionId, pids: &[u32]) {
        let peer = self.clients[id].peer;
        if self.clients[id].run.is_some() {
            return self.clients[id].refuse(
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
            return self.clients[id].control(&Msg::Refused { code, reason });
        }
        let caller = (peer.uid != 0).then(|| Caller::of(peer.pid, peer.uid, peer.gid));
        let baseline = match self.prepare_run(peer, s) {
            Ok(b) => b,
            Err(e) => {
                let reason = format!("the agent could not attach: {e}").into_bytes();
                let code = Refusal::Failed;
                return self.clients[id].control(&Msg::Refused { code, reason });
            }
        };
        // Adopting the running processes' mms needs rss_stat following.
        let memory = self.clients[id].memory;
        self.programs.follow_rss_for_attach(memory);
        let probes = &mut self.programs.probes;
        let attached = match crate::kernel::attach::attach_as(probes, pids, s, caller) {
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
                return self.clients[id].control(&Msg::Refused { code, reason });
            }
        };
        for t in &attached.targets {
            self.router.learn(t.pid, t.start_ns, s);
        }
        let pids: Vec<u32> = attached.targets.iter().map(|t| t.pid).collect();
        self.clients[id].run = Some(RunState {
            baseline,
            enobufs_at_start: self.router.taskstats_stats().enobufs,
        });
        self.follow_rss();
        self.clients[id].control(&Msg::Attached {
            pids,
            attach_ns: attached.attach_ns,
            memory_followed: attached.memory_followed,
        });
    }

    /// Client `id` ends its run in session `s`: answered now, or once the final CPU records
    /// of its reaped processes went (with `wait_release`, bounded: see [`super::finish`]).
    fn finish(&mut self, id: ClientId, s: SessionId, wait_release: bool) {
        self.route();
        let waits = wait_release && self.programs.probes.cpu_at_release;
        let awaited = match waits && self.clients[id].run.is_some() {
            true => Finisher::awaited_releases(&self.programs.probes, s),
            false => Vec::new(),
        };
        match awaited.is_empty() {
            true => self.end_run(id, s),
            false => self.finisher.hold(id, s, awaited),
        }
    }

    /// Ends client `id`'s run: every record sent, then the figures only the agent reads.
    pub(super) fn end_run(&mut self, id: ClientId, s: SessionId) {
        let Some(baseline) = self.clients[id].run.as_ref().map(|r| r.baseline) else {
            // Nothing tracked (the track was refused): an empty end.
            return self.clients[id].control(&Msg::End(proto::End::default()));
        };
        let probes = &self.programs.probes;
        // The mms before the tree's sum: a process growing between the two reads raises the
        // tree's peak past its own, never its own past the tree's.
        let mms = probes.followed_mms_of(s).unwrap_or_default();
        // A process no longer followed at that read wrote its last records (its peak, its
        // exit) before it: they end here, marked before the tree's sum, which covers them.
        let written = self.router.written();
        let tree_rss = probes.tree_rss_of(s).unwrap_or_default();
        let counters = probes
            .counters_of(s)
            .map(|c| c.since(&baseline))
            .unwrap_or_default();
        // What the kernel wrote from the last drain to that mark, while the run is still the
        // client's (records of a session with no run go nowhere). The answer goes before the
        // untracking (map walks, 0.1-0.3 ms here): what a process still running writes
        // meanwhile is past the run's end, which its client would not take.
        self.router
            .route(&mut self.clients, &mut self.watchers, Some(written));
        let Some(run) = self.clients[id].run.take() else {
            return;
        };
        let enobufs = self.router.taskstats_stats().enobufs - run.enobufs_at_start;
        let c = &mut self.clients[id];
        // What did not fit the queues' bounds (`queues`), the records sent just before
        // included.
        c.seal();
        let loss = c.take_loss();
        for chunk in mms.chunks(proto::MMS_PER_MESSAGE) {
            c.control(&Msg::Mms(chunk.to_vec()));
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
        c.control(&Msg::End(end));
        c.write();
        self.end_session_run(s);
        self.follow_rss();
        self.share_tracking_map();
    }
}
