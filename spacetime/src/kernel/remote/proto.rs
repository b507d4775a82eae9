//! The agent's wire protocol, over a Unix `SOCK_SEQPACKET` socket: one message per packet (the
//! socket keeps the boundaries), each at most [`MAX_MESSAGE`] bytes, a one-byte type first.
//! Numbers are little-endian. The first message of a connection is the client's [`Msg::Hello`]
//! carrying [`VERSION`]; an agent speaking another version answers [`Msg::Refused`].
//!
//! Kernel records travel as the ring buffer holds them ([`Msg::Records`]) and taskstats records
//! as the kernel's netlink datagrams ([`Msg::Taskstats`]): the client decodes both with the
//! same decoders as a local ring and listener, so the two paths cannot disagree.
//!
//! Parsing trusts nothing: every length and count is checked against the bytes that are
//! there before anything is allocated, and a bad message is an error, never a panic.

use crate::kernel::counters::KernelCounters;

pub use super::codes::{datagram_identities, CpuClockState, Refusal, TaskstatsState};

/// The protocol's version: a change to any message's layout changes it.
pub const VERSION: u32 = 7;

/// Largest message either side sends or accepts.
pub const MAX_MESSAGE: usize = 128 << 10;
/// Longest text (a refusal, a mechanism line) in a message.
pub const MAX_TEXT: usize = 2048;
/// Most pids in an [`Msg::Attach`] or [`Msg::Attached`].
pub const MAX_PIDS: usize = 4096;
/// Most mechanism lines in a [`Welcome`].
pub const MAX_MECHANISMS: usize = 64;

/// What a client asks for in its hello.
pub mod want {
    /// Trace processes the client starts.
    pub const TRACE: u8 = 1;
    /// Watch every exit on the system (a non-root client: its own uid's only).
    pub const WATCH: u8 = 2;
    /// The bits above that say what.
    pub const KIND: u8 = 0x1f;
    /// A flag beside TRACE: the runs show CPU over time: the agent's CPU clock program
    /// samples their threads while the session is open ([`super::CpuClockState`]).
    pub const CPU_OVER_TIME: u8 = 0x20;
    /// A flag beside TRACE: the runs show no memory over time (a `time -f` format): the
    /// kernel follows none of their processes' mms, and rss_stat need not run for them.
    pub const NO_MEMORY: u8 = 0x40;
    /// A flag beside TRACE: delay accounting on while the session lives.
    pub const DELAYACCT: u8 = 0x80;
}

/// What the agent tells a client once it has a session.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Welcome {
    pub session: u16,
    /// The kernel follows RSS changes (rss_stat attached when the session runs).
    pub rss_tracking: bool,
    /// Free records come (final CPU figures).
    pub cpu_at_release: bool,
    pub ring_buffer_bytes: u32,
    /// How long the agent took to load its programs, µs (once, when it started).
    pub load_us: u64,
    /// The agent's taskstats receive buffer; 0 when it has no listener.
    pub taskstats_rcvbuf_bytes: u32,
    /// Whether its taskstats records come.
    pub taskstats: TaskstatsState,
    /// How its listener failed, for people ([`TaskstatsState::Failed`]).
    pub taskstats_error: Vec<u8>,
    /// The kernel mechanisms in use, as `-v` lists them.
    pub mechanisms: Vec<Vec<u8>>,
    /// Whose processes the session sees: a watch of a user who is not root sees that uid's
    /// only; [`SEES_ALL`] otherwise.
    pub sees_uid: u32,
    /// Whether the CPU clock program samples the session's threads.
    pub cpu_clock: CpuClockState,
}

/// [`Welcome::sees_uid`] of a session that sees every process it asks for.
pub const SEES_ALL: u32 = u32::MAX;

