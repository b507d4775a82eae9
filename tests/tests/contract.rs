//! The JSON contract's shape, argv fidelity, and the sudo user drop.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use spacetime_tests::{assert_world_executable, find_process, kernel_at_least, Exit, Trace, MIB};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn get<'a>(v: &'a Value, path: &str, key: &str) -> &'a Value {
    v.as_object()
        .unwrap_or_else(|| panic!("{path} must be an object, got {v}"))
        .get(key)
        .unwrap_or_else(|| panic!("{path}.{key} is missing"))
}

fn u64_at(v: &Value, path: &str, key: &str) -> u64 {
    let x = get(v, path, key);
    x.as_u64()
        .unwrap_or_else(|| panic!("{path}.{key} must be a non-negative integer, got {x}"))
}

fn int_at(v: &Value, path: &str, key: &str) -> i64 {
    let x = get(v, path, key);
    x.as_i64()
        .unwrap_or_else(|| panic!("{path}.{key} must be an integer, got {x}"))
}

fn strings_at(v: &Value, path: &str, key: &str) -> Vec<String> {
    let x = get(v, path, key);
    x.as_array()
        .unwrap_or_else(|| panic!("{path}.{key} must be an array, got {x}"))
        .iter()
        .map(|s| {
            s.as_str()
                .unwrap_or_else(|| panic!("{path}.{key} must hold strings, got {s}"))
                .to_owned()
        })
        .collect()
}

/// `{"code": N}` or `{"signal": N}` (or null if `nullable`).
fn check_exit(v: &Value, path: &str, nullable: bool) {
    if v.is_null() {
        assert!(nullable, "{path} must not be null");
        return;
    }
    let o = v
        .as_object()
        .unwrap_or_else(|| panic!("{path} must be an object, got {v}"));
    assert_eq!(o.len(), 1, "{path} must have exactly one key, got {v}");
    let (k, n) = o.iter().next().expect("one key");
    assert!(
        k == "code" || k == "signal",
        "{path} key must be code or signal, got {v}"
    );
    assert!(n.is_i64(), "{path}.{k} must be an integer, got {v}");
}

#[test]
fn json_contract_keys_and_types() {
    let argv = [WL, "tree", "1", "1"];
    let out = Trace::new(argv).tag("contract").run();
    out.assert_code(0);
    assert!(
        !out.stderr.trim().is_empty(),
        "a human summary is expected on stderr"
    );
    let v = out.json_value();
    assert_eq!(strings_at(&v, "$", "command"), argv, "$.command");
    check_exit(get(&v, "$", "exit"), "$.exit", false);
    assert_eq!(get(&v, "$", "exit"), &serde_json::json!({"code": 0}));
    for k in ["wall_ns", "user_ns", "sys_ns", "lost_events"] {
        u64_at(&v, "$", k);
    }
    assert!(u64_at(&v, "$", "wall_ns") > 0, "$.wall_ns must be > 0");
    let totals = get(&v, "$", "totals");
    for k in ["processes", "threads", "peak_rss_bytes"] {
        u64_at(totals, "$.totals", k);
    }
    let procs = get(&v, "$", "processes")
        .as_array()
        .expect("$.processes must be an array");
    assert_eq!(procs.len(), 2, "tree 1 1: root + one child");
    for (i, p) in procs.iter().enumerate() {
        let path = format!("$.processes[{i}]");
        int_at(p, &path, "pid");
        int_at(p, &path, "ppid");
        u64_at(p, &path, "start_ns");
        let end = get(p, &path, "end_ns");
        assert!(
            end.is_u64(),
            "{path}.end_ns must be an integer here (everything exited), got {end}"
        );
        assert!(u64_at(p, &path, "threads") >= 1);
        check_exit(get(p, &path, "exit"), &format!("{path}.exit"), true);
        assert!(
            u64_at(p, &path, "peak_rss_bytes") > 0,
            "{path}.peak_rss_bytes > 0"
        );
        let images = get(p, &path, "images")
            .as_array()
            .unwrap_or_else(|| panic!("{path}.images must be an array"));
        assert!(!images.is_empty(), "{path}.images is empty");
        for (j, img) in images.iter().enumerate() {
            let ipath = format!("{path}.images[{j}]");
            let exe = get(img, &ipath, "exe");
            assert!(exe.is_string(), "{ipath}.exe must be a string, got {exe}");
            strings_at(img, &ipath, "argv");
            u64_at(img, &ipath, "start_ns");
            u64_at(img, &ipath, "peak_rss_bytes");
        }
    }
    // And the typed view + invariants.
    let report = out.report();
    for t in out.truth_of("tree") {
        let p = find_process(&report, t.pid());
        assert_eq!(p.ppid, t.ppid(), "pid {}: ppid", p.pid);
    }
}

