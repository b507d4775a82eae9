//! The fentry programs of older kernels, attached after the raw tracepoints, and the `-v`
//! lines that say which kernel mechanism serves each figure.

use aya::{programs::FEntry, Ebpf};
use spacetime_common::{rss_layout, MAX_EXACT_CPUS};

use super::{plan::Plan, Atomics, LoadError, BTF_PATH};
use crate::kernel::offsets::{MemHook, Resolved};

/// Which end of an image a memory hook serves, for the `-v` lines.
#[derive(Clone, Copy)]
enum MemKind {
    Exec,
    Exit,
}

impl MemKind {
    fn hook(self) -> FentryHook {
        match self {
            MemKind::Exec => FentryHook::ExecPeaks,
            MemKind::Exit => FentryHook::ExitPeaks,
        }
    }

    fn tracepoint_line(self) -> &'static str {
        match self {
            MemKind::Exec => "sched_prepare_exec: image peaks read at exec's point of no return",
            MemKind::Exit => {
                "sched_process_exit fires before exit_mm(): final image peaks read there"
            }
        }
    }

    fn fentry_line(self, function: &str) -> String {
        match self {
            MemKind::Exec => format!(
                "fentry {function} (no sched_prepare_exec): peaks of images replaced by exec \
                 read from the old mm"
            ),
            MemKind::Exit => format!(
                "fentry {function} (sched_process_exit fires after exit_mm()): final image \
                 peaks read before the mm is released"
            ),
        }
    }

    fn no_hook(self) -> &'static str {
        match self {
            MemKind::Exec => "no sched_prepare_exec nor exec_mm_release on this kernel",
            MemKind::Exit => {
                "sched_process_exit fires after exit_mm() and exit_mm_release is not traceable"
            }
        }
    }

    fn unavailable(self) -> &'static str {
        match self {
            MemKind::Exec => "images replaced by exec have no peak",
            MemKind::Exit => "the last image of each process has no peak",
        }
    }
}

/// Loads and attaches the fentry program named after kernel function `function` (its build
/// for the kernel's `atomics`). aya resolves the target in the kernel's BTF with its own
/// parser, loaded once, only when needed.
fn attach_fentry(
    ebpf: &mut Ebpf,
    function: &'static str,
    atomics: Atomics,
    kernel_btf: &mut Option<aya::Btf>,
) -> Result<(), LoadError> {
    let program = atomics.program(function);
    let err = |source| LoadError::AttachFentry { function, source };
    if kernel_btf.is_none() {
        *kernel_btf = Some(aya::Btf::from_sys_fs().map_err(LoadError::KernelBtf)?);
    }
    let btf = kernel_btf.as_ref().ok_or(LoadError::NoBtf)?;
    let prog: &mut FEntry = ebpf
        .program_mut(program)
        .ok_or(LoadError::MissingProgram(program))?
        .try_into()
        .map_err(err)?;
    super::startup::retry_interrupted(program, || prog.load(function, btf)).map_err(err)?;
    prog.attach().map_err(err)?;
    Ok(())
}

/// An fentry program of an older kernel's that the kernel would not attach: which figure it
/// served, and the `-v` line that says so.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub hook: FentryHook,
    pub line: String,
}

/// The fentry programs older kernels need, by the figure each serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FentryHook {
    /// The last thread of a process (`taskstats_exit`'s group_dead).
    GroupDead,
    /// Peaks of images replaced by exec.
    ExecPeaks,
    /// Final image peaks at exit.
    ExitPeaks,
}

/// The mechanisms in use, one line each, and those of them the kernel refused.
pub(super) struct Described {
    pub lines: Vec<String>,
    /// The fentry programs the kernel refused: each costs its figure, not the trace.
    pub refused: Vec<Refused>,
}

/// Attaches the fentry programs this kernel needs (none from 6.16 on) and says, one line
/// each, which mechanism serves which figure. A failed fentry costs its figure, not the
/// trace: it is logged and said.
pub(super) fn attach_fentries_and_describe(
    ebpf: &mut Ebpf,
    resolved: &Resolved,
    plan: &Plan,
    nr_cpus: u32,
    rss_asked: bool,
) -> Described {
    let atomics = plan.atomics;
    let mut lines = vec![
        "raw tracepoints sched_process_fork, sched_process_exec, sched_process_exit".to_string(),
        format!("kernel field offsets from {BTF_PATH}"),
        match resolved.rss_layout {
            rss_layout::ATOMIC_ARRAY => "RSS counters: atomic array (pre-6.2)".to_string(),
            _ if nr_cpus <= MAX_EXACT_CPUS => {
                format!("RSS counters: per-CPU, summed exactly over {nr_cpus} CPUs")
            }
            _ => format!(
                "RSS counters: per-CPU, {nr_cpus} CPUs is above {MAX_EXACT_CPUS}: shared count \
                 only (approximate)"
            ),
        },
    ];
    if let Some(limits) = atomics.limits() {
        lines.push(limits.to_string());
    }
    if plan.cgroup_names {
        lines.push("cgroup paths read from the kernel the first time each is seen".into());
    }
    if plan.rss {
        lines.push(
            "kmem:rss_stat: every RSS change of traced processes; tree-wide sum and peak kept \
             in the kernel"
                .into(),
        );
    } else if rss_asked {
        lines.push(
            "no kmem:rss_stat tracepoint: RSS over time is sampled from /proc/PID/statm".into(),
        );
    }
    let mut refused = Vec::new();
    let mut kernel_btf = None;
    let mut refuse = |hook: FentryHook, line: String| {
        log::warn!("{line}");
        refused.push(Refused {
            hook,
            line: line.clone(),
        });
        line
    };
    if let Some(function) = resolved.group_dead_hook {
        // Before exit_mm_release: it reads what this one stashed.
        lines.push(
            match attach_fentry(ebpf, function, atomics, &mut kernel_btf) {
                Ok(()) => format!("fentry {function}: the kernel's own group_dead (last thread)"),
                Err(e) => refuse(
                    FentryHook::GroupDead,
                    format!("{e}: the last thread is told by signal->live"),
                ),
            },
        );
    }
    for (hook, what) in [
        (resolved.exec_mem, MemKind::Exec),
        (resolved.exit_mem, MemKind::Exit),
    ] {
        lines.push(match hook {
            MemHook::Tracepoint => what.tracepoint_line().to_string(),
            MemHook::Fentry(function) => {
                match attach_fentry(ebpf, function, atomics, &mut kernel_btf) {
                    Ok(()) => what.fentry_line(function),
                    Err(e) => refuse(what.hook(), format!("{e}: {}", what.unavailable())),
                }
            }
            MemHook::Unavailable => format!("{}: {}", what.no_hook(), what.unavailable()),
        });
    }
    lines.push(if plan.dead_switch {
        "raw tracepoints sched_switch (dead tasks) and sched_process_free: each process's CPU \
         as wait4 reports it, at its last switch"
            .into()
    } else if plan.cpu_at_release {
        "raw tracepoint sched_process_free: each process's CPU as wait4 reports it".into()
    } else {
        "CPU read at exit (no sched_process_free): short processes read low".into()
    });
    Described { lines, refused }
}
