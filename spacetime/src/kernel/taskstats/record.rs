//! `struct taskstats` (include/uapi/linux/taskstats.h), decoded by the version it reports.
//!
//! Offsets are those of the x86-64/aarch64 C layout (every `__u64` 8-aligned, the explicit
//! `__attribute__((aligned(8)))` on `cpu_count`, `ac_sched`, `ac_uid`, `ac_etime` and
//! `ac_tgetime`), checked with `offsetof` against the header. Version history as far as
//! the layout goes:
//!
//! | version | adds (at the end) | size |
//! |---|---|---|
//! | 1 | delay fields only, behind `__u16 padding[3]`: a *different* layout, not decoded | 72 |
//! | 2 | exit code, flags, nice, basic (`ac_comm`..`ac_majflt`) and extended accounting (`coremem`..`write_syscalls`) | 248 |
//! | 3 | `read_bytes`, `write_bytes`, `cancelled_write_bytes` | 272 |
//! | 4 | `nvcsw`, `nivcsw` | 288 |
//! | 5 | `ac_utimescaled`, `ac_stimescaled` | 304 |
//! | 6 | `cpu_scaled_run_real_total` | 312 |
//! | 7 | `freepages_count`, `freepages_delay_total` | 328 |
//! | 8 | nothing new in the layout | 328 |
//! | 9 | `thrashing_count`, `thrashing_delay_total` | 344 |
//! | 10 | `ac_btime64` | 352 |
//! | 11 | `compact_count`, `compact_delay_total` | 368 |
//! | 12 | `ac_tgid`, `ac_tgetime`, `ac_exe_dev`, `ac_exe_inode` | 400 |
//! | 13 | `wpcopy_count`, `wpcopy_delay_total` | 416 |
//! | 14 | `irq_count`, `irq_delay_total` | 432 |
//! | 15 | per-category `*_delay_max`/`*_delay_min` *inserted after each delay pair* (breaks the layout; shipped in 6.14/6.15 before the fix) | 560 |
//! | 16 | the same max/min, moved to the end instead | 560 |
//!
//! Version 15 is decoded with its own (shifted) layout. Versions above 16 are decoded with
//! the version-16 layout, ignoring what follows.

use serde::Serialize;

use super::netlink::{ne_u16, ne_u32, ne_u64, Malformed};

/// `ac_flag` bits (`<linux/acct.h>`).
// The header's whole set, as the format defines it; spacetime reads AGROUP, its tests more.
#[allow(dead_code)]
pub mod flags {
    /// Forked but did not exec.
    pub const AFORK: u8 = 0x01;
    /// Used super-user privileges.
    pub const ASU: u8 = 0x02;
    /// Used compatibility mode (VAX only; never set on Linux's architectures).
    pub const ACOMPAT: u8 = 0x04;
    /// Dumped core.
    pub const ACORE: u8 = 0x08;
    /// Killed by a signal.
    pub const AXSIG: u8 = 0x10;
    /// This task was the last of its thread group (version 12+).
    pub const AGROUP: u8 = 0x20;
}

/// Bytes a command name keeps inline: the most a record carries.
const COMM_INLINE: usize = off::TS_COMM_LEN;

/// A task's command name (`ac_comm`), as UTF-8 (lossy: it is bytes to the kernel). Stored
/// inline: every exit record carries one, and a heap string each was the decoder's one
/// allocation per record. A name that only fits after lossy replacement goes to the heap.
#[derive(Clone, PartialEq, Eq)]
pub enum Comm {
    Inline { len: u8, bytes: [u8; COMM_INLINE] },
    Heap(Box<str>),
}