/// A deterministic argument of exactly `len` bytes mixing ASCII, JSON-special characters,
/// control characters and multi-byte UTF-8.
fn make_arg(len: usize, seed: usize) -> String {
    const CHUNK: &str = "abc\"q\\b/sl\ttab\nnl é€😀 {}[]<>,:;'$`!#%&*()=+?|~^0123456789 ";
    let chars: Vec<char> = CHUNK.chars().collect();
    let mut s = String::with_capacity(len);
    let mut i = seed;
    loop {
        let c = chars[i % chars.len()];
        if s.len() + c.len_utf8() > len {
            break;
        }
        s.push(c);
        i += 1;
    }
    while s.len() < len {
        s.push('x');
    }
    assert_eq!(s.len(), len);
    s
}

fn check_argv(args: &[String], tag: &str) {
    let mut argv: Vec<&str> = vec![WL, "noop"];
    argv.extend(args.iter().map(String::as_str));
    let out = Trace::new(&argv).tag(tag).run();
    out.assert_code(0);
    let report = out.report();
    let root = report.root();
    assert_eq!(root.images.len(), 1, "noop: images");
    let got = &root.images[0].argv;
    assert_eq!(
        got.len(),
        argv.len(),
        "pid {}: argv has {} entries, want {}",
        root.pid,
        got.len(),
        argv.len()
    );
    for (i, (g, w)) in got.iter().zip(&argv).enumerate() {
        if g != w {
            let at = g
                .bytes()
                .zip(w.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(g.len().min(w.len()));
            panic!(
                "pid {}: argv[{i}] differs: got {} bytes, want {} bytes, first difference at \
                 byte {at}",
                root.pid,
                g.len(),
                w.len()
            );
        }
    }
    assert_eq!(report.command, argv, "$.command");
}

#[test]
fn argv_6k_argument_byte_for_byte() {
    check_argv(&[make_arg(6144, 0)], "argv6k");
}

#[test]
fn argv_over_12k_in_several_args_byte_for_byte() {
    let args = vec![
        make_arg(4000, 1),
        String::new(),
        make_arg(5000, 7),
        "-x".to_owned(),
        make_arg(3500, 13),
        String::new(),
        make_arg(1, 3),
    ];
    assert!(args.iter().map(String::len).sum::<usize>() > 12 * 1024);
    check_argv(&args, "argv12k");
}

#[test]
fn argv_many_short_args() {
    let args: Vec<String> = (0..200).map(|i| format!("a{i}")).collect();
    check_argv(&args, "argvmany");
}

/// Expected supplementary groups of `user`, from `id -G`.
fn groups_of(user: &str) -> BTreeSet<i64> {
    let out = std::process::Command::new("id")
        .arg("-G")
        .arg(user)
        .output()
        .expect("run id -G");
    assert!(out.status.success(), "id -G {user} failed");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(|g| g.parse().expect("gid"))
        .collect()
}

#[test]
fn sudo_env_drops_to_the_invoking_user() {
    assert_world_executable(std::path::Path::new(WL));
    let out = Trace::new([WL, "whoami"])
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .env("SUDO_USER", "nobody")
        .tag("sudo")
        .run();
    out.assert_code(0);
    let t = out.truth_one("whoami");
    for k in ["uid", "euid", "gid", "egid"] {
        assert_eq!(t.int(k), 65534, "pid {}: {k} after the sudo drop", t.pid());
    }
    let mut got: BTreeSet<i64> = t.ints("groups").into_iter().collect();
    got.insert(65534);
    let mut want = groups_of("nobody");
    want.insert(65534);
    assert_eq!(got, want, "pid {}: supplementary groups", t.pid());
    assert!(!got.contains(&0), "pid {}: still in group 0", t.pid());
    let report = out.report();
    let p = find_process(&report, t.pid());
    assert_eq!(p.exit, Some(Exit::Code(0)));
}

#[test]
fn keep_root_ignores_sudo_env() {
    let out = Trace::new([WL, "whoami"])
        .flag("--keep-root")
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .env("SUDO_USER", "nobody")
        .tag("keeproot")
        .run();
    out.assert_code(0);
    let t = out.truth_one("whoami");
    assert_eq!(t.int("uid"), 0, "pid {}: uid with --keep-root", t.pid());
    assert_eq!(t.int("euid"), 0, "pid {}: euid with --keep-root", t.pid());
    let report = out.report();
    find_process(&report, t.pid());
}

/// The programs on the scheduler's fork, exec and exit tracepoints.
const CORE_PROGRAMS: [&str; 3] = [
    "sched_process_fork",
    "sched_process_exec",
    "sched_process_exit",
];

/// `$.spacetime.kernel_programs`, checked for shape: name → (run_cnt, run_time_ns).
fn kernel_programs(own: &Value) -> std::collections::BTreeMap<String, (u64, u64)> {
    let progs = get(own, "$.spacetime", "kernel_programs")
        .as_array()
        .unwrap_or_else(|| panic!("$.spacetime.kernel_programs must be an array, got {own}"));
    progs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let path = format!("$.spacetime.kernel_programs[{i}]");
            let name = get(p, &path, "name")
                .as_str()
                .unwrap_or_else(|| panic!("{path}.name must be a string, got {p}"));
            let runs = u64_at(p, &path, "run_cnt");
            let time = u64_at(p, &path, "run_time_ns");
            let per_run = get(p, &path, "ns_per_run");
            match runs {
                0 => assert!(
                    per_run.is_null(),
                    "{path}.ns_per_run: null without runs, got {p}"
                ),
                _ => assert_eq!(
                    per_run.as_u64(),
                    Some(time / runs),
                    "{path}.ns_per_run: {p}"
                ),
            }
            (name.to_string(), (runs, time))
        })
        .collect()
}