/// The figures of a run that only the agent can read, sent when the run ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct End {
    /// The session's own loss and failure counters over the run.
    pub counters: KernelCounters,
    /// Records the agent dropped because the client did not read them in time.
    pub dropped_records: u64,
    /// taskstats datagrams dropped likewise.
    pub dropped_taskstats: u64,
    /// Receives of the agent's taskstats listener that lost records (ENOBUFS) over the run:
    /// the machine's, not the session's own.
    pub taskstats_enobufs: u64,
    /// The session's tree-wide RSS as the kernel followed it (raw `TreeRss`).
    pub tree_rss: spacetime_common::TreeRss,
}

/// One message, either way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Client: the first message.
    /// `max_processes`: the most processes the client's run may have tracked at once (its
    /// `--max-processes`; 0: no limit of its own), as its own programs' tracking map would.
    Hello {
        version: u32,
        want: u8,
        max_processes: u32,
    },
    /// Client: track the held child whose pidfd rides along (SCM_RIGHTS).
    Track,
    /// Client: attach to these running processes (at most [`MAX_PIDS`]), theirs only.
    Attach { pids: Vec<u32> },
    /// Client: send every record the kernel holds for my session now, then [`Msg::Flushed`].
    Flush { seq: u32 },
    /// Client: the run is over: send every record the kernel holds for the session (with
    /// `wait_release`, first waiting, bounded, for the final CPU records of its processes
    /// already reaped), untrack its processes, then [`Msg::Mms`] and [`Msg::End`]: the run's
    /// whole end in one round trip.
    Finish { wait_release: bool },
    /// Agent: the session is open.
    Welcome(Welcome),
    /// Agent: why not, as a code and one sentence; a refused hello ends the connection.
    Refused { code: Refusal, reason: Vec<u8> },
    /// Agent: the child is tracked; its pid as the agent's PID namespace numbers it (the
    /// kernel's, when the agent runs in the initial one), and how many namespaces below the
    /// agent's the client's is.
    Tracked { kernel_pid: u32, level: u32 },
    /// Agent: the processes attached to (the pids asked for first, then their descendants),
    /// when tracking began, and whether their memory is followed from then on.
    Attached {
        pids: Vec<u32>,
        attach_ns: u64,
        memory_followed: bool,
    },
    /// Agent: raw kernel records of the session, in ring order.
    Records(Vec<Vec<u8>>),
    /// Agent: taskstats netlink datagrams about processes of the session, in the order read.
    Taskstats(Vec<Vec<u8>>),
    /// Agent: every record up to the flush was sent.
    Flushed { seq: u32 },
    /// Agent: the followed mms of the run's processes still running at its end (raw
    /// `MmState`s), before [`Msg::End`].
    Mms(Vec<spacetime_common::MmState>),
    /// Agent: the run's end.
    End(End),
    /// Agent: a watch's kernel counters, when they changed.
    Counters(KernelCounters),
    /// Agent: it is stopping; the session ends here.
    Shutdown { reason: Vec<u8> },
}

mod ty {
    pub const HELLO: u8 = 1;
    pub const TRACK: u8 = 2;
    pub const FLUSH: u8 = 3;
    pub const FINISH: u8 = 4;
    pub const ATTACH: u8 = 5;
    pub const ATTACHED: u8 = 110;
    pub const WELCOME: u8 = 101;
    pub const REFUSED: u8 = 102;
    pub const TRACKED: u8 = 103;
    pub const RECORDS: u8 = 104;
    pub const TASKSTATS: u8 = 105;
    pub const FLUSHED: u8 = 106;
    pub const MMS: u8 = 107;
    pub const END: u8 = 108;
    pub const SHUTDOWN: u8 = 109;
    pub const COUNTERS: u8 = 111;
}

/// Whether a message of type `t` is one the agent sends as a control message (an answer,
/// or news of the session), not a record or a taskstats datagram.
pub fn is_answer(t: u8) -> bool {
    !matches!(t, ty::RECORDS | ty::TASKSTATS)
}

