//! Every process kept (`trace`): in the order first seen, indexed by key. The root is the
//! first process seen with the root's pid; inside a PID namespace the pids shown are the
//! namespace's, from the fork records (the keys stay the kernel's).

use std::{convert::Infallible, sync::Arc};

use spacetime_common::ExitEvent;

use super::{adopt::Adoptions, Process, Stats, Storage};
use crate::model::{
    key_index::KeyIndex,
    process::{Key, Names},
};
use rustc_hash::{FxHashMap, FxHashSet};

/// Every process and image a trace saw (a [`super::Store`] over it is `trace`'s tree).
#[derive(Debug, Default)]
pub struct Kept {
    pub(super) procs: Vec<Process>,
    pub(super) index: KeyIndex,
    /// Every tgid seen, and where its latest process is, for filtering other sources
    /// (taskstats) by process: once pids wrap every pid is a tgid seen, and only the start
    /// and end of its process tell a traced exit from another one on the machine.
    pub(super) tgids: FxHashMap<u32, u32>,
    root_pid: u32,
    root_ppid: u32,
    /// spacetime runs inside a PID namespace: the root's pid there.
    pub(super) root_ns_pid: Option<u32>,
    root: Option<usize>,
    /// Processes that predate an attach, by tgid, until a record names them.
    pub(super) adopted: Adoptions,
    /// Every distinct set of names an exec gave, once: a build runs the same program with the
    /// same arguments thousands of times (144 bytes of heap each, kept apart).
    names: FxHashSet<Arc<Names>>,
    /// [`Kept::settle`]d: `index`, `tgids` and `names` are gone.
    settled: bool,
}

impl Kept {
    /// A tgid known before any of its processes (adopted): in `tgids`, without a slot.
    pub(super) const NO_SLOT: u32 = u32::MAX;

    /// Rooted at the first process seen with `root_pid`, started by `root_ppid`.
    pub fn new(root_pid: u32, root_ppid: u32) -> Kept {
        Kept {
            root_pid,
            root_ppid,
            ..Kept::default()
        }
    }

    /// The process with this key, made when unknown.
    pub(super) fn entry(&mut self, key: Key) -> usize {
        if let Some(i) = self.indexed(&key) {
            return i;
        }
        if self.settled {
            if let Some(i) = self.procs.iter().position(|p| p.key == Some(key)) {
                return i;
            }
        }
        let i = self.procs.len();
        let is_root = self.root.is_none() && key.tgid == self.root_pid;
        if is_root {
            self.root = Some(i);
        }
        let pid = match self.root_ns_pid {
            None => key.tgid,
            Some(root) if is_root => root,
            // Until its fork record names it.
            Some(_) => 0,
        };
        self.procs.push(Process {
            key: Some(key).into(),
            pid,
            start_ns: key.start_ns,
            ppid: if is_root { self.root_ppid } else { 0 },
            threads: 1,
            ..Process::default()
        });
        let procs = &self.procs;
        self.index.insert(&key, i, |s| key_of(&procs[s as usize]));
        let slot = u32::try_from(i).expect("fewer than 2^32 processes");
        let latest = self.tgids.entry(key.tgid).or_insert(slot);
        // Records come in time order, but an adopted process may be named late.
        if *latest == Kept::NO_SLOT || self.procs[*latest as usize].start_ns <= key.start_ns {
            *latest = slot;
        }
        if let Some(a) = self.adopted.take(key) {
            a.fill(&mut self.procs[i]);
        }
        i
    }

    /// The one shared copy of these names. Only whole names are shared: an image whose argv
    /// is still streaming in changes its own.
    pub(super) fn intern(&mut self, names: Names) -> Arc<Names> {
        if let Some(n) = self.names.get(&names) {
            return Arc::clone(n);
        }
        let n = Arc::new(names);
        if !self.settled {
            self.names.insert(Arc::clone(&n));
        }
        n
    }

    /// Where the process with this key is, while the index lives (until settled).
    pub(super) fn indexed(&self, key: &Key) -> Option<usize> {
        let procs = &self.procs;
        self.index.get(key, |s| key_of(&procs[s as usize]))
    }

