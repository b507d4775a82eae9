//! The agent's one loop: `poll` over its listening socket, its signalfd, the ring buffer, the
//! watch loader's wake-up and every client; the ring drained on each wake-up (and every
//! 50 ms) and routed ([`super::route`]); each client's requests answered by
//! [`super::requests`]; connections accepted within their limits, idle ones closed.

use std::{
    os::fd::{AsFd, AsRawFd, BorrowedFd},
    path::PathBuf,
    time::{Duration, Instant},
};

use crate::kernel::ring::Ring;
use rustix::event::{PollFd, PollFlags, Timespec};

use super::{
    clients::Client, listen::Listener, queues::Queues, route::Owners, users::Users, verify::Peer,
    watchers::Watchers,
};
use crate::kernel::{
    loader::{CpuClock, KernelLogger, LoadOptions, Probes},
    remote::{
        proto::{self, Msg, Refusal, TaskstatsState, Welcome},
        sock,
    },
    taskstats::{ListenerStats, TaskstatsListener, Unavailable},
};

/// How often the ring is drained when nothing wakes the agent.
const TICK_MS: i64 = 50;
/// Processes one non-root session may have tracked at once.
pub const PROCESSES_PER_SESSION: u32 = 16384;
/// Connections at once (each holds a session or is about to).
const MAX_CLIENTS: usize = 256;
/// Connections one non-root user may hold at once (with or without a session), so that no
/// user takes every connection.
const CONNECTIONS_PER_USER: usize = 16;
/// Messages read from one client per round of the loop: one client cannot starve the others.
const READS_PER_ROUND: usize = 64;
/// A connection that has not said hello by then is closed.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
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

/// Serves until a SIGTERM, SIGINT or SIGHUP (Ok), or fails to start or to go on.
pub(super) struct Agent {
    pub probes: Probes,
    pub ring: Ring,
    logger: Option<KernelLogger>,
    pub taskstats: Option<TaskstatsListener>,
    pub welcome: Welcome,
    /// Processes per non-root session, and per non-root user.
    pub session_limit: u32,
    idle_timeout: Duration,
    pub clients: Vec<Client>,
    /// Which session each traced process belongs to, for taskstats datagrams.
    pub owners: Owners,
    pub rss_following: bool,
    /// Since when no session needs rss_stat while it is still attached (it lingers).
    pub rss_unwanted_since: Option<Instant>,
    /// `--rss-linger`.
    pub rss_linger: Duration,
    /// Delay accounting switched on for clients (restored when dropped).
    pub delayacct: Option<crate::run::delayacct::DelayAcct>,
    pub users: Users,
    /// What waits for every client.
    pub queues: Queues,
    pub watchers: Watchers,
    accept: AcceptBackoff,
}

pub fn serve(args: &Config) -> anyhow::Result<()> {
    use anyhow::Context;
    if !rustix::process::geteuid().is_root() {
        anyhow::bail!("the agent loads the kernel programs for every user: run it as root (with CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN and CAP_SYS_PTRACE)");
    }
    super::ready::check_capabilities()?;
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
    let welcome = Welcome {
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
    };
    let limits = super::ready::Limits {
        sessions_per_user: super::requests::SESSIONS_PER_USER,
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
    let mut agent = Agent {
        ring: probes.take_events()?,
        logger: probes.take_logger(),
        probes,
        taskstats: taskstats.ok(),
        welcome,
        session_limit: args.session_limit,
        idle_timeout: args.idle_timeout,
        clients: Vec::new(),
        owners: Owners::default(),
        rss_following: false,
        rss_unwanted_since: None,
        rss_linger: args.rss_linger,
        delayacct: None,
        users: Users::new(),
        queues: Queues::with_budget(args.queued_bytes),
        watchers: Watchers::new().context("the watch loader's wake-up")?,
        accept: AcceptBackoff::default(),
    };
    let result = agent.run(listener.fd.as_fd(), sigfd);
    agent.shutdown();
    result
}

/// `accept()` failing for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)
/// leaves the connection waiting, so the listener stays readable: polled at once again, it
/// would spin. The listener is left out of the poll for a while instead (doubling up to a
/// second), and the failure is said at most once per [`AcceptBackoff::SAY_EVERY`], with the
/// count since.
#[derive(Default)]
struct AcceptBackoff {
    until: Option<Instant>,
    delay: Duration,
    failures: u64,
    said: Option<Instant>,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);
    const SAY_EVERY: Duration = Duration::from_secs(10);

    fn listening(&self) -> bool {
        self.until.is_none_or(|t| Instant::now() >= t)
    }

    fn failed(&mut self, e: &std::io::Error) {
        self.failures += 1;
        self.delay = (self.delay * 2).clamp(Self::FIRST, Self::MAX);
        self.until = Some(Instant::now() + self.delay);
        if self.said.is_none_or(|t| t.elapsed() >= Self::SAY_EVERY) {
            log::warn!(
                "spacetime agent: accepting a connection: {e} ({} failures so far); waiting {:?} before the next",
                self.failures,
                self.delay
            );
            self.said = Some(Instant::now());
        }
    }

    fn accepted(&mut self) {
        self.delay = Duration::ZERO;
    }
}

