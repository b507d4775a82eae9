//! What spacetime itself costs: its own CPU time (getrusage of its own process, every thread;
//! the traced processes are other processes after fork+exec and never count here), its peak
//! RSS (VmHWM: ru_maxrss would carry the peak of whatever ran spacetime, since exec folds the
//! pre-exec image's peak into it — the very error spacetime exists to avoid), and the time its
//! programs spend in the kernel. Serialized as the `"spacetime"`
//! object of `trace --json` and of `watch --summary-json`, rendered as one `-v` line.

use std::fmt::Write as _;

use serde::Serialize;

use crate::{
    kernel::loader::{KernelProgramStats, ProgramStats},
    util::units::{bytes, duration_ns},
};

/// spacetime's own cost, measured when the report is made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct OwnCost {
    /// CPU time of spacetime's own process (all its threads), in user and kernel mode.
    pub user_ns: u64,
    pub sys_ns: u64,
    /// spacetime's own peak RSS (VmHWM of its own address space).
    pub peak_rss_bytes: u64,
    /// `kernel.bpf_stats_enabled` was 1: `kernel_programs` figures are counted.
    pub bpf_stats_enabled: bool,
    /// Time spent in each loaded kernel program (zeros while the kernel does not count).
    pub kernel_programs: Vec<ProgramStats>,
    /// spacetime's start-up: environment checks, kernel offsets, loading (verification
    /// included) and attaching its programs, in µs.
    pub load_us: u64,
}

impl OwnCost {
    /// getrusage now, with what `kernel` adds: its start-up and its programs' statistics
    /// (read while they are still attached; none for an agent's).
    pub fn of(kernel: &dyn crate::kernel::source::KernelSource) -> OwnCost {
        OwnCost {
            load_us: (kernel.capabilities().load_ms * 1e3) as u64,
            ..OwnCost::from_parts(rusage_self(), vm_hwm_bytes(), kernel.program_stats())
        }
    }

    /// `vm_hwm`: VmHWM in bytes; without it, ru_maxrss (an upper bound) stands in.
    fn from_parts(
        usage: Option<libc::rusage>,
        vm_hwm: Option<u64>,
        kernel: KernelProgramStats,
    ) -> OwnCost {
        let (user_ns, sys_ns, maxrss) = usage.map_or((0, 0, 0), |u| {
            (
                timeval_ns(u.ru_utime),
                timeval_ns(u.ru_stime),
                (u.ru_maxrss.max(0) as u64).saturating_mul(1024),
            )
        });
        let peak_rss_bytes = vm_hwm.unwrap_or(maxrss);
        OwnCost {
            user_ns,
            sys_ns,
            peak_rss_bytes,
            bpf_stats_enabled: kernel.stats_enabled,
            kernel_programs: kernel.programs,
            load_us: 0,
        }
    }

    /// Whether the kernel counted program runs (while enabled now, or at some time before).
    pub fn programs_counted(&self) -> bool {
        self.bpf_stats_enabled || self.kernel_programs.iter().any(|p| p.run_cnt > 0)
    }

    /// One line for `-v`: own CPU and peak RSS, and each program's time per run.
    pub fn line(&self) -> String {
        let mut s = format!(
            "spacetime itself: user {} · sys {} · peak RSS {}",
            duration_ns(self.user_ns),
            duration_ns(self.sys_ns),
            bytes(self.peak_rss_bytes)
        );
        if !self.programs_counted() {
            s.push_str(
                " · kernel programs not timed (sysctl kernel.bpf_stats_enabled=1 times them)",
            );
            return s;
        }
        s.push_str(" · in the kernel per run:");
        let mut first = true;
        for p in self.kernel_programs.iter().filter(|p| p.run_cnt > 0) {
            let _ = write!(
                s,
                "{} {} {} ns ×{}",
                if first { "" } else { "," },
                p.name,
                p.ns_per_run.unwrap_or(0),
                p.run_cnt
            );
            first = false;
        }
        if first {
            s.push_str(" no runs counted");
        }
        s
    }
}