#[test]
fn own_cost_is_spacetimes_process_only() {
    // The traced child is another process after fork+exec: its 192 MiB must not show in
    // spacetime's own peak, which is held under half of it (26 MB here).
    const TOUCH_MIB: u64 = 192;
    let out = Trace::new([WL, "touch", &TOUCH_MIB.to_string()])
        .flag("-v")
        .tag("owncost")
        .run();
    out.assert_code(0);
    let v = out.json_value();
    let own = get(&v, "$", "spacetime");
    let cpu = u64_at(own, "$.spacetime", "user_ns") + u64_at(own, "$.spacetime", "sys_ns");
    assert!(cpu > 0, "$.spacetime: spacetime used no CPU? {own}");
    let peak = u64_at(own, "$.spacetime", "peak_rss_bytes");
    assert!(
        (MIB..=TOUCH_MIB / 2 * MIB).contains(&peak),
        "$.spacetime.peak_rss_bytes {peak} must be between 1 MiB and {} MiB: {own}",
        TOUCH_MIB / 2
    );
    let child = out.truth_one("touch");
    assert!(
        child.vmhwm_bytes() >= TOUCH_MIB * MIB,
        "pid {}: the workload's own peak {} is below {TOUCH_MIB} MiB",
        child.pid(),
        child.vmhwm_bytes()
    );
    let stats = get(own, "$.spacetime", "bpf_stats_enabled");
    assert!(stats.is_boolean(), "$.spacetime.bpf_stats_enabled: {stats}");
    let progs = kernel_programs(own);
    for name in CORE_PROGRAMS {
        assert!(
            progs.contains_key(name),
            "$.spacetime.kernel_programs lacks {name}: {own}"
        );
    }
    assert!(
        out.stderr.contains("spacetime itself: user "),
        "-v must print spacetime's own cost\n{}",
        out.context()
    );
}