    /// spacetime runs inside a PID namespace, where the root is `root_ns_pid` (the root pid
    /// given to [`Kept::new`] is the kernel's): pids shown are the namespace's, from the fork
    /// records.
    pub fn set_namespace_root(&mut self, root_ns_pid: u32) {
        self.root_ns_pid = Some(root_ns_pid);
    }

    /// Every process kept, in the order first seen.
    pub fn processes(&self) -> &[Process] {
        &self.procs
    }

    pub fn root(&self) -> Option<&Process> {
        self.root.map(|i| &self.procs[i])
    }

    /// Where the process is in [`processes`](Kept::processes).
    pub fn index_of(&self, key: &Key) -> Option<usize> {
        match self.settled {
            false => self.indexed(key),
            true => self.procs.iter().position(|p| p.key == Some(*key)),
        }
    }

    pub fn get(&self, key: &Key) -> Option<&Process> {
        self.index_of(key).map(|i| &self.procs[i])
    }

    /// The run ended and no record comes any more: what taking records needs goes before the
    /// report is built (the index by key and the tgids, 37 bytes a process; the names' set; the
    /// list's room to grow). Looking a process up still works, by a scan.
    pub fn settle(&mut self) {
        let k = self;
        k.settled = true;
        k.index = KeyIndex::default();
        k.tgids = FxHashMap::default();
        k.names = FxHashSet::default();
        k.procs.shrink_to_fit();
    }

    /// The latest process seen with this tgid (the one started last), while records come
    /// (until settled).
    pub fn latest_with_tgid(&self, tgid: u32) -> Option<&Process> {
        let &i = self.tgids.get(&tgid)?;
        self.procs.get(i as usize)
    }

    /// Processes that have not exited, among those the kernel tracks (an untracked one's
    /// exit never comes: an attached run waiting for it would never end).
    pub fn live(&self) -> usize {
        self.procs
            .iter()
            .filter(|p| p.end_ns.is_none() && !p.untracked())
            .count()
    }

    /// Whether any process with this tgid is (or was) in the tree; the root's pid counts from
    /// the start.
    pub fn knows_tgid(&self, tgid: u32) -> bool {
        let k = self;
        tgid == k.root_pid
            || match k.settled {
                false => k.tgids.contains_key(&tgid),
                true => k
                    .procs
                    .iter()
                    .any(|p| p.key.get().is_some_and(|k| k.tgid == tgid)),
            }
    }
}

/// A kept process's key (every process the index files has one).
fn key_of(p: &Process) -> Key {
    p.key.get().unwrap_or(Key {
        tgid: 0,
        start_ns: 0,
    })
}

impl Storage for Kept {
    type Held = Process;
    /// Nothing leaves: every process stays in the tree.
    type Ended = Infallible;

    fn find(&mut self, key: Key, _create: bool, _stats: &mut Stats) -> Option<&mut Process> {
        let i = self.entry(key);
        Some(&mut self.procs[i])
    }

    fn knows(&mut self, key: Key, _stats: &mut Stats) -> bool {
        self.index_of(&key).is_some()
    }

    fn has_room(&self, _tgid: u32) -> bool {
        true
    }

    fn counts_children(&self) -> bool {
        false
    }

    fn forked(&mut self, tgid: u32) {
        self.adopted.forget(tgid);
    }

    fn namespace_pids(&self) -> bool {
        self.root_ns_pid.is_some()
    }

    /// Most processes have one or two images: without this the first insert reserves four
    /// (864 bytes, the largest allocation per process in a 100k-process trace).
    fn child_images(&self) -> usize {
        1
    }

    /// Whole names are shared (see [`Kept::intern`]).
    fn exec_names(
        &mut self,
        names: Names,
        whole: bool,
        _args_len: usize,
        _stats: &mut Stats,
    ) -> Arc<Names> {
        match whole {
            true => self.intern(names),
            false => Arc::new(names),
        }
    }

    fn keeps_images(&self) -> bool {
        true
    }

    fn publishes_partial_argv(&self) -> bool {
        true
    }

    fn unknown_exit(&mut self, _x: &ExitEvent, _stats: &mut Stats) -> Option<Infallible> {
        None
    }

    fn ended(&mut self, _tgid: u32, _stats: &mut Stats) -> Option<Infallible> {
        None
    }
}
