//! The agent's one loop: `poll` over its listening socket, its signalfd, the ring buffer and
//! every client; the ring drained on each wake-up (and every 50 ms) and routed ([`super::route`]);
//! each client's requests (hello, track, attach, flush, finish) answered here.

use std::{
    collections::HashMap,
    os::fd::{AsRawFd, OwnedFd},
    path::{Path, PathBuf},
};

use aya::maps::{MapData, RingBuf};
use spacetime_common::MAX_SESSIONS;

use super::{
    clients::{Client, RunState},
    verify::{self, Peer},
};
use crate::kernel::{
    loader::{KernelLogger, LoadOptions, Probes, SessionId},
    remote::{
        proto::{self, Msg, Welcome},
        sock,
    },
    taskstats::{ListenerStats, TaskstatsListener},
};

/// How often the ring is drained when nothing wakes the agent.
const TICK_MS: i32 = 50;
/// Sessions one non-root user may hold at once.
pub const SESSIONS_PER_USER: usize = 8;
/// Processes one non-root session may have tracked at once.
pub const PROCESSES_PER_SESSION: u32 = 16384;
/// Connections at once (each holds a session or is about to).
const MAX_CLIENTS: usize = 256;
/// Connections one non-root user may hold at once (with or without a session), so that no
/// user takes every connection.
const CONNECTIONS_PER_USER: usize = 16;
/// Messages read from one client per round of the loop: one client cannot starve the others.
const READS_PER_ROUND: usize = 64;

/// `spacetime agent [--socket PATH]`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// Where to listen (default: $SPACETIME_SOCKET, else /run/spacetime/agent.sock)
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Most processes one non-root session may have traced at once (the kernel refuses to
    /// trace forks beyond it, and the client's report counts them)
    #[arg(long, value_name = "N", default_value_t = PROCESSES_PER_SESSION,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub session_limit: u32,
}

/// Entry point of the subcommand: 0 after a SIGTERM, SIGINT or SIGHUP, 125 when it cannot
/// serve.
pub fn main(args: AgentArgs) -> i32 {
    match serve(&args) {
        Ok(()) => 0,
        Err(e) => {
            crate::errln!("spacetime agent: {e:#}");
            crate::util::exit_code::EXIT_OWN_FAILURE
        }
    }
}

pub(super) struct Agent {
    pub probes: Probes,
    pub ring: RingBuf<MapData>,
    logger: Option<KernelLogger>,
    pub taskstats: Option<TaskstatsListener>,
    welcome: Welcome,
    /// Processes per non-root session.
    session_limit: u32,
    pub clients: Vec<Client>,
    /// The tgid of each traced process, to its session.
    pub tgids: HashMap<u32, SessionId>,
    rss_following: bool,
    /// Delay accounting switched on for clients (restored when dropped).
    delayacct: Option<crate::run::delayacct::DelayAcct>,
}

