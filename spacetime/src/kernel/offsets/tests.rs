use super::*;
use crate::kernel::btf::tests::Enc;

/// BTF shaped like a 5.x kernel: `mm_struct.rss_stat` is a `struct mm_rss_stat`, tasks cache
/// RSS deltas in `task_struct.rss_stat`, no `sched_prepare_exec`. `skip` ("struct.member" or
/// an enumerator) is left out, to check the errors.
fn old_kernel(skip: &str) -> Btf {
    kernel(skip, false)
}

/// [`old_kernel`], or with `tracepoints_with_mm` the tracepoints of 6.16+: a
/// `sched_prepare_exec`, and a `sched_process_exit` with a `group_dead` argument. Both have
/// `exit_mm_release` and `exec_mm_release` unless `skip` names them.
fn kernel(skip: &str, tracepoints_with_mm: bool) -> Btf {
    let mut e = Enc::new();
    let int = e.int("int", 4, 32);
    let long = e.int("long", 8, 64);
    let ptr = e.modifier(Kind::Ptr, "", long);
    let s64 = e.modifier(Kind::Typedef, "s64", long);
    let a64 = e.strukt("", 8, &[("counter", s64, 0)]);
    let a64_t = e.modifier(Kind::Typedef, "atomic64_t", a64);
    let along = e.modifier(Kind::Typedef, "atomic_long_t", a64_t);
    let a32 = e.strukt("", 4, &[("counter", int, 0)]);
    let atomic_t = e.modifier(Kind::Typedef, "atomic_t", a32);
    let counts = e.array(along, int, 4);
    // `count` is not first here (it is in the kernel) so the addition is tested.
    let mm_rss = e.strukt("mm_rss_stat", 40, &[("count", counts, 8)]);
    let icounts = e.array(int, int, 4);
    let task_rss = e.strukt(
        "task_rss_stat",
        20,
        &[("events", int, 0), ("count", icounts, 4)],
    );
    let se = e.strukt("sched_entity", 64, &[("sum_exec_runtime", long, 48)]);
    let keep = |ty: &str, m: &[(&'static str, u32, u32)]| -> Vec<(&'static str, u32, u32)> {
        m.iter()
            .filter(|x| format!("{ty}.{}", x.0) != skip)
            .copied()
            .collect()
    };
    let task = keep(
        "task_struct",
        &[
            ("se", se, 64),
            ("mm", ptr, 200),
            ("exit_code", int, 208),
            ("pid", int, 220),
            ("tgid", int, 224),
            ("group_leader", ptr, 232),
            ("utime", long, 240),
            ("stime", long, 248),
            ("start_time", long, 256),
            ("rss_stat", task_rss, 264),
            ("signal", ptr, 288),
        ],
    );
    e.strukt("task_struct", 512, &task);
    let signal = keep(
        "signal_struct",
        &[
            ("live", atomic_t, 4),
            ("group_exit_code", int, 96),
            ("flags", int, 116),
            ("maxrss", long, 200),
        ],
    );
    e.strukt("signal_struct", 256, &signal);
    let mm = keep(
        "mm_struct",
        &[
            ("hiwater_rss", long, 8),
            ("hiwater_vm", long, 16),
            ("total_vm", long, 24),
            ("arg_start", long, 100),
            ("arg_end", long, 108),
            ("rss_stat", mm_rss, 200),
        ],
    );
    let mm_body = e.strukt("", 400, &mm);
    e.strukt("mm_struct", 400, &[("", mm_body, 0)]);
    e.strukt(
        "linux_binprm",
        128,
        &keep("linux_binprm", &[("filename", ptr, 96)]),
    );
    let pptrs = e.array(ptr, int, 0);
    let value = e.array(int, int, 0);
    let u = e.composite(
        Kind::Union,
        "",
        false,
        0,
        &[("value", value, 0), ("pptrs", pptrs, 0)],
    );
    e.strukt("bpf_array", 320, &keep("bpf_array", &[("", u, 320)]));
    let counters = enumerators(
        skip,
        &[
            ("MM_FILEPAGES", 0),
            ("MM_ANONPAGES", 1),
            ("MM_SWAPENTS", 2),
            ("MM_SHMEMPAGES", 3),
            ("NR_MM_COUNTERS", 4),
        ],
    );
    e.enum32("", false, &counters);
    hooks(&mut e, skip, tracepoints_with_mm, ptr);
    Btf::parse(e.build()).unwrap()
}

/// `vals` but the enumerator `skip`.
fn enumerators<'a>(skip: &str, vals: &[(&'a str, i32)]) -> Vec<(&'a str, i32)> {
    vals.iter().filter(|x| x.0 != skip).copied().collect()
}

