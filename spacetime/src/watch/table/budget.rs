//! Bounds on what the table keeps for processes it will never report, or cannot afford:
//! the argv budget (`watch --argv-budget`), and forgetting processes the kernel-side filter
//! kept out.
//!
//! The budget covers the argv of live processes (each distinct image once: a forked child
//! shares its parent's until it execs) and of the images `--images` keeps. It is checked after
//! every `1/8` of it has arrived, not per exec: one pass walks the table. Over budget, the
//! largest argv are cut to their first [`KEEP_BYTES`] until three quarters of the budget are
//! used; each cut is counted ([`super::TableStats::argv_evicted`]) and the row shows its argv
//! as incomplete.

use std::{collections::HashMap, sync::Arc};

use super::{Names, Table};

/// Bytes of argv an evicted image keeps (its program and first arguments, mostly).
pub const KEEP_BYTES: usize = 256;
/// Default budget: 32 MiB of argv.
pub const DEFAULT_ARGV_BUDGET: u64 = 32 << 20;

#[derive(Debug, Clone, Copy)]
pub(super) struct Budget {
    limit: usize,
    /// argv bytes announced by exec records since the last check.
    added: usize,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget {
            limit: DEFAULT_ARGV_BUDGET as usize,
            added: 0,
        }
    }
}

impl Table {
    /// Sets the argv budget in bytes (at least a page).
    pub fn set_argv_budget(&mut self, bytes: u64) {
        self.budget.limit = usize::try_from(bytes).unwrap_or(usize::MAX).max(4096);
    }

    /// An exec announced `len` bytes of argv (or /proc gave them): checks the budget every
    /// eighth of it.
    pub fn charge_argv(&mut self, len: usize) {
        self.budget.added = self.budget.added.saturating_add(len);
        if self.budget.added >= (self.budget.limit / 8).max(64 << 10) {
            self.budget.added = 0;
            self.enforce_argv_budget();
        }
    }

    /// argv bytes held now: each distinct image once, partial argv included.
    #[cfg(test)]
    pub fn argv_bytes(&self) -> usize {
        self.argv_holders().0
    }

    /// (total bytes, (size, image) of each distinct image).
    fn argv_holders(&self) -> (usize, Vec<(usize, *const Names)>) {
        let mut seen = HashMap::new();
        let mut total = 0usize;
        for e in self.live.values() {
            let images = e.images.iter().map(|i| &i.image);
            for img in std::iter::once(&e.image).chain(images) {
                let ptr = Arc::as_ptr(img);
                if seen.insert(ptr, ()).is_none() {
                    total += img.args.len();
                }
            }
            if let Some(b) = &e.building {
                total += b.held_bytes();
            }
        }
        let mut sizes: Vec<(usize, *const Names)> = Vec::with_capacity(seen.len());
        for e in self.live.values() {
            let images = e.images.iter().map(|i| &i.image);
            for img in std::iter::once(&e.image).chain(images) {
                let ptr = Arc::as_ptr(img);
                if seen.remove(&ptr).is_some() && img.args.len() > KEEP_BYTES {
                    sizes.push((img.args.len(), ptr));
                }
            }
        }
        (total, sizes)
    }

    /// Over budget: cuts the largest argv until three quarters of it are used.
    pub fn enforce_argv_budget(&mut self) {
        let (mut total, mut sizes) = self.argv_holders();
        if total <= self.budget.limit {
            return;
        }
        let target = self.budget.limit / 4 * 3;
        sizes.sort_unstable_by_key(|&(len, _)| std::cmp::Reverse(len));
        let mut cut: HashMap<*const Names, Option<Arc<Names>>> = HashMap::new();
        for (len, ptr) in sizes {
            if total <= target {
                break;
            }
            total -= len - KEEP_BYTES;
            cut.insert(ptr, None);
        }
        for e in self.live.values_mut() {
            let images = e.images.iter_mut().map(|i| &mut i.image);
            for img in std::iter::once(&mut e.image).chain(images) {
                let Some(slot) = cut.get_mut(&Arc::as_ptr(img)) else {
                    continue;
                };
                let small = slot.get_or_insert_with(|| {
                    self.stats.argv_evicted += 1;
                    self.stats.argv_evicted_bytes += (img.args.len() - KEEP_BYTES) as u64;
                    Arc::new(evicted(img))
                });
                *img = small.clone();
            }
        }
    }

    /// A process the kernel-side filter kept out ended (`EXIT_FILTERED`): its entry goes, if
    /// it had one (it passed the filter once, then changed uid or cgroup), uncounted.
    pub fn forget(&mut self, x: &spacetime_common::ExitEvent) {
        if self.lookup(x.hdr.tgid, x.hdr.leader_start_ns).is_some() {
            let mut chain = Vec::new();
            let _ = self.exit(x, &mut chain);
        }
    }

