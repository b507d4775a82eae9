//! `cargo xtask`: builds the eBPF object and the binary that embeds it, installs the toolchain
//! pieces that are missing, and runs spacetime and its tests.

mod agent_pass;
mod arch;
mod bench;
mod impls;
mod install;
mod layers;
mod package;
mod package_check;
mod ready;
mod startup_order;
mod tally;
mod toolchain;
mod vm;

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Build, run and test spacetime")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install what the build needs and is missing (nightly rust-src, bpf-linker on LLVM 22)
    Setup {
        /// Then what packaging needs and is missing: lintian (`deb`), the
        /// aarch64 target and its cross linker (`dist --target aarch64-unknown-linux-musl`)
        #[arg(long)]
        packaging: bool,
        /// Then what the tests need and is missing: the host suite's tools (`test`) and qemu
        /// with the guests' packages (`vm-test`, both architectures)
        #[arg(long)]
        tests: bool,
    },
    /// Build the eBPF object and the release binary that embeds it
    Build {
        /// Build the unit and integration test binaries in the same cargo run (what `test`
        /// runs next; CI's build stage)
        #[arg(long)]
        tests: bool,
    },
    /// Build, then install the binary, its shell completions and manual page, the licences
    /// and a hardened systemd unit for `spacetime watch --metrics` (PREFIX/lib/systemd/system)
    Install(install::Options),
    /// Build the Debian package (target/debian/spacetime_*.deb) with dpkg-deb, and check it
    /// with lintian
    Deb(package::DebOptions),
    /// Build the static (musl) binary and a tarball with it, its completions, manual page,
    /// units and licences (target/dist/)
    Dist {
        /// The static target: x86_64-unknown-linux-musl, or aarch64-unknown-linux-musl
        /// (cross-linked with Debian's gcc-aarch64-linux-gnu); repeated, one build makes both
        #[arg(long = "target", default_value = "x86_64-unknown-linux-musl")]
        targets: Vec<String>,
        /// A check build, not for shipping: the spacetime crate unoptimized (its dependencies
        /// and eBPF object as shipped), what `vm-test --arch arm64` builds and runs
        #[arg(long)]
        check_build: bool,
    },
    /// Build, then run the release binary with ARGS (as root)
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Build, then run every test: unit tests and the integration tests that load the real
    /// programs (needs root)
    Test {
        /// Extra arguments for the test harness (after --)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// The layering of spacetime/src (imports point down: cmd → run → report → model →
    /// kernel → util), then rustfmt and clippy (-D warnings, no function over 100 lines, a
    /// SAFETY comment on every unsafe block) on both the userspace and the eBPF crates
    Lint,
    /// Measure what spacetime costs next to bare runs, /usr/bin/time and strace, on workloads
    /// the bench builds itself (needs root); prints a Markdown table, writes JSON under
    /// target/bench/ and keeps the latest table in BENCHMARKS.md
    Bench(bench::Options),
    /// Record which functions a trace through the agent runs first, in order, into
    /// spacetime/startup.order, which the release link lays out first (needs root: uprobes)
    StartupOrder,
    /// Build, then run every integration test inside a Debian guest (qemu, TCG), 6.1 unless
    /// told; fetches and caches the kernel package with apt
    VmTest {
        /// Boot this Debian release's cloud kernel: 11 (Linux 5.10), 12 (6.1) or 13 (6.12)
        #[arg(long, value_enum, default_value = "12")]
        debian: vm::Debian,
        /// The guest's architecture: amd64, or arm64 (Debian's arm64 cloud kernel under
        /// qemu-system-aarch64, the static aarch64 build, and only the tests of
        /// `--test`, doctor and memory unless told)
        #[arg(long, value_enum, default_value = "amd64")]
        arch: arch::Arch,
        /// Boot this kernel image instead of Debian's cloud kernel
        #[arg(long, conflicts_with = "debian")]
        kernel: Option<PathBuf>,
        /// Time limit for the guest, in seconds: twice what the whole suite takes (docs/building.md
        /// has the figures); one hung test binary is stopped at its own limit
        #[arg(long, default_value_t = 1200)]
        timeout: u64,
        /// Also run the tests skipped by default as too slow for an emulated CPU
        #[arg(long)]
        all: bool,
        /// vCPUs of the guest (qemu -smp)
        #[arg(long, default_value_t = 2)]
        cpus: u32,
        /// Run only this integration test binary (tests/tests/NAME.rs); repeatable
        #[arg(long = "test", value_name = "NAME")]
        only: Vec<String>,
        /// Leave this integration test binary out (another guest runs it); repeatable
        #[arg(long = "except", value_name = "NAME")]
        except: Vec<String>,
        /// The guest runs this spacetime binary (e.g. the static one of `cargo xtask dist`)
        /// instead of the release build
        #[arg(long, value_name = "PATH")]
        spacetime: Option<PathBuf>,
        /// In the same guest, after the suite, run the doctor tests again with this spacetime
        /// binary (the static one of `cargo xtask dist`): one boot for both
        #[arg(long, value_name = "PATH")]
        doctor_with: Option<PathBuf>,
        /// Extra arguments for every test binary (after --), e.g. a test name filter
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// The cargo target directory: `CARGO_TARGET_DIR` if set, else the workspace's `target/`.
pub fn target_dir() -> PathBuf {
    // Relative, as cargo reads it: from the directory it was started in (xtask's own, since
    // cargo runs it there); paths below are handed to commands that run elsewhere.
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|d| std::path::absolute(&d).unwrap_or(d))
        .unwrap_or_else(|| root().join("target"))
}

/// Where spacetime's build script builds the eBPF crate (spacetime/build.rs).
fn ebpf_target_dir() -> PathBuf {
    target_dir().join("bpf")
}

/// The release binary.
pub fn spacetime_bin() -> PathBuf {
    target_dir().join("release/spacetime")
}

pub fn run(cmd: &mut Command) -> Result<()> {
    let shown = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("running {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}

/// Whether a little-endian ELF64 file has a section named `name`.
fn elf_has_section(elf: &[u8], name: &str) -> bool {
    let u16_at = |o: usize| {
        elf.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
    };
    let u64_at = |o: usize| {
        elf.get(o..o + 8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])) as usize)
    };
    if elf.get(..5) != Some(b"\x7fELF\x02") {
        return false;
    }
    let (Some(shoff), Some(shentsize), Some(shnum), Some(shstrndx)) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e))
    else {
        return false;
    };
    let Some(strtab) = u64_at(shoff + shstrndx * shentsize + 0x18) else {
        return false;
    };
    (0..shnum).any(|i| {
        let Some(name_off) = elf
            .get(shoff + i * shentsize..shoff + i * shentsize + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        else {
            return false;
        };
        let start = strtab + name_off;
        elf.get(start..start + name.len() + 1)
            .is_some_and(|n| &n[..name.len()] == name.as_bytes() && n[name.len()] == 0)
    })
}