impl Agent {
    /// Waits up to [`TICK_MS`] (less while a finish is held back) for any descriptor the loop
    /// serves; what each has to say, in the order: listener, signals, ring, watch loader,
    /// then every client.
    fn wait(
        &self,
        listener: BorrowedFd<'_>,
        sigfd: BorrowedFd<'_>,
    ) -> std::io::Result<Vec<PollFlags>> {
        let listen = match self.accept.listening() {
            true => PollFlags::IN,
            false => PollFlags::empty(),
        };
        let mut pfds = vec![
            PollFd::new(&listener, listen),
            PollFd::new(&sigfd, PollFlags::IN),
            PollFd::new(&self.ring, PollFlags::IN),
            PollFd::from_borrowed_fd(self.watchers.wake_fd(), PollFlags::IN),
        ];
        for c in &self.clients {
            let out = match c.wants_to_write() {
                true => PollFlags::OUT,
                false => PollFlags::empty(),
            };
            pfds.push(PollFd::new(&c.fd, PollFlags::IN | out));
        }
        // A finish held back looks for its records at short steps.
        let wait_ns = match self.finishing() {
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
        Ok(pfds.iter().map(PollFd::revents).collect())
    }

    fn run(&mut self, listener: BorrowedFd<'_>, sigfd: BorrowedFd<'_>) -> anyhow::Result<()> {
        let mut buf = vec![0u8; proto::MAX_MESSAGE + 1];
        let mut shared = Instant::now();
        loop {
            let ready = self.wait(listener, sigfd)?;
            const FIRST_CLIENT: usize = 4;
            if !ready[1].is_empty() {
                let signals = crate::util::signals::read_signals(sigfd.as_raw_fd());
                if let Some((signo, _)) = signals.first() {
                    log::info!("spacetime agent: signal {signo}: stopping");
                    return Ok(());
                }
            }
            if ready[0].contains(PollFlags::IN) {
                self.accept(listener);
            }
            if !ready[3].is_empty() {
                self.watch_loaded();
            }
            self.watchers.tick();
            self.route();
            self.advance_finishing();
            for (i, r) in ready[FIRST_CLIENT..].iter().enumerate() {
                if r.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                    self.read_client(i, &mut buf);
                }
            }
            for c in &mut self.clients {
                c.seal();
                c.write();
            }
            self.close_idle();
            self.remove_closed();
            if self.rss_unwanted_since.is_some() {
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
            let principal = self.users.principal(peer.uid);
            let mut c = Client::new(fd, peer, principal, self.queues.clone());
            let of_user = self
                .clients
                .iter()
                .filter(|c| c.principal == principal)
                .count();
            if self.clients.len() >= MAX_CLIENTS {
                refuse(
                    &mut c,
                    Refusal::Busy,
                    "the agent serves as many connections as it can; try again later",
                );
            } else if principal != 0 && of_user >= CONNECTIONS_PER_USER {
                let why = format!(
                    "user {principal} already has {CONNECTIONS_PER_USER} connections to the agent, the most one user may have"
                );
                refuse(&mut c, Refusal::UserLimit, &why);
            }
            log::debug!(
                "client pid {} uid {} (user {principal}) connected",
                peer.pid,
                peer.uid
            );
            self.clients.push(c);
        }
    }

    /// Reads and handles every message client `i` sent.
    fn read_client(&mut self, i: usize, buf: &mut [u8]) {
        for _ in 0..READS_PER_ROUND {
            if self.clients[i].closed {
                return;
            }
            let r = match sock::recv(self.clients[i].fd.as_fd(), buf, false) {
                Ok(r) => r,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::debug!("client {}: {e}", self.clients[i].peer.pid);
                    self.clients[i].closed = true;
                    return;
                }
            };
            if r.len == 0 {
                self.clients[i].closed = true;
                return;
            }
            self.clients[i].active = Instant::now();
            let msg = match (r.truncated, Msg::parse(&buf[..r.len])) {
                (false, Ok(m)) => m,
                (_, parsed) => {
                    let why = parsed
                        .err()
                        .map_or("too large".to_string(), |e| e.to_string());
                    let why = format!("a malformed message: {why}");
                    refuse(&mut self.clients[i], Refusal::Protocol, &why);
                    return;
                }
            };
            self.handle(i, msg, r.fd);
        }
    }