fn serve(args: &AgentArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        anyhow::bail!("the agent loads the kernel programs for every user: run it as root (with CAP_BPF, CAP_PERFMON, CAP_NET_ADMIN, CAP_SYS_PTRACE and CAP_KILL)");
    }
    super::ready::check_capabilities()?;
    let path = args.socket.clone().unwrap_or_else(super::socket_path);
    // Before any thread: every thread inherits the blocked signals.
    let sigfd = crate::util::signals::signal_fd(&[libc::SIGTERM, libc::SIGINT, libc::SIGHUP])?;
    let mut probes = Probes::load(&LoadOptions {
        ring_buffer_bytes: 16 << 20,
        track_rss: true,
        ..LoadOptions::default()
    })?;
    probes.set_rss_following(false)?;
    let taskstats = crate::kernel::taskstats::open_listener(16 << 20);
    let activated = activated_socket();
    let by_systemd = activated.is_some();
    let listener = match activated {
        Some(fd) => fd,
        None => listen(&path).with_context(|| format!("listening on {}", path.display()))?,
    };
    let welcome = Welcome {
        session: 0,
        rss_tracking: probes.rss_tracking,
        cpu_at_release: probes.cpu_at_release,
        ring_buffer_bytes: probes.ring_buffer_bytes,
        load_us: (probes.load_ms * 1e3) as u64,
        taskstats_rcvbuf_bytes: taskstats.as_ref().map_or(0, |t| t.stats().rcvbuf_bytes) as u32,
        taskstats_error: taskstats
            .as_ref()
            .err()
            .map_or(Vec::new(), |e| e.to_string().into_bytes()),
        mechanisms: probes
            .mechanisms
            .iter()
            .map(|m| m.clone().into_bytes())
            .collect(),
    };
    let limits = super::ready::Limits {
        sessions_per_user: SESSIONS_PER_USER,
        connections_per_user: CONNECTIONS_PER_USER,
        connections: MAX_CLIENTS,
        processes_per_session: args.session_limit,
    };
    super::ready::announce(&super::ready::start_line(
        &super::ready::listening_path(&listener, &path),
        by_systemd,
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
        clients: Vec::new(),
        tgids: HashMap::new(),
        rss_following: false,
        delayacct: None,
    };
    let result = agent.run(&listener, &sigfd);
    agent.shutdown();
    drop(listener);
    // A socket systemd made is systemd's to remove.
    if !by_systemd {
        if let Err(e) = std::fs::remove_file(&path) {
            log::debug!("removing {}: {e}", path.display());
        }
    }
    result
}

/// The listening socket systemd passed (socket activation: `LISTEN_PID` is us and
/// `LISTEN_FDS` is 1, the socket is descriptor 3), made non-blocking.
fn activated_socket() -> Option<OwnedFd> {
    use std::os::fd::FromRawFd;
    let ours = std::env::var("LISTEN_PID").ok()?.parse::<u32>().ok()? == std::process::id();
    if !ours || std::env::var("LISTEN_FDS").ok()?.trim() != "1" {
        return None;
    }
    // SAFETY: systemd hands descriptor 3 over to us; nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(3) };
    // SAFETY: fcntl on a descriptor we own.
    unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK);
        libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC);
    }
    Some(fd)
}

/// The socket file (its directory made 0755 when missing), open to every user (0666): the
/// checks on each request decide, not the file's mode.
fn listen(path: &Path) -> std::io::Result<OwnedFd> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    let fd = sock::listen(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(fd)
}