/// Cargo invocation for the userspace workspace. spacetime's build script builds the eBPF
/// object it embeds (nightly, bpfel-unknown-none, build-std=core): that is the one build path.
fn cargo() -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root()).env_remove("SPACETIME_EBPF_OBJ");
    c
}

pub fn build() -> Result<()> {
    build_targets(&[])
}

/// `build`, with every test binary of `cargo xtask test` built in the same cargo run: the
/// spacetime crate's unit-test build (its longest unit) then compiles beside the release
/// build instead of after it, where cargo's queue starts it last (from nothing, the eBPF
/// object kept: 149 s of wall against 190 s for the two runs one after the other; the crate
/// rebuilt: 106 s against 138 s). The release binary is the same file, and `cargo test
/// --release` then finds everything built.
pub fn build_with_tests() -> Result<()> {
    build_targets(&["--all-targets"])
}

fn build_targets(extra: &[&str]) -> Result<()> {
    toolchain::ensure()?;
    mark_target_dir()?;
    eprintln!("xtask: building spacetime (release; its build script builds the eBPF programs)");
    // The whole workspace, resolved as `cargo test --workspace` resolves it: with `-p spacetime`
    // alone its dependencies' features differed from the test build's (aya and object were
    // compiled again), and so the crate was compiled twice in every CI run.
    toolchain::ensure_rust_target(release_target())?;
    run(cargo()
        .args(["build", "--release", "--workspace", "--exclude", "xtask"])
        .args(["--target", release_target()])
        .args(extra))?;
    install_release_binary()?;
    // Linked with BTF (--btf in spacetime-ebpf/.cargo/config.toml), the object carries the
    // types of its maps and programs for the loader and for bpftool.
    let obj = ebpf_target_dir().join("bpfel-unknown-none/release/spacetime");
    let bytes = std::fs::read(&obj).with_context(|| format!("reading {}", obj.display()))?;
    if !elf_has_section(&bytes, ".BTF") {
        bail!(
            "{} has no .BTF section: bpf-linker must run with --btf (spacetime-ebpf/.cargo/config.toml)",
            obj.display()
        );
    }
    Ok(())
}

