//! `cargo xtask vm-test`: the whole integration suite inside a Debian guest (6.1 unless
//! `--debian 11` (5.10) or `--debian 13` (6.12) says otherwise).
//!
//! Most servers still run 6.1, which differs from recent kernels exactly where spacetime is
//! delicate (the exit tracepoint fires after the mm is gone, no `sched_prepare_exec`, atomic RSS
//! counters). This boots Debian's cloud kernel under qemu (TCG: KVM hangs on the CI machines)
//! with an initramfs holding busybox, the release `spacetime`, `st-workload` and the integration
//! test binaries, runs every test binary in the guest and reads the verdict from the console.
//!
//! The kernel package is fetched with apt by name (the newest `linux-image-*-cloud-amd64-unsigned`
//! of the release that apt offers, `vm/kernel.rs`) and cached under `<target>/vm/debian-N/`, so a
//! second run downloads nothing.
//!
//! `--arch arm64` boots the release's arm64 cloud kernel under qemu-system-aarch64 (virt, TCG)
//! with the static aarch64 spacetime, aarch64 builds of the chosen test binaries (doctor and
//! memory unless `--test` says), and Debian's arm64 busybox and setpriv (with its libraries),
//! cached under `<target>/vm/debian-N-arm64/`.

use std::{
    ffi::OsString,
    fs,
    path::PathBuf,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::{
    arch::{Arch, Build},
    target_dir, toolchain,
};

mod console;
mod guest;
mod kernel;
use console::boot;
use guest::make_initramfs;
pub use kernel::Debian;

/// Host packages the VM test needs besides qemu: a static busybox for an amd64 guest, cpio
/// for the archive.
const HOST_PACKAGES: [&str; 2] = ["busybox-static", "cpio"];
/// The test binaries an arm64 guest runs unless `--test` names others: what the architecture
/// could change (the kernel's features as doctor sees them; the exact RSS read through the
/// per-CPU counters and their offsets) with the fewest cross-built binaries: an emulated arm64
/// CPU is slower than an emulated x86-64 one, and every test binary is one more cross build.
const ARM64_TESTS: [&str; 2] = ["doctor", "memory"];
/// Printed by the guest's /init as its last line before powering off.
const MARKER: &str = "SPACETIME-VM-RESULT:";
/// Where the guest finds things.
const GUEST_SPACETIME: &str = "/usr/bin/spacetime";
/// Where the guest finds the `--doctor-with` binary.
const GUEST_DOCTOR_WITH: &str = "/usr/bin/spacetime-doctor-with";
/// The doctor test binary that runs with it.
const GUEST_DOCTOR_TEST: &str = "/doctor-with/doctor";
const GUEST_TESTS: &str = "/tests";
/// busybox applets linked in the archive (the rest are installed by /init). The tests call
/// `true` (through PATH), `/bin/echo`, `/bin/sh` and `id -G`.
const APPLETS: [&str; 17] = [
    "sh", "echo", "true", "false", "id", "mount", "mkdir", "cat", "cp", "mv", "ls", "uname",
    "poweroff", "sleep", "grep", "env", "ip",
];

pub struct Options {
    /// The Debian release whose cloud kernel the guest boots.
    pub debian: Debian,
    /// The guest's architecture.
    pub arch: Arch,
    /// A kernel image to boot instead of Debian's.
    pub kernel: Option<PathBuf>,
    /// Limit for the guest's whole run.
    pub timeout: Duration,
    /// Also run the tests in [`SLOW_UNDER_TCG`].
    pub all: bool,
    /// Extra arguments for every test binary (a name filter, `--nocapture`…).
    pub test_args: Vec<OsString>,
    /// vCPUs of the guest: the exact RSS sums add per-CPU deltas, so more CPUs test more.
    pub cpus: u32,
    /// Run only these integration test binaries (by file name: `memory`); all when empty.
    pub only: Vec<String>,
    /// Leave these out (another guest runs them).
    pub except: Vec<String>,
    /// The spacetime binary the guest runs (the static one of `cargo xtask dist`); the
    /// release build when None.
    pub spacetime: Option<PathBuf>,
    /// A second binary the doctor tests run with after the suite, in the same boot.
    pub doctor_with: Option<PathBuf>,
}

/// Tests skipped by default (`--all` runs them): sized for a real CPU, they cannot finish in
/// time on qemu's emulated one (about 12 fork+exec per second here, 100 times slower).
const SLOW_UNDER_TCG: [(&str, &str); 3] = [
    (
        "watch_sees_every_exit_of_a_burst",
        "1000 fork+exec, about 85 s of an emulated CPU, for what the host's run checks: the \
         watch's matching and output, the same on every kernel",
    ),
    (
        "own_memory_per_exec_storm_process_is_bounded",
        "18 000 fork+exec for spacetime's own memory per process, which userspace decides, the \
         same on every kernel",
    ),
    (
        "diff_compares_the_mean_rss_on_cpu",
        "two 500 ms CPU burns (13-25 s of an emulated guest) for what diff makes of two saved \
         reports, in userspace; the figure itself is the kernel's in \
         mean_rss_on_cpu_is_what_the_process_held",
    ),
];

/// Test binaries left out of the guest: they check the CLI, the docs, the file formats, the
/// metrics, what a terminal shows and the build view with host tools the busybox guest lacks
/// (bash, groff, man, python3 with pip, cargo, setpriv, systemd-analyze, a Prometheus server,
/// tmux, script, GNU time, hyperfine, make and a C compiler, Chromium), and nothing in them
/// depends on the kernel version (the units' test also applies PR_SET_MDWE, Linux 6.3+). The agent's resource bounds and failure handling (agent_abuse,
/// agent_failure: its queues, descriptors, watch sets, idle sessions, a killed or stopped
/// agent, a sysctl put back) are the agent's own user-space rules, the same on every kernel,
/// and take minutes under an emulated CPU; the guest runs the kernel's side of the agent
/// (agent, agent_attack). bench (its runs, exit codes, exports, stops, and the walls it
/// measures), where a trace's outputs go, spacetime's own exit status and signal forwarding,
/// watch's refusal of arguments, and whose programs a run uses are decided in userspace, from
/// the same records and reduction a trace has, which the guest's other tests check: bench's
/// peak of a run is a trace's (memory, in the 8-vCPU guest).
const HOST_ONLY: [&str; 25] = [
    "agent_abuse",
    "agent_choice",
    "agent_failure",
    "bench",
    "bench_hyperfine",
    "bench_options",
    "bench_wall",
    "build",
    "cli",
    "docs",
    "exit",
    "gnu_time",
    "html",
    "html_view",
    "install",
    "output",
    "perfetto",
    "prometheus",
    "schema",
    "status",
    "svg",
    "terminal",
    "units",
    "watch_args",
    "watch_json",
];

/// Single tests skipped in the guest, and why: two need make (one a C compiler too); one a
/// disk-backed file system; one systemd's socket activation; one Python's jsonschema; one a
/// Python interpreter (three), one a JDK; three run a copy of
/// /bin/true under another name, and the guest's /bin/true is busybox, which picks its
/// applet by that name. What those check (non-UTF-8 names in the report, escaping) is done
/// in userspace; the kernel's reading of argv bytes is tested in the guest by the processes
/// tests.
const HOST_TOOLS_TESTS: [(&str, &str); 13] = [
    (
        "an_attach_report_matches_the_schema",
        "no python3 with jsonschema in the guest",
    ),
    (
        "socket_activation_serves_the_first_client",
        "no systemd-socket-activate in the guest: the socket handoff is userspace only",
    ),
    (
        "page_cache_is_charged_to_the_cgroup_and_absent_from_rss",
        "no disk-backed file system in the guest: tmpfs pages cannot be dropped and read back",
    ),
    (
        "a_small_make_reaches_every_peak",
        "no make or cc in the guest",
    ),
    (
        "parameter_scan_of_make_j_reports_time_and_memory_per_value",
        "no make in the guest",
    ),
    (
        "long_non_ascii_path_with_more_processes_than_top",
        "busybox /bin/true",
    ),
    (
        "non_utf8_argv_and_exe_are_exact_in_trace_json",
        "busybox /bin/true",
    ),
    (
        "non_utf8_argv_and_exe_are_exact_in_watch_json",
        "busybox /bin/true",
    ),
    (
        "a_python_fork_pool",
        "no python3 in the guest: PSS rounds are tested there on st-workload's forks",
    ),
    (
        "a_jvm_with_a_256_mib_heap",
        "no JDK in the guest: PSS rounds are tested there on st-workload's forks",
    ),
    (
        "the_tree_pss_never_exceeds_the_trees_peak_rss_up_to_then",
        "no python3 in the guest: a spawn pool's workers",
    ),
    (
        "cpu_over_time_never_exceeds_the_online_cpus",
        "no python3 in the guest: a spawn pool's workers",
    ),
    (
        "verbose_detail_lines_split_the_rows_cpu",
        "busybox sh execs its last command: two processes where dash makes three",
    ),
];

pub fn vm_test(opts: Options) -> Result<()> {
    let started = Instant::now();
    let arch = opts.arch;
    ensure_host_packages(arch)?;
    let dir = target_dir().join("vm");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let cache = match arch {
        Arch::Amd64 => dir.join(format!("debian-{}", opts.debian.number())),
        _ => dir.join(format!("debian-{}-{}", opts.debian.number(), arch.debian())),
    };
    let kernel = match &opts.kernel {
        Some(k) => k.clone(),
        None => kernel::debian_kernel(opts.debian, arch, &cache)?,
    };
    if !kernel.is_file() {
        bail!("kernel image {} does not exist", kernel.display());
    }
    let spacetime = match &opts.spacetime {
        Some(bin) => bin.clone(),
        None if arch.is_host() => {
            crate::build()?;
            crate::spacetime_bin()
        }
        // The guest checks what the architecture changes: the spacetime crate unoptimized is
        // enough, and its test binaries below link the same build of it.
        None => crate::package::build_static(&[arch], Build::Check)?.remove(0),
    };
    let mut only = opts.only.clone();
    if !arch.is_host() && only.is_empty() {
        only = ARM64_TESTS.iter().map(|t| t.to_string()).collect();
    }
    let userland = guest::userland(arch, opts.debian, &cache)?;
    let mut built = build_tests(arch, spacetime, &only, userland)?;
    if let Some(bin) = &opts.doctor_with {
        if !bin.is_file() {
            bail!("--doctor-with {}: no such file", bin.display());
        }
        let doctor = built
            .tests
            .iter()
            .find(|(name, _)| name == "doctor")
            .context("no doctor test binary")?;
        built.doctor_with = Some((bin.clone(), doctor.1.clone()));
    }
    built
        .tests
        .retain(|(name, _)| !HOST_ONLY.contains(&name.as_str()));
    eprintln!(
        "xtask: not run in the guest (they need host tools; cargo xtask test runs them): {}",
        HOST_ONLY.join(", ")
    );
    if !only.is_empty() {
        built.tests.retain(|(name, _)| only.contains(name));
        if built.tests.is_empty() {
            bail!("no integration test binary named {only:?}");
        }
    }
    for name in &opts.except {
        if !built.tests.iter().any(|(n, _)| n == name) {
            bail!("--except {name}: no integration test binary of that name");
        }
        built.tests.retain(|(n, _)| n != name);
    }
    // Each run's own archive: two guests prepared one after the other boot side by side (CI),
    // and a guest reads its archive after its prepare said it was done.
    let tag = std::process::id();
    let scratch = Scratch(vec![
        dir.join(format!("root-{tag}")),
        dir.join(format!("initramfs-{tag}.cpio")),
    ]);
    let (root, initrd) = (&scratch.0[0], &scratch.0[1]);
    let mut test_args = opts.test_args.clone();
    for (name, why) in HOST_TOOLS_TESTS {
        eprintln!("xtask: {name} runs on the host only ({why})");
        test_args.extend(["--skip".into(), name.into()]);
    }
    if !opts.all {
        for (name, why) in SLOW_UNDER_TCG {
            eprintln!("xtask: skipping {name} ({why}; --all runs it)");
            test_args.extend(["--skip".into(), name.into()]);
        }
    }
    make_initramfs(root, initrd, &built, &test_args)?;
    let _ = fs::remove_dir_all(root);
    eprintln!(
        "xtask: prepared in {:.0} s; booting {} (qemu, TCG, {} vCPUs, time limit {} s)",
        started.elapsed().as_secs_f64(),
        kernel.display(),
        opts.cpus,
        opts.timeout.as_secs()
    );
    let booted = Instant::now();
    let cpu_before = children_cpu_s();
    let mut verdict = boot(arch, &kernel, initrd, opts.timeout, opts.cpus)?;
    if !opts.all {
        verdict.skipped = SLOW_UNDER_TCG.iter().map(|(name, _)| *name).collect();
    }
    eprintln!(
        "xtask: guest ran for {:.0} s, qemu used {:.0} CPU seconds (whole vm-test {:.0} s)",
        booted.elapsed().as_secs_f64(),
        children_cpu_s() - cpu_before,
        started.elapsed().as_secs_f64()
    );
    verdict.summarize()
}

/// Files and directories of one run, removed when it ends however it ends.
struct Scratch(Vec<PathBuf>);

impl Drop for Scratch {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = fs::remove_dir_all(p).or_else(|_| fs::remove_file(p));
        }
    }
}

