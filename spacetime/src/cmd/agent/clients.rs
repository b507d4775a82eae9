//! One connected client as the agent keeps it: who it is, its session, and what waits to be
//! sent to it.
//!
//! The queue is bounded in what it costs the agent, not in payload: each message counts its
//! allocation (capacity) and the bookkeeping around it, and the number of messages is
//! bounded too. A client's queue also draws on its user's share and on the agent's whole,
//! so that no user, with all the connections allowed, can make the agent grow past a known
//! size. Records and taskstats datagrams that do not fit are dropped and counted as the
//! client's loss; answers to its own requests always go in, but a client that leaves more
//! than [`MAX_UNREAD_ANSWERS`] of them unread is not reading at all, and is closed.

use std::{
    cell::Cell,
    collections::VecDeque,
    io,
    os::fd::{AsFd, OwnedFd},
    rc::Rc,
    time::Instant,
};

use super::verify::Peer;
use crate::kernel::{
    loader::KernelCounters,
    remote::{
        proto::{self, Msg},
        sock,
    },
};

/// Most bytes (allocations) queued for one client.
pub const MAX_QUEUED_BYTES: usize = 32 << 20;
/// Most bytes queued for all the connections of one user (not root).
pub const USER_QUEUED_BYTES: usize = 64 << 20;
/// Most bytes queued for every client together.
pub const AGENT_QUEUED_BYTES: usize = 256 << 20;
/// Most messages queued for one client.
const MAX_QUEUED_MESSAGES: usize = 16384;
/// Answers a client may leave unread: one that waits for each answer before asking again (as
/// spacetime does) never has more than a few.
pub const MAX_UNREAD_ANSWERS: usize = 64;
/// What one queued message costs besides its buffer: its slot in the queue and the
/// allocator's header, rounded up.
const MESSAGE_OVERHEAD: usize = 64;

/// Bytes queued, shared by the clients that draw on the same budget.
#[derive(Clone, Default)]
pub struct Budget(Rc<Cell<usize>>);

impl Budget {
    pub fn used(&self) -> usize {
        self.0.get()
    }
    fn add(&self, n: usize) {
        self.0.set(self.0.get() + n);
    }
    fn sub(&self, n: usize) {
        self.0.set(self.0.get().saturating_sub(n));
    }
    /// Other clients hold it too.
    pub fn shared(&self) -> bool {
        Rc::strong_count(&self.0) > 1
    }
}

/// A run being traced for a client.
pub(super) struct RunState {
    /// The session's counters when the run began.
    pub baseline: KernelCounters,
    /// The listener's lost receives when the run began.
    pub enobufs_at_start: u64,
}

pub(super) struct Client {
    pub fd: OwnedFd,
    pub peer: Peer,
    /// The user its limits count against (see `users`).
    pub principal: u32,
    /// Given at the hello.
    pub session: Option<u16>,
    pub run: Option<RunState>,
    /// Its run's finish, held back for final CPU records.
    pub finishing: Option<super::finish::Finishing>,
    /// A watch client's seat at its uid's programs.
    pub seat: Option<super::watchers::Seat>,
    /// It asked for delay accounting.
    pub delayacct: bool,
    /// Its runs show memory over time (not a `time -f` format): rss_stat runs for them, and
    /// the kernel follows their processes' mms.
    pub memory: bool,
    /// Its runs' own limit on processes tracked at once (0: none), from its hello.
    pub max_processes: u32,
    /// When it last sent a message or read one of ours.
    pub active: Instant,
    outbox: VecDeque<Vec<u8>>,
    queued_bytes: usize,
    unread_answers: usize,
    user: Budget,
    agent: Budget,
    /// Records gathered for the next [`Msg::Records`], and datagrams for the next
    /// [`Msg::Taskstats`]: each at most one message.
    batch: proto::Batch,
    datagrams: proto::Batch,
    pub dropped_records: u64,
    pub dropped_taskstats: u64,
    /// To be ended and removed.
    pub closed: bool,
}

/// What a message costs the agent while queued.
fn cost(msg: &[u8], capacity: usize) -> usize {
    capacity.max(msg.len()) + MESSAGE_OVERHEAD
}