/// What every release build here is for: the host's musl target. The binary is static (no
/// dynamic loader, and no CPUID probing of the CPU's caches at every start, as glibc does,
/// which a hypervisor traps: a /bin/true traced through the agent is 0.2 ms shorter than with
/// a static glibc binary, BENCHMARKS.md), and the tests are built for the same target, so
/// that spacetime and its dependencies are compiled once. User names still come from every
/// NSS source (`util::nss`).
pub fn release_target() -> &'static str {
    arch::Arch::host().musl()
}

/// Puts the release binary where every path expects it, target/release/spacetime (cargo's
/// own is under the target's directory), whole or not at all: a copy renamed over the old
/// file (a plain `cargo build --release` leaves its dynamic glibc link there).
fn install_release_binary() -> Result<()> {
    let built = target_dir()
        .join(release_target())
        .join("release/spacetime");
    let bytes = std::fs::read(&built).with_context(|| format!("reading {}", built.display()))?;
    if elf_has_section(&bytes, ".interp") {
        bail!("{} names a dynamic loader", built.display());
    }
    let bin = spacetime_bin();
    let part = bin.with_extension("part");
    std::fs::write(&part, &bytes).with_context(|| format!("writing {}", part.display()))?;
    std::fs::set_permissions(&part, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    std::fs::rename(&part, &bin).with_context(|| format!("renaming to {}", bin.display()))
}

/// The build script puts the eBPF object under the nearest directory cargo tagged with
/// CACHEDIR.TAG; cargo tags the target directory only when it creates it, so one made before
/// (`mkdir -p target/…`) would leave the object under the script's own OUT_DIR, where this
/// file does not look. Tag it as cargo would.
fn mark_target_dir() -> Result<()> {
    let dir = target_dir();
    let tag = dir.join("CACHEDIR.TAG");
    if !tag.exists() {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        std::fs::write(
            &tag,
            "Signature: 8a477f597d28d172789f06886806bc55\n\
             # This file is a cache directory tag created by cargo.\n\
             # For information about cache directory tags see https://bford.info/cachedir/\n",
        )
        .with_context(|| format!("writing {}", tag.display()))?;
    }
    Ok(())
}

pub fn is_root() -> bool {
    // Avoids a libc dependency: root's uid in /proc/self/status.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(2) == Some("0"))
        })
        .unwrap_or(false)
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Cmd::Setup { packaging, tests } => {
            toolchain::ensure()?;
            let mut debs = Vec::new();
            if packaging {
                debs.extend(package::prepare_tools()?);
            }
            if tests {
                debs.push(toolchain::test_tools());
                debs.push(vm::host_packages(arch::Arch::Amd64));
                debs.push(vm::host_packages(arch::Arch::Arm64));
            }
            toolchain::apt_install_all(&debs)
        }
        Cmd::Build { tests: false } => build(),
        Cmd::Build { tests: true } => build_with_tests(),
        Cmd::Install(opts) => install::install(opts),
        Cmd::Deb(opts) => package::deb(opts),
        Cmd::Dist {
            targets,
            check_build,
        } => {
            let mut archs = Vec::new();
            for t in &targets {
                let a = arch::Arch::from_musl(t)?;
                if !archs.contains(&a) {
                    archs.push(a);
                }
            }
            let build = if check_build {
                arch::Build::Check
            } else {
                arch::Build::Shipped
            };
            package::dist(&archs, build).map(|_| ())
        }
        Cmd::Run { args } => {
            build()?;
            let bin = spacetime_bin();
            let mut cmd = if is_root() {
                Command::new(&bin)
            } else {
                let mut c = Command::new("sudo");
                c.arg(&bin);
                c
            };
            let status = cmd.args(&args).status().context("running spacetime")?;
            std::process::exit(status.code().unwrap_or(1));
        }
        Cmd::Test { args } => test(&args),
        Cmd::VmTest {
            debian,
            arch,
            kernel,
            timeout,
            all,
            cpus,
            only,
            except,
            spacetime,
            doctor_with,
            args,
        } => vm::vm_test(vm::Options {
            debian,
            arch,
            kernel,
            timeout: std::time::Duration::from_secs(timeout),
            all,
            test_args: args,
            cpus,
            only,
            except,
            spacetime,
            doctor_with,
        }),
        Cmd::Bench(opts) => bench::bench(opts),
        Cmd::Lint => lint(),
        Cmd::StartupOrder => startup_order::run(),
    }
}

