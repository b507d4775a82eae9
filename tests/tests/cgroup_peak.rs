//! `--cgroup-peak`: the tree's distinct-page peak from a memory cgroup of its own, against
//! workloads whose sharing and page cache are known: a process that forks a child sharing its
//! pages copy-on-write (summed RSS ≈ 2N, distinct pages ≈ N), a process that reads a file
//! into the page cache (RSS small, charged pages ≈ the file), a survivor still running at the
//! end, and a machine whose cgroup mounts are read-only. The run's cgroup must be gone after
//! every one of them.

use std::{io::Write, path::Path};

use serde_json::Value;
use spacetime_tests::{find_process, gate::Gate, TempDir, Trace, MIB};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// Every directory named `spacetime-PID-*` under /sys/fs/cgroup (the cgroups spacetime `pid`
/// made).
fn cgroups_of(pid: i32) -> Vec<String> {
    let prefix = format!("spacetime-{pid}-");
    let mut found = Vec::new();
    let mut stack = vec![(std::path::PathBuf::from("/sys/fs/cgroup"), 0)];
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
            let name = e.file_name().to_string_lossy().into_owned();
            if !is_dir {
                continue;
            }
            if name.starts_with(&prefix) {
                found.push(e.path().display().to_string());
            } else if depth < 6 {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    found
}

/// The report's `cgroup_peak` object, asserted available; returns its peak in bytes.
fn cgroup_peak(v: &Value, context: &str) -> u64 {
    let c = &v["cgroup_peak"];
    assert_eq!(
        c["available"], true,
        "cgroup_peak not available: {c}\n{context}"
    );
    let version = c["cgroup_version"].as_u64().expect("cgroup_version");
    let want_source = if version == 2 {
        "memory.peak"
    } else {
        "memory.max_usage_in_bytes"
    };
    assert_eq!(c["source"], want_source, "source for cgroup v{version}");
    c["peak_bytes"].as_u64().expect("peak_bytes")
}

fn tree_peak(v: &Value) -> u64 {
    v["totals"]["tree_peak_rss_bytes"]
        .as_u64()
        .expect("totals.tree_peak_rss_bytes")
}

/// Runs `cow-fork MIB` under --cgroup-peak and checks both peaks against the truth.
fn cow_fork(mib: u64) {
    let run = Trace::new([WL, "cow-fork", &mib.to_string()])
        .flag("--cgroup-peak")
        .tag("cgroup-cow")
        .spawn();
    let spacetime = run.pid();
    let out = run.wait();
    out.assert_code(0);
    let report = out.report();
    let v = out.json_value();
    let ctx = out.context();
    // Truth: each process's own VmHWM; both were at their peak together (they hold until
    // both recorded).
    let hwm_sum: u64 = out
        .truth_of("cow-fork")
        .iter()
        .map(|t| {
            find_process(&report, t.pid());
            t.vmhwm_bytes()
        })
        .sum();
    assert_eq!(out.truth_of("cow-fork").len(), 2, "parent and child\n{ctx}");
    assert!(
        hwm_sum >= 2 * mib * MIB,
        "truth: VmHWM sum {hwm_sum} < 2×{mib} MiB (workload broken?)"
    );
    let tree = tree_peak(&v);
    let cg = cgroup_peak(&v, &ctx);
    eprintln!(
        "cow-fork {mib} MiB: tree peak {} MiB, VmHWM sum {} MiB, cgroup peak {} MiB",
        tree / MIB,
        hwm_sum / MIB,
        cg / MIB
    );
    // The summed RSS counts the shared pages in both processes.
    assert!(
        tree + 4 * MIB >= hwm_sum && tree <= hwm_sum + 8 * MIB,
        "tree peak {tree} vs the processes' VmHWM sum {hwm_sum}\n{ctx}"
    );
    // The cgroup counts them once: N MiB plus the processes' text, stacks and page tables.
    assert!(
        cg >= mib * MIB && cg <= mib * MIB + mib * MIB / 10 + 16 * MIB,
        "cgroup peak {cg} bytes for {mib} MiB shared by two processes\n{ctx}"
    );
    assert!(
        tree - cg >= mib * MIB * 9 / 10,
        "tree peak {tree} minus cgroup peak {cg} should be about the {mib} MiB shared\n{ctx}"
    );
    assert!(
        out.stderr.contains("cgroup peak"),
        "the summary names the cgroup peak\n{ctx}"
    );
    assert_eq!(
        cgroups_of(spacetime),
        Vec::<String>::new(),
        "cgroup removed"
    );
}

#[test]
fn cow_shared_pages_count_once_in_the_cgroup_and_twice_in_the_rss_sum() {
    for mib in [64, 160] {
        cow_fork(mib);
    }
}

#[test]
fn page_cache_is_charged_to_the_cgroup_and_absent_from_rss() {
    let dir = TempDir::new("cgroup-cache");
    let file = dir.path().join("data");
    let mib = 96u64;
    {
        let mut f = std::fs::File::create(&file).expect("create data file");
        let chunk = vec![0x5au8; MIB as usize];
        for _ in 0..mib {
            f.write_all(&chunk).expect("write data file");
        }
        // Clean pages, so the workload's fadvise can drop them.
        f.sync_all().expect("fsync data file");
    }
    let run = Trace::new([WL, "page-cache", &file.display().to_string()])
        .flag("--cgroup-peak")
        .tag("cgroup-cache")
        .spawn();
    let spacetime = run.pid();
    let out = run.wait();
    out.assert_code(0);
    let v = out.json_value();
    let ctx = out.context();
    let t = out.truth_one("page-cache");
    let brought = (t.int("cached_after_bytes") - t.int("cached_before_bytes")).max(0) as u64;
    assert!(
        brought >= mib * MIB * 9 / 10,
        "truth: the workload brought only {brought} bytes of {mib} MiB into the page cache"
    );
    let cg = cgroup_peak(&v, &ctx);
    let tree = tree_peak(&v);
    eprintln!(
        "page-cache {mib} MiB: brought {} MiB, cgroup peak {} MiB, tree peak RSS {} MiB",
        brought / MIB,
        cg / MIB,
        tree / MIB
    );
    assert!(
        cg >= brought && cg <= brought + 16 * MIB,
        "cgroup peak {cg} vs {brought} bytes brought into the page cache\n{ctx}"
    );
    assert!(
        tree < 16 * MIB,
        "the tree's RSS does not count page cache it never mapped: {tree}\n{ctx}"
    );
    assert_eq!(
        cgroups_of(spacetime),
        Vec::<String>::new(),
        "cgroup removed"
    );
}

/// The cgroup a process is in, per hierarchy, as /proc says.
fn cgroup_lines(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/cgroup: {e}"))
}

#[test]
fn survivors_are_moved_out_and_the_cgroup_removed() {
    // The child holds until the checks below are done (the gate opens when it drops), ten
    // minutes at most.
    let gate = Gate::new("cgroup-survivor-gate");
    let gate_path = gate.path().to_str().expect("a UTF-8 temporary path");
    let run = Trace::new([WL, "leave-child", "16", "600000", gate_path])
        .flag("--cgroup-peak")
        .flag("--stop-on-root-exit")
        .tag("cgroup-survivor")
        .spawn();
    let spacetime = run.pid();
    let out = run.wait();
    out.assert_code(0);
    let v = out.json_value();
    let ctx = out.context();
    let child = out
        .truth_of("leave-child")
        .into_iter()
        .find(|t| t.str("role") == "child")
        .unwrap_or_else(|| panic!("no child truth\n{ctx}"))
        .pid();
    let cg = cgroup_peak(&v, &ctx);
    assert!(cg >= 16 * MIB, "cgroup peak {cg} covers the child's 16 MiB");
    assert_eq!(
        v["cgroup_peak"]["moved_out"], 1,
        "the child was moved out\n{ctx}"
    );
    assert_eq!(
        cgroups_of(spacetime),
        Vec::<String>::new(),
        "cgroup removed"
    );
    // Still running (it holds until the gate opens), now in the cgroup spacetime ran in.
    let now = cgroup_lines(child);
    assert!(
        !now.contains("spacetime-"),
        "pid {child} is still in a spacetime cgroup: {now}"
    );
    assert_eq!(
        now,
        cgroup_lines(std::process::id() as i32),
        "pid {child}'s cgroups"
    );
}

#[test]
fn read_only_cgroup_mounts_give_one_sentence_and_a_full_trace() {
    // A private mount namespace whose cgroup mounts are read-only bind remounts, as in a
    // container; the host's stay writable.
    let script = r#"for m in $(awk '$3 ~ /^cgroup/ {print $2}' /proc/mounts); do
        mount -o remount,bind,ro "$m" || exit 99; done; exec "$0" "$@""#;
    let run = Trace::new([WL, "touch", "8"])
        .flag("--cgroup-peak")
        .under([
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
        ])
        .tag("cgroup-ro")
        .spawn();
    let spacetime = run.pid();
    let out = run.wait();
    out.assert_code(0);
    let v = out.json_value();
    let ctx = out.context();
    let c = &v["cgroup_peak"];
    assert_eq!(c["available"], false, "{c}\n{ctx}");
    assert_eq!(c["peak_bytes"], Value::Null);
    let why = c["unavailable_reason"]
        .as_str()
        .expect("unavailable_reason");
    assert!(
        why.starts_with("no memory controller can be used") && why.contains("Read-only"),
        "reason: {why}"
    );
    assert_eq!(
        out.stderr
            .matches("no memory controller can be used")
            .count(),
        2,
        "one notice at the start, one line in the summary\n{ctx}"
    );
    let report = out.report();
    assert!(
        report.totals.peak_rss_bytes >= 8 * MIB,
        "the trace itself is whole"
    );
    assert!(Path::new("/sys/fs/cgroup").exists());
    assert_eq!(
        cgroups_of(spacetime),
        Vec::<String>::new(),
        "nothing created"
    );
}

/// `bench --cgroup-peak`: every measured run has its own cgroup, and its distinct-page peak
/// counts the copy-on-write pages once where the summed-RSS tree peak counts them twice.
#[test]
fn bench_reports_each_runs_cgroup_peak() {
    let dir = TempDir::new("cgroup-bench");
    let json = dir.path().join("bench.json");
    let mib = 64u64;
    let out = std::process::Command::new(spacetime_tests::spacetime_bin())
        .args(["bench", "--cgroup-peak", "-N", "-r", "2", "--json"])
        .arg(&json)
        .arg(format!("{WL} cow-fork {mib}"))
        .env("ST_TRUTH", dir.path().join("truth.jsonl"))
        .env_remove("SUDO_UID")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run spacetime bench");
    let spacetime = out.id() as i32;
    let out = out.wait_with_output().expect("wait for spacetime bench");
    let ctx = format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json).expect("bench.json"))
        .unwrap_or_else(|e| panic!("bench.json: {e}\n{ctx}"));
    let r = &v["results"][0];
    let values = |k: &str| -> Vec<u64> {
        r[k]["values"]
            .as_array()
            .unwrap_or_else(|| panic!("{k}.values missing\n{ctx}"))
            .iter()
            .map(|x| x.as_u64().expect("integer"))
            .collect()
    };
    let (cgroups, trees) = (values("cgroup_peak_bytes"), values("tree_peak_rss_bytes"));
    assert_eq!(cgroups.len(), 2, "one cgroup peak per run\n{ctx}");
    for (i, (&cg, &tree)) in cgroups.iter().zip(&trees).enumerate() {
        assert!(
            cg >= mib * MIB && cg <= mib * MIB + mib * MIB / 10 + 16 * MIB,
            "run {i}: cgroup peak {cg} for {mib} MiB shared by two processes\n{ctx}"
        );
        assert!(
            tree >= cg + mib * MIB * 9 / 10,
            "run {i}: tree peak {tree} should count the {mib} MiB twice (cgroup {cg})\n{ctx}"
        );
    }
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("cgroup peak"),
        "the summary names the cgroup peak\n{ctx}"
    );
    assert_eq!(
        cgroups_of(spacetime),
        Vec::<String>::new(),
        "no cgroup left behind"
    );
}