impl Comm {
    pub fn new(raw: &[u8]) -> Comm {
        match std::str::from_utf8(raw) {
            Ok(s) if s.len() <= COMM_INLINE => {
                let mut bytes = [0; COMM_INLINE];
                bytes[..s.len()].copy_from_slice(s.as_bytes());
                Comm::Inline {
                    len: s.len() as u8,
                    bytes,
                }
            }
            _ => Comm::Heap(String::from_utf8_lossy(raw).into()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            // SAFETY: only valid UTF-8 is stored inline (checked in `new`), len ≤ COMM_INLINE.
            Comm::Inline { len, bytes } => unsafe {
                std::str::from_utf8_unchecked(bytes.get_unchecked(..*len as usize))
            },
            Comm::Heap(s) => s,
        }
    }
}

impl Default for Comm {
    fn default() -> Comm {
        Comm::Inline {
            len: 0,
            bytes: [0; COMM_INLINE],
        }
    }
}

impl std::ops::Deref for Comm {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Comm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl PartialEq<str> for Comm {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Comm {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<String> for Comm {
    fn eq(&self, other: &String) -> bool {
        self.as_str() == other
    }
}

/// Whether a record describes one task or a whole thread group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize)]
pub enum RecordKind {
    /// `TASKSTATS_TYPE_AGGR_PID`: one task (thread); `id` is its pid (tid).
    #[default]
    Pid,
    /// `TASKSTATS_TYPE_AGGR_TGID`: the thread group, sent when its last task exits and the
    /// group ever had more than one thread; `id` is the tgid.
    Tgid,
}

/// Largest and smallest single delay per category, in ns (versions 15 and 16+).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DelayExtremes {
    pub cpu_delay_max: u64,
    pub cpu_delay_min: u64,
    pub blkio_delay_max: u64,
    pub blkio_delay_min: u64,
    pub swapin_delay_max: u64,
    pub swapin_delay_min: u64,
    pub freepages_delay_max: u64,
    pub freepages_delay_min: u64,
    pub thrashing_delay_max: u64,
    pub thrashing_delay_min: u64,
    pub compact_delay_max: u64,
    pub compact_delay_min: u64,
    pub wpcopy_delay_max: u64,
    pub wpcopy_delay_min: u64,
    pub irq_delay_max: u64,
    pub irq_delay_min: u64,
}

/// One decoded exit record. Times are µs unless named `*_delay_*`/`*_total` (ns);
/// `Option` fields are `None` when the reported version does not carry them.
///
/// `ac_exitcode` is the kernel's `task->exit_code`, i.e. a `wait()` status: `code << 8`
/// for a normal exit, the signal number (| 0x80 if it dumped core) for a fatal signal.
/// See [`TaskstatsRecord::exit_code`] and [`TaskstatsRecord::term_signal`].
///
/// A [`RecordKind::Tgid`] exit record holds sums over the group's tasks: the delay
/// accounting (`cpu_*`, `blkio_*`, ...) everywhere, and on recent kernels also `ac_etime_us`,
/// CPU times and context switches. Its identity, memory and I/O fields (`ac_pid`, `ac_comm`,
/// `hiwater_rss_kib`, ...) are zero; older kernels also left its `version` at 0 (see
/// [`TaskstatsRecord::version`]). 6.18 sets it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TaskstatsRecord {
    pub kind: RecordKind,
    /// The pid (for `Pid`) or tgid (for `Tgid`) from the netlink attribute.
    pub id: u32,
    /// The struct version the layout was decoded with: the record's own first `u16`, except
    /// for a tgid record whose version the kernel leaves at 0, which takes the version of the
    /// pid record in the same message (or, alone, the newest version of its size).
    pub version: u16,
    pub ac_exitcode: u32,
    pub ac_flag: u8,
    pub ac_nice: i8,
    pub ac_sched: u8,
    pub ac_comm: Comm,
    pub ac_uid: u32,
    pub ac_gid: u32,
    pub ac_pid: u32,
    pub ac_ppid: u32,
    /// Begin time, seconds since the epoch (clamped to u32).
    pub ac_btime: u32,
    pub ac_btime64: Option<u64>,
    pub ac_etime_us: u64,
    pub ac_utime_us: u64,
    pub ac_stime_us: u64,
    pub ac_minflt: u64,
    pub ac_majflt: u64,
    /// Accumulated RSS, MiB·µs.
    pub coremem: u64,
    /// Accumulated VM size, MiB·µs.
    pub virtmem: u64,
    /// Peak RSS in KiB (the kernel's `get_mm_hiwater_rss`, taken before the mm is released).
    pub hiwater_rss_kib: u64,
    /// Peak VM size in KiB.
    pub hiwater_vm_kib: u64,
    pub read_char: u64,
    pub write_char: u64,
    pub read_syscalls: u64,
    pub write_syscalls: u64,
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    pub cancelled_write_bytes: Option<u64>,
    pub nvcsw: Option<u64>,
    pub nivcsw: Option<u64>,
    pub ac_utimescaled: Option<u64>,
    pub ac_stimescaled: Option<u64>,
    pub cpu_scaled_run_real_total: Option<u64>,
    pub cpu_count: u64,
    pub cpu_delay_total: u64,
    pub cpu_run_real_total: u64,
    pub cpu_run_virtual_total: u64,
    pub blkio_count: u64,
    pub blkio_delay_total: u64,
    pub swapin_count: u64,
    pub swapin_delay_total: u64,
    /// Memory reclaim.
    pub freepages_count: Option<u64>,
    pub freepages_delay_total: Option<u64>,
    pub thrashing_count: Option<u64>,
    pub thrashing_delay_total: Option<u64>,
    pub compact_count: Option<u64>,
    pub compact_delay_total: Option<u64>,
    pub ac_tgid: Option<u32>,
    /// Thread-group wall time so far, µs.
    pub ac_tgetime: Option<u64>,
    /// `huge_encode_dev` of the executable's filesystem; 0 for kernel threads.
    pub ac_exe_dev: Option<u64>,
    pub ac_exe_inode: Option<u64>,
    pub wpcopy_count: Option<u64>,
    pub wpcopy_delay_total: Option<u64>,
    pub irq_count: Option<u64>,
    pub irq_delay_total: Option<u64>,
    pub delay_extremes: Option<DelayExtremes>,
}

/// The exit status as wait(2) encodes it, decoded for the live tests that check the
/// records against the exits they caused (the report takes the status from the exit record).
#[cfg(test)]
impl TaskstatsRecord {
    /// The exit code for a normal exit (`WIFEXITED`), `None` if killed by a signal.
    pub fn exit_code(&self) -> Option<i32> {
        (self.ac_exitcode & 0x7f == 0).then_some(((self.ac_exitcode >> 8) & 0xff) as i32)
    }