/// The tracepoint typedefs and functions [`kernel`] has; `ptr` is any pointer type.
fn hooks(e: &mut Enc, skip: &str, tracepoints_with_mm: bool, ptr: u32) {
    // Tracepoint typedefs: `void (*)(void *, struct task_struct *[, bool])`.
    let void_ptr = e.modifier(Kind::Ptr, "", 0);
    let task_ptr = e.modifier(Kind::Ptr, "", 1); // any pointer will do
    let boolean = e.int("_Bool", 1, 8);
    let mut params = vec![void_ptr, task_ptr];
    if tracepoints_with_mm {
        params.push(boolean);
        let proto = e.ty("", Kind::FuncProto, false, 3, 0);
        e.words(&[0, void_ptr, 0, task_ptr, 0, ptr]);
        let fp = e.modifier(Kind::Ptr, "", proto);
        e.modifier(Kind::Typedef, "btf_trace_sched_prepare_exec", fp);
    }
    let proto = e.ty("", Kind::FuncProto, false, params.len() as u32, 0);
    for p in params {
        e.words(&[0, p]);
    }
    let fp = e.modifier(Kind::Ptr, "", proto);
    e.modifier(Kind::Typedef, "btf_trace_sched_process_exit", fp);
    if tracepoints_with_mm {
        // A kernel this new has bpf_get_current_task_btf (5.11+) in its helpers' enum.
        let helpers = enumerators(
            skip,
            &[
                ("BPF_FUNC_unspec", 0),
                ("BPF_FUNC_get_current_task_btf", 158),
            ],
        );
        e.enum32("bpf_func_id", false, &helpers);
    }

    // `void exit_mm_release(struct task_struct *tsk, struct mm_struct *mm)`, and exec's.
    let tsk = e.s("tsk");
    let mm_name = e.s("mm");
    let release = e.ty("", Kind::FuncProto, false, 2, 0);
    e.words(&[tsk, task_ptr, mm_name, ptr]);
    for f in [EXIT_MM_RELEASE, EXEC_MM_RELEASE] {
        if f != skip {
            e.ty(f, Kind::Func, false, 0, release);
        }
    }
}

#[test]
fn mem_hooks_follow_the_tracepoints_prototypes() {
    let r = resolve(&old_kernel("")).unwrap();
    assert_eq!(r.exit_mem, MemHook::Fentry("exit_mm_release"));
    assert_eq!(r.exec_mem, MemHook::Fentry("exec_mm_release"));
    assert!(r.notes.iter().any(|n| n.contains("fires after exit_mm()")));
    assert!(!exit_tracepoint_has_mm(&old_kernel("")));

    let r = resolve(&kernel("", true)).unwrap();
    assert!(r.has_prepare_exec);
    assert_eq!(
        (r.exit_mem, r.exec_mem),
        (MemHook::Tracepoint, MemHook::Tracepoint)
    );
    assert!(exit_tracepoint_has_mm(&kernel("", true)));

    // A function inlined away is not in BTF: no fentry, and the images have no peak.
    let r = resolve(&old_kernel("exit_mm_release")).unwrap();
    assert_eq!(r.exit_mem, MemHook::Unavailable);
    assert_eq!(r.exec_mem, MemHook::Fentry("exec_mm_release"));
    let r = resolve(&old_kernel("exec_mm_release")).unwrap();
    assert_eq!(r.exec_mem, MemHook::Unavailable);
    assert!(r
        .notes
        .iter()
        .any(|n| n.contains("exec_mm_release: not in BTF")));
}

#[test]
fn btf_function_probes() {
    let b = old_kernel("");
    assert!(b.has_func("exit_mm_release"));
    assert!(!b.has_func("exit_mm"));
    assert!(!b.has_func("task_struct")); // a struct, not a function
    assert_eq!(
        b.typedef_fn_params("btf_trace_sched_process_exit").unwrap(),
        2
    );
    assert_eq!(
        kernel("", true)
            .typedef_fn_params("btf_trace_sched_process_exit")
            .unwrap(),
        3
    );
    assert!(b.typedef_fn_params("btf_trace_sched_prepare_exec").is_err());
    assert!(b.typedef_fn_params("atomic_t").is_err()); // a typedef of a struct
}

