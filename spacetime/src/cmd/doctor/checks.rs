//! What can be told without loading anything: the kernel and its BTF, this process's
//! capabilities, kernel lockdown, the hooks the kernel's BTF says spacetime will use (the 6.1
//! and the 6.2+/6.10+/6.16+ paths), delay accounting, the PID namespace.

use spacetime_common::{rss_layout, MAX_EXACT_CPUS};

use super::{Check, Status};
use crate::kernel::{
    btf::Btf,
    loader::{possible_cpus, FentryHook},
    offsets::{self, MemHook, Resolved},
    taskstats::{delayacct_enabled, delayacct_switch, DelayAcctSwitch},
};
use crate::util::caps::{self, Cap, CapSet};

const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
const LOCKDOWN: &str = "/sys/kernel/security/lockdown";

/// The oldest kernel spacetime is tested on (Debian 11's 5.10): the README and the package say
/// the same.
pub const MIN_KERNEL: (u32, u32) = (5, 10);

/// `MAJOR.MINOR` of a kernel release (`6.1.0-57-cloud-amd64`).
fn major_minor(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// The kernel's release, whether it describes itself (BTF), and the oldest spacetime supports.
pub fn kernel(release: &str) -> Check {
    let (ma, mi) = MIN_KERNEL;
    let old = major_minor(release).is_some_and(|v| v < MIN_KERNEL);
    match std::fs::metadata(BTF_PATH) {
        Ok(m) => Check::new(
            "kernel",
            if old { Status::Limited } else { Status::Ok },
            format!(
                "Linux {release} with BTF ({BTF_PATH}, {:.1} MiB); {}",
                m.len() as f64 / (1 << 20) as f64,
                match old {
                    true => format!(
                        "older than {ma}.{mi}, the oldest spacetime is tested on: the programs \
                         below say what loads"
                    ),
                    false => format!("spacetime supports {ma}.{mi} and later"),
                }
            ),
        ),
        Err(e) => Check::new(
            "kernel",
            Status::No,
            format!(
                "Linux {release} without BTF ({BTF_PATH}: {e}): spacetime needs Linux {ma}.{mi} \
                 or later built with CONFIG_DEBUG_INFO_BTF=y"
            ),
        ),
    }
}

/// Each capability spacetime uses, held or not; the verdict is about loading the programs.
pub fn capabilities(uid: u32, eff: CapSet) -> Check {
    let held: Vec<Cap> = Cap::ALL.into_iter().filter(|&c| eff.has(c)).collect();
    let lacking: Vec<Cap> = Cap::ALL.into_iter().filter(|&c| !eff.has(c)).collect();
    let who = if uid == 0 {
        "root".to_string()
    } else {
        format!("uid {uid}")
    };
    let missing = eff.missing_for_load();
    if missing.is_empty() {
        let mut s = format!("{who} with {}", caps::names(&held));
        if !lacking.is_empty() {
            s += &format!("; without {}", caps::names(&lacking));
        }
        return Check::new("capabilities", Status::Ok, s);
    }
    Check::new(
        "capabilities",
        Status::No,
        format!(
            "{who} without {} (or CAP_SYS_ADMIN): cannot load the kernel programs itself",
            caps::names(&missing)
        ),
    )
}

/// Kernel lockdown: "confidentiality" forbids reading kernel memory from BPF programs.
pub fn lockdown() -> Option<Check> {
    let text = std::fs::read_to_string(LOCKDOWN).ok()?;
    // "none integrity [confidentiality]": the bracketed word is in force.
    let mode = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))
        .unwrap_or("none")
        .to_string();
    Some(if mode == "confidentiality" {
        Check::new(
            "lockdown",
            Status::No,
            "kernel lockdown is \"confidentiality\": BPF programs may not read kernel memory"
                .into(),
        )
    } else {
        Check::new("lockdown", Status::Ok, format!("kernel lockdown: {mode}"))
    })
}

/// The hooks the BTF says spacetime uses, one check each (those of `refused` the kernel
/// would not attach when the programs were loaded here); one failing check when the kernel
/// lacks a field the programs read.
pub fn hooks(refused: &[FentryHook]) -> Vec<Check> {
    let resolved = Btf::from_sys_fs()
        .map_err(|e| e.to_string())
        .and_then(|btf| {
            let r = offsets::resolve(&btf).map_err(|e| e.to_string())?;
            Ok((r, btf.has_typedef("btf_trace_rss_stat")))
        });
    match resolved {
        Ok((r, rss_stat)) => hook_checks(&r, rss_stat, possible_cpus().unwrap_or(0), refused),
        Err(e) => vec![Check::new(
            "hooks",
            Status::No,
            format!("the kernel's BTF does not give what the programs read: {e}"),
        )],
    }
}

