//! The argv budget of the live set (`watch --argv-budget`).
//!
//! The budget covers the argv of live processes (each distinct image once: a forked child
//! shares its parent's until it execs) and of the images `--images` keeps. It is checked after
//! every `1/8` of it has arrived, not per exec: one pass walks the table. Over budget, the
//! largest argv are cut to their first [`KEEP_BYTES`] until three quarters of the budget are
//! used; each cut is counted ([`super::Stats::argv_evicted`]) and the row shows its argv
//! as incomplete.

use std::{collections::HashMap, sync::Arc};

use super::{live::Processes, Stats};
use crate::model::process::Names;

/// Bytes of argv an evicted image keeps (its program and first arguments, mostly).
pub const KEEP_BYTES: usize = 256;
/// Default budget: 32 MiB of argv.
pub const DEFAULT_ARGV_BUDGET: u64 = 32 << 20;

/// The argv budget: its limit, and what arrived since it was last checked. The processes are
/// the live set's, handed to each check.
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

impl Budget {
    /// Sets the budget in bytes (at least a page).
    pub(super) fn set_limit(&mut self, bytes: u64) {
        self.limit = usize::try_from(bytes).unwrap_or(usize::MAX).max(4096);
    }

    /// An exec announced `len` bytes of argv (or /proc gave them): checks the budget every
    /// eighth of it.
    pub(super) fn charge(&mut self, live: &mut Processes, len: usize, stats: &mut Stats) {
        self.added = self.added.saturating_add(len);
        if self.added >= (self.limit / 8).max(64 << 10) {
            self.added = 0;
            self.enforce(live, stats);
        }
    }

    /// (total bytes, (size, image) of each distinct image).
    pub(super) fn holders(live: &Processes) -> (usize, Vec<(usize, *const Names)>) {
        let mut seen = HashMap::new();
        let mut total = 0usize;
        for e in live.values() {
            for img in &e.images {
                let ptr = Arc::as_ptr(&img.names);
                if seen.insert(ptr, ()).is_none() {
                    total += img.names.args.len();
                }
            }
            if let Some(b) = &e.pending_args {
                total += b.held_bytes();
            }
        }
        let mut sizes: Vec<(usize, *const Names)> = Vec::with_capacity(seen.len());
        for e in live.values() {
            for img in &e.images {
                let ptr = Arc::as_ptr(&img.names);
                if seen.remove(&ptr).is_some() && img.names.args.len() > KEEP_BYTES {
                    sizes.push((img.names.args.len(), ptr));
                }
            }
        }
        (total, sizes)
    }

    /// Over budget: cuts the largest argv until three quarters of it are used.
    pub(super) fn enforce(&self, live: &mut Processes, stats: &mut Stats) {
        let (mut total, mut sizes) = Budget::holders(live);
        if total <= self.limit {
            return;
        }
        let target = self.limit / 4 * 3;
        sizes.sort_unstable_by_key(|&(len, _)| std::cmp::Reverse(len));
        let mut cut: HashMap<*const Names, Option<Arc<Names>>> = HashMap::new();
        for (len, ptr) in sizes {
            if total <= target {
                break;
            }
            total -= len - KEEP_BYTES;
            cut.insert(ptr, None);
        }
        for e in live.values_mut() {
            for img in e.process.images.iter_mut().map(|i| &mut i.names) {
                let Some(slot) = cut.get_mut(&Arc::as_ptr(img)) else {
                    continue;
                };
                let small = slot.get_or_insert_with(|| {
                    stats.argv_evicted += 1;
                    stats.argv_evicted_bytes += (img.args.len() - KEEP_BYTES) as u64;
                    Arc::new(evicted(img))
                });
                *img = small.clone();
            }
        }
    }
}

/// The image with its argv cut to [`KEEP_BYTES`], marked incomplete.
pub fn evicted(img: &Names) -> Names {
    Names {
        exe: img.exe.clone(),
        comm: img.comm,
        args: img.args[..KEEP_BYTES.min(img.args.len())].into(),
        argv_complete: false,
    }
}
