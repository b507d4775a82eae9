//! One connected client as the agent keeps it: who it is, its session, and what waits to be
//! sent to it. The queue is bounded: a client that does not read cannot make the agent
//! grow, nor stall the others; what does not fit is dropped and counted as its loss.

use std::{
    collections::VecDeque,
    io,
    os::fd::{AsRawFd, OwnedFd},
};

use super::verify::Peer;
use crate::kernel::{
    loader::KernelCounters,
    remote::{
        proto::{self, Msg},
        sock,
    },
};

/// Most bytes queued for one client; beyond, records and taskstats datagrams are dropped.
const MAX_QUEUED_BYTES: usize = 32 << 20;
/// Control messages go in beyond [`MAX_QUEUED_BYTES`] up to this much more; a client that
/// asks for answers it never reads past it is closed.
const CONTROL_SLACK_BYTES: usize = 1 << 20;

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
    /// Given at the hello.
    pub session: Option<u16>,
    pub run: Option<RunState>,
    /// A watch client's programs.
    pub watch: Option<Box<super::watchers::Watching>>,
    /// It asked for delay accounting.
    pub delayacct: bool,
    /// Its runs' own limit on processes tracked at once (0: none), from its hello.
    pub max_processes: u32,
    outbox: VecDeque<Vec<u8>>,
    queued_bytes: usize,
    /// Records gathered for the next [`Msg::Records`].
    batch: Vec<Vec<u8>>,
    batch_bytes: usize,
    pub dropped_records: u64,
    pub dropped_taskstats: u64,
    /// To be ended and removed.
    pub closed: bool,
}

impl Client {
    pub fn new(fd: OwnedFd, peer: Peer) -> Client {
        sock::set_sndbuf(fd.as_raw_fd(), 4 << 20);
        Client {
            fd,
            peer,
            session: None,
            run: None,
            watch: None,
            delayacct: false,
            max_processes: 0,
            outbox: VecDeque::new(),
            queued_bytes: 0,
            batch: Vec::new(),
            batch_bytes: proto::RECORDS_HEADER,
            dropped_records: 0,
            dropped_taskstats: 0,
            closed: false,
        }
    }

    pub fn wants_to_write(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Queues a record of the client's session.
    pub fn record(&mut self, bytes: &[u8]) {
        if !proto::records_fit(self.batch_bytes, bytes.len()) {
            self.seal();
        }
        self.batch_bytes += 4 + bytes.len();
        self.batch.push(bytes.to_vec());
    }

    /// Queues a taskstats datagram about a process of the session.
    pub fn taskstats(&mut self, datagram: &[u8]) {
        self.seal();
        let msg = Msg::Taskstats(datagram.to_vec()).encode();
        if !self.queue(msg, false) {
            self.dropped_taskstats += 1;
        }
    }

    /// Queues a control message (never dropped: they are few and small).
    pub fn control(&mut self, msg: &Msg) {
        self.seal();
        self.queue(msg.encode(), true);
    }

    /// Turns the records gathered into one message.
    pub fn seal(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::take(&mut self.batch);
        let n = batch.len() as u64;
        self.batch_bytes = proto::RECORDS_HEADER;
        if !self.queue(Msg::Records(batch).encode(), false) {
            self.dropped_records += n;
        }
    }

    fn queue(&mut self, msg: Vec<u8>, always: bool) -> bool {
        let limit = match always {
            true => MAX_QUEUED_BYTES + CONTROL_SLACK_BYTES,
            false => MAX_QUEUED_BYTES,
        };
        if self.queued_bytes + msg.len() > limit {
            if always {
                log::debug!("client {}: answers it never reads: closed", self.peer.pid);
                self.closed = true;
            }
            return false;
        }
        self.queued_bytes += msg.len();
        self.outbox.push_back(msg);
        true
    }

    /// Sends what the socket takes now, without blocking. A broken connection closes
    /// the client.
    pub fn write(&mut self) {
        while let Some(m) = self.outbox.front() {
            match sock::send(self.fd.as_raw_fd(), m, None) {
                Ok(()) => {
                    self.queued_bytes -= m.len();
                    self.outbox.pop_front();
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

#[cfg(test)]
mod tests {
    use std::os::fd::FromRawFd;

    use super::*;

    fn pair() -> (OwnedFd, OwnedFd) {
        let mut fds = [0; 2];
        let flags = libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
        // SAFETY: a valid array of two fds.
        let r = unsafe { libc::socketpair(libc::AF_UNIX, flags, 0, fds.as_mut_ptr()) };
        assert_eq!(r, 0, "socketpair: {}", io::Error::last_os_error());
        // SAFETY: fresh descriptors we own.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    }

    /// A client that never reads: the queue stops at its bound, the records beyond are
    /// counted as dropped, control messages still go in, and what was queued arrives whole
    /// and in order once the client reads.
    #[test]
    fn a_client_that_does_not_read_costs_a_bounded_queue() {
        let (agent_end, client_end) = pair();
        let mut c = Client::new(agent_end, Peer { pid: 1, uid: 1 });
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
            match sock::recv(client_end.as_raw_fd(), &mut buf, libc::MSG_DONTWAIT) {
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
}
