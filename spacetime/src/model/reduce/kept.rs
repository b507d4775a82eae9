//! Every process kept (`trace`): in the order first seen, indexed by key. The root is the
//! first process seen with the root's pid; inside a PID namespace the pids shown are the
//! namespace's, from the fork records (the keys stay the kernel's).

use std::sync::Arc;

use super::{adopt::Adoptions, Process, Store};
use crate::model::{
    key_index::KeyIndex,
    process::{Key, Names},
};
use rustc_hash::FxHashSet;

#[derive(Debug, Default)]
pub(super) struct Kept {
    pub(super) procs: Vec<Process>,
    pub(super) index: KeyIndex,
    /// Every tgid seen, for filtering other sources (taskstats) by process.
    pub(super) tgids: FxHashSet<u32>,
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
    /// [`Store::settle`]d: `index`, `tgids` and `names` are gone.
    settled: bool,
}

impl Kept {
    pub(super) fn new(root_pid: u32, root_ppid: u32) -> Kept {
        Kept {
            root_pid,
            root_ppid,
            ..Kept::default()
        }
    }

    /// The process with this key, made when unknown.
    pub(super) fn entry(&mut self, key: Key) -> usize {
        if let Some(i) = self.index_of(&key) {
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
            key: Some(key),
            pid,
            start_ns: key.start_ns,
            ppid: if is_root { self.root_ppid } else { 0 },
            threads: 1,
            is_root,
            ..Process::default()
        });
        let procs = &self.procs;
        self.index.insert(&key, i, |s| key_of(&procs[s as usize]));
        self.tgids.insert(key.tgid);
        if let Some(a) = self.adopted.take(key) {
            a.fill(&mut self.procs[i]);
        }
        i
    }
}

impl Kept {
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
}

/// A kept process's key (every process the index files has one).
fn key_of(p: &Process) -> Key {
    p.key.unwrap_or(Key {
        tgid: 0,
        start_ns: 0,
    })
}

impl Kept {
    /// Where the process with this key is, while the index lives (until settled).
    pub(super) fn index_of(&self, key: &Key) -> Option<usize> {
        let procs = &self.procs;
        self.index.get(key, |s| key_of(&procs[s as usize]))
    }
}

impl Store {
    /// spacetime runs inside a PID namespace, where the root is `root_ns_pid` (the root pid
    /// given to [`Store::keep_all`] is the kernel's): pids shown are the namespace's, from the
    /// fork records.
    pub fn in_namespace(mut self, root_ns_pid: u32) -> Store {
        self.kept.root_ns_pid = Some(root_ns_pid);
        self
    }

    /// Every process kept, in the order first seen (none with a live set).
    pub fn processes(&self) -> &[Process] {
        &self.kept.procs
    }

    pub fn root(&self) -> Option<&Process> {
        self.kept.root.map(|i| &self.kept.procs[i])
    }

    /// Where the process is in [`processes`](Store::processes).
    pub fn index_of(&self, key: &Key) -> Option<usize> {
        match self.kept.settled {
            false => self.kept.index_of(key),
            true => self.kept.procs.iter().position(|p| p.key == Some(*key)),
        }
    }

    pub fn get(&self, key: &Key) -> Option<&Process> {
        self.index_of(key).map(|i| &self.kept.procs[i])
    }

    /// The run ended and no record comes any more: what taking records needs goes before the
    /// report is built (the index by key and the tgids, 37 bytes a process; the names' set; the
    /// list's room to grow). Looking a process up still works, by a scan.
    pub fn settle(&mut self) {
        let k = &mut self.kept;
        k.settled = true;
        k.index = KeyIndex::default();
        k.tgids = FxHashSet::default();
        k.names = FxHashSet::default();
        k.procs.shrink_to_fit();
    }

    /// Processes that have not exited, among those the kernel tracks (an untracked one's
    /// exit never comes: an attached run waiting for it would never end).
    pub fn live(&self) -> usize {
        match self.live.as_deref() {
            Some(l) => l.len(),
            None => self
                .kept
                .procs
                .iter()
                .filter(|p| p.end_ns.is_none() && !p.untracked)
                .count(),
        }
    }

    /// Whether any process with this tgid is (or was) in the tree; the root's pid counts from
    /// the start.
    pub fn knows_tgid(&self, tgid: u32) -> bool {
        let k = &self.kept;
        tgid == k.root_pid
            || match k.settled {
                false => k.tgids.contains(&tgid),
                true => k
                    .procs
                    .iter()
                    .any(|p| p.key.is_some_and(|k| k.tgid == tgid)),
            }
    }
}
