//! The kernel's taskstats exit records.
//!
//! Every task that exits makes the kernel send a `struct taskstats` (peak RSS, CPU times, I/O,
//! delay accounting, ...) to each generic-netlink listener registered for the CPU it exited
//! on. [`TaskstatsListener`] opens such a listener for all possible CPUs and decodes the
//! records into [`TaskstatsRecord`]s: [`TaskstatsListener::drain`] appends whatever has
//! arrived, without waiting; the caller polls the listener's descriptor (the event loop does).
//!
//! Needs CAP_NET_ADMIN, the initial user and PID namespaces, and a kernel with
//! CONFIG_TASKSTATS (CONFIG_TASK_XACCT for the memory/I/O fields, CONFIG_TASK_DELAY_ACCT plus
//! `kernel.task_delayacct=1` for most delay fields). When exits outpace the reader, the
//! kernel drops records and the next receive reports ENOBUFS: the listener counts that in
//! [`ListenerStats::enobufs`] and goes on, so size [`ListenerOptions::rcvbuf_bytes`] for the
//! bursts you expect: each pid record occupies about 1.3 KiB of it (the datagram's kernel
//! `truesize`, measured 6.9 MB for 5300 queued records on 6.18), twice that with a tgid
//! record.

mod decode;
mod delayacct;
mod netlink;
mod record;
#[cfg(test)]
mod tests_live;
#[cfg(test)]
mod tests_parse;
#[cfg(test)]
mod tests_support;
mod thread_groups;

use std::io;
use std::time::{Duration, Instant};

use serde::Serialize;

pub use decode::parse_messages;
pub use delayacct::{delayacct_enabled, delayacct_switch, set_delayacct, DelayAcctSwitch};
#[cfg(test)]
use record::min_size;
pub use record::{flags, RecordKind, TaskstatsRecord};
pub use thread_groups::ThreadGroups;

use decode::{
    TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK, TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, TASKSTATS_CMD_GET,
};
use netlink::{
    genl_request, ne_u16, ne_u32, NetlinkSocket, NlAttrIter, NlMsgIter, CTRL_ATTR_FAMILY_ID,
    CTRL_ATTR_FAMILY_NAME, CTRL_CMD_GETFAMILY, CTRL_CMD_NEWFAMILY, GENL_HDRLEN, GENL_ID_CTRL,
    NLMSG_ERROR, NLM_F_ACK, NLM_F_REQUEST,
};

/// Default receive buffer requested with `SO_RCVBUFFORCE`: 8 MiB, which the kernel doubles
/// to 16 MiB, room for about 12 000 queued pid records (a 5000-exit burst used 6.9 MB).
pub const DEFAULT_RCVBUF_BYTES: usize = 8 << 20;

const TASKSTATS_GENL_NAME: &[u8] = b"TASKSTATS\0";
const TASKSTATS_GENL_VERSION: u8 = 1;
const CPU_POSSIBLE: &str = "/sys/devices/system/cpu/possible";
/// Largest datagram the receive buffer grows to after a truncated one.
const MAX_DATAGRAM: usize = 1 << 20;

