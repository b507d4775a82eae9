//! The agent's one loop: `poll` over its listening socket, its signalfd, the ring buffer, the
//! watch loader's wake-up and every client; the ring drained on each wake-up (and every
//! 50 ms) and routed ([`super::route`]); each client's requests answered by
//! [`super::requests`]; connections accepted within their limits ([`super::registry`]), idle
//! ones closed. [`Agent`] is the pieces together: the registry of clients and sessions, the
//! router of records, the finisher of runs, the kernel programs and the watches' sets.

use std::{
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    path::PathBuf,
    time::{Duration, Instant},
};

use rustix::event::{PollFd, PollFlags, Timespec};

use super::{
    finish::Finisher,
    listen::{AcceptBackoff, Listener},
    programs::AgentPrograms,
    queues::Queues,
    registry::{ClientId, Registry, CONNECTIONS_PER_USER, MAX_CLIENTS, SESSIONS_PER_USER},
    route::Router,
    verify::Peer,
    watchers::Watchers,
};
use crate::kernel::{
    loader::{CpuClock, KernelLogger, LoadOptions, Probes, SessionId},
    remote::{
        proto::{self, Msg, TaskstatsState, Welcome},
        sock,
    },
    taskstats::{TaskstatsListener, Unavailable},
};

/// How often the ring is drained when nothing wakes the agent.
const TICK_MS: i64 = 50;
/// Processes one non-root session may have tracked at once.
pub const PROCESSES_PER_SESSION: u32 = 16384;
/// Messages read from one client per round of the loop: one client cannot starve the others.
const READS_PER_ROUND: usize = 64;
/// A session with nothing traced, or a client that reads nothing of what waits for it, is
/// closed after this long without a sign of life (`--idle-timeout`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// What the agent is told at start (the command line's `spacetime agent` options).
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (None: $SPACETIME_SOCKET, else /run/spacetime/agent.sock).
    pub socket: Option<PathBuf>,
    /// Most processes one non-root session (and one user's sessions together) may have
    /// traced at once.
    pub session_limit: u32,
    /// How long a session with nothing traced, or a watch that reads nothing, is kept.
    pub idle_timeout: Duration,
    /// How long rss_stat stays attached after the last session that shows memory.
    pub rss_linger: Duration,
    /// Bytes of records held for clients that have not read them, all together.
    pub queued_bytes: usize,
}

/// The agent: its pieces, each owning its state, served by one loop.
pub(super) struct Agent {
    /// The kernel programs, and what is switched in them for the clients.
    pub programs: AgentPrograms,
    /// The ring, the taskstats listener, and which session owns each process.
    pub router: Router,
    /// The clients and their sessions.
    pub clients: Registry,
    /// Finishes held back for final CPU records.
    pub finisher: Finisher,
    /// The watches' program sets.
    pub watchers: Watchers,
    /// What every welcome says of the programs.
    pub welcome: Welcome,
    logger: Option<KernelLogger>,
    accept: AcceptBackoff,
}

/// Serves until a SIGTERM, SIGINT or SIGHUP (Ok), or fails to start or to go on.
pub fn serve(args: &Config) -> anyhow::Result<()> {
    use anyhow::Context;
    if !rustix::process::geteuid().is_root() {
        anyhow::bail!("the agent loads the kernel programs for every user: run it as root (with CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN and CAP_SYS_PTRACE)");
    }
    super::ready::check_capabilities()?;
    // Before any thread, so that every thread inherits it: the agent's wake-ups do not
    // preempt its clients (see `batch`). Without it the agent serves all the same.
    if let Err(e) = crate::util::sched::batch() {
        log::warn!("spacetime agent: SCHED_BATCH: {e}");
    }
    let path = args
        .socket
        .clone()
        .unwrap_or_else(crate::kernel::remote::socket_path);
    // Before any thread: every thread inherits the blocked signals.
    let sigfd = crate::util::signals::signal_fd(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])?;
    // First: a socket path that cannot be used safely stops the agent before it loads
    // anything (a client connecting meanwhile waits in the backlog).
    let listener =
        Listener::open(&path).with_context(|| format!("listening on {}", path.display()))?;
    // Whatever ends the agent, its socket file goes with it.
    let result = serve_on(args, &path, &listener, sigfd.as_fd());
    listener.remove();
    result
}

