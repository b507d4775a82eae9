//! Makes sure the pieces the eBPF build needs exist, installing only what is missing and
//! saying so: nightly's rust-src (for `-Z build-std=core`) and bpf-linker built against
//! Debian's LLVM 22 (it must match rustc's LLVM).

use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::run;

const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PACKAGES: [&str; 4] = [
    "llvm-22-dev",
    "libpolly-22-dev",
    "libzstd-dev",
    "zlib1g-dev",
];

fn quiet_ok(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What `cmd` printed on its standard output (nothing if it could not run).
pub fn output(cmd: &mut Command) -> String {
    cmd.stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Held while xtask changes what rustup installed, by every xtask process of this rustup home.
/// rustup is not safe against itself: two installs into one toolchain at once (CI's tools
/// stage adding the aarch64 target beside the build adding the musl one, on a new machine)
/// each rewrite the toolchain's list of components, one loses the other's, and the lost one's
/// files stay behind to conflict with every later install of it. Whoever takes the lock looks
/// again at what is installed: the holder before may have installed it.
fn rustup_lock() -> Result<std::fs::File> {
    let home = std::env::var_os("RUSTUP_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".rustup")))
        .context("neither RUSTUP_HOME nor HOME is set: where rustup keeps its toolchains")?;
    let path = home.join("spacetime-xtask.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    file.lock()
        .with_context(|| format!("locking {}", path.display()))?;
    Ok(file)
}

fn nightly_ready() -> bool {
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]));
    toolchains.lines().any(|l| l.starts_with("nightly")) && nightly_has_rust_src()
}

fn nightly_has_rust_src() -> bool {
    let components = output(Command::new("rustup").args([
        "component",
        "list",
        "--toolchain",
        "nightly",
        "--installed",
    ]));
    components.lines().any(|l| l.starts_with("rust-src"))
}

fn ensure_nightly() -> Result<()> {
    if nightly_ready() {
        return Ok(());
    }
    let _lock = rustup_lock()?;
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]));
    if !toolchains.lines().any(|l| l.starts_with("nightly")) {
        eprintln!("xtask: installing the nightly toolchain (the eBPF build needs -Z build-std)");
        run(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
        ]))?;
    }
    if !nightly_has_rust_src() {
        eprintln!("xtask: installing rust-src for nightly (needed by -Z build-std=core)");
        run(Command::new("rustup").args([
            "component",
            "add",
            "rust-src",
            "--toolchain",
            "nightly",
        ]))?;
    }
    Ok(())
}

/// Whether a Debian package is installed.
pub fn dpkg_installed(package: &str) -> bool {
    output(Command::new("dpkg-query").args(["-W", "-f=${Status}", package]))
        .contains("install ok installed")
}

/// Debian packages a task needs, and why: what `apt_install_all` prints for the ones missing.
pub struct Debs {
    pub packages: Vec<&'static str>,
    pub why: &'static str,
}

/// Installs the Debian packages of `packages` that are missing, saying `why`.
pub fn apt_install(packages: &[&'static str], why: &'static str) -> Result<()> {
    apt_install_all(&[Debs {
        packages: packages.to_vec(),
        why,
    }])
}

/// Installs every missing package of `needs` in one `apt-get update` and one install (each
/// update reads every index again: seconds on a new machine), saying why each is wanted.
pub fn apt_install_all(needs: &[Debs]) -> Result<()> {
    let mut missing: Vec<&str> = Vec::new();
    for need in needs {
        let its: Vec<&str> = need
            .packages
            .iter()
            .copied()
            .filter(|p| !missing.contains(p) && !dpkg_installed(p))
            .collect();
        if !its.is_empty() {
            eprintln!(
                "xtask: installing {} from Debian ({})",
                its.join(" "),
                need.why
            );
            missing.extend(its);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    run(Command::new("apt-get").args(["update", "-qq"]))?;
    run(apt_get()
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing))
}

/// apt-get, never asking, and waiting up to five minutes for dpkg's lock: another install
/// may hold it (CI prepares its guests together, and installs the package beside them).
pub fn apt_get() -> Command {
    let mut apt = Command::new("apt-get");
    apt.env("DEBIAN_FRONTEND", "noninteractive")
        .args(["-o", "DPkg::Lock::Timeout=300"]);
    apt
}

fn ensure_llvm() -> Result<()> {
    apt_install(&LLVM_PACKAGES, "bpf-linker links against LLVM 22")
}

fn ensure_bpf_linker() -> Result<()> {
    if quiet_ok(Command::new("bpf-linker").arg("--version")) {
        return Ok(());
    }
    ensure_llvm()?;
    eprintln!(
        "xtask: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (a few minutes, once)"
    );
    run(Command::new("cargo")
        .env("LLVM_PREFIX", "/usr/lib/llvm-22")
        .args([
            "install",
            "bpf-linker",
            "--version",
            BPF_LINKER_VERSION,
            "--no-default-features",
            "--features",
            "llvm-22",
        ]))
    .context("installing bpf-linker")
}

/// What the integration tests run besides spacetime: a real Prometheus server and promtool
/// for the metrics tests, tmux for the terminal tests (an 80-column pane), make and a C
/// compiler for the make builds, GNU time and hyperfine for the drop-in tests, Chromium (and a
/// font) for the HTML reports and the SVG pictures, librsvg's rsvg-convert for the pictures, Debian's Python and a JDK for the PSS tests' fork pool and JVM.
pub fn test_tools() -> Debs {
    Debs {
        packages: vec![
            "prometheus",
            "tmux",
            "make",
            "gcc",
            "libc6-dev",
            "time",
            "hyperfine",
            "chromium",
            "librsvg2-bin",
            "fonts-dejavu-core",
            "python3",
            "openjdk-17-jdk-headless",
            "bash-completion",
        ],
        why: "the metrics tests scrape `watch --metrics` with a real Prometheus and lint it with \
         promtool; the terminal tests run spacetime in an 80-column tmux pane; the timeline \
         and build tests trace make builds; `trace -f` is compared with GNU time's \
         /usr/bin/time and `bench --export-json` and the bench's wall with hyperfine's; the HTML tests load the \
         reports in headless Chromium, the SVG tests render the pictures with it and with \
         rsvg-convert; the PSS tests read a Python fork pool's and a JVM's own \
         Pss; the completion tests hand `trace`'s command to bash-completion's",
    }
}

fn rust_target_installed(target: &str) -> bool {
    let installed = output(Command::new("rustup").args(["target", "list", "--installed"]));
    installed.lines().any(|l| l.trim() == target)
}

/// Adds rustup's standard library for `target` (the static build's musl) when missing.
pub fn ensure_rust_target(target: &str) -> Result<()> {
    if rust_target_installed(target) {
        return Ok(());
    }
    let _lock = rustup_lock()?;
    if rust_target_installed(target) {
        return Ok(());
    }
    eprintln!("xtask: adding the {target} target to the stable toolchain (rustup)");
    run(Command::new("rustup").args(["target", "add", target]))
}

/// Installs whatever is missing; a no-op on a machine that has it all. The release build's
/// target too: `setup` then leaves the build nothing to add to rustup.
pub fn ensure() -> Result<()> {
    ensure_nightly()?;
    ensure_rust_target(crate::release_target())?;
    ensure_bpf_linker()
}
