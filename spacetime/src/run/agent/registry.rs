//! Every connected client, by a [`ClientId`] that is its own for as long as it is
//! connected, and the sessions they hold: who may connect (connections per user and in all),
//! which session a hello gets (sessions per user, the last ones kept for users who hold few),
//! which connections are idle, and what the clients together want of the kernel programs.
//! Every per-user limit is counted against the client's principal ([`super::users`]).

use std::{
    collections::BTreeMap,
    ops::{Index, IndexMut},
    os::fd::OwnedFd,
    time::{Duration, Instant},
};

use spacetime_common::MAX_SESSIONS;

use super::{clients::Client, queues::Queues, users::Users, verify::Peer};
use crate::kernel::{
    loader::SessionId,
    remote::proto::{Msg, Refusal},
};

/// Connections at once (each holds a session or is about to).
pub const MAX_CLIENTS: usize = 256;
/// Connections one non-root user may hold at once (with or without a session), so that no
/// user takes every connection.
pub const CONNECTIONS_PER_USER: usize = 16;
/// Sessions one non-root user (principal) may hold at once.
pub const SESSIONS_PER_USER: usize = 8;
/// Sessions kept for users who hold few: once fewer than this many are free, a user who
/// holds [`FEW_SESSIONS`] or more is refused another.
const RESERVED_SESSIONS: usize = 16;
const FEW_SESSIONS: usize = 2;
/// A connection that has not said hello by then is closed.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

/// A connected client. Never reused while the agent runs: what refers to a client gone (a
/// finish held back) finds nothing rather than another client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ClientId(u64);

/// The connected clients, in the order they connected.
pub(super) struct Registry {
    clients: BTreeMap<ClientId, Client>,
    next: u64,
    users: Users,
    /// What waits for every client.
    queues: Queues,
    /// `--idle-timeout`.
    idle_timeout: Duration,
}

impl Registry {
    pub fn new(queues: Queues, idle_timeout: Duration) -> Registry {
        Registry {
            clients: BTreeMap::new(),
            next: 0,
            users: Users::new(),
            queues,
            idle_timeout,
        }
    }

    /// Registers a new connection from `peer`: refused (told why, then closed) when the
    /// agent or the peer's user holds as many connections as they may.
    pub fn admit(&mut self, fd: OwnedFd, peer: Peer) {
        let principal = self.users.principal(peer.uid);
        let mut c = Client::new(fd, peer, principal, self.queues.clone());
        let of_user = self.iter().filter(|c| c.principal == principal).count();
        if self.clients.len() >= MAX_CLIENTS {
            c.refuse(
                Refusal::Busy,
                "the agent serves as many connections as it can; try again later",
            );
        } else if principal != 0 && of_user >= CONNECTIONS_PER_USER {
            let why = format!(
                "user {principal} already has {CONNECTIONS_PER_USER} connections to the agent, the most one user may have"
            );
            c.refuse(Refusal::UserLimit, &why);
        }
        log::debug!(
            "client pid {} uid {} (user {principal}) connected",
            peer.pid,
            peer.uid
        );
        let id = ClientId(self.next);
        self.next += 1;
        self.clients.insert(id, c);
    }

    pub fn ids(&self) -> Vec<ClientId> {
        self.clients.keys().copied().collect()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Client> {
        self.clients.values()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Client> {
        self.clients.values_mut()
    }

    /// The client whose run session `s` traces now: its records go to it.
    pub fn running_mut(&mut self, s: SessionId) -> Option<&mut Client> {
        self.iter_mut()
            .find(|c| c.session == Some(s) && c.run.is_some())
    }

    /// The watches of `uid` waiting for its set to be loaded.
    pub fn waiting_watches(&self, uid: u32) -> Vec<ClientId> {
        let waiting = |c: &Client| c.seat.is_some_and(|s| s.uid == uid && s.baseline.is_none());
        self.clients
            .iter()
            .filter(|(_, c)| waiting(c))
            .map(|(&id, _)| id)
            .collect()
    }

    /// A free session for client `id`, within its user's share; Err: why not.
    pub fn session_for(&self, id: ClientId) -> Result<SessionId, (Refusal, String)> {
        let principal = self[id].principal;
        let held = self
            .iter()
            .filter(|c| c.principal == principal && c.session.is_some())
            .count();
        let taken: Vec<SessionId> = self.iter().filter_map(|c| c.session).collect();
        let free = (MAX_SESSIONS as usize - 1).saturating_sub(taken.len());
        if principal != 0 && held >= SESSIONS_PER_USER {
            let why = format!("user {principal} already has {SESSIONS_PER_USER} sessions with the agent, the most one user may have");
            return Err((Refusal::UserLimit, why));
        }
        if principal != 0 && held >= FEW_SESSIONS && free < RESERVED_SESSIONS {
            let why = format!("the agent keeps its last {RESERVED_SESSIONS} sessions for users with fewer than {FEW_SESSIONS}; user {principal} has {held}: try again later");
            return Err((Refusal::UserLimit, why));
        }
        (1..MAX_SESSIONS as SessionId)
            .find(|s| !taken.contains(s))
            .ok_or_else(|| {
                let why = "the agent serves as many sessions as it can; try again later";
                (Refusal::Busy, why.into())
            })
    }

    /// Closes the connections that hold a slot without using it: no hello in time, a
    /// session with nothing traced and no message for `--idle-timeout`, or a watch whose
    /// records wait unread for as long.
    pub fn close_idle(&mut self) {
        let now = Instant::now();
        let idle = self.idle_timeout;
        for c in self.iter_mut().filter(|c| !c.closed) {
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

    /// Tells every client the agent stops, and marks each closed.
    pub fn close_all(&mut self) {
        for c in self.iter_mut() {
            c.control(&Msg::Shutdown {
                reason: b"the agent was told to stop".to_vec(),
            });
            c.write();
            c.closed = true;
        }
    }

    /// Unregisters the closed clients, and hands them over (to be ended).
    pub fn take_closed(&mut self) -> Vec<(ClientId, Client)> {
        let closed: Vec<ClientId> = self
            .clients
            .iter()
            .filter(|(_, c)| c.closed)
            .map(|(&id, _)| id)
            .collect();
        closed
            .into_iter()
            .filter_map(|id| self.clients.remove(&id).map(|c| (id, c)))
            .collect()
    }

    /// Whether rss_stat should run: some session that shows memory over time traces, or
    /// may (an open trace session).
    pub fn want_rss(&self) -> bool {
        self.iter().any(|c| {
            c.memory && (c.run.is_some() || (c.session.is_some() && c.seat.is_none() && !c.closed))
        })
    }

    /// Whether the CPU clock should run: some open trace session shows CPU over time.
    pub fn want_ticks(&self) -> bool {
        self.iter()
            .any(|c| c.cpu && c.session.is_some() && c.seat.is_none() && !c.closed)
    }

    /// Whether some client asked for delay accounting.
    pub fn want_delayacct(&self) -> bool {
        self.iter().any(|c| c.delayacct && !c.closed)
    }
}

/// The client handled now: registered, since only a registered client's message is handled.
impl Index<ClientId> for Registry {
    type Output = Client;
    fn index(&self, id: ClientId) -> &Client {
        self.clients
            .get(&id)
            .expect("the client handled is registered")
    }
}

impl IndexMut<ClientId> for Registry {
    fn index_mut(&mut self, id: ClientId) -> &mut Client {
        self.clients
            .get_mut(&id)
            .expect("the client handled is registered")
    }
}