/// Whether a message of type `t` is a watch's counters (the newest replaces an unsent one).
pub fn is_counters(t: u8) -> bool {
    t == ty::COUNTERS
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProtoError {
    #[error("empty message")]
    Empty,
    #[error("message of {0} bytes is larger than the protocol allows")]
    TooLarge(usize),
    #[error("unknown message type {0}")]
    UnknownType(u8),
    #[error("message type {ty} ends early: {what}")]
    Truncated { ty: u8, what: &'static str },
    #[error("message type {ty} has {extra} bytes too many")]
    Trailing { ty: u8, extra: usize },
    #[error("message type {ty}: {what}")]
    Invalid { ty: u8, what: &'static str },
}

/// A cursor over a message's bytes: every read is bounds-checked.
struct Reader<'a> {
    ty: u8,
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        if self.rest.len() < n {
            return Err(ProtoError::Truncated { ty: self.ty, what });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, ProtoError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4, what)?);
        Ok(u32::from_le_bytes(a))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(a))
    }

    fn bool(&mut self, what: &'static str) -> Result<bool, ProtoError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(ProtoError::Invalid { ty: self.ty, what }),
        }
    }

    /// A u32 length, then that many bytes (at most `max`).
    fn bytes(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(ProtoError::Invalid { ty: self.ty, what });
        }
        self.take(n, what)
    }

    /// A plain-old-data record of the kernel side, read unaligned.
    fn pod<T: PodRecord>(&mut self, what: &'static str) -> Result<T, ProtoError> {
        let b = self.take(std::mem::size_of::<T>(), what)?;
        // SAFETY: `b` holds size_of::<T>() bytes and T is a #[repr(C)] record of integers
        // (every bit pattern valid), read unaligned.
        Ok(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
    }

    fn end(self) -> Result<(), ProtoError> {
        match self.rest.len() {
            0 => Ok(()),
            extra => Err(ProtoError::Trailing { ty: self.ty, extra }),
        }
    }
}

/// The kernel side's records that travel whole: integers only, no padding left undefined.
pub trait PodRecord: Copy {}
impl PodRecord for spacetime_common::TreeRss {}
impl PodRecord for spacetime_common::MmState {}

