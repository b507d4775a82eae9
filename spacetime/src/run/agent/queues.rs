//! What waits to be sent to every client, kept in one place so that the agent's whole bound
//! is shared fairly between the people it serves.
//!
//! Each queue is bounded in what it costs the agent, not in payload: a message counts its
//! allocation plus [`MESSAGE_OVERHEAD`]. Three bounds hold: one client's queue, one user's
//! (its principal's, see `users`) queues together, and every queue together. The last is
//! shared max-min: when it is reached, the records of the user who holds the most are
//! dropped first, newest first, as long as that user holds more than the one asking will;
//! so a user who reads promptly always finds room (at least the whole bound split evenly
//! between the users holding any), and a user who does not read loses its own records, not
//! others'. Every record dropped is counted as its client's loss. Answers are never dropped
//! (a client leaving many unread is closed instead, see `clients`).

use std::{
    cell::RefCell,
    collections::{HashMap, VecDeque},
    io,
    os::fd::BorrowedFd,
    rc::Rc,
    time::{Duration, Instant},
};

use crate::kernel::remote::sock;

/// Most bytes (allocations) queued for one client.
pub const MAX_QUEUED_BYTES: usize = 32 << 20;
/// Most bytes queued for all the connections of one user (not root).
pub const USER_QUEUED_BYTES: usize = 64 << 20;
/// Most bytes queued for every client together.
pub const AGENT_QUEUED_BYTES: usize = 256 << 20;
/// Most messages queued for one client.
const MAX_QUEUED_MESSAGES: usize = 16384;
/// What one queued message costs besides its buffer: its slot in the queue and the
/// allocator's header, rounded up.
const MESSAGE_OVERHEAD: usize = 64;
/// A user's loss is logged at most this often.
const SAY_EVERY: Duration = Duration::from_secs(10);

/// What a queued message is: records and taskstats datagrams (how many) may be dropped,
/// answers and counters may not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Records(u64),
    Taskstats(u64),
    Answer,
    Counters,
}

impl Kind {
    pub fn droppable(self) -> bool {
        matches!(self, Kind::Records(_) | Kind::Taskstats(_))
    }
}

/// What a client lost to the bounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loss {
    pub records: u64,
    pub taskstats: u64,
}

impl Loss {
    fn add(&mut self, kind: Kind) {
        match kind {
            Kind::Records(n) => self.records += n,
            Kind::Taskstats(n) => self.taskstats += n,
            Kind::Answer | Kind::Counters => {}
        }
    }
}

struct Queued {
    msg: Vec<u8>,
    kind: Kind,
    cost: usize,
}

struct Outbox {
    principal: u32,
    /// Bound by its user's share (not root).
    limited: bool,
    msgs: VecDeque<Queued>,
    bytes: usize,
    loss: Loss,
}

/// The three bounds, in bytes.
#[derive(Clone, Copy, Debug)]
struct Limits {
    client: usize,
    user: usize,
    agent: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            client: MAX_QUEUED_BYTES,
            user: USER_QUEUED_BYTES,
            agent: AGENT_QUEUED_BYTES,
        }
    }
}

#[derive(Default)]
struct State {
    limits: Limits,
    boxes: HashMap<u64, Outbox>,
    next_id: u64,
    /// Bytes queued per principal (none: 0).
    users: HashMap<u32, usize>,
    total: usize,
    /// When each user's loss was last logged.
    said: HashMap<u32, Instant>,
}

/// Every client's queue; a handle, cloned into each client.
#[derive(Clone, Default)]
pub struct Queues(Rc<RefCell<State>>);

/// A client's queue in [`Queues`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueId(u64);

/// What a message costs the agent while queued.
fn cost(len: usize, capacity: usize) -> usize {
    len.max(capacity) + MESSAGE_OVERHEAD
}

impl Queues {
    /// Queues bounded by `agent` bytes in all: a user's share a quarter of it, a client's an
    /// eighth, as the defaults (`spacetime agent --queue-mib`).
    pub fn with_budget(agent: usize) -> Queues {
        let q = Queues::default();
        q.0.borrow_mut().limits = Limits {
            client: agent / (AGENT_QUEUED_BYTES / MAX_QUEUED_BYTES),
            user: agent / (AGENT_QUEUED_BYTES / USER_QUEUED_BYTES),
            agent,
        };
        q
    }