    /// The fatal signal (`WTERMSIG`), `None` for a normal exit.
    pub fn term_signal(&self) -> Option<i32> {
        let sig = self.ac_exitcode & 0x7f;
        (sig != 0).then_some(sig as i32)
    }

    /// `WCOREDUMP`.
    pub fn core_dumped(&self) -> bool {
        self.term_signal().is_some() && self.ac_exitcode & 0x80 != 0
    }
}

/// Standard (version 2..14, 16+) offsets.
mod off {
    pub const VERSION: usize = 0;
    pub const EXITCODE: usize = 4;
    pub const FLAG: usize = 8;
    pub const NICE: usize = 9;
    pub const CPU_COUNT: usize = 16;
    pub const CPU_DELAY_TOTAL: usize = 24;
    pub const BLKIO_COUNT: usize = 32;
    pub const BLKIO_DELAY_TOTAL: usize = 40;
    pub const SWAPIN_COUNT: usize = 48;
    pub const SWAPIN_DELAY_TOTAL: usize = 56;
    pub const CPU_RUN_REAL_TOTAL: usize = 64;
    pub const CPU_RUN_VIRTUAL_TOTAL: usize = 72;
    pub const AC_COMM: usize = 80;
    pub const TS_COMM_LEN: usize = 32;
    pub const AC_SCHED: usize = 112;
    pub const AC_UID: usize = 120;
    pub const AC_GID: usize = 124;
    pub const AC_PID: usize = 128;
    pub const AC_PPID: usize = 132;
    pub const AC_BTIME: usize = 136;
    pub const AC_ETIME: usize = 144;
    pub const AC_UTIME: usize = 152;
    pub const AC_STIME: usize = 160;
    pub const AC_MINFLT: usize = 168;
    pub const AC_MAJFLT: usize = 176;
    pub const COREMEM: usize = 184;
    pub const VIRTMEM: usize = 192;
    pub const HIWATER_RSS: usize = 200;
    pub const HIWATER_VM: usize = 208;
    pub const READ_CHAR: usize = 216;
    pub const WRITE_CHAR: usize = 224;
    pub const READ_SYSCALLS: usize = 232;
    pub const WRITE_SYSCALLS: usize = 240;
    pub const READ_BYTES: usize = 248;
    pub const WRITE_BYTES: usize = 256;
    pub const CANCELLED_WRITE_BYTES: usize = 264;
    pub const NVCSW: usize = 272;
    pub const NIVCSW: usize = 280;
    pub const AC_UTIMESCALED: usize = 288;
    pub const AC_STIMESCALED: usize = 296;
    pub const CPU_SCALED_RUN_REAL_TOTAL: usize = 304;
    pub const FREEPAGES_COUNT: usize = 312;
    pub const FREEPAGES_DELAY_TOTAL: usize = 320;
    pub const THRASHING_COUNT: usize = 328;
    pub const THRASHING_DELAY_TOTAL: usize = 336;
    pub const AC_BTIME64: usize = 344;
    pub const COMPACT_COUNT: usize = 352;
    pub const COMPACT_DELAY_TOTAL: usize = 360;
    pub const AC_TGID: usize = 368;
    pub const AC_TGETIME: usize = 376;
    pub const AC_EXE_DEV: usize = 384;
    pub const AC_EXE_INODE: usize = 392;
    pub const WPCOPY_COUNT: usize = 400;
    pub const WPCOPY_DELAY_TOTAL: usize = 408;
    pub const IRQ_COUNT: usize = 416;
    pub const IRQ_DELAY_TOTAL: usize = 424;
    /// Version 16: 16 × u64 max/min pairs in category order
    /// cpu, blkio, swapin, freepages, thrashing, compact, wpcopy, irq.
    pub const DELAY_EXTREMES_V16: usize = 432;
}

/// Version 15's max/min pairs, one right after each category's `*_delay_total`.
pub(crate) const DELAY_EXTREMES_V15: [usize; 8] = [32, 64, 96, 376, 408, 448, 512, 544];

/// Where a standard-layout field lives in version 15 (each earlier max/min pair shifts it).
pub(crate) const fn v15_offset(std: usize) -> usize {
    match std {
        0..=31 => std,
        32..=47 => std + 16,
        48..=63 => std + 32,
        64..=327 => std + 48,
        328..=343 => std + 64,
        344..=367 => std + 80,
        368..=415 => std + 96,
        _ => std + 112,
    }
}

/// The bytes a record of `version` must at least have; `None` for versions not decoded.
pub const fn min_size(version: u16) -> Option<usize> {
    Some(match version {
        0 | 1 => return None,
        2 => 248,
        3 => 272,
        4 => 288,
        5 => 304,
        6 => 312,
        7 | 8 => 328,
        9 => 344,
        10 => 352,
        11 => 368,
        12 => 400,
        13 => 416,
        14 => 432,
        _ => 560,
    })
}

/// The newest version whose struct is exactly `len` bytes, for a record that reports no
/// version (size 560 is read as version 16, not the short-lived 15).
pub(crate) fn version_for_size(len: usize) -> Option<u16> {
    Some(match len {
        248 => 2,
        272 => 3,
        288 => 4,
        304 => 5,
        312 => 6,
        328 => 8,
        344 => 9,
        352 => 10,
        368 => 11,
        400 => 12,
        416 => 13,
        432 => 14,
        560.. => 16,
        _ => return None,
    })
}

struct Reader<'a> {
    b: &'a [u8],
    v15: bool,
}

impl Reader<'_> {
    fn at(&self, std: usize) -> usize {
        if self.v15 {
            v15_offset(std)
        } else {
            std
        }
    }
    // Lengths are checked against `min_size` before any read, so the fallbacks below are
    // unreachable; they keep a layout mistake from ever becoming a panic.
    fn u8(&self, std: usize) -> u8 {
        self.b.get(self.at(std)).copied().unwrap_or(0)
    }
    fn u32(&self, std: usize) -> u32 {
        ne_u32(self.b, self.at(std)).unwrap_or(0)
    }
    fn u64(&self, std: usize) -> u64 {
        ne_u64(self.b, self.at(std)).unwrap_or(0)
    }
    fn opt(&self, since: u16, version: u16, std: usize) -> Option<u64> {
        (version >= since).then(|| self.u64(std))
    }
}