fn pod_bytes<T: PodRecord>(v: &T) -> &[u8] {
    // SAFETY: T is a #[repr(C)] record of integers with explicit padding fields.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

const COUNTERS: usize = 9;

fn counters_to(c: &KernelCounters) -> [u64; COUNTERS] {
    [
        c.ringbuf_lost,
        c.track_full,
        c.read_failures,
        c.filtered,
        c.reap_full,
        c.recursion_misses,
        c.session_limit,
        c.agent_queue_full,
        c.stale_cleared,
    ]
}

fn counters_from(v: [u64; COUNTERS]) -> KernelCounters {
    KernelCounters {
        ringbuf_lost: v[0],
        track_full: v[1],
        read_failures: v[2],
        filtered: v[3],
        reap_full: v[4],
        recursion_misses: v[5],
        session_limit: v[6],
        agent_queue_full: v[7],
        agent_gone: 0,
        stale_cleared: v[8],
    }
}

/// Builds a message's bytes.
struct Writer(Vec<u8>);

impl Writer {
    fn new(ty: u8) -> Writer {
        Writer(vec![ty])
    }
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Length-prefixed bytes, cut to `max` (texts are for people; records are never cut: the
    /// callers keep them within bounds).
    fn bytes(&mut self, b: &[u8], max: usize) -> &mut Self {
        let b = &b[..b.len().min(max)];
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
}

impl Msg {
    /// The message's bytes. Records and mms beyond what fits in [`MAX_MESSAGE`] are the
    /// sender's to split (see [`records_fit`]).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Msg::Hello {
                version,
                want,
                max_processes,
            } => Writer::new(ty::HELLO)
                .u32(*version)
                .u8(*want)
                .u32(*max_processes)
                .0
                .clone(),
            Msg::Track => vec![ty::TRACK],
            Msg::Flush { seq } => Writer::new(ty::FLUSH).u32(*seq).0.clone(),
            Msg::Finish { wait_release } => vec![ty::FINISH, *wait_release as u8],
            Msg::Attach { pids } => encode_pids(Writer::new(ty::ATTACH), pids).0,
            Msg::Attached {
                pids,
                attach_ns,
                memory_followed,
            } => {
                let mut w = Writer::new(ty::ATTACHED);
                w.u64(*attach_ns).u8(*memory_followed as u8);
                encode_pids(w, pids).0
            }
            Msg::Welcome(w) => encode_welcome(w),
            Msg::Refused { code, reason } => Writer::new(ty::REFUSED)
                .u8(*code as u8)
                .bytes(reason, MAX_TEXT)
                .0
                .clone(),
            Msg::Tracked { kernel_pid, level } => Writer::new(ty::TRACKED)
                .u32(*kernel_pid)
                .u32(*level)
                .0
                .clone(),
            Msg::Records(items) | Msg::Taskstats(items) => {
                let mut b = match self {
                    Msg::Records(_) => Batch::records(),
                    _ => Batch::taskstats(),
                };
                for i in items {
                    b.push(i);
                }
                b.finish()
            }
            Msg::Flushed { seq } => Writer::new(ty::FLUSHED).u32(*seq).0.clone(),
            Msg::Mms(mms) => {
                let mut w = Writer::new(ty::MMS);
                w.u32(mms.len() as u32);
                for m in mms {
                    w.0.extend_from_slice(pod_bytes(m));
                }
                w.0
            }
            Msg::End(e) => {
                let mut w = Writer::new(ty::END);
                for v in counters_to(&e.counters) {
                    w.u64(v);
                }
                w.u64(e.dropped_records)
                    .u64(e.dropped_taskstats)
                    .u64(e.taskstats_enobufs);
                w.0.extend_from_slice(pod_bytes(&e.tree_rss));
                w.0
            }
            Msg::Counters(c) => {
                let mut w = Writer::new(ty::COUNTERS);
                for v in counters_to(c) {
                    w.u64(v);
                }
                w.0
            }
            Msg::Shutdown { reason } => Writer::new(ty::SHUTDOWN).bytes(reason, MAX_TEXT).0.clone(),
        }
    }

    /// Parses one message. Never panics; allocates no more than `buf` holds.
    pub fn parse(buf: &[u8]) -> Result<Msg, ProtoError> {
        if buf.len() > MAX_MESSAGE {
            return Err(ProtoError::TooLarge(buf.len()));
        }
        let (&t, rest) = buf.split_first().ok_or(ProtoError::Empty)?;
        let mut r = Reader { ty: t, rest };
        let msg = match t {
            ty::HELLO => Msg::Hello {
                version: r.u32("version")?,
                want: r.u8("want")?,
                max_processes: r.u32("max_processes")?,
            },
            ty::TRACK => Msg::Track,
            ty::FLUSH => Msg::Flush { seq: r.u32("seq")? },
            ty::FINISH => Msg::Finish {
                wait_release: r.bool("wait for release records")?,
            },
            ty::ATTACH => Msg::Attach {
                pids: parse_pids(&mut r)?,
            },
            ty::ATTACHED => {
                let attach_ns = r.u64("attach time")?;
                let memory_followed = r.bool("memory followed")?;
                Msg::Attached {
                    pids: parse_pids(&mut r)?,
                    attach_ns,
                    memory_followed,
                }
            }
            ty::WELCOME => Msg::Welcome(parse_welcome(&mut r)?),
            ty::REFUSED => Msg::Refused {
                code: Refusal::from_u8(r.u8("code")?),
                reason: r.bytes(MAX_TEXT, "reason")?.to_vec(),
            },
            ty::TRACKED => Msg::Tracked {
                kernel_pid: r.u32("kernel pid")?,
                level: r.u32("level")?,
            },
            ty::RECORDS => Msg::Records(parse_records(&mut r)?),
            ty::TASKSTATS => Msg::Taskstats(parse_records(&mut r)?),
            ty::FLUSHED => Msg::Flushed { seq: r.u32("seq")? },
            ty::MMS => {
                let n = r.u32("count")? as usize;
                let size = std::mem::size_of::<spacetime_common::MmState>();
                // The count is only believed once the bytes for it are there.
                if r.rest.len() != n.saturating_mul(size) {
                    return Err(ProtoError::Invalid {
                        ty: t,
                        what: "count does not match the bytes",
                    });
                }
                let mut mms = Vec::with_capacity(n);
                for _ in 0..n {
                    mms.push(r.pod("mm")?);
                }
                Msg::Mms(mms)
            }
            ty::END => {
                let mut c = [0u64; COUNTERS];
                for v in c.iter_mut() {
                    *v = r.u64("counters")?;
                }
                Msg::End(End {
                    counters: counters_from(c),
                    dropped_records: r.u64("dropped records")?,
                    dropped_taskstats: r.u64("dropped taskstats")?,
                    taskstats_enobufs: r.u64("enobufs")?,
                    tree_rss: r.pod("tree rss")?,
                })
            }
            ty::COUNTERS => {
                let mut c = [0u64; COUNTERS];
                for v in c.iter_mut() {
                    *v = r.u64("counters")?;
                }
                Msg::Counters(counters_from(c))
            }
            ty::SHUTDOWN => Msg::Shutdown {
                reason: r.bytes(MAX_TEXT, "reason")?.to_vec(),
            },
            other => return Err(ProtoError::UnknownType(other)),
        };
        r.end()?;
        Ok(msg)
    }
}