    /// A new, empty queue for a client of `principal` (`limited`: bound by its user's share).
    pub fn open(&self, principal: u32, limited: bool) -> QueueId {
        let mut s = self.0.borrow_mut();
        let id = s.next_id;
        s.next_id += 1;
        s.boxes.insert(
            id,
            Outbox {
                principal,
                limited,
                msgs: VecDeque::new(),
                bytes: 0,
                loss: Loss::default(),
            },
        );
        QueueId(id)
    }

    /// Removes a client's queue; the bytes it held.
    pub fn close(&self, id: QueueId) -> usize {
        let mut s = self.0.borrow_mut();
        let Some(b) = s.boxes.remove(&id.0) else {
            return 0;
        };
        s.release(b.principal, b.bytes);
        b.bytes
    }

    /// Bytes queued for every client together.
    #[cfg(test)]
    pub fn total(&self) -> usize {
        self.0.borrow().total
    }

    /// Bytes queued for `principal`'s clients together.
    #[cfg(test)]
    pub fn of_user(&self, principal: u32) -> usize {
        self.0.borrow().users.get(&principal).copied().unwrap_or(0)
    }

    /// Bytes queued for one client.
    pub fn bytes(&self, id: QueueId) -> usize {
        self.0.borrow().boxes.get(&id.0).map_or(0, |b| b.bytes)
    }

    /// Messages queued for one client.
    pub fn len(&self, id: QueueId) -> usize {
        self.0.borrow().boxes.get(&id.0).map_or(0, |b| b.msgs.len())
    }

    /// What one client lost since last asked.
    pub fn take_loss(&self, id: QueueId) -> Loss {
        let mut s = self.0.borrow_mut();
        s.boxes
            .get_mut(&id.0)
            .map(|b| std::mem::take(&mut b.loss))
            .unwrap_or_default()
    }

    /// What one client lost so far (not reset).
    pub fn loss(&self, id: QueueId) -> Loss {
        self.0
            .borrow()
            .boxes
            .get(&id.0)
            .map_or(Loss::default(), |b| b.loss)
    }

    /// Queues `msg` for client `id`: an answer or counters always; records and datagrams if
    /// the bounds allow, making room from the user who holds the most when the agent's is
    /// reached. Returns whether it was queued (what was not is counted as the client's loss).
    pub fn push(&self, id: QueueId, mut msg: Vec<u8>, kind: Kind) -> bool {
        msg.shrink_to_fit();
        let c = cost(msg.len(), msg.capacity());
        let mut s = self.0.borrow_mut();
        if kind.droppable() && !s.room_for(id, c) {
            s.lost(id, kind);
            return false;
        }
        let Some(b) = s.boxes.get_mut(&id.0) else {
            return false;
        };
        b.bytes += c;
        b.msgs.push_back(Queued { msg, kind, cost: c });
        let p = b.principal;
        *s.users.entry(p).or_default() += c;
        s.total += c;
        true
    }

    /// Overwrites the client's queued counters with `msg` (the same type and length); false
    /// when none is queued.
    pub fn replace_counters(&self, id: QueueId, msg: &[u8]) -> bool {
        let mut s = self.0.borrow_mut();
        let Some(b) = s.boxes.get_mut(&id.0) else {
            return false;
        };
        match b.msgs.iter_mut().find(|q| q.kind == Kind::Counters) {
            Some(q) if q.msg.len() == msg.len() => {
                q.msg.copy_from_slice(msg);
                true
            }
            _ => false,
        }
    }