/// User + system seconds of every child waited for so far (the boot's qemu, once it ends).
fn children_cpu_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// What a guest of `arch` needs on the host: qemu, busybox and cpio.
pub fn host_packages(arch: Arch) -> toolchain::Debs {
    let mut packages = vec![arch.qemu().package];
    packages.extend(HOST_PACKAGES);
    toolchain::Debs {
        packages,
        why: "the VM test boots a Debian guest under qemu",
    }
}

fn ensure_host_packages(arch: Arch) -> Result<()> {
    toolchain::apt_install_all(&[host_packages(arch)])
}

/// What the guest runs.
struct Built {
    /// The spacetime binary under test.
    spacetime: PathBuf,
    /// (name, path) of every integration test binary.
    tests: Vec<(String, PathBuf)>,
    /// `st-workload`: the tests have its absolute path compiled in, so the guest keeps it.
    workload: PathBuf,
    /// `st-agent-client` (the agent tests' raw protocol client), at its build path likewise.
    agent_client: PathBuf,
    /// Another spacetime binary the doctor tests run with too (`--doctor-with`), and the
    /// doctor test binary (run whether or not `--test` chose it for the suite).
    doctor_with: Option<(PathBuf, PathBuf)>,
    /// The guest's busybox, setpriv and the libraries setpriv loads.
    userland: guest::Userland,
}