/// Loads the programs and serves on `listener` until a signal says stop.
fn serve_on(
    args: &Config,
    path: &std::path::Path,
    listener: &Listener,
    sigfd: BorrowedFd<'_>,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let mut probes = Probes::load(&LoadOptions {
        ring_buffer_bytes: 16 << 20,
        track_rss: true,
        // Attached while a session shows CPU over time (`follow_ticks`).
        cpu_clock: CpuClock::Loaded,
        ..LoadOptions::default()
    })?;
    probes.set_rss_following(false)?;
    let taskstats = crate::kernel::taskstats::open_listener(16 << 20);
    // An agent killed before may have left delay accounting on for its clients.
    crate::run::delayacct::repair_left();
    let welcome = welcome(&probes, &taskstats);
    let limits = super::ready::Limits {
        sessions_per_user: SESSIONS_PER_USER,
        connections_per_user: CONNECTIONS_PER_USER,
        connections: MAX_CLIENTS,
        processes_per_session: args.session_limit,
    };
    // Ours was bound through /proc/self/fd (see listen.rs): the kernel names it so.
    let shown = match listener.by_systemd() {
        true => super::ready::listening_path(&listener.fd, path),
        false => path.to_path_buf(),
    };
    super::ready::announce(&super::ready::start_line(
        &shown,
        listener.by_systemd(),
        &limits,
        probes.load_ms,
    ));
    let ring = probes.take_events()?;
    let logger = probes.take_logger();
    let cpu_at_release = probes.cpu_at_release;
    let mut agent = Agent {
        programs: AgentPrograms::new(probes, args.rss_linger, args.session_limit),
        router: Router::new(ring, taskstats.ok(), cpu_at_release),
        clients: Registry::new(Queues::with_budget(args.queued_bytes), args.idle_timeout),
        finisher: Finisher::default(),
        watchers: Watchers::new().context("the watch loader's wake-up")?,
        welcome,
        logger,
        accept: AcceptBackoff::default(),
    };
    let result = agent.run(listener.fd.as_fd(), sigfd);
    agent.shutdown();
    result
}

/// What every welcome says of the agent's programs and its taskstats listener.
fn welcome(probes: &Probes, taskstats: &Result<TaskstatsListener, Unavailable>) -> Welcome {
    Welcome {
        session: 0,
        rss_tracking: probes.rss_tracking,
        cpu_at_release: probes.cpu_at_release,
        ring_buffer_bytes: probes.ring_buffer_bytes,
        load_us: (probes.load_ms * 1e3) as u64,
        taskstats_rcvbuf_bytes: taskstats.as_ref().map_or(0, |t| t.stats().rcvbuf_bytes) as u32,
        taskstats: match taskstats.as_ref().err() {
            None => TaskstatsState::Available,
            Some(Unavailable::OtherNetNamespace) => TaskstatsState::OtherNetNamespace,
            Some(_) => TaskstatsState::Failed,
        },
        taskstats_error: taskstats
            .as_ref()
            .err()
            .map_or(Vec::new(), |e| e.to_string().into_bytes()),
        mechanisms: probes
            .mechanisms
            .iter()
            .map(|m| m.clone().into_bytes())
            .collect(),
        sees_uid: proto::SEES_ALL,
        cpu_clock: proto::CpuClockState::NotAsked,
    }
}

/// What woke the loop.
struct Ready {
    listener: bool,
    signals: bool,
    watch_loaded: bool,
    /// The clients with something to read (or a hang-up to see).
    clients: Vec<ClientId>,
}

