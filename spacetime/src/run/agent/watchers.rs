//! Watch clients. Each uid that watches gets a system-mode set of programs of its own (a
//! kernel-side uid filter is per set; root's has none): a non-root client sees its own
//! uid's exits and nobody else's, in the kernel already. Every watch of one uid shares its
//! set, and a set outlives its last watch by [`KEEP_IDLE`], so watches that come and go
//! cost no reload.
//!
//! Loading a set takes ~140 ms of CPU: it is done by a thread of its own, at a low priority,
//! one set at a time, while the agent's loop serves everyone else; the client that asked is
//! answered once its set is ready. Watches are shared fairly: a person (a principal, see
//! `users`) watches as one uid at a time, starts at most one load per [`LOAD_INTERVAL`], and
//! the agent holds at most [`MAX_SETS`] sets.

use std::{
    collections::{HashMap, VecDeque},
    io::{Read, Write},
    os::fd::{AsFd, BorrowedFd},
    os::unix::net::UnixStream,
    sync::mpsc,
    time::{Duration, Instant},
};

use crate::kernel::ring::Ring;
use spacetime_common::{filter_flags, mode, KernelFilter};

use super::{clients::Client, hidden::Held, registry::Registry};
use crate::kernel::{
    creds::Caller,
    loader::{KernelCounters, LoadError, LoadOptions, Probes},
    taskstats::TaskstatsRecord,
};

/// Sets of programs loaded at once (each one uid's).
pub const MAX_SETS: usize = 8;
/// How long a set no watch uses is kept for the next.
const KEEP_IDLE: Duration = Duration::from_secs(30);
/// Least time between two loads for one principal.
const LOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Processes whose free record a non-root watch may still get (see [`Exited`]).
const EXITED_KEPT: usize = 16384;

/// A record's kind, flags and process (tgid, leader's start), from its header.
fn head(record: &[u8]) -> Option<(u16, u32, (u32, u64))> {
    let h = record.get(..32)?;
    let u32_at = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let start = u64::from_le_bytes(h[24..32].try_into().ok()?);
    Some((
        u16::from_le_bytes([h[0], h[1]]),
        u32_at(4),
        (u32_at(16), start),
    ))
}

/// What of a non-root set's records may go to its watches: not the bare exit markers of
/// other users' processes (the kernel's filter kept them out), and a free record only for a
/// process whose own group exit came through the filter (the kernel sends only those; this
/// holds even if it did not).
#[derive(Default)]
struct Exited(std::collections::HashSet<(u32, u64)>);

impl Exited {
    fn passes(&mut self, record: &[u8]) -> bool {
        use spacetime_common::{flags, kind};
        let Some((k, f, process)) = head(record) else {
            return false;
        };
        match k {
            // Its own process, hidden from it: the bare marker lets it forget the process.
            kind::EXIT if f & flags::EXIT_HIDDEN != 0 => true,
            kind::EXIT if f & flags::EXIT_FILTERED != 0 => false,
            kind::EXIT if f & flags::EXIT_GROUP_DEAD != 0 => {
                if self.0.len() < EXITED_KEPT {
                    self.0.insert(process);
                }
                true
            }
            kind::REAP => self.0.remove(&process),
            _ => true,
        }
    }
}

/// One uid's loaded programs.
pub(super) struct Watching {
    pub probes: Probes,
    ring: Ring,
    /// None: root, every exit.
    uid: Option<u32>,
    exited: Exited,
    /// Its taskstats datagrams, until their exits say whether they may go.
    held: Held,
    /// Datagrams that may go to its watches.
    ready: Vec<Vec<u8>>,
}