    /// `--pid-tree` (the kernel's tree mode): the processes of the tree found in /proc, for
    /// the kernel to follow; every other seeded process is dropped, since the kernel will
    /// send nothing about it.
    pub fn keep_tree_only(&mut self) -> Vec<u32> {
        self.live.retain(|_, e| e.in_tree);
        self.live.keys().copied().collect()
    }

    /// Whether the process's argv is still arriving in continuation records.
    pub fn argv_pending(&self, pid: u32) -> bool {
        self.live.get(&pid).is_some_and(|e| e.building.is_some())
    }
}

/// The image with its argv cut to [`KEEP_BYTES`], marked incomplete.
fn evicted(img: &Names) -> Names {
    Names {
        exe: img.exe.clone(),
        comm: img.comm,
        args: img.args[..KEEP_BYTES.min(img.args.len())].into(),
        argv_complete: false,
    }
}

#[cfg(test)]
mod tests {
    use spacetime_common::{kind, EventHeader, ForkEvent};

    use super::super::{Table, TableOptions};
    use crate::events::Exec;

    fn hdr(kind: u16, pid: u32, ts: u64) -> EventHeader {
        EventHeader {
            kind,
            session: 0,
            flags: 0,
            ts_ns: ts,
            tgid: pid,
            pid,
            leader_start_ns: pid as u64,
        }
    }

    fn exec(t: &mut Table, pid: u32, area: Vec<u8>) {
        t.exec(Exec {
            hdr: hdr(kind::EXEC, pid, pid as u64 + 10),
            old_pid: pid,
            uid: 0,
            cgroup_id: 0,
            comm: "x".into(),
            filename: b"/bin/x".to_vec(),
            args_len: area.len() as u32,
            args: area,
        });
    }

    #[test]
    fn largest_argv_are_cut_to_stay_within_budget() {
        let mut t = Table::new(TableOptions {
            max_processes: 1000,
            ancestry: false,
            images: false,
            threads: false,
        });
        t.set_argv_budget(64 << 10);
        // 20 small argv, then big ones until the budget is checked and enforced.
        for pid in 1..=20 {
            exec(&mut t, pid, format!("small\0{pid}").into_bytes());
        }
        for pid in 100..110 {
            exec(&mut t, pid, vec![b'b'; 16 << 10]);
        }
        assert!(t.stats.argv_evicted > 0, "nothing evicted");
        // Checked every 64 KiB announced: at most that much over between checks.
        assert!(t.argv_bytes() <= 128 << 10, "{} bytes held", t.argv_bytes());
        t.enforce_argv_budget();
        assert!(
            t.argv_bytes() <= 64 << 10,
            "{} bytes held over a 64 KiB budget",
            t.argv_bytes()
        );
        // The small ones are untouched; a cut one keeps its first 256 bytes.
        for pid in 1..=20 {
            let e = t.get(pid).expect("small entry");
            assert!(e.image.argv_complete, "pid {pid} was cut");
        }
        let cut: Vec<_> = (100..110)
            .filter_map(|p| t.get(p))
            .filter(|e| !e.image.argv_complete)
            .collect();
        assert_eq!(cut.len() as u64, t.stats.argv_evicted);
        assert!(cut.iter().all(|e| e.image.args.len() == super::KEEP_BYTES));
    }

    #[test]
    fn a_shared_image_is_counted_and_cut_once() {
        let mut t = Table::new(TableOptions {
            max_processes: 1000,
            ancestry: false,
            images: false,
            threads: false,
        });
        t.set_argv_budget(64 << 10);
        exec(&mut t, 1, vec![b'p'; 40 << 10]);
        for child in 2..50 {
            t.fork(&ForkEvent {
                hdr: hdr(kind::FORK, 1, child as u64),
                child_pid: child,
                child_tgid: child,
                child_start_ns: child as u64,
                ..ForkEvent::default()
            });
        }
        // 49 entries share one 40 KiB image: 40 KiB held, under the budget.
        assert_eq!(t.argv_bytes(), 40 << 10);
        t.enforce_argv_budget();
        assert_eq!(t.stats.argv_evicted, 0);
        exec(&mut t, 60, vec![b'q'; 40 << 10]);
        t.enforce_argv_budget();
        // Over: the parent's image goes (or the new one), cut once for every holder.
        assert_eq!(t.stats.argv_evicted, 1);
        assert!(t.argv_bytes() <= 48 << 10, "{}", t.argv_bytes());
    }
}