fn mem_hook(id: &'static str, hook: MemHook, tracepoint: &str, what: &str, refused: bool) -> Check {
    match hook {
        MemHook::Tracepoint => Check::new(id, Status::Ok, tracepoint.into()),
        MemHook::Fentry(f) if refused => Check::new(
            id,
            Status::Limited,
            format!(
                "fentry on {f} refused by the kernel when attached: those images report no peak"
            ),
        ),
        MemHook::Fentry(f) => Check::new(
            id,
            Status::Ok,
            format!("fentry on {f} (the 6.1 path; needs BPF trampolines)"),
        ),
        MemHook::Unavailable => Check::new(
            id,
            Status::Limited,
            format!("no tracepoint and {what} is not traceable: those images report no peak"),
        ),
    }
}

fn hook_checks(r: &Resolved, rss_stat: bool, cpus: u32, refused: &[FentryHook]) -> Vec<Check> {
    let mut out = vec![Check::new(
        "hooks",
        Status::Ok,
        "raw tracepoints sched_process_fork, sched_process_exec, sched_process_exit".into(),
    )];
    out.push(mem_hook(
        "exit_peaks",
        r.exit_mem,
        "sched_process_exit fires before exit_mm() (6.16+)",
        offsets::EXIT_MM_RELEASE,
        refused.contains(&FentryHook::ExitPeaks),
    ));
    out.push(mem_hook(
        "exec_peaks",
        r.exec_mem,
        "sched_prepare_exec (6.10+)",
        offsets::EXEC_MM_RELEASE,
        refused.contains(&FentryHook::ExecPeaks),
    ));
    out.push(match (r.off.exit_tp_group_dead != 0, r.group_dead_hook) {
        (true, _) => Check::new(
            "last_thread",
            Status::Ok,
            "sched_process_exit passes group_dead (6.16+)".into(),
        ),
        (false, Some(f)) if refused.contains(&FentryHook::GroupDead) => Check::new(
            "last_thread",
            Status::Limited,
            format!(
                "fentry on {f} refused by the kernel when attached: signal->live, two threads \
                 ending at once may both look last"
            ),
        ),
        (false, Some(f)) => Check::new(
            "last_thread",
            Status::Ok,
            format!("fentry on {f}: the kernel's own group_dead"),
        ),
        (false, None) => Check::new(
            "last_thread",
            Status::Limited,
            "signal->live: two threads ending at once may both look last".into(),
        ),
    });
    let counters = match r.rss_layout {
        rss_layout::ATOMIC_ARRAY => "atomic counters (before 6.2), exact".to_string(),
        _ if cpus <= MAX_EXACT_CPUS => {
            format!("per-CPU counters (6.2+), summed exactly over {cpus} CPUs")
        }
        _ => format!("per-CPU counters over {cpus} CPUs: shared count only (approximate)"),
    };
    let exact = r.rss_layout == rss_layout::ATOMIC_ARRAY || cpus <= MAX_EXACT_CPUS;
    let over_time = if rss_stat {
        "every change followed (kmem:rss_stat)"
    } else {
        "no kmem:rss_stat: RSS over time sampled from /proc"
    };
    out.push(Check::new(
        "rss",
        if exact && rss_stat {
            Status::Ok
        } else {
            Status::Limited
        },
        format!("{counters}; {over_time}"),
    ));
    out.push(if r.off.signal_prev_utime != 0 {
        Check::new(
            "cpu",
            Status::Ok,
            "sched_process_free: CPU times as wait4 reports them".into(),
        )
    } else {
        Check::new(
            "cpu",
            Status::Limited,
            "no sched_process_free: CPU read at exit, short processes read low".into(),
        )
    });
    out
}