#[test]
fn resolve_old_kernel_layout() {
    let r = resolve(&old_kernel("")).unwrap();
    let o = r.off;
    assert_eq!(r.rss_layout, rss_layout::ATOMIC_ARRAY);
    assert_eq!((r.nr_mm_counters, r.has_prepare_exec), (4, false));
    assert_eq!(o.mm_rss_stat, 208); // points at count[0]
    assert_eq!(o.rss_stride, 8); // sizeof(atomic_long_t), through two typedefs
    assert_eq!((o.pcpu_count, o.pcpu_counters), (0, 0));
    assert!(r.has_task_rss_stat);
    assert_eq!(o.task_rss_stat_count, 268);
    assert_eq!(o.task_sum_exec_runtime, 112);
    assert_eq!((o.task_pid, o.task_tgid, o.task_signal), (220, 224, 288));
    assert_eq!((o.signal_live, o.signal_maxrss), (4, 200));
    assert_eq!((o.mm_hiwater_rss, o.mm_arg_end), (8, 108));
    assert_eq!((o.binprm_filename, o.bpf_array_pptrs), (96, 320));
    assert_eq!((o.rss_file_idx, o.rss_anon_idx, o.rss_shmem_idx), (0, 1, 3));

    let r = resolve(&old_kernel("task_struct.rss_stat")).unwrap();
    assert_eq!((r.has_task_rss_stat, r.off.task_rss_stat_count), (false, 0));
    // No sched_switch prototype (nor prev_cputime): the release record waits for the free.
    assert_eq!((o.task_state, o.signal_nr_threads), (0, 0));
}

/// Direct loads where the kernel's helpers include bpf_get_current_task_btf, and only there.
#[test]
fn direct_loads_follow_the_kernels_helpers() {
    let direct = |b: Btf| resolve(&b).unwrap().off.direct_loads;
    assert_eq!(direct(kernel("", true)), 1);
    assert_eq!(direct(kernel("BPF_FUNC_get_current_task_btf", true)), 0);
    assert_eq!(direct(old_kernel("")), 0);
}

#[test]
fn resolve_names_what_is_missing() {
    let err = resolve(&old_kernel("signal_struct.maxrss")).unwrap_err();
    assert_eq!(
        err.to_string(),
        "cannot find signal_struct.maxrss in the kernel's BTF: signal_struct has no member maxrss"
    );
    for skip in [
        "task_struct.se",
        "task_struct.exit_code",
        "mm_struct.hiwater_rss",
        "mm_struct.rss_stat",
        "linux_binprm.filename",
        "MM_SHMEMPAGES",
    ] {
        let err = resolve(&old_kernel(skip)).unwrap_err().to_string();
        let name = skip.rsplit('.').next().unwrap();
        assert!(err.contains(name), "{skip}: {err}");
    }
}

/// This machine's kernel, whose offsets /work/shared/TOOLCHAIN.md records.
const DOCUMENTED_RELEASE: &str = "6.18.44-fc-v445";

