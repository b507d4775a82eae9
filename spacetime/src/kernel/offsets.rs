//! Resolves [`KernelOffsets`] — where the kernel programs find each field they read — from the
//! running kernel's BTF, so one binary works across kernel builds and versions.

use crate::kernel::btf::{Btf, BtfError, Kind};
use spacetime_common::{rss_layout, KernelOffsets};

#[path = "offsets_creds.rs"]
mod creds;

/// `SIGNAL_GROUP_EXIT` is a `#define` (not in BTF); it has been 0x4 since Linux 3.x.
const SIGNAL_GROUP_EXIT: u32 = 0x4;

/// Why the offsets could not be resolved.
///
/// The BTF error is part of the message rather than a `source`, so that one line says both what
/// spacetime needed and what the kernel lacks.
#[derive(Debug, thiserror::Error)]
pub enum OffsetsError {
    #[error("cannot find {field} in the kernel's BTF: {cause}")]
    Field { field: String, cause: BtfError },
    #[error(
        "mm_struct.rss_stat is {found}, neither an array of struct percpu_counter (Linux 6.2+) \
         nor struct mm_rss_stat (older kernels)"
    )]
    RssLayout { found: String },
    #[error(
        "enumerator {name} = {value} is not an index into mm_struct.rss_stat ({len} counters)"
    )]
    RssIndex {
        name: &'static str,
        value: i64,
        len: u32,
    },
}

/// Where the kernel programs read the memory figures of an image that ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemHook {
    /// In the tracepoint program itself: it fires while the mm is still attached.
    Tracepoint,
    /// In an fentry program on this kernel function, which is handed the mm: the tracepoint
    /// misses it (or is missing) on this kernel.
    Fentry(&'static str),
    /// Nowhere: those images report no peak.
    Unavailable,
}

/// The kernel function exit_mm() calls with the mm before dropping it (kernel/fork.c).
pub const EXIT_MM_RELEASE: &str = "exit_mm_release";
/// The kernel function exec_mmap() calls with the old mm after exec's point of no return.
pub const EXEC_MM_RELEASE: &str = "exec_mm_release";

/// The kernel function do_exit() hands its own `group_dead` to, before exit_mm().
pub const TASKSTATS_EXIT: &str = "taskstats_exit";

/// What [`resolve`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub off: KernelOffsets,
    /// [`rss_layout`] of `mm_struct.rss_stat`.
    pub rss_layout: u32,
    /// Number of RSS counters (`NR_MM_COUNTERS`).
    pub nr_mm_counters: u32,
    /// `sched_prepare_exec` tracepoint exists (Linux 6.10+): the old image is still mapped there.
    pub has_prepare_exec: bool,
    /// Where the last image of an exiting process has its figures read.
    pub exit_mem: MemHook,
    /// Where an image replaced by exec has its figures read.
    pub exec_mem: MemHook,
    /// An fentry that learns the kernel's own `group_dead`, where the exit tracepoint does not
    /// pass it (before 6.16); `None` otherwise or when the function is not traceable.
    pub group_dead_hook: Option<&'static str>,
    /// `task_struct.rss_stat` exists: per-task cached RSS deltas (kernels before 6.2 with
    /// SPLIT_RSS_COUNTING) must be added to the mm's counters.
    pub has_task_rss_stat: bool,
    /// One line per layout decision, for `-v` output.
    pub notes: Vec<String>,
}

fn field(btf: &Btf, ty: &str, path: &str) -> Result<u32, OffsetsError> {
    btf.member_offset(ty, path)
        .map_err(|cause| OffsetsError::Field {
            field: format!("{ty}.{path}"),
            cause,
        })
}

fn rss_index(btf: &Btf, name: &'static str, len: u32) -> Result<u32, OffsetsError> {
    let value = btf.enum_value(name).map_err(|cause| OffsetsError::Field {
        field: format!("enum value {name}"),
        cause,
    })?;
    u32::try_from(value)
        .ok()
        .filter(|&v| v < len)
        .ok_or(OffsetsError::RssIndex { name, value, len })
}

#[cfg(test)]
/// Whether `sched_process_exit` fires while the exiting task's mm is still attached.
///
/// Linux 6.16 (commit 3e816361e94a, "sched/tracepoints: Move and extend the
/// sched_process_exit() tracepoint") moved the tracepoint before exit_mm() and, in the same
/// change, gave it a `group_dead` argument. So the tracepoint's BTF prototype tells which side
/// of exit_mm() it fires on: `btf_trace_sched_process_exit` is `void (*)(void *, struct
/// task_struct *)` before, `(void *, struct task_struct *, bool)` since.
pub fn exit_tracepoint_has_mm(btf: &Btf) -> bool {
    btf.typedef_fn_params("btf_trace_sched_process_exit")
        .is_ok_and(|n| n >= 3)
}

