//! The client's end of an agent connection: a session opened with a hello, a held child
//! tracked by passing its pidfd, the session's records and taskstats datagrams received as
//! they come, and the run's end figures on request.
//!
//! The agent going away (EOF, an error, a shutdown message) is never fatal here: the
//! connection says so once ([`AgentConn::gone`]) and hands out what it received before.

use std::{
    collections::VecDeque,
    io,
    os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd},
    path::Path,
    time::{Duration, Instant},
};

use rustix::io::Errno;

use super::{
    proto::{self, End, Msg, Welcome},
    sock,
};
use crate::kernel::taskstats::{ListenerStats, TaskstatsRecord};

/// How long a client waits for an answer the agent owes it (tracking, a flush, the end)
/// while the agent does no work: an agent that spends CPU meanwhile is serving, only slowly
/// (a machine whose CPU others keep busy), and is waited for up to [`BUSY_ANSWER_TIMEOUT`].
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest wait for an answer from an agent that keeps working.
const BUSY_ANSWER_TIMEOUT: Duration = Duration::from_secs(60);
/// How often, while waiting, the client looks whether the agent is stopped.
const STOPPED_CHECK: Duration = Duration::from_millis(100);
/// The first wait for an answer, ms, before the first look whether the agent is stopped
/// (reading its state in /proc costs more than most answers take to come).
const FIRST_WAIT_MS: i32 = 2;

/// Why the agent is no longer there for this client.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Gone {
    #[error("the connection was closed")]
    Closed,
    #[error("it is stopped (SIGSTOP, or held by a debugger): nothing it owes comes while it is")]
    Stopped,
    #[error(
        "it did not answer within {} s idle, or {} s working",
        ANSWER_TIMEOUT.as_secs(),
        BUSY_ANSWER_TIMEOUT.as_secs()
    )]
    Silent,
    #[error("it is stopping: {0}")]
    Stopping(String),
    #[error("it refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Broken(String),
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// No agent listens there (no socket file, or nobody behind it).
    #[error("no spacetime agent at {0}")]
    Absent(String),
    /// The agent answered no.
    #[error("the spacetime agent refused: {reason}")]
    Refused {
        code: proto::Refusal,
        reason: String,
    },
    #[error("talking to the spacetime agent at {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("the spacetime agent at {0} answered something unexpected")]
    Protocol(String),
    /// It was there but did not answer: stopped, silent, or gone meanwhile.
    #[error("the spacetime agent at {path} did not answer: {why}")]
    NoAnswer { path: String, why: Gone },
}

/// The error to show when the agent could not be used (`agent`) and loading the programs
/// here failed too (`own`): without the privileges to load them, what the agent said (no
/// agent: start one, or use sudo); otherwise the loading's own failure.
pub fn instead(own: anyhow::Error, agent: ConnectError, path: &Path) -> anyhow::Error {
    let unprivileged = matches!(
        own.downcast_ref::<crate::kernel::loader::LoadError>(),
        Some(crate::kernel::loader::LoadError::NotRoot)
    );
    match (unprivileged, agent) {
        (false, _) => own,
        (true, ConnectError::Absent(_)) => anyhow::anyhow!(
            "no spacetime agent answers at {}, and loading the kernel programs here needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN): start an agent (`sudo systemctl start spacetime-agent.socket`, or `sudo spacetime agent`), or run this with sudo; `spacetime doctor` says what works here",
            path.display()
        ),
        (true, other) => other.into(),
    }
}

/// A refusal or failure while tracking, as one sentence.
#[derive(Debug, thiserror::Error)]
pub enum TrackError {
    #[error("the spacetime agent refused: {reason}")]
    Refused {
        code: proto::Refusal,
        reason: String,
    },
    #[error("the spacetime agent went away: {0}")]
    Gone(String),
}

/// What the agent sent when the run ended (nothing, when it went away first).
#[derive(Debug, Default)]
pub struct RunEnd {
    pub end: Option<End>,
    pub mms: Vec<spacetime_common::MmState>,
}