/// The maximum and minimum delays of version 15 and later (two layouts: 15 put them apart).
fn delay_extremes(b: &[u8], version: u16) -> DelayExtremes {
    let pair = |i: usize| {
        let at = if version == 15 {
            DELAY_EXTREMES_V15[i]
        } else {
            off::DELAY_EXTREMES_V16 + 16 * i
        };
        (ne_u64(b, at).unwrap_or(0), ne_u64(b, at + 8).unwrap_or(0))
    };
    let (cpu_delay_max, cpu_delay_min) = pair(0);
    let (blkio_delay_max, blkio_delay_min) = pair(1);
    let (swapin_delay_max, swapin_delay_min) = pair(2);
    let (freepages_delay_max, freepages_delay_min) = pair(3);
    let (thrashing_delay_max, thrashing_delay_min) = pair(4);
    let (compact_delay_max, compact_delay_min) = pair(5);
    let (wpcopy_delay_max, wpcopy_delay_min) = pair(6);
    let (irq_delay_max, irq_delay_min) = pair(7);
    DelayExtremes {
        cpu_delay_max,
        cpu_delay_min,
        blkio_delay_max,
        blkio_delay_min,
        swapin_delay_max,
        swapin_delay_min,
        freepages_delay_max,
        freepages_delay_min,
        thrashing_delay_max,
        thrashing_delay_min,
        compact_delay_max,
        compact_delay_min,
        wpcopy_delay_max,
        wpcopy_delay_min,
        irq_delay_max,
        irq_delay_min,
    }
}

