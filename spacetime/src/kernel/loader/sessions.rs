//! Several traced trees in one loaded set of programs. Each traced process carries its
//! session in `TRACKED` (a fork copies the parent's), every record says whose it is, and each
//! session has its own tree-wide RSS, loss counters and process limit. Session 0 is the
//! standalone one: a `trace`, `bench` or `watch` that loaded its own programs uses it alone.

use aya::{
    maps::{Array, HashMap, MapData, MapError, PerCpuArray, PerCpuValues},
    Ebpf, Pod,
};
use spacetime_common::{
    stat, MmState, SessionCount, SessionLimit, SessionStats, Tracked, TreeRss, MAX_SESSIONS,
};

use super::{maps::Maps, possible_cpus, KernelCounters, LoadError};

/// A session of the loaded programs: 0 standalone, `1..MAX_SESSIONS` handed out by an agent.
pub type SessionId = u16;

/// Passes at most this many times over `TRACKED` when a session is forgotten: a fork racing
/// with one pass adds a child the next pass removes.
const UNTRACK_PASSES: usize = 16;

/// The maps that say which process is whose, and each session's figures, limits and
/// counters, taken out of the loaded object: no other part of userspace reads or writes them.
pub(super) struct Sessions {
    /// Also cleared between runs (runs.rs).
    pub(super) maps: Maps,
    /// Each slot of `SESSION_LIMITS` as userspace last wrote it (the kernel only reads the
    /// map; None: not read yet). A change is one write, and one that changes nothing none
    /// (each was a read and a write): an agent's map calls on a traced /bin/true, 33 → 24.
    limits: [Option<SessionLimit>; MAX_SESSIONS as usize],
}

pub(super) fn map_err(name: &'static str) -> impl Fn(MapError) -> LoadError {
    move |source| LoadError::Map { name, source }
}

fn hash_mut<'a, K: Pod, V: Pod>(
    ebpf: &'a mut Maps,
    name: &'static str,
) -> Result<HashMap<&'a mut MapData, K, V>, LoadError> {
    let map = ebpf.map_mut(name).ok_or(LoadError::MissingMap(name))?;
    HashMap::try_from(map).map_err(map_err(name))
}

fn hash<'a, K: Pod, V: Pod>(
    ebpf: &'a Maps,
    name: &'static str,
) -> Result<HashMap<&'a MapData, K, V>, LoadError> {
    let map = ebpf.map(name).ok_or(LoadError::MissingMap(name))?;
    HashMap::try_from(map).map_err(map_err(name))
}

pub(super) fn array_mut<'a, V: Pod>(
    ebpf: &'a mut Maps,
    name: &'static str,
) -> Result<Array<&'a mut MapData, V>, LoadError> {
    let map = ebpf.map_mut(name).ok_or(LoadError::MissingMap(name))?;
    Array::try_from(map).map_err(map_err(name))
}

fn array<'a, V: Pod>(
    ebpf: &'a Maps,
    name: &'static str,
) -> Result<Array<&'a MapData, V>, LoadError> {
    let map = ebpf.map(name).ok_or(LoadError::MissingMap(name))?;
    Array::try_from(map).map_err(map_err(name))
}

/// The session as a map index, if it is one.
fn index(session: SessionId) -> Result<u32, LoadError> {
    if u32::from(session) < MAX_SESSIONS {
        Ok(u32::from(session))
    } else {
        Err(LoadError::BadSession(session))
    }
}

fn is_enoent(e: &MapError) -> bool {
    matches!(e, MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::ENOENT))
        || matches!(e, MapError::KeyNotFound)
}

fn is_eexist(e: &MapError) -> bool {
    matches!(e, MapError::SyscallError(s) if s.io_error.raw_os_error() == Some(libc::EEXIST))
}

impl Sessions {
    /// Takes the session maps out of the loaded object.
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<Sessions, LoadError> {
        let maps = Maps::take(
            ebpf,
            &[
                "TRACKED",
                "MM_STATE",
                "SESSIONS",
                "SESSION_LIMITS",
                "TREE_RSS",
                "STATS",
            ],
        )?;
        Ok(Sessions {
            maps,
            limits: [None; MAX_SESSIONS as usize],
        })
    }

