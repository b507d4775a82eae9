//! What the loaded programs cost in the kernel: run counts and run time, as the kernel keeps
//! them while `kernel.bpf_stats_enabled` is on.

use super::Probes;

/// Where the kernel says whether it counts BPF program runs and their time.
const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// One loaded program's run count and run time, as the kernel keeps them (only while
/// `kernel.bpf_stats_enabled` is 1: both stay 0 otherwise).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ProgramStats {
    /// The program's name in the object (the kernel keeps 15 characters of it).
    pub name: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    /// `run_time_ns / run_cnt`; null when the program never ran while counted.
    pub ns_per_run: Option<u64>,
}

impl ProgramStats {
    pub fn new(name: String, run_cnt: u64, run_time_ns: u64) -> ProgramStats {
        ProgramStats {
            name,
            run_cnt,
            run_time_ns,
            ns_per_run: run_time_ns.checked_div(run_cnt),
        }
    }
}

/// The kernel's statistics of every loaded program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelProgramStats {
    /// `kernel.bpf_stats_enabled` read 1 (false also when it could not be read).
    pub stats_enabled: bool,
    /// By name; programs present in the object but not loaded on this kernel are left out.
    pub programs: Vec<ProgramStats>,
}

/// `kernel.bpf_stats_enabled`'s value, as the sysctl file holds it.
pub fn parse_sysctl_flag(text: &str) -> Option<bool> {
    match text.trim().parse::<u32>().ok()? {
        0 => Some(false),
        _ => Some(true),
    }
}

impl Probes {
    /// Run counts and times of every loaded program, and whether the kernel is counting them.
    /// Never fails: a program whose figures cannot be read is left out (and logged).
    pub fn program_stats(&self) -> KernelProgramStats {
        let stats_enabled = std::fs::read_to_string(BPF_STATS_SYSCTL)
            .inspect_err(|e| log::debug!("reading {BPF_STATS_SYSCTL}: {e}"))
            .ok()
            .and_then(|t| parse_sysctl_flag(&t))
            .unwrap_or(false);
        let mut programs: Vec<ProgramStats> = self
            .ebpf
            .programs()
            // A program not loaded on this kernel (no fentry target, no rss_stat) has no info.
            .filter_map(|(name, prog)| match prog.info() {
                Ok(info) => Some(ProgramStats::new(
                    name.to_string(),
                    info.run_count(),
                    u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
                )),
                Err(e) => {
                    log::debug!("no statistics for program {name}: {e}");
                    None
                }
            })
            .collect();
        programs.sort_by(|a, b| a.name.cmp(&b.name));
        KernelProgramStats {
            stats_enabled,
            programs,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_flag() {
        assert_eq!(parse_sysctl_flag("0\n"), Some(false));
        assert_eq!(parse_sysctl_flag("1\n"), Some(true));
        assert_eq!(parse_sysctl_flag(""), None);
        assert_eq!(parse_sysctl_flag("on"), None);
    }

    #[test]
    fn ns_per_run() {
        let p = ProgramStats::new("sched_process_exit".into(), 4, 1000);
        assert_eq!(p.ns_per_run, Some(250));
        assert_eq!(ProgramStats::new("x".into(), 0, 0).ns_per_run, None);
        let v = serde_json::to_value(&p).expect("serialize");
        assert_eq!(
            v,
            serde_json::json!({"name": "sched_process_exit", "run_cnt": 4,
                               "run_time_ns": 1000, "ns_per_run": 250})
        );
    }
}