/// Decodes the payload of a `TASKSTATS_TYPE_STATS` attribute.
///
/// `version_hint` replaces a reported version of 0 (the kernel's tgid exit records).
pub(crate) fn parse_stats(
    kind: RecordKind,
    id: u32,
    b: &[u8],
    version_hint: Option<u16>,
) -> Result<TaskstatsRecord, Malformed> {
    let reported =
        ne_u16(b, off::VERSION).ok_or(Malformed("taskstats shorter than its version"))?;
    let version = match reported {
        0 => version_hint
            .or_else(|| version_for_size(b.len()))
            .ok_or(Malformed("taskstats without a version, of no known size"))?,
        v => v,
    };
    let need = min_size(version).ok_or(Malformed("taskstats version 1 layout is not decoded"))?;
    if b.len() < need {
        return Err(Malformed("taskstats shorter than its version requires"));
    }
    let r = Reader {
        b,
        v15: version == 15,
    };
    let comm_at = r.at(off::AC_COMM);
    let comm = b.get(comm_at..comm_at + off::TS_COMM_LEN).unwrap_or(&[]);
    let comm = &comm[..comm.iter().position(|&c| c == 0).unwrap_or(comm.len())];

    let delay_extremes = (version >= 15).then(|| delay_extremes(b, version));

    let v = version;
    Ok(TaskstatsRecord {
        kind,
        id,
        version,
        ac_exitcode: r.u32(off::EXITCODE),
        ac_flag: r.u8(off::FLAG),
        ac_nice: r.u8(off::NICE) as i8,
        ac_sched: r.u8(off::AC_SCHED),
        ac_comm: Comm::new(comm),
        ac_uid: r.u32(off::AC_UID),
        ac_gid: r.u32(off::AC_GID),
        ac_pid: r.u32(off::AC_PID),
        ac_ppid: r.u32(off::AC_PPID),
        ac_btime: r.u32(off::AC_BTIME),
        ac_btime64: r.opt(10, v, off::AC_BTIME64),
        ac_etime_us: r.u64(off::AC_ETIME),
        ac_utime_us: r.u64(off::AC_UTIME),
        ac_stime_us: r.u64(off::AC_STIME),
        ac_minflt: r.u64(off::AC_MINFLT),
        ac_majflt: r.u64(off::AC_MAJFLT),
        coremem: r.u64(off::COREMEM),
        virtmem: r.u64(off::VIRTMEM),
        hiwater_rss_kib: r.u64(off::HIWATER_RSS),
        hiwater_vm_kib: r.u64(off::HIWATER_VM),
        read_char: r.u64(off::READ_CHAR),
        write_char: r.u64(off::WRITE_CHAR),
        read_syscalls: r.u64(off::READ_SYSCALLS),
        write_syscalls: r.u64(off::WRITE_SYSCALLS),
        read_bytes: r.opt(3, v, off::READ_BYTES),
        write_bytes: r.opt(3, v, off::WRITE_BYTES),
        cancelled_write_bytes: r.opt(3, v, off::CANCELLED_WRITE_BYTES),
        nvcsw: r.opt(4, v, off::NVCSW),
        nivcsw: r.opt(4, v, off::NIVCSW),
        ac_utimescaled: r.opt(5, v, off::AC_UTIMESCALED),
        ac_stimescaled: r.opt(5, v, off::AC_STIMESCALED),
        cpu_scaled_run_real_total: r.opt(6, v, off::CPU_SCALED_RUN_REAL_TOTAL),
        cpu_count: r.u64(off::CPU_COUNT),
        cpu_delay_total: r.u64(off::CPU_DELAY_TOTAL),
        cpu_run_real_total: r.u64(off::CPU_RUN_REAL_TOTAL),
        cpu_run_virtual_total: r.u64(off::CPU_RUN_VIRTUAL_TOTAL),
        blkio_count: r.u64(off::BLKIO_COUNT),
        blkio_delay_total: r.u64(off::BLKIO_DELAY_TOTAL),
        swapin_count: r.u64(off::SWAPIN_COUNT),
        swapin_delay_total: r.u64(off::SWAPIN_DELAY_TOTAL),
        freepages_count: r.opt(7, v, off::FREEPAGES_COUNT),
        freepages_delay_total: r.opt(7, v, off::FREEPAGES_DELAY_TOTAL),
        thrashing_count: r.opt(9, v, off::THRASHING_COUNT),
        thrashing_delay_total: r.opt(9, v, off::THRASHING_DELAY_TOTAL),
        compact_count: r.opt(11, v, off::COMPACT_COUNT),
        compact_delay_total: r.opt(11, v, off::COMPACT_DELAY_TOTAL),
        ac_tgid: (v >= 12).then(|| r.u32(off::AC_TGID)),
        ac_tgetime: r.opt(12, v, off::AC_TGETIME),
        ac_exe_dev: r.opt(12, v, off::AC_EXE_DEV),
        ac_exe_inode: r.opt(12, v, off::AC_EXE_INODE),
        wpcopy_count: r.opt(13, v, off::WPCOPY_COUNT),
        wpcopy_delay_total: r.opt(13, v, off::WPCOPY_DELAY_TOTAL),
        irq_count: r.opt(14, v, off::IRQ_COUNT),
        irq_delay_total: r.opt(14, v, off::IRQ_DELAY_TOTAL),
        delay_extremes,
    })
}

/// Test support: writes the standard-layout offsets so tests can build records by field.
#[cfg(test)]
pub(crate) mod layout {
    pub(crate) use super::off::*;
    pub(crate) use super::v15_offset;
    pub(crate) use super::DELAY_EXTREMES_V15;
}
