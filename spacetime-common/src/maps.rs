//! What the kernel side's maps hold between events: the traced processes, each session's
//! counts and limits, the followed mms and the tree-wide RSS, and the indexes of the program
//! and switch arrays.

/// A traced process (`TRACKED` values, keyed by tgid).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Tracked {
    /// The mm whose RSS is followed (0: none yet).
    pub mm: u64,
    /// Its session: a fork copies the parent's to the child.
    pub session: u32,
    pub _pad: u32,
    /// 0 while the process runs. Once its group exit is seen, [`Tracked::ended_mark`] of its
    /// leader's start time: the entry no longer traces anything and waits for the process's
    /// final CPU figures (the kernel's reap.rs); whoever sends its release record removes it.
    /// One entry from fork to release: the exit marks it in place instead of moving it to a
    /// second map.
    pub ended: u64,
}

impl Tracked {
    /// What [`Tracked::ended`] holds for a process whose leader started at `leader_start_ns`:
    /// never 0, which means running.
    pub const fn ended_mark(leader_start_ns: u64) -> u64 {
        if leader_start_ns == 0 {
            1
        } else {
            leader_start_ns
        }
    }
}

/// A process whose group exit was seen, waiting for its final CPU figures (`EXITED` values,
/// keyed by tgid: system mode's, session 0; a trace's wait in their `TRACKED` entries, see
/// [`Tracked::ended`]). Whoever sends its release record removes it: the removal that succeeds
/// is the one that sends.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Reaping {
    /// Start time of the group leader: with the tgid, the process's identity.
    pub leader_start_ns: u64,
    pub session: u32,
    pub _pad: u32,
}

/// A session's live tracked processes (`SESSIONS`), kept by the kernel side with atomics. The
/// session's count is `roots` ([`SessionLimit`]) plus `forked`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionCount {
    /// Processes its forks tracked minus its tracked processes that exited (roots included,
    /// so it goes below zero as roots exit).
    pub forked: i64,
    /// Its processes whose exit was seen and whose release record has not gone (entries with
    /// [`Tracked::ended`] set), as the kernel adds and removes them: 0 tells userspace that
    /// no walk of `TRACKED` would find one.
    pub ended: i64,
}

/// A session's limit (`SESSION_LIMITS`), written by userspace only (the kernel never writes
/// it, so a whole-value update cannot lose a kernel-side change).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionLimit {
    /// Most processes tracked at once; 0: no limit.
    pub max_processes: u32,
    /// Processes userspace tracked into the session (roots, processes attached to).
    pub roots: u32,
    /// The uid of the user the session traces for (an agent's client that is not root): a
    /// traced process whose exec leaves that user's credentials (setuid, setgid, file
    /// capabilities, not dumpable) leaves the session ([`crate::flags::EXEC_LEFT`]). 0: no check
    /// (root may trace anything; a trace's own programs are root's).
    pub owner_uid: u32,
    /// Its gid, checked likewise.
    pub owner_gid: u32,
    /// The owner's permitted capabilities: a process may hold these and stay.
    pub owner_caps: u64,
    /// Non-zero: the session asks for no memory over time (a `time -f` format), so the kernel
    /// follows none of its processes' mms; their peaks are the kernel's own at each image's
    /// end. 0 (the default, and a trace's own programs): followed.
    pub no_memory: u32,
    pub _pad: u32,
}

/// Slots of the kernel's `TAILS` program array: programs reached by tail calls only, which
/// userspace loads and puts there before attaching anything.
pub mod tail {
    /// `exec_args`: the argv records after an exec record's first.
    pub const EXEC_ARGS: u32 = 0;
    pub const COUNT: u32 = 1;
}

/// Slots of the kernel's `SWITCHES` array: settings userspace changes while loaded.
pub mod switch {
    /// Non-zero: forks and execs start following no new mm (`rss_stat` is detached, so a
    /// followed mm's figures would go stale). 0 at load.
    pub const RSS_PAUSED: u32 = 0;
    pub const COUNT: u32 = 1;
}

/// The mm of a traced process, as the kernel side follows it (`MM_STATE` values).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MmState {
    pub tgid: u32,
    /// The session of the process: its RSS points and the tree-wide sum it adds to.
    pub session: u32,
    pub leader_start_ns: u64,
    /// Exact file, anon and shmem pages.
    pub rss_pages: [i64; 3],
    pub total_pages: i64,
    pub last_sent_ns: u64,
    /// The largest `total_pages` seen, and since when this mm is followed.
    pub peak_pages: i64,
    pub since_ns: u64,
    /// A point the rate limit held back that must not be lost (a new maximum of this mm or of
    /// the tree): when (0: none), the mm's pages and the tree's then. Sent when growth stops,
    /// before any later point of this mm, and when following ends; userspace reads it for
    /// processes still running when the trace ends.
    pub held_ns: u64,
    pub held_pages: i64,
    pub held_tree_pages: i64,
    pub held_anon_pages: i64,
    /// The value of the last point sent, and when `total_pages` last changed (with the tree's
    /// sum then): the last value is sent when following ends, if it was held back.
    pub sent_pages: i64,
    pub last_ns: u64,
    pub last_tree_pages: i64,
}

/// The tree-wide RSS (`TREE_RSS`, one per session): the sum over a session's traced mms, its peak and when it happened.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TreeRss {
    pub rss_pages: i64,
    pub peak_pages: i64,
    pub peak_ts_ns: u64,
    /// The process whose change made the peak.
    pub peak_tgid: u32,
    pub _pad: u32,
}