    /// Closes the connections that hold a slot without using it: no hello in time, a
    /// session with nothing traced and no message for `--idle-timeout`, or a watch whose
    /// records wait unread for as long.
    fn close_idle(&mut self) {
        let now = Instant::now();
        let idle = self.idle_timeout;
        for c in self.clients.iter_mut().filter(|c| !c.closed) {
            let quiet = now.duration_since(c.active);
            let why = if c.session.is_none() && quiet >= HELLO_TIMEOUT {
                "it said no hello in time"
            } else if c.session.is_some() && c.run.is_none() && c.seat.is_none() && quiet >= idle {
                "its session was idle"
            } else if c.seat.is_some() && c.wants_to_write() && quiet >= idle {
                // A watch holds one of few program sets: it must use it. A trace that is
                // not read (its client stopped, Ctrl-Z) keeps its session: its queue is
                // bounded, what does not fit is counted as its loss.
                "the watch read nothing of what waits for it"
            } else {
                continue;
            };
            log::info!(
                "client pid {} uid {}: closed: {why} for {} s",
                c.peer.pid,
                c.peer.uid,
                quiet.as_secs()
            );
            let reason = format!("the agent closed the session: {why}").into_bytes();
            c.control(&Msg::Shutdown { reason });
            c.write();
            c.closed = true;
        }
    }

    fn remove_closed(&mut self) {
        let closed: Vec<usize> = (0..self.clients.len())
            .filter(|&i| self.clients[i].closed)
            .collect();
        let mut freed = 0;
        for &i in closed.iter().rev() {
            let c = self.clients.swap_remove(i);
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
            self.follow_rss();
            let _ = self.follow_ticks();
            self.update_delayacct();
            self.share_tracking_map();
        }
        // Freed queues go back to the system, not only to the allocator: a client that never
        // read may have held tens of MiB in small pieces. glibc only: musl (the static
        // build) has no malloc_trim.
        #[cfg(target_env = "gnu")]
        if freed >= 1 << 20 {
            // SAFETY: plain call; returns whether memory was released.
            unsafe { libc::malloc_trim(0) };
        }
        #[cfg(not(target_env = "gnu"))]
        let _ = freed;
    }

    pub(super) fn taskstats_stats(&self) -> ListenerStats {
        self.taskstats
            .as_ref()
            .map(|t| t.stats())
            .unwrap_or_default()
    }

    /// Tells every client the agent stops, and ends their sessions.
    fn shutdown(&mut self) {
        for c in &mut self.clients {
            c.control(&Msg::Shutdown {
                reason: b"the agent was told to stop".to_vec(),
            });
            c.write();
            c.closed = true;
        }
        self.remove_closed();
    }
}

/// Tells the client why not, and closes the connection once that is sent.
pub(super) fn refuse(c: &mut Client, code: Refusal, why: &str) {
    c.control(&Msg::Refused {
        code,
        reason: why.as_bytes().to_vec(),
    });
    c.write();
    c.closed = true;
}
