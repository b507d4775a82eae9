//! One exit as reported: what the filters look at and the outputs print, borrowed from the
//! table entry and the kernel's exit record (nothing is copied per exit).

use spacetime_common::{ExitEvent, TASK_COMM_LEN};

use super::identity::Identity;
use crate::model::table::{Ancestor, EndedImage, Entry, Names};
use crate::model::{cputime::split_runtime, tree::ExitStatus};

pub struct ExitView<'a> {
    /// A thread exit (`--threads`), not the end of a process.
    pub thread: bool,
    /// The process (tgid).
    pub pid: u32,
    /// The thread that exited (for a process: the last one).
    pub tid: u32,
    pub ppid: u32,
    /// The pid in the process's own PID namespace, when that is not the initial one.
    pub ns_pid: Option<u32>,
    /// The kernel's name for it at exit, its bytes as the kernel has them.
    pub comm: &'a [u8],
    /// Its last program image.
    pub image: &'a Names,
    /// CLOCK_MONOTONIC ns; unknown for a thread whose creation was not seen.
    pub start_ns: Option<u64>,
    /// When its last image started (its exec; the process's start when no exec was seen):
    /// with the pid, what its exec id is made of.
    pub image_start_ns: u64,
    pub end_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    /// `user_ns`/`sys_ns` are what wait4 reported at the process's release; false: read at
    /// exit (a thread row, or no release within the wait), which misses the last slice.
    pub cpu_final: bool,
    pub exit: ExitStatus,
    /// Peak RSS over the images seen (null when none was measured: kernel threads).
    pub peak_rss_bytes: Option<u64>,
    /// What ru_maxrss says (maximum over all images, and what it inherited).
    pub ru_maxrss_bytes: Option<u64>,
    /// The last image's own peak.
    pub last_image_peak_bytes: Option<u64>,
    pub threads: u32,
    pub uid: u32,
    pub gid: u32,
    pub cgroup: &'a str,
    /// Container, pod and unit, from the cgroup path.
    pub identity: &'a Identity,
    pub in_tree: bool,
    /// With `--images`: the images it left by exec (the last one is `image`).
    pub images: &'a [EndedImage],
    pub images_dropped: u32,
    /// With `--ancestry`: parent first.
    pub ancestry: &'a [Ancestor],
    /// The process was in the table (false: its fork and exec were not seen, e.g. lost).
    pub known: bool,
}

impl ExitView<'_> {
    /// The parent's pid, when known. Unknown (None) for a process whose fork was not seen
    /// (started before the watch and gone before /proc was read, or lost): the table then
    /// holds 0, which is nobody's pid except the parent of pid 1 and of kthreadd (pid 2).
    pub fn parent(&self) -> Option<u32> {
        known_parent(self.pid, self.ppid)
    }

    pub fn runtime_ns(&self) -> Option<u64> {
        self.start_ns.map(|s| self.end_ns.saturating_sub(s))
    }
}

/// `ppid` unless it is the table's 0 for "not seen" (see [`ExitView::parent`]).
pub fn known_parent(pid: u32, ppid: u32) -> Option<u32> {
    (ppid != 0 || pid <= 2).then_some(ppid)
}

/// The name in a record, up to its NUL. Kept as bytes: the kernel cuts a name at 15 bytes,
/// which can split a UTF-8 sequence, and any process may name itself with any bytes.
pub fn comm_bytes(comm: &[u8; TASK_COMM_LEN]) -> &[u8] {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    &comm[..end]
}

/// Final CPU time of a process: the sum of its threads' exits, or the kernel's group total
/// when that is larger (threads that exited before `watch` started).
pub fn process_times(e: &Entry, x: &ExitEvent) -> (u64, u64) {
    if x.group_runtime_ns > e.runtime_ns {
        split_runtime(x.group_runtime_ns, x.group_utime_ns, x.group_stime_ns)
    } else {
        (e.user_ns, e.sys_ns)
    }
}

/// The last image's peak in pages: 0 on the parent's address space (vfork), `None` when the
/// kernel had no mm to read (kernel threads).
pub fn last_image_peak_pages(e: &Entry, x: &ExitEvent) -> Option<u64> {
    crate::model::process::end_peak_pages(&x.mem, e.shared_mm)
}

/// The namespace pid when it differs from the host's.
pub fn ns_pid(x: &ExitEvent) -> Option<u32> {
    (x.ns_level > 0 && x.ns_tgid != 0 && x.ns_tgid != x.hdr.tgid).then_some(x.ns_tgid)
}