/// Delay accounting: on or off, and whether `--delayacct` can switch it here.
pub fn delayacct(eff: CapSet) -> Check {
    let (how, on) = match delayacct_switch().and_then(|h| Ok((h, delayacct_enabled()?))) {
        Ok(x) => x,
        Err(e) => {
            return Check::new(
                "delays",
                Status::No,
                format!("cannot tell whether the kernel accounts delays: {e}"),
            )
        }
    };
    let (status, text) = match (how, on) {
        (DelayAcctSwitch::Absent, _) => (
            Status::No,
            "the kernel has no delay accounting (no CONFIG_TASK_DELAY_ACCT): delays read 0".into(),
        ),
        (DelayAcctSwitch::Sysctl, true) => (
            Status::Ok,
            "delay accounting on (kernel.task_delayacct=1)".into(),
        ),
        (DelayAcctSwitch::Boot, true) => (
            Status::Ok,
            "delay accounting on (set at boot: this kernel has no kernel.task_delayacct)".into(),
        ),
        (DelayAcctSwitch::Boot, false) => (
            Status::Off,
            "delay accounting off (`nodelayacct` at boot; this kernel cannot switch it on \
             while running): delays read 0"
                .into(),
        ),
        (DelayAcctSwitch::Sysctl, false) => {
            let how = if eff.has(Cap::SysAdmin) {
                "--delayacct switches it on for a trace"
            } else {
                "switching it (--delayacct) needs CAP_SYS_ADMIN; an agent can if its unit allows"
            };
            (
                Status::Off,
                format!("delay accounting off (kernel.task_delayacct=0): {how}"),
            )
        }
    };
    Check::new("delays", status, text)
}

/// Which PID namespace spacetime runs in, and what follows.
pub fn pid_namespace() -> Check {
    if crate::kernel::pidns::in_initial_namespace() {
        return Check::new("pid_namespace", Status::Ok, "the host's (initial)".into());
    }
    Check::new(
        "pid_namespace",
        Status::Limited,
        "inside a PID namespace (not the host's): pids are translated; an agent serves only \
         clients of its own namespace; the kernel takes no taskstats listener from here"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use spacetime_common::KernelOffsets;

    /// The minimum the README and the package say, read from a release.
    #[test]
    fn the_minimum_is_read_from_the_release() {
        assert_eq!(major_minor("6.1.0-57-cloud-amd64"), Some((6, 1)));
        assert_eq!(major_minor("5.10.223"), Some((5, 10)));
        assert_eq!(major_minor("weird"), None);
        if std::path::Path::new(BTF_PATH).exists() {
            let row = kernel("5.4.0-1-amd64");
            assert_eq!(row.status, Status::Limited, "{}", row.summary);
            let row = kernel("5.10.0-32-cloud-amd64");
            assert_eq!(row.status, Status::Ok, "{}", row.summary);
        }
        assert!(kernel("6.18.0").summary.contains("5.10"));
    }

    /// 6.1's hooks: the three fentry programs, per-CPU counters.
    fn six_one() -> Resolved {
        Resolved {
            off: KernelOffsets::default(),
            rss_layout: rss_layout::ATOMIC_ARRAY,
            nr_mm_counters: 4,
            has_prepare_exec: false,
            exit_mem: MemHook::Fentry("exit_mm_release"),
            exec_mem: MemHook::Fentry("exec_mm_release"),
            group_dead_hook: Some("taskstats_exit"),
            has_task_rss_stat: false,
            notes: Vec::new(),
        }
    }

    fn status(checks: &[Check], id: &str) -> Status {
        checks
            .iter()
            .find(|c| c.id == id)
            .unwrap_or_else(|| panic!("no {id} row"))
            .status
    }

    /// The BTF offers fentry on 6.1 arm64 too, where the kernel refuses to attach it (no
    /// ftrace direct calls before 6.4): the rows say what loading found, not what BTF offers.
    #[test]
    fn a_refused_fentry_limits_its_row() {
        let all = hook_checks(&six_one(), true, 2, &[]);
        for id in ["exit_peaks", "exec_peaks", "last_thread"] {
            assert_eq!(
                status(&all, id),
                Status::Ok,
                "{id} with every fentry attached"
            );
        }
        let refused = [FentryHook::ExitPeaks, FentryHook::GroupDead];
        let some = hook_checks(&six_one(), true, 2, &refused);
        assert_eq!(status(&some, "exit_peaks"), Status::Limited);
        assert_eq!(status(&some, "last_thread"), Status::Limited);
        assert_eq!(status(&some, "exec_peaks"), Status::Ok);
        let row = some.iter().find(|c| c.id == "exit_peaks").expect("row");
        assert!(row.summary.contains("refused"), "{}", row.summary);
    }
}
