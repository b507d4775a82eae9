//! The process and image model `trace` and `watch` share: a process's identity and how it
//! ended, and what one program image ran.

use spacetime_common::{flags, EventHeader, MemStats};

use crate::kernel::events::Comm;
use crate::util::arg_area::{argv_of, without_final_nul};

/// A process's identity: pids are reused, (tgid, start time of its group leader) is not.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub tgid: u32,
    pub start_ns: u64,
}

impl Key {
    /// The process a record is about.
    pub fn of(h: &EventHeader) -> Key {
        Key {
            tgid: h.tgid,
            start_ns: h.leader_start_ns,
        }
    }
}

/// A [`Key`] or none, in 16 bytes where `Option<Key>` takes 24: every process keeps one.
/// None is a start at `u64::MAX`, which no process has (see [`crate::model::opt_ns::OptNs`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OptKey(Key);

impl OptKey {
    pub const NONE: OptKey = OptKey(Key {
        tgid: 0,
        start_ns: u64::MAX,
    });

    pub const fn get(self) -> Option<Key> {
        match self.0.start_ns {
            u64::MAX => None,
            _ => Some(self.0),
        }
    }

    pub const fn is_some(self) -> bool {
        self.0.start_ns != u64::MAX
    }
}

impl Default for OptKey {
    fn default() -> OptKey {
        OptKey::NONE
    }
}

impl From<Option<Key>> for OptKey {
    /// A key starting at `u64::MAX` (584 years of uptime) is kept one ns earlier.
    fn from(key: Option<Key>) -> OptKey {
        key.map_or(OptKey::NONE, |k| {
            OptKey(Key {
                tgid: k.tgid,
                start_ns: k.start_ns.min(u64::MAX - 1),
            })
        })
    }
}

impl PartialEq<Option<Key>> for OptKey {
    fn eq(&self, other: &Option<Key>) -> bool {
        self.get() == *other
    }
}

impl std::fmt::Debug for OptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

const _: () = assert!(size_of::<OptKey>() == 16);

/// How far a start time read from /proc (whole clock ticks, converted against two clocks) may
/// lie from the kernel's exact one and still be the same process.
pub fn proc_start_slack_ns() -> u64 {
    let tick = 1_000_000_000 / crate::util::clock::ticks_per_s().max(1);
    (2 * tick + 1_000_000).max(50_000_000)
}

/// Whether a start time read from /proc is that of the process a record says started at
/// `exact_ns`.
pub fn same_start(approx_ns: u64, exact_ns: u64) -> bool {
    exact_ns.abs_diff(approx_ns) <= proc_start_slack_ns()
}

/// How a process ended, decoded from a wait status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Code(i32),
    Signal { signal: i32, core_dumped: bool },
}

impl ExitStatus {
    /// Decodes a wait(2) status (`task->exit_code` has the same encoding).
    pub fn from_wait(status: u32) -> ExitStatus {
        let signal = (status & 0x7f) as i32;
        if signal == 0 {
            ExitStatus::Code(((status >> 8) & 0xff) as i32)
        } else {
            ExitStatus::Signal {
                signal,
                core_dumped: status & 0x80 != 0,
            }
        }
    }

    /// The status a shell reports: the code, or 128 + the signal.
    pub fn shell_code(&self) -> i32 {
        match *self {
            ExitStatus::Code(c) => c,
            ExitStatus::Signal { signal, .. } => 128 + signal,
        }
    }
}

/// How a process ended, or not yet, in 2 bytes where `Option<ExitStatus>` takes 8: the wait
/// status's low 16 bits, all [`ExitStatus::from_wait`] reads. None is `u16::MAX`, which would
/// read as signal 127: Linux has 64 signals, and a dead task's status is never a stopped
/// one's (low byte 0x7f).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct OptExit(u16);

impl OptExit {
    pub const NONE: OptExit = OptExit(u16::MAX);

    /// A dead task's `exit_code` (a wait status).
    pub fn from_wait(status: u32) -> OptExit {
        OptExit(status as u16)
    }

    /// `e` as the wait status it was decoded from, when a dead task can have it: a code of
    /// 0–255, or a signal of 1–126 (a saved report's exit, read back).
    pub fn of(e: ExitStatus) -> Option<OptExit> {
        match e {
            ExitStatus::Code(c) => u8::try_from(c).ok().map(|c| OptExit(u16::from(c) << 8)),
            ExitStatus::Signal {
                signal,
                core_dumped,
            } => u16::try_from(signal)
                .ok()
                .filter(|s| (1..=126).contains(s))
                .map(|s| OptExit(s | if core_dumped { 0x80 } else { 0 })),
        }
    }

    pub fn get(self) -> Option<ExitStatus> {
        (self != OptExit::NONE).then(|| ExitStatus::from_wait(u32::from(self.0)))
    }
}

impl Default for OptExit {
    fn default() -> OptExit {
        OptExit::NONE
    }
}

impl std::fmt::Debug for OptExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// The end-of-image memory figures an image keeps of the kernel's [`MemStats`] (56 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndMem {
    pub peak_rss_pages: u64,
    /// As the kernel computes it: what taskstats reports.
    pub kernel_peak_rss_pages: u64,
    pub peak_vm_pages: u64,
    /// [`flags`] `MEM_*`.
    pub flags: u32,
}

impl EndMem {
    /// The figures an image's end record gives of its own memory: none on its parent's address
    /// space (vfork) or when the kernel had no mm to read (kernel threads).
    pub fn of_image(m: MemStats, shared_mm: bool) -> Option<EndMem> {
        (!shared_mm && m.flags & flags::MEM_VALID != 0).then(|| EndMem::from(m))
    }
}

