//! One connected client as the agent keeps it: who it is, its session, and what waits to be
//! sent to it.
//!
//! What waits is kept in [`Queues`], with every other client's, so that the bounds of one
//! client, one user and the whole agent are applied together (see `queues`): records and
//! taskstats datagrams that do not fit are dropped and counted as the client's loss; answers
//! to its own requests always go in, but a client that leaves more than
//! [`MAX_UNREAD_ANSWERS`] of them unread is not reading at all, and is closed.

use std::{
    io,
    os::fd::{AsFd, OwnedFd},
    time::Instant,
};

use super::{
    queues::{Kind, Loss, QueueId, Queues},
    verify::Peer,
};
use crate::kernel::{
    loader::{KernelCounters, SessionId},
    remote::{
        proto::{self, Msg, Refusal},
        sock,
    },
};

/// Answers a client may leave unread: one that waits for each answer before asking again (as
/// spacetime does) never has more than a few.
pub const MAX_UNREAD_ANSWERS: usize = 64;

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
    pub session: Option<SessionId>,
    pub run: Option<RunState>,
    /// A watch client's seat at its uid's programs.
    pub seat: Option<super::watchers::Seat>,
    /// It asked for delay accounting.
    pub delayacct: bool,
    /// Its runs show memory over time (not a `time -f` format): rss_stat runs for them, and
    /// the kernel follows their processes' mms.
    pub memory: bool,
    /// Its runs show CPU over time: the CPU clock program runs while its session is open,
    /// and the ticks of its processes go to it (none go to a client that did not ask).
    pub cpu: bool,
    /// Its runs' own limit on processes tracked at once (0: none), from its hello.
    pub max_processes: u32,
    /// When it last sent a message or read one of ours.
    pub active: Instant,
    queues: Queues,
    queue: QueueId,
    unread_answers: usize,
    /// Records gathered for the next [`Msg::Records`], and datagrams for the next
    /// [`Msg::Taskstats`]: each at most one message.
    batch: proto::Batch,
    datagrams: proto::Batch,
    /// To be ended and removed.
    pub closed: bool,
}

impl Client {
    pub fn new(fd: OwnedFd, peer: Peer, principal: u32, queues: Queues) -> Client {
        sock::set_sndbuf(fd.as_fd(), 4 << 20);
        let queue = queues.open(principal, peer.uid != 0);
        Client {
            fd,
            peer,
            principal,
            session: None,
            run: None,
            seat: None,
            delayacct: false,
            memory: true,
            cpu: false,
            max_processes: 0,
            active: Instant::now(),
            queues,
            queue,
            unread_answers: 0,
            batch: proto::Batch::records(),
            datagrams: proto::Batch::taskstats(),
            closed: false,
        }
    }

    pub fn wants_to_write(&self) -> bool {
        self.queues.len(self.queue) > 0
    }

    /// Bytes its queue costs now.
    pub fn queued_bytes(&self) -> usize {
        self.queues.bytes(self.queue)
    }

    /// What it lost to the bounds since last asked (a run's end tells it).
    pub fn take_loss(&mut self) -> Loss {
        self.queues.take_loss(self.queue)
    }

    /// Records it lost to the bounds so far (a watch is told as they grow).
    pub fn dropped_records(&self) -> u64 {
        self.queues.loss(self.queue).records
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
        let kind = match msg {
            Msg::Counters(_) => Kind::Counters,
            _ => Kind::Answer,
        };
        if self.queues.push(self.queue, msg.encode(), kind) {
            self.unread_answers += 1;
        }
    }

    /// Tells the client why not, and closes the connection once that is sent.
    pub fn refuse(&mut self, code: Refusal, why: &str) {
        self.control(&Msg::Refused {
            code,
            reason: why.as_bytes().to_vec(),
        });
        self.write();
        self.closed = true;
    }

    /// Queues a watch's counters; an unsent earlier one is replaced, not added to.
    pub fn counters(&mut self, counters: KernelCounters) {
        let msg = Msg::Counters(counters);
        if !self.queues.replace_counters(self.queue, &msg.encode()) {
            self.control(&msg);
        }
    }

    /// Turns the records gathered into one message, and the datagrams into another.
    pub fn seal(&mut self) {
        if !self.batch.is_empty() {
            let batch = std::mem::replace(&mut self.batch, proto::Batch::records());
            let kind = Kind::Records(batch.len() as u64);
            self.queues.push(self.queue, batch.finish(), kind);
        }
        if !self.datagrams.is_empty() {
            let batch = std::mem::replace(&mut self.datagrams, proto::Batch::taskstats());
            let kind = Kind::Taskstats(batch.len() as u64);
            self.queues.push(self.queue, batch.finish(), kind);
        }
    }

    /// Sends what the socket takes now, without blocking. A broken connection closes
    /// the client.
    pub fn write(&mut self) {
        loop {
            match self.queues.send_front(self.queue, self.fd.as_fd()) {
                Ok(sent) if sent.messages == 0 => return,
                Ok(sent) => {
                    self.unread_answers = self.unread_answers.saturating_sub(sent.answers);
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
}

impl Drop for Client {
    fn drop(&mut self) {
        // The queues outlive it: what it held goes back.
        self.queues.close(self.queue);
    }
}

#[cfg(test)]
mod tests {
    use super::super::queues::MAX_QUEUED_BYTES;
    use super::*;

    fn client(fd: OwnedFd, queues: &Queues) -> Client {
        let peer = Peer {
            pid: 1,
            uid: 1,
            gid: 1,
        };
        Client::new(fd, peer, 1, queues.clone())
    }

    /// A client that never reads: the queue stops at its bound, the records beyond are
    /// counted as dropped, answers still go in, and what was queued arrives whole and in
    /// order once the client reads.
    #[test]
    fn a_client_that_does_not_read_costs_a_bounded_queue() {
        let (agent_end, client_end) = sock::pair().expect("socketpair");
        let queues = Queues::default();
        let mut c = client(agent_end, &queues);
        let record = vec![7u8; 4000];
        let total = 3 * MAX_QUEUED_BYTES / record.len();
        for _ in 0..total {
            c.record(&record);
            c.write();
        }
        c.seal();
        c.write();
        assert!(
            c.queued_bytes() <= MAX_QUEUED_BYTES,
            "queue {} bytes",
            c.queued_bytes()
        );
        let dropped = c.dropped_records();
        assert!(dropped > 0, "nothing dropped past the bound");
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
            got + dropped,
            total as u64,
            "every record either arrived or was counted as dropped"
        );
        assert_eq!(c.take_loss().records, dropped);
        assert_eq!(c.take_loss().records, 0, "told once");
    }

    /// Tiny answers a client never reads: it is closed after [`MAX_UNREAD_ANSWERS`] (plus
    /// what its socket buffer took), and what it held goes back.
    #[test]
    fn unread_answers_close_the_client_and_free_its_queue() {
        let (agent_end, _client_end) = sock::pair().expect("socketpair");
        let queues = Queues::default();
        let mut c = client(agent_end, &queues);
        let mut sent = 0;
        while !c.closed {
            c.control(&Msg::Flushed { seq: sent });
            c.write();
            sent += 1;
            assert!(sent < 1_000_000, "never closed");
        }
        assert!(
            queues.len(c.queue) <= MAX_UNREAD_ANSWERS,
            "{}",
            queues.len(c.queue)
        );
        assert!(queues.of_user(1) > 0 && queues.of_user(1) == queues.total());
        drop(c);
        assert_eq!((queues.of_user(1), queues.total()), (0, 0), "given back");
    }
}