/// Why a listener could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum TaskstatsError {
    #[error("the kernel has no TASKSTATS generic netlink family (it was built without CONFIG_TASKSTATS)")]
    NoFamily,
    #[error("registering for taskstats exit records needs CAP_NET_ADMIN (run as root)")]
    NotPermitted,
    #[error("the kernel refused to register exit listening on CPUs {cpumask:?}: {source} (it accepts listeners only from the initial user and PID namespaces, for possible CPUs)")]
    Rejected { cpumask: String, source: io::Error },
    #[error("the kernel did not answer the taskstats {0} request within {1:?}")]
    Timeout(&'static str, Duration),
    #[error("the kernel answered the taskstats {0} request with something unexpected: {1}")]
    Protocol(&'static str, String),
    #[error("taskstats netlink I/O failed: {0}")]
    Io(#[from] io::Error),
}

/// How to open a [`TaskstatsListener`].
#[derive(Debug, Clone)]
pub struct ListenerOptions {
    /// Receive buffer to request (the kernel doubles it for bookkeeping). Set with
    /// `SO_RCVBUFFORCE`; without CAP_NET_ADMIN, `SO_RCVBUF` capped by `net.core.rmem_max`.
    pub rcvbuf_bytes: usize,
    /// CPU list to listen on, in the kernel's format (`"0-3,5"`); `None`: every possible CPU.
    pub cpumask: Option<String>,
    /// How long to wait for each of the kernel's replies while opening.
    pub reply_timeout: Duration,
}

impl Default for ListenerOptions {
    fn default() -> Self {
        Self {
            rcvbuf_bytes: DEFAULT_RCVBUF_BYTES,
            cpumask: None,
            reply_timeout: Duration::from_secs(5),
        }
    }
}

/// Counters of a listener (or of [`parse_messages`] calls).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ListenerStats {
    /// Records decoded.
    pub records: u64,
    /// Receives that failed with ENOBUFS: each means the kernel dropped one or more records.
    pub enobufs: u64,
    /// Messages, attributes or records that could not be decoded (and truncated datagrams).
    pub parse_errors: u64,
    /// `NLMSG_ERROR` messages with a non-zero error received while listening.
    pub kernel_errors: u64,
    /// Receive buffer the kernel granted (`SO_RCVBUF` as read back, i.e. doubled).
    pub rcvbuf_bytes: usize,
    /// Whether `SO_RCVBUFFORCE` worked (`false`: fell back to `SO_RCVBUF` after EPERM).
    pub forced: bool,
}

/// Why no taskstats records come. Rendered as a sentence at the edge (the report's
/// `unavailable_reason`, the summary, `watch`'s coverage line); decided on as this type.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unavailable {
    /// `--no-taskstats`.
    #[error("--no-taskstats")]
    Disabled,
    /// The kernel sends exit records to listeners in the initial network namespace only.
    #[error("spacetime runs outside the host's network namespace, and the kernel sends taskstats records only there")]
    OtherNetNamespace,
    /// Opening or registering the listener failed.
    #[error("{0}")]
    Open(String),
    /// The agent has no listener, for the reason it gives.
    #[error("{0}")]
    Agent(String),
    /// A listener that registered fine heard nothing while processes exited.
    #[error(
        "no taskstats record arrived: the kernel sends them only to the host's network namespace"
    )]
    NoRecords,
}

/// The taskstats listener of `trace`, `watch` and the agent (`rcvbuf_bytes` of receive
/// buffer), or why there is none.
pub fn open_listener(rcvbuf_bytes: usize) -> Result<TaskstatsListener, Unavailable> {
    // A listener elsewhere than the initial network namespace (a container) registers fine
    // and then hears nothing.
    let netns = |pid: &str| {
        std::fs::metadata(format!("/proc/{pid}/ns/net"))
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
    };
    if let (Ok(own), Ok(init)) = (netns("self"), netns("1")) {
        if own != init {
            return Err(Unavailable::OtherNetNamespace);
        }
    }
    let opts = ListenerOptions {
        rcvbuf_bytes,
        ..ListenerOptions::default()
    };
    TaskstatsListener::open(opts).map_err(|e| Unavailable::Open(e.to_string()))
}

/// A registered taskstats exit listener. Deregisters (best effort) when dropped.
#[derive(Debug)]
pub struct TaskstatsListener {
    sock: NetlinkSocket,
    family_id: u16,
    cpumask: String,
    buf: Vec<u8>,
    /// Records that arrived while waiting for the registration ack.
    pending: Vec<TaskstatsRecord>,
    stats: ListenerStats,
    seq: u32,
    registered: bool,
}

enum Reply {
    Ack,
    Errno(i32),
    Family(Option<u16>),
}