pub struct AgentConn {
    fd: OwnedFd,
    pub welcome: Welcome,
    /// From connecting to the session's welcome, ms: this client's start-up.
    pub ready_ms: f64,
    /// A watch's kernel counters, as the agent last sent them.
    pub counters: std::rc::Rc<std::cell::Cell<crate::kernel::loader::KernelCounters>>,
    /// Why the agent went away, once it did, for whoever holds a clone (a watch's summary).
    pub gone_news: std::rc::Rc<std::cell::RefCell<Option<Gone>>>,
    /// Records received and not yet handed out, in ring order.
    inbox: VecDeque<Vec<u8>>,
    /// taskstats datagrams received and not yet parsed.
    taskstats: Vec<Vec<u8>>,
    taskstats_stats: ListenerStats,
    flushed: Option<u32>,
    seq: u32,
    /// This run's Finish was sent.
    finish_asked: bool,
    ended: Option<End>,
    mms: Vec<spacetime_common::MmState>,
    gone: Option<Gone>,
    /// The agent's pid (SO_PEERCRED; 0 when it is not in our PID namespace), to tell a
    /// stopped agent from a slow one.
    agent_pid: u32,
    /// The user was told that the agent went away.
    told: bool,
    /// The kernel reported the connection reset (see `recv`).
    reset: bool,
    /// What the session is for ([`proto::want`]): a trace's words are not a watch's.
    want: u8,
    /// The run's root was asked for with the hello: its track answer is awaited, not asked
    /// for, and what comes before [`AgentConn::track`] is called is the run's.
    track_sent: bool,
    /// That answer, when it came before it was awaited.
    track_answer: Option<Msg>,
    buf: Vec<u8>,
}

fn shown(b: &[u8]) -> String {
    crate::util::term::escape(b)
}