fn encode_welcome(w: &Welcome) -> Vec<u8> {
    let mut out = Writer::new(ty::WELCOME);
    out.u16(w.session)
        .u8(w.rss_tracking as u8)
        .u8(w.cpu_at_release as u8)
        .u32(w.ring_buffer_bytes)
        .u64(w.load_us)
        .u32(w.taskstats_rcvbuf_bytes)
        .u32(w.sees_uid)
        .u8(w.taskstats as u8)
        .bytes(&w.taskstats_error, MAX_TEXT);
    let (cpus, why): (u32, &[u8]) = match &w.cpu_clock {
        CpuClockState::NotAsked => (0, b""),
        CpuClockState::Ticking { cpus } => (*cpus, b""),
        CpuClockState::Failed(why) => (0, why),
    };
    out.u8(w.cpu_clock.code()).u32(cpus).bytes(why, MAX_TEXT);
    let n = w.mechanisms.len().min(MAX_MECHANISMS);
    out.u32(n as u32);
    for m in &w.mechanisms[..n] {
        out.bytes(m, MAX_TEXT);
    }
    out.0
}

fn parse_welcome(r: &mut Reader<'_>) -> Result<Welcome, ProtoError> {
    let mut w = Welcome {
        session: r.u16("session")?,
        rss_tracking: r.bool("rss tracking")?,
        cpu_at_release: r.bool("cpu at release")?,
        ring_buffer_bytes: r.u32("ring buffer")?,
        load_us: r.u64("load time")?,
        taskstats_rcvbuf_bytes: r.u32("taskstats buffer")?,
        sees_uid: r.u32("whose processes")?,
        taskstats: TaskstatsState::from_u8(r.u8("taskstats state")?),
        taskstats_error: r.bytes(MAX_TEXT, "taskstats error")?.to_vec(),
        mechanisms: Vec::new(),
        cpu_clock: CpuClockState::NotAsked,
    };
    let (code, cpus) = (r.u8("cpu clock")?, r.u32("cpu clock cpus")?);
    let why = r.bytes(MAX_TEXT, "cpu clock failure")?;
    w.cpu_clock = match code {
        CpuClockState::NOT_ASKED => CpuClockState::NotAsked,
        CpuClockState::TICKING => CpuClockState::Ticking { cpus },
        CpuClockState::FAILED => CpuClockState::Failed(why.to_vec()),
        _ => {
            return Err(ProtoError::Invalid {
                ty: r.ty,
                what: "cpu clock state",
            })
        }
    };
    let n = r.u32("mechanism count")? as usize;
    if n > MAX_MECHANISMS {
        return Err(ProtoError::Invalid {
            ty: r.ty,
            what: "too many mechanisms",
        });
    }
    for _ in 0..n {
        w.mechanisms.push(r.bytes(MAX_TEXT, "mechanism")?.to_vec());
    }
    Ok(w)
}

