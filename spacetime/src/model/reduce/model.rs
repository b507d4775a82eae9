//! The process and image model the store keeps: one [`Process`] per thread group, with one
//! [`Image`] per program it ran.

use std::sync::{Arc, LazyLock};

use smallvec::SmallVec;
use spacetime_common::ReapEvent;

use crate::model::{
    argv::PendingArgv,
    cputime,
    image_mem::ImageMem,
    opt_ns::OptNs,
    process::{Key, Names, OptExit, OptKey},
};

/// One program image of a process.
#[derive(Clone, Debug)]
pub struct Image {
    pub names: Arc<Names>,
    pub start_ns: u64,
    /// 8 bytes, not an `Option`'s 16: see [`OptNs`].
    pub end_ns: OptNs,
    /// Carried over from the parent at fork rather than started by an exec.
    pub inherited: bool,
    /// Ran on the parent's address space (vfork/posix_spawn before exec): its memory figures
    /// are the parent's and are not counted for this process.
    pub shared_mm: bool,
    /// Memory figures at the end of the image, when known, and the exact maximum RSS of its
    /// mm, when the kernel followed every change of it: packed, so that two images fit in
    /// [`Process::images`] inline.
    pub mem: ImageMem,
    /// Started before spacetime attached (`trace -p`): exe, argv and comm were read from
    /// /proc at the attach, not from an exec record.
    pub read_at_attach: bool,
}

// A 100 000-process trace holds 100 000 processes and two images each: see
// `packs_into_21_bytes_and_two_images_fit_in_a_process` (model/image_mem.rs).
const _: () = assert!(size_of::<Image>() <= 48);
const _: () = assert!(size_of::<Process>() <= 192);

impl Default for Image {
    /// An image with no names yet: they point at one shared empty [`Names`] (a fork builds
    /// its inherited image from a default one, and should not allocate names to drop them).
    fn default() -> Image {
        Image {
            names: Arc::clone(Image::no_names()),
            start_ns: 0,
            end_ns: OptNs::NONE,
            inherited: false,
            shared_mm: false,
            mem: ImageMem::default(),
            read_at_attach: false,
        }
    }
}

impl Image {
    /// The one shared empty [`Names`].
    pub fn no_names() -> &'static Arc<Names> {
        static NO_NAMES: LazyLock<Arc<Names>> = LazyLock::new(Arc::default);
        &NO_NAMES
    }

    pub fn exe(&self) -> &[u8] {
        &self.names.exe
    }

    /// The arguments, exact bytes.
    pub fn argv(&self) -> impl Iterator<Item = &[u8]> + Clone {
        self.names.argv()
    }

    pub fn comm(&self) -> &[u8] {
        self.names.comm.as_bytes()
    }

    /// Every argv byte arrived and none was cut.
    pub fn argv_complete(&self) -> bool {
        self.names.argv_complete
    }

    /// argv joined by spaces, or the exe (or comm) when there is none: a name for the image
    /// where Unicode text is needed (invalid UTF-8 shown as U+FFFD).
    pub fn title_lossy(&self) -> String {
        let bytes: Vec<u8> = if self.argv().next().is_some() {
            self.argv().collect::<Vec<_>>().join(&b' ')
        } else if !self.exe().is_empty() {
            self.exe().to_vec()
        } else {
            self.comm().to_vec()
        };
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Peak RSS of this image in pages (None while running or when not measured).
    pub fn peak_rss_pages(&self) -> Option<u64> {
        if self.shared_mm {
            return Some(0);
        }
        self.mem.peak_rss()
    }

    pub fn peak_vm_pages(&self) -> Option<u64> {
        if self.shared_mm {
            return Some(0);
        }
        self.mem.peak_vm()
    }

    pub fn exact(&self) -> bool {
        self.shared_mm || self.mem.exact()
    }
}

