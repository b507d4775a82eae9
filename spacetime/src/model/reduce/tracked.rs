//! A live process (`watch`): the [`Process`] and what the live set keeps beside it. Only its
//! current image is kept (with `images`, also the last [`MAX_IMAGES`] it left); the peak of
//! every image left stays in [`Tracked::left_peak_pages`].

use std::{ops::Deref, sync::Arc};

use spacetime_common::ImageEndEvent;

use super::{Held, Image, Process};
use crate::model::process::{end_peak_pages, same_start, Key, Names};

/// Images left by exec kept per process with `images` (the last ones; older are counted).
pub const MAX_IMAGES: usize = 32;

/// A live process.
#[derive(Debug, Default)]
pub struct Tracked {
    pub process: Process,
    /// The start time is the kernel's (false: read from /proc, to the clock tick).
    pub(super) start_exact: bool,
    pub(super) live_children: u32,
    /// A descendant of `--pid-tree`.
    pub in_tree: bool,
    /// Found in /proc at start rather than seen forking.
    pub seeded: bool,
    /// In the set (false: made up for an exit whose process was unknown).
    pub known: bool,
    /// Images left beyond the [`MAX_IMAGES`] kept.
    pub images_dropped: u32,
    /// Largest peak of the images it left (pages).
    pub left_peak_pages: u64,
    /// CPU time of the threads that exited, as the kernel's sum_exec_runtime.
    pub runtime_ns: u64,
}

impl Deref for Tracked {
    type Target = Process;
    fn deref(&self) -> &Process {
        &self.process
    }
}

impl Tracked {
    pub(super) fn new(key: Key) -> Tracked {
        Tracked {
            process: Process {
                key: Some(key).into(),
                pid: key.tgid,
                start_ns: key.start_ns,
                threads: 1,
                ..Process::default()
            },
            start_exact: true,
            known: true,
            ..Tracked::default()
        }
    }

    /// A process found in /proc: start time approximate, its image as /proc gave it.
    pub fn seeded(pid: u32, ppid: u32, start_ns: u64, names: Arc<Names>) -> Tracked {
        let mut t = Tracked::new(Key {
            tgid: pid,
            start_ns,
        });
        t.process.ppid = ppid;
        t.process.images.push(Image {
            names,
            start_ns,
            read_at_attach: true,
            ..Image::default()
        });
        t.start_exact = false;
        t.seeded = true;
        t
    }

    /// Its current program image (none known: empty names).
    pub fn image(&self) -> &Arc<Names> {
        match self.process.images.last() {
            Some(i) => &i.names,
            None => Image::no_names(),
        }
    }

    /// When its current image started by exec (0: no exec seen).
    pub fn exec_ns(&self) -> u64 {
        match self.process.images.last() {
            Some(i) if !i.inherited && !i.read_at_attach => i.start_ns,
            _ => 0,
        }
    }

    /// Whether its argv is still arriving in continuation records.
    pub fn argv_pending(&self) -> bool {
        self.pending_args.is_some()
    }

    /// Whether a record for the process started at `start_ns` is for this one; a seeded one
    /// takes the exact start time.
    pub(super) fn same_process(&mut self, start_ns: u64) -> bool {
        if !self.started_at(start_ns) {
            return false;
        }
        if !self.start_exact {
            let p = &mut self.process;
            p.start_ns = start_ns;
            p.key = Some(Key {
                tgid: p.pid,
                start_ns,
            })
            .into();
            self.start_exact = true;
        }
        true
    }

    /// Whether a record for the process started at `start_ns` is for this one (without
    /// taking the exact start time, see [`Self::same_process`]).
    pub fn started_at(&self, start_ns: u64) -> bool {
        match self.start_exact {
            true => self.process.start_ns == start_ns,
            false => same_start(self.process.start_ns, start_ns),
        }
    }

    /// Drops the images left beyond what is kept.
    fn trim_images(&mut self, keep: bool) {
        let left = self.process.images.len().saturating_sub(1);
        let cap = if keep { MAX_IMAGES } else { 0 };
        if left > cap {
            let n = left - cap;
            self.process.images.drain(..n);
            if keep {
                self.images_dropped += n as u32;
            }
        }
    }
}

impl Held for Tracked {
    fn process(&mut self) -> &mut Process {
        &mut self.process
    }

    /// A ghost counts its children: only those it will see exit.
    fn forked_child(&mut self, count: bool) -> bool {
        if count {
            self.live_children += 1;
        }
        self.in_tree
    }

    /// Forked after the programs were attached, found in /proc too: as for an adopted process,
    /// the records say everything (an exec /proc already showed is still to come), so the
    /// /proc reading goes.
    fn fork_record(&mut self, in_tree: bool) {
        self.in_tree |= in_tree;
        if std::mem::take(&mut self.seeded) {
            self.process.images.clear();
        }
    }

    fn exec_done(&mut self, keep_images: bool) {
        self.trim_images(keep_images);
    }

    fn image_ended(&mut self, m: &ImageEndEvent, shared_mm: bool) {
        if let Some(pages) = end_peak_pages(&m.mem, shared_mm) {
            self.left_peak_pages = self.left_peak_pages.max(pages);
        }
    }

    fn thread_exited(&mut self, runtime_ns: u64) {
        self.runtime_ns += runtime_ns;
    }
}