impl TaskstatsListener {
    /// Opens the socket, sizes its buffer, resolves the TASKSTATS family and registers for
    /// the exit records of `opts.cpumask` (default: all possible CPUs).
    pub fn open(opts: ListenerOptions) -> Result<Self, TaskstatsError> {
        let sock = NetlinkSocket::open()?;
        let forced = match sock.set_rcvbuf(opts.rcvbuf_bytes, true) {
            Ok(()) => true,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                sock.set_rcvbuf(opts.rcvbuf_bytes, false)?;
                false
            }
            Err(e) => return Err(e.into()),
        };
        let rcvbuf_bytes = sock.rcvbuf()?;
        let cpumask = match opts.cpumask {
            Some(mask) => mask,
            None => std::fs::read_to_string(CPU_POSSIBLE)?.trim().to_owned(),
        };
        let mut listener = Self {
            sock,
            family_id: 0,
            cpumask,
            buf: vec![0; 64 << 10],
            pending: Vec::new(),
            stats: ListenerStats {
                rcvbuf_bytes,
                forced,
                ..ListenerStats::default()
            },
            seq: 0,
            registered: false,
        };
        listener.family_id = listener.resolve_family(opts.reply_timeout)?;
        listener.register(opts.reply_timeout)?;
        Ok(listener)
    }

    /// The TASKSTATS generic netlink family id.
    #[cfg(test)]
    pub fn family_id(&self) -> u16 {
        self.family_id
    }

    /// The CPU list registered.
    #[cfg(test)]
    pub fn cpumask(&self) -> &str {
        &self.cpumask
    }

    /// Counters so far.
    pub fn stats(&self) -> ListenerStats {
        self.stats
    }

    /// Appends every record that has already arrived, without waiting; returns how many.
    /// Works without a tokio runtime.
    pub fn drain(&mut self, out: &mut Vec<TaskstatsRecord>) -> Result<usize, TaskstatsError> {
        let got = self.pending.len();
        out.append(&mut self.pending);
        let sock = &self.sock;
        let (n, _) = drain_socket(sock, &mut self.buf, &mut self.stats, out, usize::MAX)?;
        Ok(got + n)
    }

    /// Appends the records that have already arrived, without waiting, until about `max`
    /// came (a few more: datagrams are received in batches); returns whether more may wait
    /// (false: the socket would block). A backlog is then taken in parts, each decoded
    /// record being 744 bytes.
    pub fn drain_some(
        &mut self,
        out: &mut Vec<TaskstatsRecord>,
        max: usize,
    ) -> Result<bool, TaskstatsError> {
        out.append(&mut self.pending);
        let sock = &self.sock;
        let (_, more) = drain_socket(sock, &mut self.buf, &mut self.stats, out, max)?;
        Ok(more)
    }

    /// Hands every datagram that has already arrived to `each` undecoded, without waiting;
    /// returns how many. For a reader that forwards them (the agent sends each to the client
    /// whose process it is about, which decodes it with [`parse_messages`]). Lost receives
    /// are counted as [`drain`](Self::drain) counts them; records are not.
    pub fn drain_datagrams(
        &mut self,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, TaskstatsError> {
        self.pending.clear();
        let sock = &self.sock;
        let mut got = 0;
        let mut lens = [0usize; BATCH];
        loop {
            let slot = self.buf.len() / BATCH;
            let n = match sock.recv_batch(&mut self.buf, slot, &mut lens) {
                Ok(n) => n,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.stats.enobufs += 1;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(got),
                Err(e) => return Err(e.into()),
            };
            let mut widest = 0;
            for (i, &len) in lens[..n].iter().enumerate() {
                if len > slot {
                    self.stats.parse_errors += 1;
                    widest = widest.max(len);
                } else {
                    got += 1;
                    each(&self.buf[i * slot..][..len]);
                }
            }
            if widest > 0 {
                let new_slot = widest.next_power_of_two().min(MAX_DATAGRAM / BATCH);
                self.buf.resize(self.buf.len().max(new_slot * BATCH), 0);
            }
        }
    }

    /// Waits up to `timeout` for a datagram to arrive (the socket becomes readable).
    pub fn wait_readable(&self, timeout: Duration) -> bool {
        use std::os::fd::AsRawFd as _;
        let mut fds = [libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one pollfd, valid for the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) > 0 }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn resolve_family(&mut self, timeout: Duration) -> Result<u16, TaskstatsError> {
        const WHAT: &str = "CTRL_CMD_GETFAMILY";
        let seq = self.next_seq();
        let msg = genl_request(
            GENL_ID_CTRL,
            NLM_F_REQUEST,
            seq,
            CTRL_CMD_GETFAMILY,
            1,
            &[(CTRL_ATTR_FAMILY_NAME, TASKSTATS_GENL_NAME)],
        );
        self.sock.send(&msg)?;
        match self.await_reply(WHAT, seq, timeout)? {
            Reply::Family(Some(id)) => Ok(id),
            Reply::Family(None) => Err(TaskstatsError::Protocol(WHAT, "no family id".into())),
            Reply::Errno(libc::ENOENT) => Err(TaskstatsError::NoFamily),
            Reply::Errno(libc::EPERM) => Err(TaskstatsError::NotPermitted),
            Reply::Errno(e) => Err(io::Error::from_raw_os_error(e).into()),
            Reply::Ack => Err(TaskstatsError::Protocol(
                WHAT,
                "an ack instead of the family".into(),
            )),
        }
    }

    fn register(&mut self, timeout: Duration) -> Result<(), TaskstatsError> {
        const WHAT: &str = "REGISTER_CPUMASK";
        let seq = self.next_seq();
        let mask = cstring_bytes(&self.cpumask);
        let msg = genl_request(
            self.family_id,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            TASKSTATS_CMD_GET,
            TASKSTATS_GENL_VERSION,
            &[(TASKSTATS_CMD_ATTR_REGISTER_CPUMASK, &mask)],
        );
        self.sock.send(&msg)?;
        // Registered from here on even if the ack gets lost: drop will deregister.
        self.registered = true;
        match self.await_reply(WHAT, seq, timeout)? {
            Reply::Ack => Ok(()),
            Reply::Errno(e) => {
                self.registered = false;
                Err(match e {
                    libc::EPERM => TaskstatsError::NotPermitted,
                    _ => TaskstatsError::Rejected {
                        cpumask: self.cpumask.clone(),
                        source: io::Error::from_raw_os_error(e),
                    },
                })
            }
            Reply::Family(_) => Err(TaskstatsError::Protocol(
                WHAT,
                "a controller message".into(),
            )),
        }
    }

    fn deregister(&mut self) -> io::Result<()> {
        if !self.registered {
            return Ok(());
        }
        self.registered = false;
        let seq = self.next_seq();
        let mask = cstring_bytes(&self.cpumask);
        let msg = genl_request(
            self.family_id,
            NLM_F_REQUEST,
            seq,
            TASKSTATS_CMD_GET,
            TASKSTATS_GENL_VERSION,
            &[(TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK, &mask)],
        );
        self.sock.send(&msg)
    }

    /// Blocks (bounded by `timeout`) for the reply to request `seq`. Exit records arriving
    /// meanwhile go to `pending`.
    fn await_reply(
        &mut self,
        what: &'static str,
        seq: u32,
        timeout: Duration,
    ) -> Result<Reply, TaskstatsError> {
        let deadline = Instant::now() + timeout;
        loop {
            let sock = &self.sock;
            if !sock.wait_readable(deadline)? {
                return Err(TaskstatsError::Timeout(what, timeout));
            }
            let n = match recv_datagram(sock, &mut self.buf, &mut self.stats)? {
                Received::Datagram(n) => n,
                Received::Again | Received::Skipped => continue,
            };
            let mut reply = None;
            for msg in NlMsgIter::new(&self.buf[..n]) {
                let Ok(msg) = msg else {
                    self.stats.parse_errors += 1;
                    break;
                };
                if msg.seq == seq && msg.ty == NLMSG_ERROR {
                    // An error message too short to hold its error is a protocol error.
                    let err = ne_u32(msg.payload, 0).map_or(-libc::EPROTO, |e| e as i32);
                    reply = Some(if err == 0 {
                        Reply::Ack
                    } else {
                        Reply::Errno(-err)
                    });
                } else if msg.seq == seq && msg.ty == GENL_ID_CTRL {
                    reply = Some(Reply::Family(family_id_of(msg.payload)));
                } else {
                    let before = self.pending.len();
                    decode::parse_one(&msg, &mut self.pending, &mut self.stats);
                    self.stats.records += (self.pending.len() - before) as u64;
                }
            }
            if let Some(reply) = reply {
                return Ok(reply);
            }
        }
    }
}