fn encode_pids(mut w: Writer, pids: &[u32]) -> Writer {
    let n = pids.len().min(MAX_PIDS);
    w.u32(n as u32);
    for &p in &pids[..n] {
        w.u32(p);
    }
    w
}

fn parse_pids(r: &mut Reader<'_>) -> Result<Vec<u32>, ProtoError> {
    let n = r.u32("pid count")? as usize;
    if n > MAX_PIDS || n.saturating_mul(4) > r.rest.len() {
        return Err(ProtoError::Invalid {
            ty: r.ty,
            what: "more pids than allowed or than bytes",
        });
    }
    (0..n).map(|_| r.u32("pid")).collect()
}

fn parse_records(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, ProtoError> {
    let n = r.u32("count")? as usize;
    // Each record takes at least its 4-byte length: a count beyond that is a lie.
    if n > r.rest.len() / 4 {
        return Err(ProtoError::Invalid {
            ty: r.ty,
            what: "more records than bytes",
        });
    }
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(r.bytes(MAX_MESSAGE, "record")?.to_vec());
    }
    Ok(out)
}

/// The bytes of an empty [`Msg::Records`] or [`Msg::Taskstats`] (type and count).
pub const RECORDS_HEADER: usize = 5;

/// A [`Msg::Records`] or [`Msg::Taskstats`] encoded as its items come: the agent gathers a
/// pass's records, and its datagrams, into a message each, without a buffer per item. (It
/// copied each record twice and sent a message per datagram: per 1000 traced fork+execs the
/// agent spent 6.5 ms of CPU, now 4.5, and its client 12, now 10.3.)
pub struct Batch {
    buf: Vec<u8>,
    count: u32,
}

impl Batch {
    pub fn records() -> Batch {
        Batch::new(ty::RECORDS)
    }

    pub fn taskstats() -> Batch {
        Batch::new(ty::TASKSTATS)
    }

    fn new(t: u8) -> Batch {
        let mut buf = Vec::new();
        buf.push(t);
        buf.extend_from_slice(&0u32.to_le_bytes());
        Batch { buf, count: 0 }
    }

    /// Whether an item of `len` bytes still fits in this message.
    pub fn fits(&self, len: usize) -> bool {
        self.buf.len() + 4 + len <= MAX_MESSAGE
    }

    /// Adds an item; the caller checked [`Batch::fits`] (an item that does not fit would make
    /// a message the other side refuses).
    pub fn push(&mut self, item: &[u8]) {
        self.buf
            .extend_from_slice(&(item.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(item);
        self.count += 1;
    }

    /// Items added.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The message's bytes.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf[1..RECORDS_HEADER].copy_from_slice(&self.count.to_le_bytes());
        self.buf
    }
}

/// How many `MmState`s fit in one [`Msg::Mms`].
pub const MMS_PER_MESSAGE: usize =
    (MAX_MESSAGE - 5) / std::mem::size_of::<spacetime_common::MmState>();

#[cfg(test)]
#[path = "proto_tests.rs"]
mod tests;