/// Sets `kernel.bpf_stats_enabled` and puts the old value back when dropped (panics included).
struct BpfStats {
    old: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    fn enable() -> BpfStats {
        let old =
            std::fs::read_to_string(BPF_STATS).unwrap_or_else(|e| panic!("read {BPF_STATS}: {e}"));
        std::fs::write(BPF_STATS, "1").unwrap_or_else(|e| panic!("write 1 to {BPF_STATS}: {e}"));
        BpfStats { old }
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        if let Err(e) = std::fs::write(BPF_STATS, self.old.trim()) {
            eprintln!("could not restore {BPF_STATS} to {}: {e}", self.old.trim());
        }
    }
}

#[test]
fn kernel_program_stats_count_every_exit() {
    let _stats = BpfStats::enable();
    let out = Trace::new([WL, "tree", "2", "3"]).tag("bpfstats").run();
    out.assert_code(0);
    let nodes = out.truth_of("tree").len() as u64;
    assert_eq!(nodes, 1 + 3 + 9, "tree 2 3: truth lines");
    let report = out.report();
    assert_eq!(report.processes.len() as u64, nodes, "tree 2 3: processes");
    let v = out.json_value();
    let own = get(&v, "$", "spacetime");
    assert_eq!(
        get(own, "$.spacetime", "bpf_stats_enabled"),
        &Value::Bool(true),
        "$.spacetime.bpf_stats_enabled with the sysctl set: {own}"
    );
    let progs = kernel_programs(own);
    let run_cnt = |name: &str| {
        progs
            .get(name)
            .unwrap_or_else(|| panic!("$.spacetime.kernel_programs lacks {name}: {own}"))
            .0
    };
    // The tracepoints fire for every task on the system; the traced ones are a subset.
    assert!(
        run_cnt("sched_process_exit") >= nodes,
        "sched_process_exit ran {} times for a workload of {nodes} processes: {own}",
        run_cnt("sched_process_exit")
    );
    assert!(
        run_cnt("sched_process_fork") >= nodes - 1,
        "sched_process_fork ran {} times for {} forks: {own}",
        run_cnt("sched_process_fork"),
        nodes - 1
    );
    let (_, exit_ns) = progs["sched_process_exit"];
    assert!(
        exit_ns > 0,
        "sched_process_exit: run_time_ns must be > 0: {own}"
    );
}

#[test]
fn start_up_cost_is_reported_per_program() {
    let out = Trace::new([WL, "tree", "1", "1"]).tag("startup").run();
    out.assert_code(0);
    let v = out.json_value();
    let own = get(&v, "$", "spacetime");
    let load_us = u64_at(own, "$.spacetime", "load_us");
    assert!(load_us > 0, "$.spacetime.load_us: {own}");
    let progs = get(own, "$.spacetime", "kernel_programs")
        .as_array()
        .unwrap_or_else(|| panic!("$.spacetime.kernel_programs must be an array: {own}"));
    let timed: Vec<&Value> = progs.iter().filter(|p| !p["load_us"].is_null()).collect();
    // Every program on a tracepoint is loaded on the timed path; own_pid is loaded apart.
    for name in [
        "sched_process_exit",
        "sched_process_exec",
        "sched_process_fork",
    ] {
        let p = timed
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{name} has no load time: {own}"));
        // The kernel says how many instructions it verified since 5.16; before, null.
        if kernel_at_least(5, 16) {
            let insns = p["verified_insns"].as_u64().unwrap_or(0);
            assert!(insns > 0, "{name}: verified_insns from the kernel: {p}");
        } else {
            assert!(
                p["verified_insns"].is_null(),
                "{name}: verified_insns before 5.16: {p}"
            );
        }
    }
    for p in &timed {
        let us = p["load_us"].as_u64().unwrap_or(u64::MAX);
        assert!(
            us <= load_us,
            "a program's load ({us} µs) lies within the whole start-up ({load_us} µs): {p}"
        );
    }
    // A plain trace: no free record was given up and the kernel skipped no program run.
    let counters = get(&v, "$", "kernel")["counters"].clone();
    for k in ["reap_full", "recursion_misses"] {
        assert_eq!(
            counters[k].as_u64(),
            Some(0),
            "kernel.counters.{k} on a 3-process trace: {counters}"
        );
    }
}