impl Watching {
    /// Loads system-mode programs for a watch of `owner` (root: every exit; else the exits
    /// of processes it could ptrace).
    pub fn load(owner: Caller) -> Result<Watching, LoadError> {
        let mut filter = KernelFilter::default();
        let only = (owner.uid != 0).then_some(owner.uid);
        if let Some(u) = only {
            filter.flags |= filter_flags::UID | filter_flags::READABLE;
            filter.n_uids = 1;
            filter.uids[0] = u;
            filter.owner_uid = u;
            filter.owner_gid = owner.gid;
            filter.owner_caps = owner.cap_permitted;
        }
        let mut probes = Probes::load(&LoadOptions {
            mode: mode::SYSTEM,
            filter,
            cgroup_names: true,
            ..LoadOptions::default()
        })?;
        Ok(Watching {
            ring: probes.take_events()?,
            probes,
            uid: only,
            exited: Exited::default(),
            held: Held::default(),
            ready: Vec::new(),
        })
    }

    /// Takes a taskstats datagram (its records) for this uid's watches: root's go, another
    /// uid's do not, the watcher's own wait for their exits (see `hidden`).
    fn offer(&mut self, datagram: &[u8], records: &[TaskstatsRecord]) {
        match self.uid {
            None => self.ready.push(datagram.to_vec()),
            Some(u) if super::route::of_uid(records, u) => self.held.datagram(datagram, records),
            Some(_) => {}
        }
    }
}

/// A watch client's seat: the uid whose set it reads, and the set's counters when it
/// joined (it is told of the loss since).
#[derive(Clone, Copy, Debug)]
pub(super) struct Seat {
    pub uid: u32,
    pub baseline: Option<KernelCounters>,
    pub last: KernelCounters,
}

struct Set {
    w: Watching,
    principal: u32,
    watches: usize,
    idle_since: Option<Instant>,
}

/// What a load thread hands back.
type Loaded = (u32, Result<Watching, String>);

/// Why a watch cannot be served now.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NoWatch {
    #[error("user {principal} already watches as uid {uid}: one uid's watch at a time per user")]
    OtherUid { principal: u32, uid: u32 },
    #[error("the agent serves watches for {0} users already, the most it serves at once")]
    Full(usize),
    #[error("uid {uid} already watches as gid {gid} (or with other capabilities): one set of credentials per uid at a time")]
    OtherCredentials { uid: u32, gid: u32 },
}

/// Every uid's set, and the one load under way.
pub(super) struct Watchers {
    sets: HashMap<u32, Set>,
    /// uids waiting for their set, with their principal, in order.
    queue: VecDeque<(u32, u32)>,
    loading: Option<(u32, u32, mpsc::Receiver<Loaded>)>,
    last_load: HashMap<u32, Instant>,
    /// The credentials each uid's set is loaded (or to be) for: what it may show is what
    /// they could ptrace.
    owners: HashMap<u32, Caller>,
    wake_rx: UnixStream,
    wake_tx: UnixStream,
}

impl Watchers {
    pub fn new() -> std::io::Result<Watchers> {
        let (wake_rx, wake_tx) = UnixStream::pair()?;
        wake_rx.set_nonblocking(true)?;
        Ok(Watchers {
            sets: HashMap::new(),
            queue: VecDeque::new(),
            loading: None,
            last_load: HashMap::new(),
            owners: HashMap::new(),
            wake_rx,
            wake_tx,
        })
    }