#[test]
fn resolve_live_btf_parse_and_resolve() {
    let t = std::time::Instant::now();
    let btf = Btf::from_sys_fs().expect("this test needs /sys/kernel/btf/vmlinux");
    let parsed = t.elapsed();
    let r = resolve(&btf).expect("resolve");
    let total = t.elapsed();
    println!(
        "btf: parse {parsed:?}, parse+resolve {total:?} ({})",
        if cfg!(debug_assertions) {
            "debug build"
        } else {
            "release build"
        }
    );
    println!("{:#?}", r);
    let o = r.off;

    // Facts that hold on any kernel.
    let size = |s| btf.size_of(s).unwrap();
    let (task, sig, mm) = (
        size("task_struct"),
        size("signal_struct"),
        size("mm_struct"),
    );
    assert_eq!(o.task_tgid, o.task_pid + 4);
    for f in [
        o.task_pid,
        o.task_mm,
        o.task_signal,
        o.task_group_leader,
        o.task_start_time,
        o.task_utime,
        o.task_stime,
        o.task_sum_exec_runtime,
        o.task_exit_code,
        o.task_rss_stat_count,
    ] {
        assert!(f < task, "{f} not inside task_struct ({task})");
    }
    for f in [o.signal_live, o.signal_flags, o.signal_group_exit_code] {
        assert!(f < sig);
    }
    assert!(o.signal_maxrss < sig);
    for f in [
        o.mm_hiwater_rss,
        o.mm_hiwater_vm,
        o.mm_total_vm,
        o.mm_arg_start,
    ] {
        assert!(f < mm);
    }
    assert_eq!(o.mm_arg_end, o.mm_arg_start + 8);
    assert!(o.mm_rss_stat + r.nr_mm_counters * o.rss_stride <= mm);
    let idx = [o.rss_file_idx, o.rss_anon_idx, o.rss_shmem_idx];
    assert!(idx.iter().all(|&i| i < 4 && i < r.nr_mm_counters));
    assert!(idx[0] != idx[1] && idx[1] != idx[2] && idx[0] != idx[2]);
    assert!(o.binprm_filename < size("linux_binprm"));
    assert!(o.bpf_array_pptrs <= size("bpf_array")); // a flexible array: may sit at the very end
    assert_eq!(o.signal_group_exit_flag, 4);
    // 5.18+ (every kernel spacetime tests on): the dead task's last switch is used.
    assert_eq!(
        btf.typedef_fn_params("btf_trace_sched_switch").ok(),
        Some(5)
    );
    for f in [o.task_state, o.task_on_cpu] {
        assert!(f != 0 && f < task, "{f} not inside task_struct ({task})");
    }
    for f in [o.signal_nr_threads, o.signal_stats_seq] {
        assert!(f != 0 && f < sig, "{f} not inside signal_struct ({sig})");
    }
    // Direct loads exactly from 5.11 (bpf_get_current_task_btf), by the kernel's release.
    let release = rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned();
    let mut v = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    assert_eq!(o.direct_loads == 1, (major, minor) >= (5, 11), "{release}");
    // Every kernel the programs load on has the cgroup path fields (one name or the other).
    assert!(o.task_cgroups > 0 && o.task_cgroups < task);
    assert!(o.css_set_dfl_cgrp < size("css_set"));
    assert!(o.cgroup_kn > 0 && o.cgroup_kn < size("cgroup"));
    let kn = size("kernfs_node");
    assert!(o.kernfs_parent < kn && o.kernfs_name < kn && o.kernfs_parent != o.kernfs_name);
    match r.rss_layout {
        rss_layout::PERCPU_COUNTER => {
            assert_eq!(o.rss_stride, size("percpu_counter"));
            assert!(o.pcpu_count < o.rss_stride && o.pcpu_counters < o.rss_stride);
            assert!(!r.has_task_rss_stat);
        }
        _ => {
            assert_eq!(o.rss_stride, 8);
            assert_eq!((o.pcpu_count, o.pcpu_counters), (0, 0));
        }
    }
    documented_offsets(&r, &btf);
}

/// On the kernel the numbers were read from by hand, the offsets are those numbers.
fn documented_offsets(r: &Resolved, btf: &Btf) {
    let o = r.off;
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    if release.trim() != DOCUMENTED_RELEASE {
        println!(
            "note: kernel {} is not {DOCUMENTED_RELEASE}; documented offsets not compared",
            release.trim()
        );
        return;
    }
    assert_eq!(o.task_mm, 1136);
    assert_eq!(o.mm_hiwater_rss, 344);
    assert_eq!(o.mm_rss_stat, 960);
    assert_eq!(o.pcpu_count, 8);
    assert_eq!(o.rss_stride, 40);
    assert_eq!(r.rss_layout, rss_layout::PERCPU_COUNTER);
    assert_eq!((o.rss_file_idx, o.rss_anon_idx, o.rss_shmem_idx), (0, 1, 3));
    assert!(r.has_prepare_exec);
    assert_eq!(
        (r.exit_mem, r.exec_mem),
        (MemHook::Tracepoint, MemHook::Tracepoint)
    );
    assert!(btf.has_func(EXIT_MM_RELEASE) && btf.has_func(EXEC_MM_RELEASE));
}