/// A 4 KiB ring buffer of spacetime's own, the smallest the kernel maps (not in the agent's
/// pass: an agent's ring is its own): 300 forks, execs (argv included) and exits (60 in the
/// emulated guest) write 15-75 KB of records, so the ring wraps again and again and records
/// straddle its end (the data is mapped once: such a
/// record is put together from the area's end and its start). Each record read decodes, and
/// each part of a process read is whole, argv and exit. How much a ring this small loses
/// depends on how soon the reader is scheduled, so loss is allowed here and must be counted: a
/// process missing from the report, or a part of one, means records said lost. (Asserting none
/// lost failed in CI with the reader not scheduled for ~10 ms on a busy machine; asserting
/// every exit of a process whose exec arrived failed there too.)
#[test]
fn records_that_wrap_around_a_small_ring_decode_whole() {
    // 60 in the emulated guest: still more than the 34 that fill the ring twice.
    let n = spacetime_tests::storm_size(300, 60);
    const RING: u64 = 4 << 10;
    let out = Trace::new([WL, "storm", &n.to_string(), WL, "noop"])
        .flag("--ring-buffer")
        .flag("4K")
        .tag("small-ring")
        .timeout(Duration::from_secs(300))
        .run();
    out.assert_code(0);
    let v = out.json_value();
    assert_eq!(v["kernel"]["ring_buffer_bytes"], RING, "{}", out.context());
    assert_eq!(
        v["kernel"]["decode_errors"],
        0,
        "records that did not decode\n{}",
        out.context()
    );
    let lost = v["lost_events"].as_u64().expect("lost_events");
    let t = out.truth_one("storm");
    let pids = t.ints("pids");
    assert_eq!(pids.len(), n);
    let processes = v["processes"].as_array().expect("processes");
    let mut present = 0u64;
    for &pid in &pids {
        let Some(p) = processes.iter().find(|p| p["pid"] == pid) else {
            continue;
        };
        let Some(last) = p["images"].as_array().and_then(|i| i.last()) else {
            continue;
        };
        present += 1;
        // A record lost (counted) leaves its part unknown, never garbled: the exec's argv, or
        // the fork's (the parent's) when the exec was lost; the exit, or none said unknown.
        let storm_argv = json!([WL, "storm", n.to_string(), WL, "noop"]);
        assert!(
            last["argv"] == json!([WL, "noop"]) || (lost > 0 && last["argv"] == storm_argv),
            "pid {pid}: argv {} ({lost} lost)",
            last["argv"]
        );
        assert!(
            p["exit"] == json!({"code": 0})
                || (lost > 0 && p["exit"].is_null() && p["state"] == "unknown"),
            "pid {pid}: exit {} state {} ({lost} lost)",
            p["exit"],
            p["state"]
        );
    }
    let missing = n as u64 - present;
    assert!(
        missing == 0 || lost > 0,
        "{missing} of {n} processes missing and no loss said\n{}",
        out.context()
    );
    if lost > 0 {
        assert!(
            out.stderr.contains("INCOMPLETE"),
            "{lost} records lost and the summary does not say INCOMPLETE\n{}",
            out.context()
        );
    }
    // A fork and an exit alone are 248 bytes of records: what was read filled the ring at least
    // twice, so it wrapped while being read.
    assert!(
        present * 248 >= 2 * RING,
        "only {present} of {n} processes read ({lost} records lost): the ring never wrapped\n{}",
        out.context()
    );
}