    /// Starts tracing the process `tgid` and everything it forks from now on in `session`.
    /// It counts against the session's process limit. A process already traced in the same
    /// session (a tracked parent forked it meanwhile) stays as it is; in another session it
    /// is an error.
    pub(super) fn track_in(&mut self, tgid: u32, session: SessionId) -> Result<(), LoadError> {
        const NAME: &str = "TRACKED";
        let slot = index(session)?;
        let mut tracked = hash_mut::<u32, Tracked>(&mut self.maps, NAME)?;
        let t = Tracked {
            mm: 0,
            session: slot,
            _pad: 0,
            ended: 0,
        };
        // BPF_NOEXIST: an entry a fork made has the mm the kernel already follows.
        match tracked.insert(tgid, t, 1) {
            Ok(()) => {}
            Err(e) if is_eexist(&e) => {
                let held = tracked.get(&tgid, 0).map_err(map_err(NAME))?;
                return match held.session == slot {
                    true => Ok(()),
                    false => Err(LoadError::TrackedElsewhere {
                        tgid,
                        session: held.session as SessionId,
                    }),
                };
            }
            Err(source) => return Err(LoadError::Map { name: NAME, source }),
        }
        self.update_limit(session, |l| l.roots = l.roots.saturating_add(1))
    }

    /// Stops tracing `tgid` (a process attached to that was gone before it was proven
    /// tracked: its pid must not make a later holder traced). Absent is not an error.
    pub(super) fn untrack(&mut self, tgid: u32) -> Result<(), LoadError> {
        const NAME: &str = "TRACKED";
        let mut tracked = hash_mut::<u32, Tracked>(&mut self.maps, NAME)?;
        let session = match tracked.get(&tgid, 0) {
            Ok(t) if t.ended == 0 => t.session as SessionId,
            // Its exit was seen and gave its slot back: the entry traces nothing and goes
            // with the process's release record.
            Ok(_) => return Ok(()),
            Err(e) if is_enoent(&e) => return Ok(()),
            Err(source) => return Err(LoadError::Map { name: NAME, source }),
        };
        match tracked.remove(&tgid) {
            Ok(()) => self.update_limit(session, |l| l.roots = l.roots.saturating_sub(1)),
            // Its exit removed it meanwhile and gave its slot back.
            Err(e) if is_enoent(&e) => Ok(()),
            Err(source) => Err(LoadError::Map { name: NAME, source }),
        }
    }

    /// Stops tracing every process of `session`: its entries in `TRACKED` first (repeated
    /// while forks add children), the entries of its processes waiting for their release
    /// record with them, then its followed mms. Processes still running go on untraced.
    /// Returns how many processes were still tracked. Other sessions are untouched.
    pub(super) fn untrack_session(&mut self, session: SessionId) -> Result<usize, LoadError> {
        let slot = index(session)?;
        // One read of the session's counts tells both: none running, none awaiting release.
        let count = self.count_of(slot)?;
        let removed = match self.live(slot, &count)? == 0 && count.ended == 0 {
            true => 0,
            false => self.remove_tracked(slot)?,
        };
        self.zero_count(slot)?;
        Ok(removed)
    }

    /// Removes the session in `slot`'s entries from `TRACKED` (repeated while forks add
    /// children), then its followed mms; returns how many of them were processes still
    /// running (not ended, see [`Tracked::ended`]).
    fn remove_tracked(&mut self, slot: u32) -> Result<usize, LoadError> {
        let mut removed = 0;
        for _ in 0..UNTRACK_PASSES {
            let (n, running) =
                remove_where::<u32, Tracked>(&mut self.maps, "TRACKED", |t| t.session == slot)
                    .map(|gone| (gone.len(), gone.iter().filter(|t| t.ended == 0).count()))?;
            removed += running;
            if n == 0 {
                break;
            }
        }
        remove_where::<u64, MmState>(&mut self.maps, "MM_STATE", |m| m.session == slot)?;
        Ok(removed)
    }

    /// How many of the processes in `slot` wait for their release record, as the kernel
    /// counts them (`SessionCount::ended`; not 0 means a walk may find some).
    fn ended_of(&self, slot: u32) -> Result<i64, LoadError> {
        Ok(self.count_of(slot)?.ended)
    }