/// One process (thread group).
#[derive(Clone, Debug, Default)]
pub struct Process {
    /// 16 bytes, not an `Option`'s 24: see [`OptKey`].
    pub key: OptKey,
    /// The pid as spacetime's PID namespace numbers it (the kernel's, `key.tgid`, unless
    /// spacetime runs inside a namespace; there 0 when its fork record was lost).
    pub pid: u32,
    /// The process that forked this one, numbered like `pid` (0 when unknown); kept when the
    /// kernel reparents.
    pub ppid: u32,
    /// The key of the process that forked this one, when its fork was seen: see
    /// [`Process::parent`].
    pub(super) parent_tgid: u32,
    pub(super) parent_start_ns: u64,
    pub start_ns: u64,
    pub end_ns: OptNs,
    /// Every thread it ever had, the main thread included.
    pub threads: u32,
    /// 2 bytes, not an `Option`'s 8: see [`OptExit`].
    pub exit: OptExit,
    /// Inline while there are two at most (most processes of a big tree fork and exit, or
    /// fork and exec once): not an allocation of their own each.
    pub images: SmallVec<[Image; 2]>,
    /// Its last exec's argv while it is assembled from continuation records; dropped once
    /// every byte came, or published as it stands when another exec or the exit ends that
    /// image. Kept here, not in each image: only the last exec's can still be arriving (8
    /// bytes a process where two images took 16).
    pub(super) pending_args: Option<Box<PendingArgv>>,
    /// CPU time: what wait4 reported for it once its release was seen (`cpu_final`); until
    /// then the sum over its exited threads, each read in the exit path (a thread's last
    /// slice is not yet counted there, so short processes read low).
    pub user_ns: u64,
    pub sys_ns: u64,
    /// `user_ns`/`sys_ns` are the kernel's figures at the process's release (as wait4).
    pub cpu_final: bool,
    /// `signal->maxrss` at exit: what ru_maxrss reports (pages; 16 TiB of 4 KiB pages at
    /// most, which a u32 holds).
    pub signal_maxrss_pages: u32,
    /// One bit each of [`Process::FORK_SEEN`], [`Process::UNTRACKED`] and [`Process::LEFT`]:
    /// 1 byte where three bools took 3 (with the maxrss in 4 bytes, a process is 192 bytes).
    pub(super) seen: u8,
}

impl Process {
    /// Its fork was seen (not for the root, nor a process whose fork was lost).
    pub(super) const FORK_SEEN: u8 = 1;
    /// The kernel did not track it (its session's process limit, or a full tracking map: the
    /// fork record says so): none of its records come, so nothing waits for its exit.
    pub(super) const UNTRACKED: u8 = 2;
    /// It left the trace at an exec (`EXEC_LEFT`): credentials its session's owner lacks.
    pub(super) const LEFT: u8 = 4;

    /// See [`Process::FORK_SEEN`].
    pub fn fork_seen(&self) -> bool {
        self.seen & Process::FORK_SEEN != 0
    }

    /// See [`Process::UNTRACKED`].
    pub fn untracked(&self) -> bool {
        self.seen & Process::UNTRACKED != 0
    }

    /// See [`Process::LEFT`].
    pub fn left(&self) -> bool {
        self.seen & Process::LEFT != 0
    }

    /// Marks it as having left the trace at an exec (a saved report's `left` state, read back).
    pub fn set_left(&mut self) {
        self.seen |= Process::LEFT | Process::UNTRACKED;
    }

    /// The process that forked this one, when its fork was seen.
    pub fn parent(&self) -> Option<Key> {
        self.fork_seen().then_some(Key {
            tgid: self.parent_tgid,
            start_ns: self.parent_start_ns,
        })
    }

    /// Peak RSS over its images, in pages.
    pub fn peak_rss_pages(&self) -> u64 {
        self.images
            .iter()
            .filter_map(Image::peak_rss_pages)
            .max()
            .unwrap_or(0)
    }

    /// The image running at `ts_ns`: the last one started at or before it.
    pub(super) fn image_at(&self, ts_ns: u64) -> Option<&Image> {
        self.images
            .iter()
            .rev()
            .find(|i| i.start_ns <= ts_ns)
            .or(self.images.first())
    }

    /// The image still open (not yet ended by exec or exit).
    pub(super) fn open_image(&mut self) -> Option<&mut Image> {
        self.images.last_mut().filter(|i| i.end_ns.is_none())
    }

    /// Its release record `r` came: where it says when its last task left the CPU for good
    /// ([`cputime::left_cpu_ns`]), its end moves there from its exit, with its last image's.
    /// The exit's teardown (its memory given back, its parent told) ran in between, and its
    /// CPU time counts it: ending at the exit, a process of one thread showed more CPU than
    /// its life. Only for a process whose exit was seen.
    pub(super) fn released(&mut self, r: &ReapEvent) {
        let Some(exit) = self.end_ns.get() else {
            return;
        };
        let Some(ts_ns) = cputime::left_cpu_ns(r, exit) else {
            return;
        };
        self.end_ns = OptNs::some(ts_ns);
        if let Some(img) = self
            .images
            .last_mut()
            .filter(|i| i.end_ns.get() == Some(exit))
        {
            img.end_ns = OptNs::some(ts_ns);
        }
    }
}