/// An ended image's peak RSS in pages: 0 on its parent's address space (vfork), `None` when
/// the kernel had no mm to read.
pub fn end_peak_pages(m: &MemStats, shared_mm: bool) -> Option<u64> {
    if shared_mm {
        Some(0)
    } else {
        EndMem::of_image(*m, false).map(|e| e.peak_rss_pages)
    }
}

impl From<MemStats> for EndMem {
    fn from(m: MemStats) -> EndMem {
        EndMem {
            peak_rss_pages: m.peak_rss_pages(),
            kernel_peak_rss_pages: m.kernel_peak_rss_pages(),
            peak_vm_pages: m.peak_vm_pages(),
            flags: m.flags,
        }
    }
}

/// What an image ran, shared (behind an `Arc`) by a forked child's inherited image with its
/// parent's instead of copied: a 100k-process fork storm would hold 100k copies. Bytes exactly
/// as the kernel had them: neither paths nor arguments need be UTF-8.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Names {
    /// The path passed to execve (for an inherited image, the parent's; for a process found
    /// in /proc, /proc/PID/exe).
    pub exe: Box<[u8]>,
    pub comm: Comm,
    /// The argument area, NUL-separated, without its final NUL: one allocation for all
    /// arguments.
    pub args: Box<[u8]>,
    /// Every argv byte arrived and none was cut.
    pub argv_complete: bool,
}

impl Names {
    /// Names from an argument area as the kernel or /proc gives it (its final NUL, if any,
    /// is dropped).
    pub fn from_area(exe: Box<[u8]>, comm: Comm, area: &[u8], complete: bool) -> Names {
        Names {
            exe,
            comm,
            args: without_final_nul(area).into(),
            argv_complete: complete,
        }
    }

    /// The arguments, exact bytes.
    pub fn argv(&self) -> impl Iterator<Item = &[u8]> + Clone {
        argv_of(&self.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(area: &[u8]) -> Vec<Vec<u8>> {
        Names::from_area(Box::default(), Comm::default(), area, true)
            .argv()
            .map(<[u8]>::to_vec)
            .collect()
    }

    #[test]
    fn argv_of_an_area_with_and_without_its_final_nul() {
        assert_eq!(argv(b"ls\0-l\0"), [b"ls".to_vec(), b"-l".to_vec()]);
        assert_eq!(argv(b"ls\0-l"), [b"ls".to_vec(), b"-l".to_vec()]);
        // A trailing empty argument stays one.
        assert_eq!(argv(b"a\0\0"), [b"a".to_vec(), Vec::new()]);
        assert!(argv(b"").is_empty());
        assert_eq!(
            crate::util::arg_area::area_into_args(b"a\0\0".to_vec()).as_ref(),
            b"a\0"
        );
        assert_eq!(
            crate::util::arg_area::area_into_args(b"a".to_vec()).as_ref(),
            b"a"
        );
    }

    #[test]
    fn an_images_end_memory_is_its_own_or_none() {
        let m = MemStats {
            hiwater_rss_pages: 300,
            flags: flags::MEM_VALID,
            ..MemStats::default()
        };
        assert_eq!(
            EndMem::of_image(m, false).map(|e| e.peak_rss_pages),
            Some(300)
        );
        assert_eq!(end_peak_pages(&m, false), Some(300));
        // On its parent's address space: the parent's figures, not its own.
        assert_eq!(EndMem::of_image(m, true), None);
        assert_eq!(end_peak_pages(&m, true), Some(0));
        let no_mm = MemStats { flags: 0, ..m };
        assert_eq!(EndMem::of_image(no_mm, false), None);
        assert_eq!(end_peak_pages(&no_mm, false), None);
    }

    #[test]
    fn a_compact_exit_reads_back_every_exit_and_signal() {
        for code in 0..=255u32 {
            let status = code << 8;
            assert_eq!(
                OptExit::from_wait(status).get(),
                Some(ExitStatus::Code(code as i32))
            );
        }
        for signal in 1..=64u32 {
            for core in [0, 0x80] {
                let status = signal | core;
                let got = OptExit::from_wait(status).get();
                assert_eq!(got, Some(ExitStatus::from_wait(status)), "{status:#x}");
            }
        }
        assert_eq!(OptExit::default().get(), None);
    }

    #[test]
    fn a_compact_key_reads_back_what_it_was_given() {
        for (tgid, start_ns) in [(0, 0), (1, 5), (u32::MAX, u64::MAX - 1)] {
            let key = Key { tgid, start_ns };
            assert_eq!(OptKey::from(Some(key)).get(), Some(key), "{key:?}");
            assert!(OptKey::from(Some(key)).is_some());
        }
        assert_eq!(OptKey::from(None).get(), None);
        assert_eq!(OptKey::default(), None);
        assert!(!OptKey::NONE.is_some());
        // The one start kept for none is never a known key's.
        let last = Key {
            tgid: 7,
            start_ns: u64::MAX,
        };
        assert_eq!(
            OptKey::from(Some(last)).get().map(|k| k.start_ns),
            Some(u64::MAX - 1)
        );
    }

    #[test]
    fn a_proc_start_time_matches_within_its_slack_only() {
        let exact = 5_000_000_000;
        let slack = proc_start_slack_ns();
        assert!(slack >= 50_000_000, "{slack}");
        assert!(same_start(exact - 10_000_000, exact));
        assert!(same_start(exact + slack, exact));
        // A process that reused the pid a little later is another one.
        assert!(!same_start(exact + slack + 1, exact));
    }
}