impl AgentConn {
    /// Connects and opens a session for `want` ([`proto::want`]), whose runs have at most
    /// `max_processes` processes tracked at once (0: the agent's limit alone). Once the
    /// hello is sent, `held` may start the run's root (held before its exec) and give its
    /// pidfd: the track request follows the hello without waiting for the welcome (the
    /// agent reads a connection's requests in order), and [`AgentConn::track`] then only
    /// awaits the answer. The fork overlaps the agent's work on the hello.
    pub fn connect_for(
        path: &Path,
        want: u8,
        max_processes: u32,
        held: impl FnOnce() -> Option<OwnedFd>,
    ) -> Result<AgentConn, ConnectError> {
        let started = Instant::now();
        let where_ = path.display().to_string();
        let fd = match sock::connect(path) {
            Ok(fd) => fd,
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT) | Some(libc::ECONNREFUSED) | Some(libc::ENOTDIR)
                ) =>
            {
                return Err(ConnectError::Absent(where_))
            }
            Err(source) => {
                return Err(ConnectError::Io {
                    path: where_,
                    source,
                })
            }
        };
        let io_err = |source| ConnectError::Io {
            path: where_.clone(),
            source,
        };
        let hello = Msg::Hello {
            version: proto::VERSION,
            want,
            max_processes,
        };
        sock::send(fd.as_fd(), &hello.encode(), None).map_err(io_err)?;
        let root = held();
        if let Some(pidfd) = &root {
            sock::send(fd.as_fd(), &Msg::Track.encode(), Some(pidfd.as_fd())).map_err(io_err)?;
        }
        let agent_pid = sock::peer_cred(fd.as_fd()).map_or(0, |c| c.pid);
        let mut conn = AgentConn {
            fd,
            agent_pid,
            welcome: Welcome::default(),
            ready_ms: 0.0,
            counters: Default::default(),
            gone_news: Default::default(),
            inbox: VecDeque::new(),
            taskstats: Vec::new(),
            taskstats_stats: ListenerStats::default(),
            flushed: None,
            seq: 0,
            finish_asked: false,
            ended: None,
            mms: Vec::new(),
            gone: None,
            told: true,
            reset: false,
            want,
            track_sent: root.is_some(),
            track_answer: None,
            buf: vec![0; proto::MAX_MESSAGE + 1],
        };
        match conn.recv_blocking(Instant::now() + ANSWER_TIMEOUT) {
            Some(Msg::Welcome(w)) => {
                conn.welcome = w;
                conn.taskstats_stats.rcvbuf_bytes = conn.welcome.taskstats_rcvbuf_bytes as usize;
                conn.told = false;
                conn.ready_ms = started.elapsed().as_secs_f64() * 1e3;
                Ok(conn)
            }
            Some(Msg::Refused { code, reason }) => Err(ConnectError::Refused {
                code,
                reason: shown(&reason),
            }),
            _ => match conn.gone.take() {
                Some(Gone::Refused(reason)) => Err(ConnectError::Refused {
                    code: proto::Refusal::Other,
                    reason,
                }),
                Some(why) => Err(ConnectError::NoAnswer { path: where_, why }),
                None => Err(ConnectError::Protocol(where_)),
            },
        }
    }

    /// Has the agent track the held child `pidfd` pins (our own, not yet exec'd); returns
    /// its pid as the agent numbers it and the namespace depth between us.
    pub fn track(&mut self, pidfd: BorrowedFd<'_>) -> Result<(u32, u32), TrackError> {
        if !std::mem::take(&mut self.track_sent) {
            self.begin_run();
            if let Err(e) = sock::send(self.fd.as_fd(), &Msg::Track.encode(), Some(pidfd)) {
                return Err(TrackError::Gone(e.to_string()));
            }
        }
        let mut early = self.track_answer.take();
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            let answer = match early.take() {
                Some(m) => Some(m),
                None => self.recv_blocking(deadline),
            };
            match answer {
                Some(Msg::Tracked { kernel_pid, level }) => return Ok((kernel_pid, level)),
                Some(Msg::Refused { code, reason }) => {
                    let reason = shown(&reason);
                    return Err(TrackError::Refused { code, reason });
                }
                Some(m) => self.keep(m),
                None => {
                    let why = self.gone.clone().unwrap_or(Gone::Silent);
                    self.told = true;
                    return Err(TrackError::Gone(why.to_string()));
                }
            }
        }
    }

    /// Has the agent attach to `pids` (and their descendants) for this session; returns the
    /// pids attached to, when tracking began, and whether their memory is followed.
    pub fn attach(&mut self, pids: &[u32]) -> Result<(Vec<u32>, u64, bool), TrackError> {
        self.begin_run();
        let msg = Msg::Attach {
            pids: pids.to_vec(),
        };
        if let Err(e) = sock::send(self.fd.as_fd(), &msg.encode(), None) {
            return Err(TrackError::Gone(e.to_string()));
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        loop {
            match self.recv_blocking(deadline) {
                Some(Msg::Attached {
                    pids,
                    attach_ns,
                    memory_followed,
                }) => return Ok((pids, attach_ns, memory_followed)),
                Some(Msg::Refused { code, reason }) => {
                    let reason = shown(&reason);
                    return Err(TrackError::Refused { code, reason });
                }
                Some(m) => self.keep(m),
                None => {
                    self.told = true;
                    let why = self.gone.clone().unwrap_or(Gone::Silent);
                    return Err(TrackError::Gone(why.to_string()));
                }
            }
        }
    }

    fn begin_run(&mut self) {
        self.finish_asked = false;
        self.inbox.clear();
        self.taskstats.clear();
        self.ended = None;
        self.mms.clear();
    }

    /// Why the agent is no longer there (None while it is).
    pub fn gone(&self) -> Option<&Gone> {
        self.gone.as_ref()
    }

    /// The socket, to wait on; None once the agent went away (nothing more will come).
    pub fn raw_fd(&self) -> Option<RawFd> {
        self.gone.is_none().then(|| self.fd.as_raw_fd())
    }

    /// Receives whatever waits, without blocking.
    pub fn pump(&mut self) {
        while self.gone.is_none() {
            match self.recv() {
                Ok(Some(m)) => self.keep(m),
                Ok(None) => return,
                Err(why) => self.lost(why),
            }
        }
    }

    /// The next record received, in ring order.
    pub fn next_record(&mut self) -> Option<Vec<u8>> {
        self.inbox.pop_front()
    }

    /// Forgets what was received and not handed out (records of an earlier run). A root
    /// asked for with the hello is the connection's first run: what came is its own.
    pub fn discard(&mut self) -> usize {
        self.pump();
        if self.track_sent {
            return 0;
        }
        let n = self.inbox.len() + self.taskstats.len();
        self.inbox.clear();
        self.taskstats.clear();
        n
    }

    /// Parses the taskstats datagrams received into `out`.
    pub fn take_taskstats(&mut self, out: &mut Vec<TaskstatsRecord>) {
        for d in self.taskstats.drain(..) {
            crate::kernel::taskstats::parse_messages(&d, out, &mut self.taskstats_stats);
        }
    }

    /// Counters of the taskstats records received (records, parse errors; the agent's
    /// buffer size; its lost receives once the run ended).
    pub fn taskstats_stats(&self) -> ListenerStats {
        self.taskstats_stats
    }

    /// Asks the agent for every record of the session the kernel holds now and waits until
    /// they are all received (or the agent is gone).
    pub fn sync(&mut self) {
        if self.gone.is_some() {
            return;
        }
        self.seq = self.seq.wrapping_add(1);
        let seq = self.seq;
        if let Err(e) = sock::send(self.fd.as_fd(), &Msg::Flush { seq }.encode(), None) {
            return self.send_failed(e);
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        while self.flushed != Some(seq) {
            match self.recv_blocking(deadline) {
                Some(m) => self.keep(m),
                None => return,
            }
        }
    }

    /// Ends the run, once: the agent sends every record of it (with `wait_release`, the
    /// final CPU records of the processes reaped, which it waits for), untracks its
    /// processes and sends what only it can read. One round trip; every record of the run is
    /// received when this returns.
    pub fn end_run(&mut self, wait_release: bool) {
        if self.finish_asked {
            return;
        }
        self.finish_asked = true;
        if self.gone.is_none() {
            let msg = Msg::Finish { wait_release };
            if let Err(e) = sock::send(self.fd.as_fd(), &msg.encode(), None) {
                self.send_failed(e);
            }
        }
        let deadline = Instant::now() + ANSWER_TIMEOUT;
        while self.ended.is_none() && self.gone.is_none() {
            if let Some(m) = self.recv_blocking(deadline) {
                self.keep(m);
            }
        }
    }

    /// The run's end figures ([`AgentConn::end_run`] first if it was not asked for).
    pub fn finish(&mut self) -> RunEnd {
        self.end_run(false);
        if let Some(e) = &self.ended {
            self.taskstats_stats.enobufs += e.taskstats_enobufs;
        }
        RunEnd {
            end: self.ended.take(),
            mms: std::mem::take(&mut self.mms),
        }
    }

    /// Says once on stderr that the agent went away, if it did.
    pub fn tell_if_gone(&mut self) {
        if let (Some(why), false) = (&self.gone, self.told) {
            if self.want & proto::want::KIND == proto::want::WATCH {
                crate::errln!(
                    "spacetime: the agent went away ({why}); the watch stops: no exit after this one comes"
                );
            } else {
                crate::errln!(
                    "spacetime: the agent went away ({why}); the command keeps running, and the report covers what came before"
                );
            }
            self.told = true;
        }
    }

    fn keep(&mut self, m: Msg) {
        let track_answer = matches!(m, Msg::Tracked { .. } | Msg::Refused { .. });
        if track_answer && self.track_sent && self.track_answer.is_none() {
            self.track_answer = Some(m);
            return;
        }
        match m {
            Msg::Records(r) => self.inbox.extend(r),
            Msg::Taskstats(d) => self.taskstats.extend(d),
            Msg::Flushed { seq } => self.flushed = Some(seq),
            Msg::Mms(m) => self.mms.extend(m),
            Msg::End(e) => self.ended = Some(e),
            Msg::Counters(c) => self.counters.set(c),
            Msg::Shutdown { reason } => self.lost(Gone::Stopping(shown(&reason))),
            Msg::Refused { reason, .. } => self.lost(Gone::Refused(shown(&reason))),
            other => log::debug!("agent: unexpected message {other:?}"),
        }
    }

    /// A send failed: the agent closed its end. What it sent before closing (that it stops,
    /// and why; records) is still there to read, and says why before the failure does.
    fn send_failed(&mut self, e: io::Error) {
        self.pump();
        self.lost(Gone::Broken(e.to_string()));
    }

    fn lost(&mut self, why: Gone) {
        if self.gone.is_none() {
            log::debug!("agent connection lost: {why}");
            *self.gone_news.borrow_mut() = Some(why.clone());
            self.gone = Some(why);
        }
    }

    /// One message without waiting; Ok(None) when none waits.
    fn recv(&mut self) -> Result<Option<Msg>, Gone> {
        match sock::recv(self.fd.as_fd(), &mut self.buf, false) {
            // An agent that closed with requests of ours unread leaves a reset, which the
            // kernel reports once, before the messages it sent first (why it stops among
            // them): read on; once those are read, the end of the connection is reported.
            Err(e) if Errno::from_io_error(&e) == Some(Errno::CONNRESET) && !self.reset => {
                self.reset = true;
                self.recv()
            }
            Ok(r) if r.len == 0 => Err(Gone::Closed),
            Ok(r) if r.truncated => Err(Gone::Broken(
                "a message larger than the protocol allows".into(),
            )),
            Ok(r) => match Msg::parse(&self.buf[..r.len]) {
                Ok(m) => Ok(Some(m)),
                Err(e) => Err(Gone::Broken(format!("a malformed message: {e}"))),
            },
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(Gone::Broken(e.to_string())),
        }
    }

    /// Whether the agent process is stopped (its state in /proc: `T` or `t`).
    fn agent_stopped(&self) -> bool {
        self.agent_stat()
            .is_some_and(|(state, _)| matches!(state, b'T' | b't'))
    }

    /// The agent's state letter and CPU time (clock ticks, user + system), from its
    /// /proc/PID/stat (readable by every user).
    fn agent_stat(&self) -> Option<(u8, u64)> {
        if self.agent_pid == 0 {
            return None;
        }
        let stat = crate::util::proc_text::read(format!("/proc/{}/stat", self.agent_pid)).ok()?;
        let close = stat.iter().rposition(|&b| b == b')')?;
        let rest = std::str::from_utf8(stat.get(close + 2..)?).ok()?;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        Some((*f.first()?.as_bytes().first()?, tick(11)? + tick(12)?))
    }

    /// One message, waiting until `deadline`; None when the agent is gone, stopped (told at
    /// once, not after the deadline) or silent. An answer that comes within
    /// [`FIRST_WAIT_MS`] (most do) costs no look at the agent's state.
    fn recv_blocking(&mut self, mut deadline: Instant) -> Option<Msg> {
        let mut waited = false;
        let latest = Instant::now() + BUSY_ANSWER_TIMEOUT;
        let mut cpu = None;
        while self.gone.is_none() {
            match self.recv() {
                Ok(Some(m)) => return Some(m),
                Ok(None) => {}
                Err(why) => {
                    self.lost(why);
                    break;
                }
            }
            if waited && self.agent_stopped() {
                self.lost(Gone::Stopped);
                break;
            }
            if waited && cpu.is_none() {
                cpu = self.agent_stat().map(|(_, t)| t);
            }
            let mut left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // Silent, unless it worked meanwhile: then it is owed more time.
                let now_cpu = self.agent_stat().map(|(_, t)| t);
                if now_cpu > cpu && Instant::now() < latest {
                    cpu = now_cpu;
                    deadline = (Instant::now() + ANSWER_TIMEOUT).min(latest);
                    left = deadline.saturating_duration_since(Instant::now());
                } else {
                    self.lost(Gone::Silent);
                    break;
                }
            }
            let wait = match waited {
                false => FIRST_WAIT_MS,
                true => left.min(STOPPED_CHECK).as_millis() as i32 + 1,
            };
            sock::wait_readable(self.fd.as_fd(), wait);
            waited = true;
        }
        None
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
