//! Peak RSS per process and per image, against each process's own VmHWM read right before exit.

use spacetime_tests::{
    assert_rss, find_process, gate::Gate, kernel_has_fetch_atomics, Trace, MIB, NO_FETCH_ATOMICS,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

#[test]
fn touch_64_mib_peak_matches_vmhwm() {
    let out = Trace::new([WL, "touch", "64"]).tag("touch").run();
    out.assert_code(0);
    let report = out.report();
    let truth = out.truth_one("touch");
    let want = truth.vmhwm_bytes();
    assert!(
        want >= 64 * MIB,
        "truth: pid {} VmHWM {want} < 64 MiB (workload broken?)",
        truth.pid()
    );

    let p = find_process(&report, truth.pid());
    assert_eq!(report.root().pid, p.pid, "the touching process is the root");
    assert_eq!(
        p.images.len(),
        1,
        "pid {}: one image (no fork, no exec): {:?}",
        p.pid,
        p.images
    );
    assert_eq!(p.images[0].exe, WL, "pid {}: images[0].exe", p.pid);
    assert_eq!(
        p.images[0].argv,
        [WL, "touch", "64"],
        "pid {}: images[0].argv",
        p.pid
    );
    assert_rss(
        &format!("pid {} process peak_rss_bytes", p.pid),
        p.peak_rss_bytes,
        want,
    );
    assert_rss(
        &format!("pid {} images[0].peak_rss_bytes", p.pid),
        p.images[0].peak(),
        want,
    );
    assert_eq!(report.totals.peak_rss_bytes, p.peak_rss_bytes);
}

/// The ru_maxrss trap: the image before exec is big, the one after is small. ru_maxrss would
/// report the big one for the exec'd program; spacetime must split them per image.
#[test]
fn grow_exec_splits_peak_per_image() {
    let out = Trace::new([WL, "grow-exec", "300", WL, "noop"])
        .tag("grow-exec")
        .run();
    out.assert_code(0);
    let report = out.report();
    let truth = out.truth_one("grow-exec");
    let want = truth.vmhwm_bytes();
    assert!(
        want >= 300 * MIB,
        "truth: pid {} VmHWM {want} < 300 MiB",
        truth.pid()
    );

    assert_eq!(
        report.processes.len(),
        1,
        "exec keeps one entry for the pid; got pids {:?}",
        report.pids()
    );
    let p = find_process(&report, truth.pid());
    assert_eq!(
        p.images.len(),
        2,
        "pid {}: two images (grow-exec, then noop): {:?}",
        p.pid,
        p.images
    );
    let (big, small) = (&p.images[0], &p.images[1]);
    assert_eq!(big.exe, WL, "pid {}: images[0].exe", p.pid);
    assert_eq!(
        big.argv,
        [WL, "grow-exec", "300", WL, "noop"],
        "pid {}: images[0].argv",
        p.pid
    );
    assert_rss(
        &format!("pid {} images[0] (before exec) peak_rss_bytes", p.pid),
        big.peak(),
        want,
    );
    assert!(
        small.exe.ends_with("st-workload"),
        "pid {}: images[1].exe {:?} should end in st-workload",
        p.pid,
        small.exe
    );
    assert_eq!(small.exe, WL, "pid {}: images[1].exe", p.pid);
    assert_eq!(small.argv, [WL, "noop"], "pid {}: images[1].argv", p.pid);
    assert!(
        small.peak() < 16 * MIB,
        "pid {}: images[1] (noop after exec) peak {} bytes ({:.1} MiB) must be < 16 MiB: \
         the pre-exec peak leaked into the new image",
        p.pid,
        small.peak(),
        small.peak() as f64 / MIB as f64
    );
    assert!(small.peak() > 0, "pid {}: images[1] peak is 0", p.pid);
    assert_eq!(
        p.peak_rss_bytes,
        big.peak(),
        "pid {}: process peak = max over images",
        p.pid
    );
    assert_eq!(
        p.exit,
        Some(spacetime_tests::Exit::Code(0)),
        "pid {}: exit",
        p.pid
    );
}

/// A process that peaks, frees, then ends small: its image peak is the peak it reached (its
/// own VmRSS at that moment), not the smaller figure the kernel's lazily raised hiwater_rss
/// may keep.
#[test]
fn freed_peak_is_still_the_peak() {
    let out = Trace::new([WL, "peak-free", "96", "8"])
        .tag("peak-free")
        .run();
    out.assert_code(0);
    let report = out.report();
    let truth = out.truth_one("peak-free");
    let want = truth.int("peak_vmrss_kib") as u64 * 1024;
    assert!(want >= 96 * MIB, "truth: VmRSS at the peak {want}");
    let p = find_process(&report, truth.pid());
    // The peak was read right after touching, before the read of /proc itself could add much.
    assert_rss(
        &format!("pid {} images[0] (peak then free)", p.pid),
        p.images[0].peak(),
        want,
    );
}

/// `--stop-on-root-exit`: a child still running when the trace ends reports its peak so far,
/// as the kernel followed it, not 0; the report stays consistent with itself.
#[test]
fn a_child_left_running_reports_its_peak_so_far() {
    // Held until the test ends (the gate opens when it drops), ten minutes at most: the trace
    // stops at the root's exit while the child surely runs.
    let gate = Gate::new("leave-child-gate");
    let gate_path = gate.path().to_str().expect("a UTF-8 temporary path");
    let out = Trace::new([WL, "leave-child", "48", "600000", gate_path])
        .flag("--stop-on-root-exit")
        .tag("leave-child")
        .run();
    out.assert_code(0);
    let report = out.report();
    let child_truth = out
        .truth_of("leave-child")
        .into_iter()
        .find(|t| t.str("role") == "child")
        .unwrap_or_else(|| panic!("no truth line from the child\n{}", out.context()));
    let want = child_truth.vmhwm_bytes();
    assert!(want >= 48 * MIB, "truth: the child's VmHWM {want} < 48 MiB");
    let child = find_process(&report, child_truth.pid());
    assert_eq!(
        child.end_ns, None,
        "pid {}: still running when the root exited",
        child.pid
    );
    assert_rss(
        &format!("pid {} (running) peak_rss_bytes", child.pid),
        child.peak_rss_bytes,
        want,
    );
    let img = child.images.last().expect("an image");
    assert_rss(
        &format!("pid {} (running) last image's peak", child.pid),
        img.peak(),
        want,
    );
    let v = out.json_value();
    let tree_peak = v["totals"]["tree_peak_rss_bytes"]
        .as_u64()
        .expect("tree peak");
    assert!(
        tree_peak >= child.peak_rss_bytes,
        "the tree peak {tree_peak} counts the child's {}",
        child.peak_rss_bytes
    );
    // Where the kernel's BPF lacks fetch atomics the tree-wide peak is approximate, and the
    // report says so (kernel.mechanisms, which -v shows); elsewhere it says nothing of it.
    let mechanisms = &v["kernel"]["mechanisms"];
    let said = mechanisms
        .as_array()
        .expect("kernel.mechanisms")
        .iter()
        .filter_map(|m| m.as_str())
        .any(|m| m.starts_with(NO_FETCH_ATOMICS) && m.contains("(tree_peak_rss) is approximate"));
    assert_eq!(
        said,
        !kernel_has_fetch_atomics(),
        "kernel.mechanisms: {mechanisms}"
    );
    assert_eq!(v["totals"]["still_running"].as_u64(), Some(1));
    // Its series reaches its peak too.
    let entry = v["timeline"]["processes"]
        .as_array()
        .expect("timeline.processes")
        .iter()
        .find(|e| e["pid"].as_i64() == Some(i64::from(child.pid)))
        .expect("the child's series");
    let top = entry["rss"]
        .as_array()
        .expect("rss")
        .iter()
        .filter_map(|p| p[1].as_u64())
        .max()
        .unwrap_or(0);
    assert!(
        top.abs_diff(child.peak_rss_bytes) <= spacetime_tests::PAGE,
        "the running child's series tops at {top}, its peak is {}",
        child.peak_rss_bytes
    );
}