/// An fentry on `function` if the kernel describes it (it then exists and is not inlined).
fn fentry_hook(btf: &Btf, function: &'static str, notes: &mut Vec<String>) -> MemHook {
    if btf.has_func(function) {
        notes.push(format!("function {function}: present (fentry target)"));
        MemHook::Fentry(function)
    } else {
        notes.push(format!(
            "function {function}: not in BTF (inlined or absent)"
        ));
        MemHook::Unavailable
    }
}

/// `sched_switch(preempt, prev, next, prev_state)` (5.18+; the typedef adds the `void *`
/// context first): a dead task's last switch is seen by its `prev_state`.
const SWITCH_PARAMS_WITH_STATE: u32 = 5;

/// The fields that tell, at a dead task's last switch, whether its process's CPU figures are
/// final (see the kernel side's reap.rs); left 0 (the switch is not used, the free record
/// alone carries them) where a field or the tracepoint's `prev_state` is missing.
fn dead_switch(
    btf: &Btf,
    off: &mut KernelOffsets,
    notes: &mut Vec<String>,
) -> Result<(), OffsetsError> {
    const TASK: [&str; 2] = ["__state", "on_cpu"];
    const SIGNAL: [&str; 2] = ["nr_threads", "stats_lock.seqcount.seqcount.sequence"];
    let params = btf.typedef_fn_params("btf_trace_sched_switch").ok();
    if params != Some(SWITCH_PARAMS_WITH_STATE)
        || !TASK.iter().all(|m| btf.has_member("task_struct", m))
        || !SIGNAL.iter().all(|m| btf.has_member("signal_struct", m))
    {
        notes.push(
            "no sched_switch with prev_state (or a field it needs): final CPU figures wait for \
             sched_process_free"
                .into(),
        );
        return Ok(());
    }
    off.task_state = field(btf, "task_struct", TASK[0])?;
    off.task_on_cpu = field(btf, "task_struct", TASK[1])?;
    off.signal_nr_threads = field(btf, "signal_struct", SIGNAL[0])?;
    off.signal_stats_seq = field(btf, "signal_struct", SIGNAL[1])?;
    notes.push(
        "tracepoint sched_switch(prev_state): final CPU figures at a dead task's last switch"
            .into(),
    );
    Ok(())
}

/// Optional: the fields of a cgroup's path (`watch`'s identity). kernfs_node's parent is
/// `__parent` since 6.15 (read under RCU there).
fn cgroup_path(
    btf: &Btf,
    off: &mut KernelOffsets,
    notes: &mut Vec<String>,
) -> Result<(), OffsetsError> {
    let parent = ["__parent", "parent"]
        .into_iter()
        .find(|p| btf.has_member("kernfs_node", p));
    let have = btf.has_member("task_struct", "cgroups")
        && btf.has_member("css_set", "dfl_cgrp")
        && btf.has_member("cgroup", "kn")
        && btf.has_member("kernfs_node", "name");
    match parent {
        Some(p) if have => {
            off.task_cgroups = field(btf, "task_struct", "cgroups")?;
            off.css_set_dfl_cgrp = field(btf, "css_set", "dfl_cgrp")?;
            off.cgroup_kn = field(btf, "cgroup", "kn")?;
            off.kernfs_name = field(btf, "kernfs_node", "name")?;
            off.kernfs_parent = field(btf, "kernfs_node", p)?;
            notes.push(format!("cgroup paths from kernfs_node.name and .{p}"));
        }
        _ => notes.push("no cgroup path fields: cgroups are named from /sys/fs/cgroup".into()),
    }
    Ok(())
}