impl Client {
    pub fn new(fd: OwnedFd, peer: Peer, principal: u32, user: Budget, agent: Budget) -> Client {
        sock::set_sndbuf(fd.as_fd(), 4 << 20);
        Client {
            fd,
            peer,
            principal,
            session: None,
            run: None,
            finishing: None,
            seat: None,
            delayacct: false,
            memory: true,
            max_processes: 0,
            active: Instant::now(),
            outbox: VecDeque::new(),
            queued_bytes: 0,
            unread_answers: 0,
            user,
            agent,
            batch: proto::Batch::records(),
            datagrams: proto::Batch::taskstats(),
            dropped_records: 0,
            dropped_taskstats: 0,
            closed: false,
        }
    }

    pub fn wants_to_write(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Bytes its queue costs now.
    pub fn queued_bytes(&self) -> usize {
        self.queued_bytes
    }

    /// Queues a record of the client's session.
    pub fn record(&mut self, bytes: &[u8]) {
        if !self.batch.fits(bytes.len()) {
            self.seal();
        }
        self.batch.push(bytes);
    }

    /// Queues a taskstats datagram about a process of the session. The client reads records
    /// and datagrams apart, so a pass's datagrams share one message.
    pub fn taskstats(&mut self, datagram: &[u8]) {
        if !self.datagrams.fits(datagram.len()) {
            self.seal();
        }
        self.datagrams.push(datagram);
    }

    /// Queues a control message: an answer, never dropped; past [`MAX_UNREAD_ANSWERS`]
    /// unread, the client is closed instead.
    pub fn control(&mut self, msg: &Msg) {
        self.seal();
        if self.unread_answers >= MAX_UNREAD_ANSWERS {
            if !self.closed {
                log::info!(
                    "client pid {} uid {}: {} answers unread: closed",
                    self.peer.pid,
                    self.peer.uid,
                    self.unread_answers
                );
            }
            self.closed = true;
            return;
        }
        if self.queue(msg.encode(), true) {
            self.unread_answers += 1;
        }
    }

    /// Queues a watch's counters; an unsent earlier one is replaced, not added to.
    pub fn counters(&mut self, counters: KernelCounters) {
        let msg = Msg::Counters(counters).encode();
        if let Some(m) = self
            .outbox
            .iter_mut()
            .find(|m| m.first().is_some_and(|&t| proto::is_counters(t)))
        {
            // Same type, same length: the cost is unchanged.
            m.copy_from_slice(&msg);
            return;
        }
        self.control(&Msg::Counters(counters));
    }

    /// Turns the records gathered into one message, and the datagrams into another.
    pub fn seal(&mut self) {
        if !self.batch.is_empty() {
            let batch = std::mem::replace(&mut self.batch, proto::Batch::records());
            let n = batch.len() as u64;
            if !self.queue(batch.finish(), false) {
                self.dropped_records += n;
            }
        }
        if !self.datagrams.is_empty() {
            let batch = std::mem::replace(&mut self.datagrams, proto::Batch::taskstats());
            let n = batch.len() as u64;
            if !self.queue(batch.finish(), false) {
                self.dropped_taskstats += n;
            }
        }
    }

    /// Queues `msg` if the client's, its user's and the agent's bounds allow (an answer
    /// always fits: they are few, see [`Client::control`]).
    fn queue(&mut self, mut msg: Vec<u8>, answer: bool) -> bool {
        msg.shrink_to_fit();
        let c = cost(&msg, msg.capacity());
        let over = self.queued_bytes + c > MAX_QUEUED_BYTES
            || self.outbox.len() >= MAX_QUEUED_MESSAGES
            || (self.peer.uid != 0 && self.user.used() + c > USER_QUEUED_BYTES)
            || self.agent.used() + c > AGENT_QUEUED_BYTES;
        if over && !answer {
            return false;
        }
        self.queued_bytes += c;
        self.user.add(c);
        self.agent.add(c);
        self.outbox.push_back(msg);
        true
    }

    /// Sends what the socket takes now, without blocking. A broken connection closes
    /// the client.
    pub fn write(&mut self) {
        while let Some(m) = self.outbox.front() {
            match sock::send(self.fd.as_fd(), m, None) {
                Ok(()) => {
                    let c = cost(m, m.capacity());
                    // Answers go first in their turn: the oldest unread one was this.
                    if m.first().is_some_and(|&t| proto::is_answer(t)) {
                        self.unread_answers = self.unread_answers.saturating_sub(1);
                    }
                    self.release(c);
                    self.outbox.pop_front();
                    self.active = Instant::now();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::debug!("client {}: {e}", self.peer.pid);
                    self.closed = true;
                    return;
                }
            }
        }
    }

    fn release(&mut self, c: usize) {
        self.queued_bytes = self.queued_bytes.saturating_sub(c);
        self.user.sub(c);
        self.agent.sub(c);
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // The budgets outlive it: what it held goes back.
        let held = self.queued_bytes;
        self.release(held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(fd: OwnedFd, user: Budget, agent: Budget) -> Client {
        Client::new(
            fd,
            Peer {
                pid: 1,
                uid: 1,
                gid: 1,
            },
            1,
            user,
            agent,
        )
    }

    /// A client that never reads: the queue stops at its bound, the records beyond are
    /// counted as dropped, answers still go in, and what was queued arrives whole and in
    /// order once the client reads.
    #[test]
    fn a_client_that_does_not_read_costs_a_bounded_queue() {
        let (agent_end, client_end) = sock::pair().expect("socketpair");
        let mut c = client(agent_end, Budget::default(), Budget::default());
        let record = vec![7u8; 4000];
        let total = 3 * MAX_QUEUED_BYTES / record.len();
        for _ in 0..total {
            c.record(&record);
            c.write();
        }
        c.seal();
        c.write();
        assert!(
            c.queued_bytes <= MAX_QUEUED_BYTES,
            "queue {} bytes",
            c.queued_bytes
        );
        assert!(c.dropped_records > 0, "nothing dropped past the bound");
        c.control(&Msg::Flushed { seq: 1 });
        let mut buf = vec![0u8; proto::MAX_MESSAGE + 1];
        let mut got = 0u64;
        let mut flushed = false;
        while !flushed {
            c.write();
            match sock::recv(client_end.as_fd(), &mut buf, false) {
                Ok(r) => match Msg::parse(&buf[..r.len]).expect("a whole message") {
                    Msg::Records(rs) => {
                        assert!(rs.iter().all(|r| *r == record), "records intact");
                        got += rs.len() as u64;
                    }
                    Msg::Flushed { seq: 1 } => flushed = true,
                    other => panic!("unexpected {other:?}"),
                },
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("recv: {e}"),
            }
        }
        assert_eq!(
            got + c.dropped_records,
            total as u64,
            "every record either arrived or was counted as dropped"
        );
    }

    /// Tiny answers a client never reads: it is closed after [`MAX_UNREAD_ANSWERS`] (plus
    /// what its socket buffer took), and what it held goes back to the budgets.
    #[test]
    fn unread_answers_close_the_client_and_free_its_queue() {
        let (agent_end, _client_end) = sock::pair().expect("socketpair");
        let (user, agent) = (Budget::default(), Budget::default());
        let mut c = client(agent_end, user.clone(), agent.clone());
        let mut sent = 0;
        while !c.closed {
            c.control(&Msg::Flushed { seq: sent });
            c.write();
            sent += 1;
            assert!(sent < 1_000_000, "never closed");
        }
        assert!(c.outbox.len() <= MAX_UNREAD_ANSWERS, "{}", c.outbox.len());
        assert!(user.used() > 0 && user.used() == agent.used());
        drop(c);
        assert_eq!((user.used(), agent.used()), (0, 0), "given back");
    }

    /// Two clients of one user share its bound: the second gets only what the first left.
    #[test]
    fn a_users_clients_share_its_bound() {
        let (a_end, _a) = sock::pair().expect("socketpair");
        let (b_end, _b) = sock::pair().expect("socketpair");
        let (user, agent) = (Budget::default(), Budget::default());
        let mut a = client(a_end, user.clone(), agent.clone());
        let mut b = client(b_end, user.clone(), agent.clone());
        let record = vec![1u8; 60_000];
        for _ in 0..4 * USER_QUEUED_BYTES / record.len() {
            a.record(&record);
            b.record(&record);
        }
        a.seal();
        b.seal();
        assert!(
            user.used() <= USER_QUEUED_BYTES,
            "user's share {}",
            user.used()
        );
        assert!(a.dropped_records > 0 && b.dropped_records > 0);
    }
}
