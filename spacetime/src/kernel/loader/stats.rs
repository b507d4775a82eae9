//! What the loaded programs cost in the kernel: run counts and run time, as the kernel keeps
//! them while `kernel.bpf_stats_enabled` is on.

use aya::Ebpf;

/// Where the kernel says whether it counts BPF program runs and their time.
const BPF_STATS_SYSCTL: &str = "/proc/sys/kernel/bpf_stats_enabled";

/// One loaded program's run count and run time, as the kernel keeps them (only while
/// `kernel.bpf_stats_enabled` is 1: both stay 0 otherwise).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProgramStats {
    /// The program's name in the object (the kernel keeps 15 characters of it); a build
    /// without fetch atomics goes by its program's name (see `Atomics`).
    pub name: String,
    pub run_cnt: u64,
    pub run_time_ns: u64,
    /// `run_time_ns / run_cnt`; null when the program never ran while counted.
    pub ns_per_run: Option<u64>,
    /// Instructions the verifier processed when it loaded the program (its cost at
    /// start-up); null where the kernel does not say (before 5.16).
    pub verified_insns: Option<u32>,
    /// Wall time of the program's load (verification included), in µs; null for programs
    /// loaded outside the timed path.
    pub load_us: Option<u64>,
}

impl ProgramStats {
    pub fn new(name: String, run_cnt: u64, run_time_ns: u64) -> ProgramStats {
        ProgramStats {
            name,
            run_cnt,
            run_time_ns,
            ns_per_run: run_time_ns.checked_div(run_cnt),
            verified_insns: None,
            load_us: None,
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

/// `struct bpf_prog_info` up to `recursion_misses` (uapi/linux/bpf.h): the field aya's
/// `ProgramInfo` does not expose, at its fixed offset.
const PROG_INFO_LEN: usize = 216;
const RECURSION_MISSES_AT: usize = 208;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// The kernel's count of runs of program `fd` skipped because it was already running on
/// that CPU (kernels before 5.12 do not count: 0).
fn prog_recursion_misses(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    #[repr(C, align(8))]
    struct Info([u8; PROG_INFO_LEN]);
    #[repr(C)]
    struct Attr {
        bpf_fd: u32,
        info_len: u32,
        info: u64,
    }
    let mut info = Info([0; PROG_INFO_LEN]);
    let mut attr = Attr {
        bpf_fd: fd.as_raw_fd() as u32,
        info_len: PROG_INFO_LEN as u32,
        info: info.0.as_mut_ptr() as u64,
    };
    // SAFETY: bpf(2) writes at most `info_len` bytes into `info`.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            &mut attr as *mut Attr,
            std::mem::size_of::<Attr>(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if (attr.info_len as usize) < RECURSION_MISSES_AT + 8 {
        return Ok(0);
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(&info.0[RECURSION_MISSES_AT..RECURSION_MISSES_AT + 8]);
    Ok(u64::from_ne_bytes(v))
}

/// Runs of every loaded program of `ebpf` that the kernel skipped (see
/// `prog_recursion_misses`).
pub(super) fn recursion_misses(ebpf: &Ebpf) -> u64 {
    use std::os::fd::AsFd;
    ebpf.programs()
        .filter_map(|(name, prog)| {
            let fd = prog.fd().ok()?;
            prog_recursion_misses(fd.as_fd())
                .inspect_err(|e| log::debug!("program {name}: no recursion count: {e}"))
                .ok()
        })
        .sum()
}

/// Each raw-tracepoint program's load time (µs), verification included, measured at load.
pub(super) struct LoadTimes(pub(super) Vec<(String, u64)>);

impl LoadTimes {
    /// Run counts and times of every program loaded in `ebpf`, and whether the kernel is
    /// counting them. Never fails: a program whose figures cannot be read is left out (and
    /// logged).
    pub(super) fn program_stats(&self, ebpf: &Ebpf) -> KernelProgramStats {
        let stats_enabled = std::fs::read_to_string(BPF_STATS_SYSCTL)
            .inspect_err(|e| log::debug!("reading {BPF_STATS_SYSCTL}: {e}"))
            .ok()
            .and_then(|t| parse_sysctl_flag(&t))
            .unwrap_or(false);
        let mut programs: Vec<ProgramStats> = ebpf
            .programs()
            // A program not loaded on this kernel (no fentry target, no rss_stat) has no info.
            .filter_map(|(name, prog)| match prog.info() {
                Ok(info) => Some(ProgramStats {
                    verified_insns: info.verified_instruction_count(),
                    load_us: self.0.iter().find(|(n, _)| n == name).map(|p| p.1),
                    ..ProgramStats::new(
                        super::atomics::program_of(name).to_string(),
                        info.run_count(),
                        u64::try_from(info.run_time().as_nanos()).unwrap_or(u64::MAX),
                    )
                }),
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
                               "run_time_ns": 1000, "ns_per_run": 250,
                               "verified_insns": null, "load_us": null})
        );
    }
}