impl Drop for TaskstatsListener {
    fn drop(&mut self) {
        if let Err(e) = self.deregister() {
            log::debug!("taskstats: deregistering failed: {e}");
        }
    }
}

fn cstring_bytes(s: &str) -> Vec<u8> {
    let mut v = Vec::with_capacity(s.len() + 1);
    v.extend_from_slice(s.as_bytes());
    v.push(0);
    v
}

fn family_id_of(genl_payload: &[u8]) -> Option<u16> {
    if genl_payload.first() != Some(&CTRL_CMD_NEWFAMILY) {
        return None;
    }
    NlAttrIter::new(genl_payload.get(GENL_HDRLEN..)?)
        .map_while(Result::ok)
        .find(|a| a.ty == CTRL_ATTR_FAMILY_ID)
        .and_then(|a| ne_u16(a.payload, 0))
}

enum Received {
    /// A whole datagram of this length is in the buffer.
    Datagram(usize),
    /// Nothing to read (EAGAIN).
    Again,
    /// A receive that produced nothing usable: ENOBUFS or a truncated datagram (counted).
    Skipped,
}

/// One non-blocking receive into `buf`. A truncated datagram is counted as a parse error
/// and `buf` grows so that the next one of that size fits.
fn recv_datagram(
    sock: &NetlinkSocket,
    buf: &mut Vec<u8>,
    stats: &mut ListenerStats,
) -> io::Result<Received> {
    match sock.recv(buf) {
        Ok(n) if n > buf.len() => {
            stats.parse_errors += 1;
            buf.resize(n.next_power_of_two().clamp(buf.len(), MAX_DATAGRAM), 0);
            Ok(Received::Skipped)
        }
        Ok(n) => Ok(Received::Datagram(n)),
        Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
            stats.enobufs += 1;
            Ok(Received::Skipped)
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Received::Again),
        Err(e) => Err(e),
    }
}

