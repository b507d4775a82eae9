//! Which thread group a taskstats record is about. From 5.19 (struct version 12) a record
//! names it (`ac_tgid`); before, a thread's record names only its own pid, and only the
//! thread's start (its BPF fork record, always read before its exit record is sent) says
//! whose it is. Threads are remembered until their record comes, and not at all once a
//! record has named its group.

use rustc_hash::FxHashMap;

use super::{RecordKind, TaskstatsRecord};

#[derive(Default)]
pub struct ThreadGroups {
    /// Each traced thread's tgid, by tid, until its record comes.
    threads: FxHashMap<u32, u32>,
    /// A record named its thread group: the kernel says it in every record.
    named: bool,
}

impl ThreadGroups {
    /// Thread `tid` of `tgid` started.
    pub fn started(&mut self, tid: u32, tgid: u32) {
        if !self.named {
            self.threads.insert(tid, tgid);
        }
    }

    /// The thread group `r` is about: a group record's id, the group the record names, the
    /// tgid its thread started in, or its pid (a process's main thread).
    pub fn of(&mut self, r: &TaskstatsRecord) -> u32 {
        match (r.kind, r.ac_tgid) {
            (RecordKind::Tgid, _) => r.id,
            (_, Some(t)) if t != 0 => {
                if !self.named {
                    self.named = true;
                    self.threads = FxHashMap::default();
                }
                t
            }
            _ => self.threads.remove(&r.ac_pid).unwrap_or(r.ac_pid),
        }
    }

    /// Keeps only the threads whose group `keep` says is still of interest.
    pub fn retain(&mut self, keep: impl Fn(u32) -> bool) {
        self.threads.retain(|_, tgid| keep(*tgid));
    }
}