    /// Sends the client's oldest messages on `fd` without blocking, up to
    /// [`sock::SEND_BATCH`] in one call: how many went and how many of those were answers
    /// (not droppable); none when nothing waits. WouldBlock when the socket takes nothing
    /// now.
    pub fn send_front(&self, id: QueueId, fd: BorrowedFd<'_>) -> io::Result<Sent> {
        let mut s = self.0.borrow_mut();
        let Some(b) = s.boxes.get_mut(&id.0) else {
            return Ok(Sent::default());
        };
        let front: Vec<&[u8]> = b
            .msgs
            .iter()
            .take(sock::SEND_BATCH)
            .map(|q| q.msg.as_slice())
            .collect();
        let n = sock::send_many(fd, &front)?;
        let mut sent = Sent {
            messages: n,
            answers: 0,
        };
        let mut cost = 0;
        for q in b.msgs.drain(..n) {
            sent.answers += usize::from(!q.kind.droppable());
            cost += q.cost;
        }
        b.bytes -= cost;
        let p = b.principal;
        s.release(p, cost);
        Ok(sent)
    }
}

/// What one [`Queues::send_front`] sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sent {
    pub messages: usize,
    /// Of them, answers (control messages, never dropped).
    pub answers: usize,
}

impl State {
    /// Whether a droppable message costing `c` fits client `id`'s bounds, once room is made
    /// in the agent's from users who hold more.
    fn room_for(&mut self, id: QueueId, c: usize) -> bool {
        let Some(b) = self.boxes.get(&id.0) else {
            return false;
        };
        let (p, limited) = (b.principal, b.limited);
        let mine = self.users.get(&p).copied().unwrap_or(0);
        let l = self.limits;
        if b.bytes + c > l.client
            || b.msgs.len() >= MAX_QUEUED_MESSAGES
            || (limited && mine + c > l.user)
        {
            return false;
        }
        while self.total + c > l.agent {
            // The user who holds the most, if more than this one will: its newest go.
            let most = self
                .users
                .iter()
                .filter(|&(&u, _)| u != p)
                .max_by_key(|&(_, &held)| held)
                .map(|(&u, &held)| (u, held));
            match most {
                Some((u, held)) if held > mine + c && self.evict(u) => {}
                _ => return false,
            }
        }
        true
    }

    /// Drops the newest droppable message of `principal`'s fullest client; false when it
    /// has none.
    fn evict(&mut self, principal: u32) -> bool {
        let victim = self
            .boxes
            .iter()
            .filter(|(_, b)| b.principal == principal && b.msgs.iter().any(|q| q.kind.droppable()))
            .max_by_key(|(_, b)| b.bytes)
            .map(|(&id, _)| id);
        let Some(id) = victim else { return false };
        let Some(b) = self.boxes.get_mut(&id) else {
            return false;
        };
        let Some(i) = b.msgs.iter().rposition(|q| q.kind.droppable()) else {
            return false;
        };
        let Some(q) = b.msgs.remove(i) else {
            return false;
        };
        b.bytes -= q.cost;
        b.loss.add(q.kind);
        self.release(principal, q.cost);
        self.say_loss(
            principal,
            "the agent's queues are full and its clients hold the most",
        );
        true
    }

    fn lost(&mut self, id: QueueId, kind: Kind) {
        let Some(b) = self.boxes.get_mut(&id.0) else {
            return;
        };
        b.loss.add(kind);
        let p = b.principal;
        self.say_loss(p, "its clients read too slowly");
    }

    fn release(&mut self, principal: u32, c: usize) {
        self.total = self.total.saturating_sub(c);
        if let Some(u) = self.users.get_mut(&principal) {
            *u = u.saturating_sub(c);
            if *u == 0 {
                self.users.remove(&principal);
            }
        }
    }

    /// Logs that `principal`'s records are dropped, at most every [`SAY_EVERY`].
    fn say_loss(&mut self, principal: u32, why: &str) {
        let now = Instant::now();
        if self
            .said
            .get(&principal)
            .is_some_and(|&t| now.duration_since(t) < SAY_EVERY)
        {
            return;
        }
        self.said
            .retain(|_, &mut t| now.duration_since(t) < SAY_EVERY);
        self.said.insert(principal, now);
        let held = self.users.get(&principal).copied().unwrap_or(0);
        log::info!(
            "user {principal}: records dropped: {why} ({} MiB queued for it, {} MiB for all)",
            held >> 20,
            self.total >> 20
        );
    }
}

#[cfg(test)]
#[path = "queues_tests.rs"]
mod tests;