/// Datagrams received per system call while draining: one exit record is one datagram of
/// ~0.5 KiB, so a 64 KiB buffer cut in 16 slots fits them with room to spare.
const BATCH: usize = 16;

/// Receives and decodes until the socket would block (callers rely on that to clear
/// readiness) or `max` records came; returns the records appended, and whether it stopped
/// at `max`. Datagrams come in batches (recvmmsg): at storm rates one receive per record was a sixth
/// of a listener's CPU. A truncated datagram is counted as a parse error and the slots grow
/// so that the next one of that size fits (up to [`MAX_DATAGRAM`] / [`BATCH`]).
fn drain_socket(
    sock: &NetlinkSocket,
    buf: &mut Vec<u8>,
    stats: &mut ListenerStats,
    out: &mut Vec<TaskstatsRecord>,
    max: usize,
) -> io::Result<(usize, bool)> {
    let mut got = 0;
    let mut lens = [0usize; BATCH];
    loop {
        if got >= max {
            return Ok((got, true));
        }
        let slot = buf.len() / BATCH;
        let n = match sock.recv_batch(buf, slot, &mut lens) {
            Ok(n) => n,
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                stats.enobufs += 1;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((got, false)),
            Err(e) => return Err(e),
        };
        let mut widest = 0;
        for (i, &len) in lens[..n].iter().enumerate() {
            if len > slot {
                stats.parse_errors += 1;
                widest = widest.max(len);
            } else {
                got += parse_messages(&buf[i * slot..][..len], out, stats);
            }
        }
        if widest > 0 {
            let new_slot = widest.next_power_of_two().min(MAX_DATAGRAM / BATCH);
            buf.resize(buf.len().max(new_slot * BATCH), 0);
        }
    }
}
