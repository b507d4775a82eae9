//! `--events exec`: a line per program as it starts, written once its argv has arrived (the
//! continuation records of an exec follow it on the ring buffer; a process that ends first
//! gets its exec line with what arrived, before its exit line).

use std::sync::Arc;

use super::watcher::Watch;
use crate::model::identity::Identity;
use crate::model::table::{Ancestor, Names, Table};

/// An exec line, borrowed from the table entry.
pub struct ExecView<'a> {
    pub pid: u32,
    pub ppid: Option<u32>,
    pub uid: u32,
    pub image: &'a Names,
    /// CLOCK_MONOTONIC ns of the exec.
    pub ts_ns: u64,
    pub cgroup: &'a str,
    pub identity: &'a Identity,
    /// Parent first.
    pub ancestry: &'a [Ancestor],
}

/// An exec whose line is not written yet.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    tgid: u32,
    start_ns: u64,
    uid: u32,
    cgroup_id: u64,
}

/// The exec lines waiting for their argv (`--events exec`; off: none ever waits).
#[derive(Debug, Default)]
pub(super) struct ExecLines {
    on: bool,
    pending: Vec<Pending>,
}

impl ExecLines {
    pub(super) fn new(on: bool) -> ExecLines {
        ExecLines {
            on,
            pending: Vec::new(),
        }
    }

    /// An exec record was applied to the table: its line waits for its argv.
    pub(super) fn seen(&mut self, tgid: u32, start_ns: u64, uid: u32, cgroup_id: u64) {
        if !self.on {
            return;
        }
        self.pending.push(Pending {
            tgid,
            start_ns,
            uid,
            cgroup_id,
        });
    }

    /// The lines ready to be written, in the order their execs came: whose argv is complete,
    /// all of them with `all`, or those of process `only` (it is ending: its argv will not
    /// grow). The others wait on.
    fn take_ready(&mut self, all: bool, only: Option<u32>, table: &Table) -> Vec<Pending> {
        if self.pending.is_empty() {
            return Vec::new();
        }
        let (ready, waiting) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| all || only == Some(p.tgid) || !table.argv_pending(p.tgid));
        self.pending = waiting;
        ready
    }
}

impl Watch {
    /// Writes the exec lines whose argv is complete (see [`ExecLines::take_ready`]).
    pub(super) fn write_execs(&mut self, all: bool, only: Option<u32>) {
        for p in self.exec_lines.take_ready(all, only, &self.table) {
            if self.stop.is_none() {
                self.write_exec(p);
            }
        }
    }

    fn write_exec(&mut self, p: Pending) {
        let cg = Arc::clone(self.cgroups.get(p.cgroup_id));
        let Some(e) = self.table.get(p.tgid).filter(|e| e.start_ns == p.start_ns) else {
            return;
        };
        if !self
            .filter
            .matches_exec(e.in_tree, p.uid, &e.image, &cg.path)
        {
            return;
        }
        let mut ancestry = std::mem::take(&mut self.ancestry);
        ancestry.clear();
        self.table.chain(e.ppid, e.start_ns, &mut ancestry);
        let view = ExecView {
            pid: p.tgid,
            ppid: crate::model::exit_view::known_parent(p.tgid, e.ppid),
            uid: p.uid,
            image: &e.image,
            ts_ns: if e.exec_ns != 0 {
                e.exec_ns
            } else {
                e.start_ns
            },
            cgroup: &cg.path,
            identity: &cg.identity,
            ancestry: &ancestry,
        };
        let r = self.out.write_exec(&view);
        self.ancestry = ancestry;
        self.metrics.execs_reported += 1;
        if let Err(err) = r {
            self.output_failed(err);
        }
    }
}