    /// Readable when a load finished.
    pub fn wake_fd(&self) -> BorrowedFd<'_> {
        self.wake_rx.as_fd()
    }

    /// Takes a seat for a watch of `owner` (`principal`'s): Ok(true) when its set is there,
    /// Ok(false) when it is being loaded (the client is answered by [`Watchers::finished`]).
    pub fn join(&mut self, owner: Caller, principal: u32) -> Result<bool, NoWatch> {
        let uid = owner.uid;
        // Root's set shows everything: who asks does not matter.
        let owner = match uid {
            0 => Caller {
                uid: 0,
                gid: 0,
                cap_permitted: 0,
            },
            _ => owner,
        };
        if principal != 0 {
            let other = self
                .sets
                .iter()
                .map(|(&u, s)| (u, s.principal, s.watches))
                .chain(self.pending().map(|(u, p)| (u, p, 1)))
                .find(|&(u, p, n)| p == principal && u != uid && n > 0);
            if let Some((u, _, _)) = other {
                return Err(NoWatch::OtherUid { principal, uid: u });
            }
            // The person's idle set of another uid makes room.
            self.sets
                .retain(|&u, s| u == uid || s.principal != principal);
        }
        if let Some(&o) = self.owners.get(&uid).filter(|&&o| o != owner) {
            let used = self.sets.get(&uid).is_some_and(|s| s.watches > 0)
                || self.pending().any(|(u, _)| u == uid);
            if used {
                return Err(NoWatch::OtherCredentials { uid, gid: o.gid });
            }
            // An idle set for other credentials: loaded again for these.
            self.sets.remove(&uid);
        }
        self.owners.insert(uid, owner);
        if let Some(s) = self.sets.get_mut(&uid) {
            s.watches += 1;
            s.idle_since = None;
            return Ok(true);
        }
        if self.pending().any(|(u, _)| u == uid) {
            return Ok(false);
        }
        let busy = self.sets.values().filter(|s| s.watches > 0).count() + self.pending().count();
        if busy >= MAX_SETS {
            return Err(NoWatch::Full(busy));
        }
        if self.sets.len() + self.pending().count() >= MAX_SETS {
            self.evict_oldest_idle();
        }
        self.queue.push_back((uid, principal));
        self.start_due();
        Ok(false)
    }

    /// A watch waiting for `uid`'s set takes its seat now that it is loaded.
    pub fn join_loaded(&mut self, uid: u32) {
        if let Some(s) = self.sets.get_mut(&uid) {
            s.watches += 1;
            s.idle_since = None;
        }
    }

    /// A watch of `uid` ended.
    pub fn leave(&mut self, uid: u32) {
        if let Some(s) = self.sets.get_mut(&uid) {
            s.watches = s.watches.saturating_sub(1);
            if s.watches == 0 {
                s.idle_since = Some(Instant::now());
            }
        }
    }

    /// uids loading or waiting to, with their principals.
    fn pending(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.loading
            .iter()
            .map(|(u, p, _)| (*u, *p))
            .chain(self.queue.iter().copied())
    }

    fn evict_oldest_idle(&mut self) {
        let oldest = self
            .sets
            .iter()
            .filter_map(|(&u, s)| s.idle_since.map(|t| (t, u)))
            .min();
        if let Some((_, u)) = oldest {
            self.sets.remove(&u);
        }
    }

    /// Starts the next load whose principal may load now (one at a time).
    fn start_due(&mut self) {
        if self.loading.is_some() {
            return;
        }
        let due = |p: &u32| {
            self.last_load
                .get(p)
                .is_none_or(|t| t.elapsed() >= LOAD_INTERVAL)
        };
        let Some(i) = self.queue.iter().position(|(_, p)| due(p)) else {
            return;
        };
        let Some((uid, principal)) = self.queue.remove(i) else {
            return;
        };
        self.last_load.insert(principal, Instant::now());
        let (tx, rx) = mpsc::channel();
        let mut wake = match self.wake_tx.try_clone() {
            Ok(w) => w,
            Err(e) => {
                let _ = tx.send((uid, Err(format!("a socket pair: {e}"))));
                self.loading = Some((uid, principal, rx));
                return;
            }
        };
        let owner = self.owners.get(&uid).copied().unwrap_or(Caller {
            uid,
            gid: u32::MAX,
            cap_permitted: 0,
        });
        std::thread::spawn(move || {
            // Below the agent's loop: the load may take a CPU, the loop must not wait.
            let _ = rustix::process::setpriority_process(None, 10);
            let _ = tx.send((uid, Watching::load(owner).map_err(|e| e.to_string())));
            let _ = wake.write_all(&[1]);
        });
        self.loading = Some((uid, principal, rx));
    }

    /// A load that finished: its uid, and its set or why it failed. Starts the next load.
    pub fn finished(&mut self) -> Option<(u32, Result<(), String>)> {
        let mut byte = [0u8; 16];
        let _ = self.wake_rx.read(&mut byte);
        let (uid, principal, rx) = self.loading.take()?;
        let done = match rx.try_recv() {
            Ok((_, r)) => r,
            Err(mpsc::TryRecvError::Empty) => {
                self.loading = Some((uid, principal, rx));
                return None;
            }
            Err(mpsc::TryRecvError::Disconnected) => Err("the loading thread ended".into()),
        };
        self.start_due();
        Some((
            uid,
            done.map(|w| {
                self.sets.insert(
                    uid,
                    Set {
                        w,
                        principal,
                        watches: 0,
                        idle_since: Some(Instant::now()),
                    },
                );
            }),
        ))
    }

    /// Housekeeping on every round: loads that became due start, sets idle too long go.
    pub fn tick(&mut self) {
        self.start_due();
        self.sets
            .retain(|_, s| s.idle_since.is_none_or(|t| t.elapsed() < KEEP_IDLE));
        let kept: Vec<u32> = self.pending().map(|(u, _)| u).collect();
        let sets = &self.sets;
        self.owners
            .retain(|u, _| sets.contains_key(u) || kept.contains(u));
    }

    /// What the welcome of a watch of `uid` tells: the set's figures.
    pub fn probes_of(&self, uid: u32) -> Option<&Probes> {
        self.sets.get(&uid).map(|s| &s.w.probes)
    }

    /// Sends each set's records to its watches (a non-root set's filtered exits, bare
    /// markers of other users' processes, to none), and each watch its counters when they
    /// changed. A set no watch uses is drained all the same.
    pub fn drain(&mut self, clients: &mut Registry) {
        for (&uid, s) in self.sets.iter_mut() {
            let filtered = s.w.uid.is_some();
            let end = s.w.ring.written();
            while let Some(item) = s.w.ring.next_record_before(end) {
                if filtered {
                    s.w.held.exit(&item);
                }
                if (filtered && !s.w.exited.passes(&item)) || s.watches == 0 {
                    continue;
                }
                for c in clients.iter_mut().filter(|c| seated(c, uid)) {
                    c.record(&item);
                }
            }
            let Ok(now) = s.w.probes.counters() else {
                continue;
            };
            for c in clients.iter_mut().filter(|c| seated(c, uid)) {
                tell_counters(c, now);
            }
        }
    }

    /// Offers a taskstats datagram to every set (see [`Watching::offer`]).
    pub fn offer(&mut self, datagram: &[u8], records: &[TaskstatsRecord]) {
        for s in self.sets.values_mut() {
            s.w.offer(datagram, records);
        }
    }

    /// Ends a routing pass: each set's datagrams that may go now go to its watches.
    pub fn deliver_taskstats(&mut self, clients: &mut Registry) {
        for (&uid, s) in self.sets.iter_mut() {
            s.w.held.end_pass(&mut s.w.ready);
            for d in s.w.ready.drain(..) {
                for c in clients.iter_mut().filter(|c| seated(c, uid)) {
                    c.taskstats(&d);
                }
            }
        }
    }
}

/// Whether `c` is a watch of `uid` whose set is ready.
fn seated(c: &Client, uid: u32) -> bool {
    c.seat.is_some_and(|s| s.uid == uid && s.baseline.is_some())
}

/// Tells watch `w` its set's counters since it joined, and the records the agent dropped
/// for it, when they changed since last told.
fn tell_counters(w: &mut Client, now: KernelCounters) {
    let Some(mut seat) = w.seat else { return };
    let Some(base) = seat.baseline else { return };
    let mut c = now.since(&base);
    c.agent_queue_full = w.dropped_records();
    if c != seat.last {
        seat.last = c;
        w.seat = Some(seat);
        w.counters(c);
    }
}