/// Resolves every offset the kernel programs need from `btf`.
pub fn resolve(btf: &Btf) -> Result<Resolved, OffsetsError> {
    let mut notes = Vec::new();
    let mut off = required(btf)?;
    cgroup_path(btf, &mut off, &mut notes)?;
    // Optional: the exit record's comm, PID-namespace pid and group CPU times (`watch`).
    if btf.has_member("task_struct", "comm") {
        off.task_comm = field(btf, "task_struct", "comm")?;
    }
    pid_numbers(btf, &mut off)?;
    if btf.has_member("task_struct", "min_flt") {
        off.task_min_flt = field(btf, "task_struct", "min_flt")?;
    }
    group_cputime(btf, &mut off, &mut notes)?;

    // sched_process_exit(task, group_dead) since 6.16: the kernel's own answer to "is this the
    // last thread?". Before, signal->live is read, which two threads exiting at once can both
    // see at 0.
    if btf.typedef_fn_params("btf_trace_sched_process_exit").ok() == Some(3) {
        off.exit_tp_group_dead = 1;
        notes.push("tracepoint sched_process_exit passes group_dead".into());
    }

    // bpf_get_current_task_btf (5.11+): the exit and exec programs' fields are plain loads
    // through pointers the verifier types by BTF, not a helper's call each.
    if btf.enum_value("BPF_FUNC_get_current_task_btf").is_ok() {
        off.direct_loads = 1;
        notes.push("BPF loads kernel fields directly (bpf_get_current_task_btf)".into());
    }

    creds::resolve(btf, &mut off, &mut notes)?;

    let has_task_rss_stat = btf.has_member("task_struct", "rss_stat.count");
    if has_task_rss_stat {
        off.task_rss_stat_count = field(btf, "task_struct", "rss_stat.count")?;
        notes.push("task_struct.rss_stat: per-task RSS deltas (split RSS counting)".into());
    }
    let (layout, nr) = rss_stat(btf, &mut off, &mut notes)?;
    off.rss_file_idx = rss_index(btf, "MM_FILEPAGES", nr)?;
    off.rss_anon_idx = rss_index(btf, "MM_ANONPAGES", nr)?;
    off.rss_shmem_idx = rss_index(btf, "MM_SHMEMPAGES", nr)?;

    let has_prepare_exec = btf.has_typedef("btf_trace_sched_prepare_exec");
    let (exec_mem, exit_mem, group_dead_hook) =
        memory_hooks(btf, &off, has_prepare_exec, &mut notes);
    Ok(Resolved {
        group_dead_hook,
        off,
        rss_layout: layout,
        nr_mm_counters: nr,
        has_prepare_exec,
        exit_mem,
        exec_mem,
        has_task_rss_stat,
        notes,
    })
}

/// The offsets every supported kernel has.
fn required(btf: &Btf) -> Result<KernelOffsets, OffsetsError> {
    let task = |p| field(btf, "task_struct", p);
    let signal = |p| field(btf, "signal_struct", p);
    let mm = |p| field(btf, "mm_struct", p);
    Ok(KernelOffsets {
        task_pid: task("pid")?,
        task_tgid: task("tgid")?,
        task_mm: task("mm")?,
        task_signal: task("signal")?,
        task_group_leader: task("group_leader")?,
        task_start_time: task("start_time")?,
        task_utime: task("utime")?,
        task_stime: task("stime")?,
        task_sum_exec_runtime: task("se.sum_exec_runtime")?,
        task_exit_code: task("exit_code")?,
        signal_live: signal("live.counter")?,
        signal_flags: signal("flags")?,
        signal_group_exit_code: signal("group_exit_code")?,
        signal_maxrss: signal("maxrss")?,
        mm_hiwater_rss: mm("hiwater_rss")?,
        mm_hiwater_vm: mm("hiwater_vm")?,
        mm_total_vm: mm("total_vm")?,
        mm_rss_stat: mm("rss_stat")?,
        mm_arg_start: mm("arg_start")?,
        mm_arg_end: mm("arg_end")?,
        binprm_filename: field(btf, "linux_binprm", "filename")?,
        bpf_array_pptrs: field(btf, "bpf_array", "pptrs")?,
        signal_group_exit_flag: SIGNAL_GROUP_EXIT,
        ..KernelOffsets::default()
    })
}

/// The pid as the task's own PID namespace numbers it (optional).
fn pid_numbers(btf: &Btf, off: &mut KernelOffsets) -> Result<(), OffsetsError> {
    if btf.has_member("task_struct", "thread_pid")
        && btf.has_member("pid", "level")
        && btf.has_member("pid", "numbers")
    {
        let numbers = btf
            .member_type("pid", "numbers")
            .map_err(|cause| OffsetsError::Field {
                field: "pid.numbers".into(),
                cause,
            })?;
        if numbers.elem_size > 0 {
            off.task_thread_pid = field(btf, "task_struct", "thread_pid")?;
            off.pid_level = field(btf, "pid", "level")?;
            off.pid_numbers = numbers.offset;
            off.upid_size = numbers.elem_size;
        }
    }
    Ok(())
}

/// The thread group's CPU times, and what wait4 returns of them (optional).
fn group_cputime(
    btf: &Btf,
    off: &mut KernelOffsets,
    notes: &mut Vec<String>,
) -> Result<(), OffsetsError> {
    let signal = |p| field(btf, "signal_struct", p);
    if btf.has_member("signal_struct", "sum_sched_runtime")
        && btf.has_member("signal_struct", "utime")
        && btf.has_member("signal_struct", "stime")
    {
        off.signal_utime = signal("utime")?;
        off.signal_stime = signal("stime")?;
        off.signal_sum_sched_runtime = signal("sum_sched_runtime")?;
        // What wait4 returns is cputime_adjust() of these, remembered in prev_cputime: read
        // when the process is freed (sched_process_free).
        if btf.has_member("signal_struct", "prev_cputime.utime")
            && btf.has_member("signal_struct", "prev_cputime.stime")
            && btf.has_typedef("btf_trace_sched_process_free")
        {
            off.signal_prev_utime = signal("prev_cputime.utime")?;
            off.signal_prev_stime = signal("prev_cputime.stime")?;
            notes.push("tracepoint sched_process_free: present".into());
            dead_switch(btf, off, notes)?;
        } else {
            notes.push(
                "no sched_process_free or signal_struct.prev_cputime: CPU figures read at exit"
                    .into(),
            );
        }
    }
    Ok(())
}