impl Agent {
    fn run(&mut self, listener: &OwnedFd, sigfd: &OwnedFd) -> anyhow::Result<()> {
        let mut buf = vec![0u8; proto::MAX_MESSAGE + 1];
        loop {
            let mut pfds = vec![
                pollfd(listener.as_raw_fd(), libc::POLLIN),
                pollfd(sigfd.as_raw_fd(), libc::POLLIN),
                pollfd(self.ring.as_raw_fd(), libc::POLLIN),
            ];
            for c in &self.clients {
                let out = if c.wants_to_write() { libc::POLLOUT } else { 0 };
                pfds.push(pollfd(c.fd.as_raw_fd(), libc::POLLIN | out));
            }
            // SAFETY: a valid array of pollfds.
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, TICK_MS) };
            if n < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                return Err(std::io::Error::last_os_error().into());
            }
            if pfds[1].revents != 0 {
                let signals = crate::run::event_loop::read_signals(sigfd.as_raw_fd());
                if let Some((signo, _)) = signals.first() {
                    log::info!("spacetime agent: signal {signo}: stopping");
                    return Ok(());
                }
            }
            if pfds[0].revents & libc::POLLIN != 0 {
                self.accept(listener);
            }
            self.route();
            for (i, p) in pfds[3..].iter().enumerate() {
                if p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 {
                    self.read_client(i, &mut buf);
                }
            }
            for c in &mut self.clients {
                c.seal();
                c.write();
            }
            self.remove_closed();
            if let Some(l) = self.logger.as_mut() {
                l.flush();
            }
        }
    }

    fn accept(&mut self, listener: &OwnedFd) {
        loop {
            let fd = match sock::accept(listener.as_raw_fd()) {
                Ok(Some(fd)) => fd,
                Ok(None) => return,
                Err(e) => {
                    log::warn!("spacetime agent: accepting a connection: {e}");
                    return;
                }
            };
            let cred = match sock::peer_cred(fd.as_raw_fd()) {
                Ok(c) => c,
                Err(e) => {
                    log::debug!("no peer credentials: {e}");
                    continue;
                }
            };
            let peer = Peer {
                pid: cred.pid as u32,
                uid: cred.uid,
            };
            let mut c = Client::new(fd, peer);
            let of_user = self
                .clients
                .iter()
                .filter(|c| c.peer.uid == peer.uid)
                .count();
            if self.clients.len() >= MAX_CLIENTS {
                refuse(
                    &mut c,
                    "the agent serves as many connections as it can; try again later",
                );
            } else if peer.uid != 0 && of_user >= CONNECTIONS_PER_USER {
                let why = format!(
                    "user {} already has {CONNECTIONS_PER_USER} connections to the agent, the most one user may have",
                    peer.uid
                );
                refuse(&mut c, &why);
            }
            log::debug!("client pid {} uid {} connected", peer.pid, peer.uid);
            self.clients.push(c);
        }
    }

    /// Reads and handles every message client `i` sent.
    fn read_client(&mut self, i: usize, buf: &mut [u8]) {
        for _ in 0..READS_PER_ROUND {
            if self.clients[i].closed {
                return;
            }
            let fd = self.clients[i].fd.as_raw_fd();
            let r = match sock::recv(fd, buf, libc::MSG_DONTWAIT) {
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
            let msg = match (r.truncated, Msg::parse(&buf[..r.len])) {
                (false, Ok(m)) => m,
                (_, parsed) => {
                    let why = parsed
                        .err()
                        .map_or("too large".to_string(), |e| e.to_string());
                    refuse(&mut self.clients[i], &format!("a malformed message: {why}"));
                    return;
                }
            };
            self.handle(i, msg, r.fd);
        }
    }

    fn handle(&mut self, i: usize, msg: Msg, fd: Option<OwnedFd>) {
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
            (Msg::Track, Some(s)) => match fd {
                Some(fd) => self.track(i, s, &fd),
                None => refuse(
                    &mut self.clients[i],
                    "no process descriptor came with the request",
                ),
            },
            (Msg::Attach { pids }, Some(s)) => self.attach(i, s, &pids),
            (Msg::Flush { seq }, Some(_)) => {
                self.route();
                self.clients[i].control(&Msg::Flushed { seq });
            }
            (Msg::Finish, Some(s)) => self.finish(i, s),
            (other, _) => {
                log::debug!("client {}: unexpected {other:?}", self.clients[i].peer.pid);
                refuse(&mut self.clients[i], "a message out of order");
            }
        }
    }

    fn hello(&mut self, i: usize, version: u32, asked: u8) {
        let want = asked & proto::want::KIND;
        let uid = self.clients[i].peer.uid;
        if version != proto::VERSION {
            let why = format!(
                "this agent speaks protocol version {}, the client {version}: use the same spacetime for both",
                proto::VERSION
            );
            return refuse(&mut self.clients[i], &why);
        }
        if want != proto::want::TRACE && want != proto::want::WATCH {
            return refuse(&mut self.clients[i], "the agent does not serve that");
        }
        // The kernel programs number processes as the agent's namespace does.
        if !verify::same_pid_namespace(self.clients[i].peer.pid) {
            return refuse(
                &mut self.clients[i],
                "the client runs in another PID namespace than the agent's",
            );
        }
        let held = self
            .clients
            .iter()
            .filter(|c| c.peer.uid == uid && c.session.is_some())
            .count();
        if uid != 0 && held >= SESSIONS_PER_USER {
            let why = format!("user {uid} already has {SESSIONS_PER_USER} sessions with the agent, the most one user may have");
            return refuse(&mut self.clients[i], &why);
        }
        let taken: Vec<u16> = self.clients.iter().filter_map(|c| c.session).collect();
        let Some(s) = (1..MAX_SESSIONS as u16).find(|s| !taken.contains(s)) else {
            return refuse(
                &mut self.clients[i],
                "the agent serves as many sessions as it can; try again later",
            );
        };
        let mut welcome = Welcome {
            session: s,
            ..self.welcome.clone()
        };
        if want == proto::want::WATCH {
            let watching = self.clients.iter().filter(|c| c.watch.is_some()).count();
            if watching >= super::watchers::MAX_WATCHES {
                let why = format!(
                    "the agent serves {watching} watches already, the most it serves at once"
                );
                return refuse(&mut self.clients[i], &why);
            }
            match super::watchers::Watching::load(uid) {
                Ok(w) => {
                    welcome.cpu_at_release = w.probes.cpu_at_release;
                    welcome.mechanisms = w
                        .probes
                        .mechanisms
                        .iter()
                        .map(|m| m.clone().into_bytes())
                        .collect();
                    welcome.load_us = (w.probes.load_ms * 1e3) as u64;
                    self.clients[i].watch = Some(Box::new(w));
                }
                Err(e) => {
                    let why = format!("the agent could not load programs for the watch: {e}");
                    return refuse(&mut self.clients[i], &why);
                }
            }
        }
        self.clients[i].session = Some(s);
        self.clients[i].delayacct = asked & proto::want::DELAYACCT != 0;
        self.update_delayacct();
        self.clients[i].control(&Msg::Welcome(welcome));
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

    fn track(&mut self, i: usize, s: SessionId, pidfd: &OwnedFd) {
        let peer = self.clients[i].peer;
        if self.clients[i].run.is_some() {
            return refuse(
                &mut self.clients[i],
                "a run is already being traced in this session",
            );
        }
        let proven = match verify::prove(peer, pidfd) {
            Ok(p) => p,
            Err(why) => {
                log::info!("client pid {} uid {}: refused: {why}", peer.pid, peer.uid);
                let reason = why.to_string().into_bytes();
                return self.clients[i].control(&Msg::Refused { reason });
            }
        };
        let limit = self.limit_for(i);
        let started = self
            .probes
            .reset_session(s)
            .and_then(|()| self.probes.set_session_limit(s, limit))
            .and_then(|()| self.probes.counters_of(s))
            .and_then(|baseline| {
                self.probes.track_in(proven.pid, s)?;
                Ok(baseline)
            });
        let baseline = match started {
            Ok(b) => b,
            Err(e) => {
                log::warn!("spacetime agent: tracking pid {}: {e}", proven.pid);
                let reason = format!("the agent could not track the process: {e}").into_bytes();
                return self.clients[i].control(&Msg::Refused { reason });
            }
        };
        self.tgids.insert(proven.pid, s);
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
    /// whose real, effective and saved uids are its own (ptrace's credential rule), and only
    /// from the agent's PID namespace (its pids must mean the agent's).
    fn attach(&mut self, i: usize, s: SessionId, pids: &[u32]) {
        let peer = self.clients[i].peer;
        if self.clients[i].run.is_some() {
            return refuse(
                &mut self.clients[i],
                "a run is already being traced in this session",
            );
        }
        if !verify::same_pid_namespace(peer.pid) {
            let reason =
                b"attaching through the agent needs the client in the agent's PID namespace"
                    .to_vec();
            return self.clients[i].control(&Msg::Refused { reason });
        }
        let caller = (peer.uid != 0).then_some(peer.uid);
        let limit = self.limit_for(i);
        let started = self.probes.reset_session(s).and_then(|()| {
            self.probes.set_session_limit(s, limit)?;
            self.probes.counters_of(s)
        });
        let baseline = match started {
            Ok(b) => b,
            Err(e) => {
                let reason = format!("the agent could not attach: {e}").into_bytes();
                return self.clients[i].control(&Msg::Refused { reason });
            }
        };
        // Adopting the running processes' mms needs rss_stat following.
        if let Err(e) = self.probes.set_rss_following(true) {
            log::warn!("spacetime agent: switching rss_stat on: {e}");
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
                let reason = e.to_string().into_bytes();
                return self.clients[i].control(&Msg::Refused { reason });
            }
        };
        let pids: Vec<u32> = attached.targets.iter().map(|t| t.pid).collect();
        for &p in &pids {
            self.tgids.insert(p, s);
        }
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

    /// Ends client `i`'s run: every record sent, then the figures only the agent reads.
    fn finish(&mut self, i: usize, s: SessionId) {
        self.route();
        let Some(run) = self.clients[i].run.take() else {
            // Nothing tracked (the track was refused): an empty end.
            return self.clients[i].control(&Msg::End(proto::End::default()));
        };
        let tree_rss = self.probes.tree_rss_of(s).unwrap_or_default();
        let mms = self.probes.followed_mms_of(s).unwrap_or_default();
        let counters = self
            .probes
            .counters_of(s)
            .map(|c| c.since(&run.baseline))
            .unwrap_or_default();
        self.end_session_run(s);
        // What the kernel wrote between the last drain and the untracking.
        self.route();
        let enobufs = self.taskstats_stats().enobufs - run.enobufs_at_start;
        let c = &mut self.clients[i];
        for chunk in mms.chunks(proto::MMS_PER_MESSAGE) {
            c.control(&Msg::Mms(chunk.to_vec()));
        }
        let end = proto::End {
            counters,
            dropped_records: std::mem::take(&mut c.dropped_records),
            dropped_taskstats: std::mem::take(&mut c.dropped_taskstats),
            taskstats_enobufs: enobufs,
            tree_rss,
        };
        c.control(&Msg::End(end));
        self.follow_rss();
    }

    /// Forgets every process of session `s` in the kernel and here.
    fn end_session_run(&mut self, s: SessionId) {
        match self.probes.untrack_session(s) {
            Ok(n) => log::debug!("session {s}: {n} processes untracked"),
            Err(e) => log::warn!("spacetime agent: untracking session {s}: {e}"),
        }
        self.tgids.retain(|_, v| *v != s);
    }

    /// rss_stat runs only while some session traces.
    fn follow_rss(&mut self) {
        let want = self.clients.iter().any(|c| c.run.is_some());
        if want != self.rss_following {
            match self.probes.set_rss_following(want) {
                Ok(()) => self.rss_following = want,
                Err(e) => log::warn!("spacetime agent: switching rss_stat: {e}"),
            }
        }
    }

    /// Delay accounting (a root-only sysctl) on while some client asked for it, and put back
    /// as it was after the last.
    fn update_delayacct(&mut self) {
        let want = self.clients.iter().any(|c| c.delayacct && !c.closed);
        match (want, self.delayacct.is_some()) {
            (true, false) => {
                self.delayacct = Some(crate::run::delayacct::DelayAcct::configure(true, false))
            }
            (false, true) => self.delayacct = None,
            _ => {}
        }
    }

    fn remove_closed(&mut self) {
        let closed: Vec<usize> = (0..self.clients.len())
            .filter(|&i| self.clients[i].closed)
            .collect();
        for &i in closed.iter().rev() {
            let c = self.clients.swap_remove(i);
            if let (Some(s), Some(_)) = (c.session, c.run) {
                // A client gone (or dead) mid-run: its session ends at once.
                self.end_session_run(s);
            }
            log::debug!("client pid {} gone", c.peer.pid);
        }
        if !closed.is_empty() {
            self.follow_rss();
            self.update_delayacct();
        }
    }

    fn taskstats_stats(&self) -> ListenerStats {
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

fn pollfd(fd: std::os::fd::RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Tells the client why not, and closes the connection once that is sent.
fn refuse(c: &mut Client, why: &str) {
    c.control(&Msg::Refused {
        reason: why.as_bytes().to_vec(),
    });
    c.write();
    c.closed = true;
}