    /// What the kernel counts of the session in `slot` (`SESSIONS`).
    fn count_of(&self, slot: u32) -> Result<SessionCount, LoadError> {
        array::<SessionCount>(&self.maps, "SESSIONS")?
            .get(&slot, 0)
            .map_err(map_err("SESSIONS"))
    }

    /// The processes of `session` whose exit the kernel saw and whose final CPU record has
    /// not gone yet (their ended `TRACKED` entries): tgid and leader start, as
    /// [`Tracked::ended_mark`] makes it. No walk when the kernel counts none.
    pub(super) fn awaiting_release(
        &self,
        session: SessionId,
    ) -> Result<Vec<(u32, u64)>, LoadError> {
        let slot = index(session)?;
        if self.ended_of(slot)? == 0 {
            return Ok(Vec::new());
        }
        let tracked = hash::<u32, Tracked>(&self.maps, "TRACKED")?;
        Ok(tracked
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, t)| t.session == slot && t.ended != 0)
            .map(|(tgid, t)| (tgid, t.ended))
            .collect())
    }

    /// Whether the process (`tgid`, its leader started at `start_ns`) still waits for its
    /// final CPU record (false when that cannot be read).
    pub(super) fn awaits_release(&self, tgid: u32, start_ns: u64) -> bool {
        hash::<u32, Tracked>(&self.maps, "TRACKED")
            .ok()
            .and_then(|m| m.get(&tgid, 0).ok())
            .is_some_and(|t| t.ended == Tracked::ended_mark(start_ns))
    }

    /// Sets `session`'s tree-wide RSS (sum, peak, its time), live process count and loss
    /// counters back to zero, before a run. Call it with nothing of the session tracked
    /// (after [`Sessions::untrack_session`]). Its process limit stays.
    pub(super) fn reset_session(&mut self, session: SessionId) -> Result<(), LoadError> {
        let slot = index(session)?;
        array_mut::<TreeRss>(&mut self.maps, "TREE_RSS")?
            .set(slot, TreeRss::default(), 0)
            .map_err(map_err("TREE_RSS"))?;
        self.zero_count(slot)?;
        const STATS: &str = "STATS";
        let cpus = possible_cpus()? as usize;
        let map = self
            .maps
            .map_mut(STATS)
            .ok_or(LoadError::MissingMap(STATS))?;
        let mut stats: PerCpuArray<_, SessionStats> =
            PerCpuArray::try_from(map).map_err(map_err(STATS))?;
        let zeros =
            PerCpuValues::try_from(vec![SessionStats::default(); cpus]).map_err(|source| {
                LoadError::Io {
                    path: "/sys/devices/system/cpu/possible",
                    source,
                }
            })?;
        stats.set(slot, zeros, 0).map_err(map_err(STATS))?;
        Ok(())
    }

    /// The session's live count back to nothing tracked (its processes were just forgotten).
    pub(super) fn zero_count(&mut self, slot: u32) -> Result<(), LoadError> {
        array_mut::<SessionCount>(&mut self.maps, "SESSIONS")?
            .set(slot, SessionCount::default(), 0)
            .map_err(map_err("SESSIONS"))?;
        self.update_limit(slot as SessionId, |l| l.roots = 0)
    }

    /// Most processes `session` may have traced at once (0: no limit). A fork beyond it is
    /// reported but its child is not traced (`FORK_UNTRACKED`, counted as `session_limit`).
    pub(super) fn set_session_limit(
        &mut self,
        session: SessionId,
        max_processes: u32,
    ) -> Result<(), LoadError> {
        self.update_limit(session, |l| l.max_processes = max_processes)
    }

    /// Whether the kernel follows the mms of `session`'s processes (memory over time): an
    /// agent's client with a `time -f` format asks for none, and its processes then cost
    /// `rss_stat` a lookup that misses.
    pub(super) fn set_session_memory(
        &mut self,
        session: SessionId,
        follow: bool,
    ) -> Result<(), LoadError> {
        self.update_limit(session, |l| l.no_memory = u32::from(!follow))
    }

    /// Whose session `session` is: a user who is not root (`Some`) has every exec of its
    /// processes checked against these credentials in the kernel, and a process that takes
    /// others leaves the session (`EXEC_LEFT`); `None`: no check.
    pub(super) fn set_session_owner(
        &mut self,
        session: SessionId,
        owner: Option<crate::kernel::creds::Caller>,
    ) -> Result<(), LoadError> {
        self.update_limit(session, |l| match owner {
            Some(c) if c.uid != 0 => {
                l.owner_uid = c.uid;
                l.owner_gid = c.gid;
                l.owner_caps = c.cap_permitted;
            }
            _ => {
                l.owner_uid = 0;
                l.owner_gid = 0;
                l.owner_caps = 0;
            }
        })
    }

    /// Whether `tgid` is tracked now, and in which session (an entry whose exit was seen
    /// tracks nothing: no).
    pub(super) fn tracked_in(&self, tgid: u32) -> Result<Option<SessionId>, LoadError> {
        const NAME: &str = "TRACKED";
        match hash::<u32, Tracked>(&self.maps, NAME)?.get(&tgid, 0) {
            Ok(t) if t.ended == 0 => Ok(Some(t.session as SessionId)),
            Ok(_) => Ok(None),
            Err(e) if is_enoent(&e) => Ok(None),
            Err(source) => Err(LoadError::Map { name: NAME, source }),
        }
    }

    /// Changes `session`'s entry of `SESSION_LIMITS`, which only userspace writes (so the
    /// whole-value write loses no kernel change).
    fn update_limit(
        &mut self,
        session: SessionId,
        change: impl FnOnce(&mut SessionLimit),
    ) -> Result<(), LoadError> {
        const NAME: &str = "SESSION_LIMITS";
        let slot = index(session)?;
        let was = self.limit(slot)?;
        let mut l = was;
        change(&mut l);
        if l == was {
            return Ok(());
        }
        // Forgotten until written: a failed write leaves the map's value unknown.
        self.limits[slot as usize] = None;
        array_mut::<SessionLimit>(&mut self.maps, NAME)?
            .set(slot, l, 0)
            .map_err(map_err(NAME))?;
        self.limits[slot as usize] = Some(l);
        Ok(())
    }

    /// Slot `slot` of `SESSION_LIMITS`: as last written, else read from the map.
    fn limit(&mut self, slot: u32) -> Result<SessionLimit, LoadError> {
        const NAME: &str = "SESSION_LIMITS";
        if let Some(l) = self.limits[slot as usize] {
            return Ok(l);
        }
        let l = array::<SessionLimit>(&self.maps, NAME)?
            .get(&slot, 0)
            .map_err(map_err(NAME))?;
        self.limits[slot as usize] = Some(l);
        Ok(l)
    }

    /// Whether every process `session` traced has passed its group exit, so that neither
    /// `TRACKED` nor `MM_STATE` holds anything of it: its live count is given back there
    /// (exit.rs, `claim_group_exit`), after rss_exit, attached before the exit record's
    /// program, stopped following the mm; a process whose exit no program saw keeps the
    /// count above zero. A walk of either map visits every bucket (65 536 each, 0.1-0.2 ms)
    /// whatever the session holds.
    pub(super) fn holds_nothing(&self, session: SessionId) -> Result<bool, LoadError> {
        Ok(self.live_processes_of(session)? == 0)
    }

    /// Processes `session` has traced now, as its limit counts them.
    pub(super) fn live_processes_of(&self, session: SessionId) -> Result<i64, LoadError> {
        let slot = index(session)?;
        self.live(slot, &self.count_of(slot)?)
    }

    /// The processes the session in `slot` has traced now, from its `count`: those forked
    /// in the kernel and the roots userspace tracked.
    fn live(&self, slot: u32, count: &SessionCount) -> Result<i64, LoadError> {
        let limit = match self.limits[slot as usize] {
            Some(l) => l,
            None => array::<SessionLimit>(&self.maps, "SESSION_LIMITS")?
                .get(&slot, 0)
                .map_err(map_err("SESSION_LIMITS"))?,
        };
        Ok(count.forked + i64::from(limit.roots))
    }

    /// `session`'s tree-wide RSS as the kernel followed it: current sum, peak and when.
    pub(super) fn tree_rss_of(&self, session: SessionId) -> Result<TreeRss, LoadError> {
        array::<TreeRss>(&self.maps, "TREE_RSS")?
            .get(&index(session)?, 0)
            .map_err(map_err("TREE_RSS"))
    }

    /// The mms the kernel still follows for `session` (its processes running now).
    pub(super) fn followed_mms_of(&self, session: SessionId) -> Result<Vec<MmState>, LoadError> {
        if self.holds_nothing(session)? {
            return Ok(Vec::new());
        }
        let slot = u32::from(session);
        let states = hash::<u64, MmState>(&self.maps, "MM_STATE")?;
        // An entry removed while the walk runs is skipped, not an error.
        Ok(states
            .iter()
            .filter_map(Result::ok)
            .map(|(_, v)| v)
            .filter(|v| v.session == slot)
            .collect())
    }

    /// Loss and failure counters of every session together, and the programs' recursion
    /// misses.
    pub(super) fn counters(
        &self,
        recursion_misses: impl FnOnce() -> u64,
    ) -> Result<KernelCounters, LoadError> {
        let mut sum = KernelCounters {
            recursion_misses: recursion_misses(),
            ..KernelCounters::default()
        };
        let stats = self.stats_map()?;
        for s in 0..MAX_SESSIONS {
            let c = read_counters(&stats, s)?;
            sum.ringbuf_lost += c.ringbuf_lost;
            sum.track_full += c.track_full;
            sum.session_limit += c.session_limit;
            sum.read_failures += c.read_failures;
            sum.filtered += c.filtered;
            sum.reap_full += c.reap_full;
            sum.stale_cleared += c.stale_cleared;
        }
        Ok(sum)
    }

    /// `session`'s own loss and failure counters. Loss that belongs to no session (a kernel
    /// read with no process to charge, a program run the kernel skipped) is session 0's.
    pub(super) fn counters_of(
        &self,
        session: SessionId,
        recursion_misses: impl FnOnce() -> u64,
    ) -> Result<KernelCounters, LoadError> {
        let mut c = read_counters(&self.stats_map()?, index(session)?)?;
        if session == 0 {
            c.recursion_misses = recursion_misses();
        }
        Ok(c)
    }

    fn stats_map(&self) -> Result<PerCpuArray<&MapData, SessionStats>, LoadError> {
        const NAME: &str = "STATS";
        let map = self.maps.map(NAME).ok_or(LoadError::MissingMap(NAME))?;
        PerCpuArray::try_from(map).map_err(map_err(NAME))
    }
}

