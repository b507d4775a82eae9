//! The kernel field offsets the programs read, shared by both sides.

/// Offsets of the kernel fields the programs read, in bytes, resolved from the running kernel's
/// BTF at load time. Nothing here is baked from the build machine.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelOffsets {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_mm: u32,
    pub task_signal: u32,
    pub task_group_leader: u32,
    pub task_start_time: u32,
    pub task_utime: u32,
    pub task_stime: u32,
    pub task_sum_exec_runtime: u32,
    pub task_exit_code: u32,
    /// `task_struct.rss_stat` (per-task cached RSS deltas, kernels before 6.2); 0 when absent.
    pub task_rss_stat_count: u32,
    pub signal_live: u32,
    pub signal_flags: u32,
    pub signal_group_exit_code: u32,
    pub signal_maxrss: u32,
    pub mm_hiwater_rss: u32,
    pub mm_hiwater_vm: u32,
    pub mm_total_vm: u32,
    pub mm_rss_stat: u32,
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    /// `percpu_counter.count` (PERCPU_COUNTER layout).
    pub pcpu_count: u32,
    /// `percpu_counter.counters` (PERCPU_COUNTER layout).
    pub pcpu_counters: u32,
    /// Stride between `rss_stat` elements: `sizeof(struct percpu_counter)` or 8.
    pub rss_stride: u32,
    /// Indexes of the counters that make up RSS (`enum MM_*`).
    pub rss_file_idx: u32,
    pub rss_anon_idx: u32,
    pub rss_shmem_idx: u32,
    pub binprm_filename: u32,
    /// `bpf_array.pptrs`: where a per-CPU array keeps its per-CPU base pointers.
    pub bpf_array_pptrs: u32,
    /// `SIGNAL_GROUP_EXIT` in `signal_struct.flags`.
    pub signal_group_exit_flag: u32,
    /// `task_struct.comm`; 0 when absent (the exit record then carries the exiting thread's).
    pub task_comm: u32,
    /// `task_struct.thread_pid`, `pid.level`, `pid.numbers`, `sizeof(struct upid)`: the pid in
    /// the task's own PID namespace. `task_thread_pid` is 0 when absent (no namespace pid).
    pub task_thread_pid: u32,
    pub pid_level: u32,
    pub pid_numbers: u32,
    pub upid_size: u32,
    /// `signal_struct.utime`, `.stime`, `.sum_sched_runtime`: CPU time of released threads;
    /// `signal_sum_sched_runtime` is 0 when absent (no group totals).
    pub signal_utime: u32,
    pub signal_stime: u32,
    pub signal_sum_sched_runtime: u32,
    /// 1 when `sched_process_exit` passes `group_dead` as its second argument (6.16+): the
    /// kernel's own "last thread" flag. Otherwise `signal->live == 0` is used, which two
    /// threads exiting at the same moment can both see.
    pub exit_tp_group_dead: u32,
    /// `signal_struct.prev_cputime.utime` and `.stime`: what the last `cputime_adjust()` of the
    /// process returned (wait4, getrusage, /proc/PID/stat); 0 when absent (no REAP records).
    pub signal_prev_utime: u32,
    pub signal_prev_stime: u32,
    /// `task_struct.__state`, `.on_cpu`, `signal_struct.nr_threads` and the sequence of
    /// `signal_struct.stats_lock`: whether a dead task's last switch leaves its process's CPU
    /// figures final (reap.rs). `task_state` is 0 when the switch is not used (no
    /// `prev_state` argument to `sched_switch`).
    pub task_state: u32,
    pub task_on_cpu: u32,
    pub signal_nr_threads: u32,
    pub signal_stats_seq: u32,
    /// 1 when an mm's per-CPU RSS counters are one block (`__percpu_counter_init_many`,
    /// 6.6+): one read per CPU fetches all of them.
    pub rss_pcpu_block: u32,
    /// `task_struct.cgroups`, `css_set.dfl_cgrp`, `cgroup.kn`, `kernfs_node.name` and
    /// `kernfs_node.parent` (`__parent` since 6.15): a cgroup's path from the kernel's own
    /// names. `cgroup_kn` is 0 when one is absent (no [`kind::CGROUP_NAME`] records).
    pub task_cgroups: u32,
    pub css_set_dfl_cgrp: u32,
    pub cgroup_kn: u32,
    pub kernfs_name: u32,
    pub kernfs_parent: u32,
    /// `task_struct.real_cred` (the objective credentials ptrace compares) and in `struct
    /// cred` the real, effective and saved uids and gids (`kuid_t`/`kgid_t`: a u32 first) and
    /// `cap_permitted` (64 bits either way it was laid out); `mm_struct.flags` (its low two
    /// bits: dumpable). `task_real_cred` is 0 when absent: no exec credential check.
    pub task_real_cred: u32,
    pub cred_uid: u32,
    pub cred_euid: u32,
    pub cred_suid: u32,
    pub cred_gid: u32,
    pub cred_egid: u32,
    pub cred_sgid: u32,
    pub cred_cap_permitted: u32,
    pub mm_flags: u32,
    /// `task_struct.min_flt`: the thread's minor page faults; 0 when absent.
    pub task_min_flt: u32,
    /// 1 when the kernel's BPF has `bpf_get_current_task_btf` (5.11+): the exit and exec
    /// programs then load task, signal and mm fields directly through pointers the verifier
    /// types by BTF instead of calling bpf_probe_read_kernel for each.
    pub direct_loads: u32,
}