/// `cargo xtask test`: every unit and integration test file, then the agent pass, each run to
/// its end whatever failed before it, and one closing line that counts them all.
fn test(args: &[OsString]) -> Result<()> {
    if !is_root() {
        bail!("the tests load eBPF programs: run `sudo -E cargo xtask test` (or as root)");
    }
    build_with_tests()?;
    toolchain::apt_install_all(&[toolchain::test_tools()])?;
    let started = std::time::Instant::now();
    eprintln!("xtask: running the tests");
    let (mut tally, _) = tally::run(
        cargo()
            .env("SPACETIME_BIN", spacetime_bin())
            // Where no agent answers: an agent of the machine's own (a package's socket unit,
            // another version of spacetime) would otherwise serve every trace of this pass,
            // which tests the programs this build loads. The agent pass names its own.
            .env(
                "SPACETIME_SOCKET",
                "/nonexistent/spacetime-tests/agent.sock",
            )
            .args([
                "test",
                "--release",
                "--target",
                release_target(),
                "--workspace",
                "--exclude",
                "xtask",
                "--no-fail-fast",
                "--",
            ])
            .args(args),
    )?;
    let mut through_agent = cargo();
    through_agent.env("SPACETIME_BIN", spacetime_bin());
    match agent_pass::run(through_agent, &spacetime_bin(), args) {
        Ok(t) => tally.add(t),
        Err(e) => {
            eprintln!("xtask: the agent pass: {e:#}");
            tally.failed_targets.push("the agent pass".into());
        }
    }
    tally::report(&tally, started);
    if !tally.ok() {
        bail!("{} failed", tally.failed_targets.join(", "));
    }
    Ok(())
}

/// `cargo xtask lint`: the layering, rustfmt, then clippy on the userspace and eBPF crates.
fn lint() -> Result<()> {
    toolchain::ensure()?;
    layers::lint(&root().join("spacetime/src"))?;
    impls::lint(&root().join("spacetime/src"))?;
    let long = layers::long_files(
        &root(),
        &[
            "spacetime-common/src",
            "spacetime-ebpf/src",
            "spacetime-stats/src",
            "tests",
            "xtask/src",
        ],
    )?;
    for (file, n) in &long {
        eprintln!(
            "  {file}: {n} lines, over the {}-line limit",
            layers::MAX_FILE_LINES
        );
    }
    if !long.is_empty() {
        bail!("{} files over {} lines", long.len(), layers::MAX_FILE_LINES);
    }
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(Command::new("cargo")
        .current_dir(root().join("spacetime-ebpf"))
        .args(["+nightly", "fmt", "--check"]))?;
    run(cargo()
        .args(["clippy", "--workspace", "--all-targets", "--"])
        .args(CLIPPY_LINTS))?;
    run(Command::new("cargo")
        .current_dir(root().join("spacetime-ebpf"))
        .env_remove("RUSTUP_TOOLCHAIN")
        .args([
            "+nightly",
            "clippy",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ])
        .arg("--target-dir")
        .arg(ebpf_target_dir())
        .arg("--")
        .args(CLIPPY_LINTS))
}

/// clippy's verdicts on both crates: no warning, no function over 100 lines (clippy.toml sets
/// the threshold), and every unsafe block says why it is sound.
const CLIPPY_LINTS: [&str; 6] = [
    "-D",
    "warnings",
    "-W",
    "clippy::too_many_lines",
    "-W",
    "clippy::undocumented_unsafe_blocks",
];

#[cfg(test)]
mod tests {
    #[test]
    fn not_an_elf_has_no_section() {
        assert!(!super::elf_has_section(b"not an ELF file at all", ".BTF"));
    }
}