/// One session's counters, each summed over the CPUs.
fn read_counters(
    stats: &PerCpuArray<&MapData, SessionStats>,
    session: u32,
) -> Result<KernelCounters, LoadError> {
    let per_cpu = stats.get(&session, 0).map_err(map_err("STATS"))?;
    let sum = |i: u32| -> u64 { per_cpu.iter().map(|s| s.counts[i as usize]).sum() };
    Ok(KernelCounters {
        ringbuf_lost: sum(stat::RINGBUF_LOST),
        track_full: sum(stat::TRACK_FULL),
        session_limit: sum(stat::SESSION_LIMIT),
        read_failures: sum(stat::READ_FAIL),
        filtered: sum(stat::FILTERED),
        reap_full: sum(stat::REAP_FULL),
        stale_cleared: sum(stat::STALE_CLEARED),
        recursion_misses: 0,
        agent_queue_full: 0,
        agent_gone: 0,
    })
}

/// Removes the entries of hash map `name` whose value `matches`; returns how many. An entry
/// the kernel removes meanwhile (its process exited) is no error.
fn remove_where<K: Pod, V: Pod>(
    ebpf: &mut Maps,
    name: &'static str,
    matches: impl Fn(&V) -> bool,
) -> Result<Vec<V>, LoadError> {
    let mut m = hash_mut::<K, V>(ebpf, name)?;
    let found: Vec<(K, V)> = m
        .iter()
        .filter_map(Result::ok)
        .filter(|(_, v)| matches(v))
        .collect();
    // What this removal took (an entry the kernel removed first is not counted).
    Ok(found
        .into_iter()
        .filter(|(k, _)| m.remove(k).is_ok())
        .map(|(_, v)| v)
        .collect())
}