/// How the kernel keeps an mm's RSS counters: the layout and the number of counters.
fn rss_stat(
    btf: &Btf,
    off: &mut KernelOffsets,
    notes: &mut Vec<String>,
) -> Result<(u32, u32), OffsetsError> {
    let rss = btf
        .member_type("mm_struct", "rss_stat")
        .map_err(|cause| OffsetsError::Field {
            field: "mm_struct.rss_stat".into(),
            cause,
        })?;
    let (layout, nr) = match (rss.kind, rss.elem_kind, rss.name) {
        (Kind::Array, Kind::Struct, "percpu_counter") => {
            let pc = |p| field(btf, "percpu_counter", p);
            off.pcpu_count = pc("count")?;
            off.pcpu_counters = pc("counters")?;
            off.rss_stride = rss.elem_size;
            notes.push(format!(
                "mm_struct.rss_stat: struct percpu_counter[{}], {} bytes each (Linux 6.2+)",
                rss.array_len, rss.elem_size
            ));
            // 6.6 allocates an mm's per-CPU counters in one go (kernel/fork.c, "group
            // allocation/free of per-cpu counters for mm struct"), with this function.
            if btf.has_func("__percpu_counter_init_many") {
                off.rss_pcpu_block = 1;
                notes.push("per-CPU RSS counters: one block per mm (6.6+)".into());
            }
            (rss_layout::PERCPU_COUNTER, rss.array_len)
        }
        (Kind::Struct, _, "mm_rss_stat") => {
            let count =
                btf.member_type("mm_rss_stat", "count")
                    .map_err(|cause| OffsetsError::Field {
                        field: "mm_rss_stat.count".into(),
                        cause,
                    })?;
            if count.kind != Kind::Array {
                return Err(OffsetsError::RssLayout {
                    found: "struct mm_rss_stat without a count array".into(),
                });
            }
            // Point straight at the first atomic_long_t so both layouts index the same way.
            off.mm_rss_stat += count.offset;
            off.rss_stride = count.elem_size;
            notes.push(format!(
                "mm_struct.rss_stat: struct mm_rss_stat {{ atomic_long_t count[{}] }} (before 6.2)",
                count.array_len
            ));
            (rss_layout::ATOMIC_ARRAY, count.array_len)
        }
        (kind, elem, name) => {
            return Err(OffsetsError::RssLayout {
                found: format!("{kind:?} of {elem:?} {name:?}"),
            })
        }
    };
    Ok((layout, nr))
}

/// Where memory is read at exec and at exit, and the group_dead fentry target (before 6.16).
fn memory_hooks(
    btf: &Btf,
    off: &KernelOffsets,
    has_prepare_exec: bool,
    notes: &mut Vec<String>,
) -> (MemHook, MemHook, Option<&'static str>) {
    notes.push(if has_prepare_exec {
        "tracepoint sched_prepare_exec: present".into()
    } else {
        "tracepoint sched_prepare_exec: absent (before 6.10)".into()
    });
    let exec_mem = if has_prepare_exec {
        MemHook::Tracepoint
    } else {
        fentry_hook(btf, EXEC_MM_RELEASE, notes)
    };
    let exit_mem = if off.exit_tp_group_dead != 0 {
        // The probe exit_tracepoint_has_mm() names for the tests.
        notes.push(
            "tracepoint sched_process_exit: fires before exit_mm(), the mm is attached".into(),
        );
        MemHook::Tracepoint
    } else {
        notes.push(
            "tracepoint sched_process_exit(task): fires after exit_mm() (before 6.16), the mm \
             is gone"
                .into(),
        );
        fentry_hook(btf, EXIT_MM_RELEASE, notes)
    };
    let group_dead_hook =
        (off.exit_tp_group_dead == 0 && btf.has_func(TASKSTATS_EXIT)).then(|| {
            notes.push(format!(
                "function {TASKSTATS_EXIT}: present (fentry target: the kernel's group_dead)"
            ));
            TASKSTATS_EXIT
        });
    (exec_mem, exit_mem, group_dead_hook)
}

#[cfg(test)]
mod tests;