/// Builds the integration tests (release; for another architecture, those of `only`, for its
/// static target) and finds their binaries in cargo's JSON messages.
fn build_tests(
    arch: Arch,
    spacetime: PathBuf,
    only: &[String],
    userland: guest::Userland,
) -> Result<Built> {
    let (mut cargo, mut cross) = (crate::cargo(), Vec::new());
    if arch.is_host() {
        eprintln!("xtask: building the integration tests (release)");
        cross.extend(["--target", crate::release_target()]);
    } else {
        eprintln!(
            "xtask: building the integration tests {only:?} for {} (release)",
            arch.musl()
        );
        cargo = arch.cargo(Build::Check)?;
        cross.extend(["--target", arch.musl()]);
        for name in only {
            cross.extend(["--test", name.as_str()]);
        }
    }
    let out = cargo
        .args([
            "test",
            "--release",
            "-p",
            "spacetime-tests",
            "--no-run",
            "--message-format=json",
        ])
        .args(cross)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo test --no-run")?;
    if !out.status.success() {
        bail!("building the integration tests failed with {}", out.status);
    }
    let mut tests = Vec::new();
    let mut workload = None;
    let mut agent_client = None;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let Some(exe) = msg["executable"].as_str() else {
            continue;
        };
        let name = msg["target"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let kinds = msg["target"]["kind"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let is_test = msg["profile"]["test"].as_bool().unwrap_or(false);
        if kinds.iter().any(|k| k == "test") {
            tests.push((name, PathBuf::from(exe)));
        } else if kinds.iter().any(|k| k == "bin") && !is_test {
            match name.as_str() {
                "st-workload" => workload = Some(PathBuf::from(exe)),
                "st-agent-client" => agent_client = Some(PathBuf::from(exe)),
                _ => {}
            }
        }
    }
    if tests.is_empty() {
        bail!("cargo built no integration test binaries");
    }
    tests.sort();
    Ok(Built {
        spacetime,
        tests,
        workload: workload.context("cargo did not report the st-workload binary")?,
        agent_client: agent_client.context("cargo did not report the st-agent-client binary")?,
        doctor_with: None,
        userland,
    })
}

#[cfg(test)]
mod tests {
    use super::guest::sh_quote;

    #[test]
    fn quoting_for_the_guest_shell() {
        assert_eq!(sh_quote("a b"), "'a b'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
    }
}