impl Agent {
    /// Waits up to [`TICK_MS`] (less while a finish is held back) for any descriptor the loop
    /// serves: the listener, signals, ring, watch loader, then every client.
    fn wait(&self, listener: BorrowedFd<'_>, sigfd: BorrowedFd<'_>) -> std::io::Result<Ready> {
        let listen = match self.accept.listening() {
            true => PollFlags::IN,
            false => PollFlags::empty(),
        };
        let mut pfds = vec![
            PollFd::new(&listener, listen),
            PollFd::new(&sigfd, PollFlags::IN),
            PollFd::new(self.router.ring(), PollFlags::IN),
            PollFd::from_borrowed_fd(self.watchers.wake_fd(), PollFlags::IN),
        ];
        const FIRST_CLIENT: usize = 4;
        for c in self.clients.iter() {
            let out = match c.wants_to_write() {
                true => PollFlags::OUT,
                false => PollFlags::empty(),
            };
            pfds.push(PollFd::new(&c.fd, PollFlags::IN | out));
        }
        // A finish held back looks for its records at short steps.
        let wait_ns = match self.finisher.holding() {
            true => super::finish::FINISH_POLL.as_nanos() as i64,
            false => TICK_MS * 1_000_000,
        };
        let tick = Timespec {
            tv_sec: 0,
            tv_nsec: wait_ns,
        };
        match rustix::event::poll(&mut pfds, Some(&tick)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let readable = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
        let clients = (self.clients.ids().into_iter())
            .zip(&pfds[FIRST_CLIENT..])
            .filter(|(_, p)| p.revents().intersects(readable))
            .map(|(id, _)| id)
            .collect();
        Ok(Ready {
            listener: pfds[0].revents().contains(PollFlags::IN),
            signals: !pfds[1].revents().is_empty(),
            watch_loaded: !pfds[3].revents().is_empty(),
            clients,
        })
    }

    fn run(&mut self, listener: BorrowedFd<'_>, sigfd: BorrowedFd<'_>) -> anyhow::Result<()> {
        let mut buf = vec![0u8; proto::MAX_MESSAGE + 1];
        let mut shared = Instant::now();
        loop {
            let ready = self.wait(listener, sigfd)?;
            if ready.signals {
                let signals = crate::util::signals::read_signals(sigfd.as_raw_fd());
                if let Some((signo, _)) = signals.first() {
                    log::info!("spacetime agent: signal {signo}: stopping");
                    return Ok(());
                }
            }
            if ready.listener {
                self.accept(listener);
            }
            if ready.watch_loaded {
                self.watch_loaded();
            }
            self.watchers.tick();
            self.route();
            self.advance_finishing();
            for id in ready.clients {
                self.read_client(id, &mut buf);
            }
            for c in self.clients.iter_mut() {
                c.seal();
                c.write();
            }
            self.clients.close_idle();
            self.remove_closed();
            if self.programs.rss_lingering() {
                self.follow_rss();
            }
            // Runs that shrank give their room back to the others of their user.
            if shared.elapsed() >= Duration::from_secs(1) {
                shared = Instant::now();
                self.share_tracking_map();
            }
            if let Some(l) = self.logger.as_mut() {
                l.flush();
            }
        }
    }

    fn accept(&mut self, listener: BorrowedFd<'_>) {
        loop {
            let fd = match sock::accept(listener) {
                Ok(Some(fd)) => fd,
                Ok(None) => return self.accept.accepted(),
                Err(e) => return self.accept.failed(&e),
            };
            let cred = match sock::peer_cred(fd.as_fd()) {
                Ok(c) => c,
                Err(e) => {
                    log::debug!("no peer credentials: {e}");
                    continue;
                }
            };
            let peer = Peer {
                pid: cred.pid,
                uid: cred.uid,
                gid: cred.gid,
            };
            self.clients.admit(fd, peer);
        }
    }

    /// Reads and handles every message client `id` sent.
    fn read_client(&mut self, id: ClientId, buf: &mut [u8]) {
        for _ in 0..READS_PER_ROUND {
            let c = &mut self.clients[id];
            if c.closed {
                return;
            }
            let r = match sock::recv(c.fd.as_fd(), buf, false) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::debug!("client {}: {e}", c.peer.pid);
                    c.closed = true;
                    return;
                }
            };
            if r.len == 0 {
                c.closed = true;
                return;
            }
            c.active = Instant::now();
            let msg = match (r.truncated, Msg::parse(&buf[..r.len])) {
                (false, Ok(m)) => m,
                (_, parsed) => {
                    let why = parsed
                        .err()
                        .map_or("too large".to_string(), |e| e.to_string());
                    let why = format!("a malformed message: {why}");
                    c.refuse(proto::Refusal::Protocol, &why);
                    return;
                }
            };
            self.handle(id, msg, r.fd);
        }
    }

    /// Ends and drops the closed clients: a run cut short is untracked, a watch leaves its
    /// set, a finish held back is forgotten, and what they held goes back.
    fn remove_closed(&mut self) {
        let closed = self.clients.take_closed();
        let mut freed = 0;
        for (id, c) in &closed {
            self.finisher.forget(*id);
            if let (Some(s), Some(_)) = (c.session, &c.run) {
                // A client gone (or dead) mid-run: its session ends at once.
                self.end_session_run(s);
            }
            if let Some(seat) = c.seat.filter(|s| s.baseline.is_some()) {
                self.watchers.leave(seat.uid);
            }
            let held = c.queued_bytes();
            freed += held;
            log::debug!("client pid {} gone ({held} bytes queued)", c.peer.pid);
        }
        if !closed.is_empty() {
            // Its queues back (the clients dropped) before the trim below.
            drop(closed);
            self.follow_rss();
            let _ = self.follow_ticks();
            self.update_delayacct();
            self.share_tracking_map();
        }
        // Freed queues go back to the system, not only to the allocator: a client that never
        // read may have held tens of MiB in small pieces. glibc only: the static build's
        // daemons allocate from musl, which unmaps a group once its blocks are free (main.rs).
        #[cfg(target_env = "gnu")]
        if freed >= 1 << 20 {
            // SAFETY: plain call; returns whether memory was released.
            unsafe { libc::malloc_trim(0) };
        }
        #[cfg(not(target_env = "gnu"))]
        let _ = freed;
    }

    /// Tells every client the agent stops, and ends their sessions.
    fn shutdown(&mut self) {
        self.clients.close_all();
        self.remove_closed();
    }

    /// Sends every waiting record and taskstats datagram to its session's client.
    pub(super) fn route(&mut self) {
        self.router
            .route(&mut self.clients, &mut self.watchers, None);
    }

    /// Answers every held-back finish whose records went (routed just before), or whose
    /// wait is over.
    fn advance_finishing(&mut self) {
        for (id, s) in self.finisher.due(&self.programs.probes) {
            // What the kernel wrote since the loop's drain.
            self.route();
            self.end_run(id, s);
        }
    }

    /// Forgets every process of session `s` in the kernel and here.
    pub(super) fn end_session_run(&mut self, s: SessionId) {
        self.programs.untrack(s);
        self.router.forget_session(s);
    }

    /// rss_stat on or off as the clients want it now (see [`AgentPrograms::follow_rss`]).
    pub(super) fn follow_rss(&mut self) {
        self.programs.follow_rss(self.clients.want_rss());
    }

    /// The CPU clock on or off as the clients want it now (see [`AgentPrograms::follow_ticks`]).
    pub(super) fn follow_ticks(&mut self) -> Result<usize, String> {
        self.programs.follow_ticks(self.clients.want_ticks())
    }

    /// Delay accounting on while some client asked for it.
    pub(super) fn update_delayacct(&mut self) {
        self.programs
            .follow_delayacct(self.clients.want_delayacct());
    }

    /// Each session's share of the tracking map, again.
    pub(super) fn share_tracking_map(&mut self) {
        self.programs.share_tracking_map(&self.clients, None);
    }
}