fn timeval_ns(t: libc::timeval) -> u64 {
    (t.tv_sec.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_usec.max(0) as u64 * 1000)
}

/// The peak RSS of spacetime's own address space, from /proc/self/status.
fn vm_hwm_bytes() -> Option<u64> {
    crate::util::proc_text::with_one_piece_text("/proc/self/status", parse_vm_hwm).ok()?
}

fn parse_vm_hwm(status: &str) -> Option<u64> {
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// getrusage(RUSAGE_SELF): every thread of this process, none of its children.
fn rusage_self() -> Option<libc::rusage> {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        log::debug!("getrusage: {}", std::io::Error::last_os_error());
        return None;
    }
    Some(u)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(user_us: i64, sys_us: i64, maxrss_kib: i64) -> libc::rusage {
        // SAFETY: an all-zero rusage is valid.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        u.ru_utime = libc::timeval {
            tv_sec: user_us / 1_000_000,
            tv_usec: user_us % 1_000_000,
        };
        u.ru_stime = libc::timeval {
            tv_sec: sys_us / 1_000_000,
            tv_usec: sys_us % 1_000_000,
        };
        u.ru_maxrss = maxrss_kib;
        u
    }

    fn programs(enabled: bool, runs: &[(&str, u64, u64)]) -> KernelProgramStats {
        KernelProgramStats {
            stats_enabled: enabled,
            programs: runs
                .iter()
                .map(|&(n, c, t)| ProgramStats::new(n.into(), c, t))
                .collect(),
        }
    }

    #[test]
    fn serializes_the_documented_keys() {
        let cost = OwnCost::from_parts(
            Some(usage(1_500_000, 250, 20_480)),
            None,
            programs(true, &[("sched_process_exit", 10, 5_000)]),
        );
        assert_eq!(
            serde_json::to_value(&cost).expect("serialize"),
            serde_json::json!({
                "user_ns": 1_500_000_000u64, "sys_ns": 250_000, "peak_rss_bytes": 20 << 20,
                "bpf_stats_enabled": true,
                "kernel_programs": [{"name": "sched_process_exit", "run_cnt": 10,
                                     "run_time_ns": 5000, "ns_per_run": 500,
                                     "verified_insns": null, "load_us": null}],
                "load_us": 0
            })
        );
    }

    #[test]
    fn peak_is_vm_hwm_not_ru_maxrss() {
        let status = "Name:\tspacetime\nVmPeak:\t  900000 kB\nVmHWM:\t   28892 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(28892 * 1024));
        assert_eq!(parse_vm_hwm("VmRSS: 1 kB\n"), None);
        // ru_maxrss carries the 200 MiB of the process that exec'd spacetime; VmHWM does not.
        let cost = OwnCost::from_parts(
            Some(usage(1, 1, 200 << 10)),
            parse_vm_hwm(status),
            KernelProgramStats::default(),
        );
        assert_eq!(cost.peak_rss_bytes, 28892 * 1024);
    }

    #[test]
    fn no_rusage_reads_zero() {
        let cost = OwnCost::from_parts(None, None, KernelProgramStats::default());
        assert_eq!((cost.user_ns, cost.sys_ns, cost.peak_rss_bytes), (0, 0, 0));
    }

    #[test]
    fn line_times_programs_only_when_counted() {
        let off = OwnCost::from_parts(
            Some(usage(2000, 1000, 4096)),
            None,
            programs(false, &[("sched_process_fork", 0, 0)]),
        );
        let line = off.line();
        assert!(line.starts_with("spacetime itself: user "), "{line}");
        assert!(line.contains("peak RSS 4.0 MiB"), "{line}");
        assert!(line.contains("bpf_stats_enabled=1"), "{line}");
        let on = OwnCost::from_parts(
            Some(usage(2000, 1000, 4096)),
            None,
            programs(
                true,
                &[
                    ("sched_process_exec", 0, 0),
                    ("sched_process_exit", 3, 3000),
                ],
            ),
        );
        let line = on.line();
        assert!(
            line.ends_with("in the kernel per run: sched_process_exit 1000 ns ×3"),
            "{line}"
        );
    }
}
