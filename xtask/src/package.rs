//! `cargo xtask deb`: a Debian package built by dpkg-deb from the staged files, a control
//! file filled in from dist/debian/control and Cargo.toml, and md5sums, checked with lintian;
//! `cargo xtask deb --check`: that package installed with apt-get on this machine, a command
//! traced with it, the agent started through its socket unit (systemd) or as the unit
//! would run it (no systemd), an unprivileged user tracing through it, then the package purged
//! and nothing of it left. `cargo xtask dist`: a static (musl) binary in a tarball with the
//! completions, manual page, units and licences (`--target aarch64-unknown-linux-musl`: the
//! arm64 one, cross-linked).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use crate::{
    arch::{Arch, Build},
    root, run, target_dir, toolchain,
};

#[derive(Debug, clap::Args)]
pub struct DebOptions {
    /// Then install it with apt-get, trace with it (as root and as nobody through the
    /// socket-activated agent), purge it and check nothing is left (root; what CI runs)
    #[arg(long)]
    check: bool,
}

/// Stages the files with `install --prefix /usr --destdir DIR` from `bin`; `writer`, when
/// `bin` does not run here, writes the completions and manual pages.
fn stage(dir: &Path, bin: &Path, writer: Option<&Path>) -> Result<()> {
    if dir.exists() {
        fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    crate::install::install(match writer {
        Some(w) => crate::install::Options::staged_foreign("/usr", dir, bin, w),
        None => crate::install::Options::staged("/usr", dir, bin),
    })
}

/// Builds the package with dpkg-deb and checks it with lintian; with `--check`, installs it.
pub fn deb(opts: DebOptions) -> Result<()> {
    crate::build()?;
    let meta = Meta::read()?;
    let tree = target_dir().join("release/deb-root");
    stage(&tree, &crate::spacetime_bin(), None)?;
    let doc = tree.join("usr/share/doc/spacetime");
    changelog(&doc, &meta)?;
    // The licences' text is in the copyright file: the files themselves stay out of the
    // package (lintian: extra-license-file).
    for licence in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let _ = fs::remove_file(doc.join(licence));
    }
    copy(
        &root().join("dist/debian/copyright"),
        &doc.join("copyright"),
    )?;
    let man = tree.join("usr/share/man/man1");
    for page in fs::read_dir(&man).with_context(|| format!("reading {}", man.display()))? {
        run(Command::new("gzip").arg("-9n").arg(page?.path()))?;
    }
    let arch = said(Command::new("dpkg").arg("--print-architecture"))?;
    control(&tree, &meta, &arch)?;
    let out = target_dir().join("debian");
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let deb = out.join(format!("spacetime_{}-1_{arch}.deb", meta.version));
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&tree)
        .arg(&deb))?;
    let size = fs::metadata(&deb)
        .with_context(|| format!("dpkg-deb wrote no {}", deb.display()))?
        .len();
    eprintln!(
        "xtask: {} ({:.1} MiB)",
        deb.display(),
        size as f64 / (1 << 20) as f64
    );
    lintian(&deb)?;
    if opts.check {
        crate::package_check::check(&deb)?;
    }
    Ok(())
}

/// The first line `cmd` printed, trimmed; an error if it printed nothing (it failed, or is
/// missing).
fn said(cmd: &mut Command) -> Result<String> {
    let out = toolchain::output(cmd);
    let line = out.lines().next().unwrap_or_default().trim();
    if line.is_empty() {
        bail!("{cmd:?} printed nothing");
    }
    Ok(line.to_string())
}

fn copy(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to)
        .map(drop)
        .with_context(|| format!("copying {} to {}", from.display(), to.display()))
}

/// TREE/DEBIAN: dist/debian/control filled in, the maintainer scripts, and the md5sums of
/// every file, as dpkg-deb wants them.
fn control(tree: &Path, meta: &Meta, arch: &str) -> Result<()> {
    let dir = tree.join("DEBIAN");
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Installed-Size, in KiB: what `du` counts of the files (before DEBIAN holds anything).
    let du = said(Command::new("du").args(["-sk"]).arg(tree))?;
    let size = du.split_whitespace().next().unwrap_or_default().to_string();
    let template = fs::read_to_string(root().join("dist/debian/control"))
        .context("reading dist/debian/control")?;
    let text = template
        .replace("@VERSION@", &meta.version)
        .replace("@ARCH@", arch)
        .replace("@MAINTAINER@", &meta.maintainer)
        .replace("@SIZE@", &size);
    fs::write(dir.join("control"), text).context("writing DEBIAN/control")?;
    for script in ["postinst", "prerm", "postrm"] {
        copy(&root().join("dist/debian").join(script), &dir.join(script))?;
    }
    // Paths relative to the root, as dpkg --verify reads them.
    let sums = Command::new("sh")
        .current_dir(tree)
        .args(["-c", "find usr -type f -print0 | sort -z | xargs -0 md5sum"])
        .output()
        .context("running md5sum")?;
    if !sums.status.success() {
        bail!("md5sum failed: {}", String::from_utf8_lossy(&sums.stderr));
    }
    fs::write(dir.join("md5sums"), sums.stdout).context("writing DEBIAN/md5sums")
}

/// What the package says of itself that Cargo.toml holds: the version, and the maintainers
/// (the first of the workspace's `authors`).
struct Meta {
    version: String,
    maintainer: String,
}

impl Meta {
    fn read() -> Result<Meta> {
        let out = Command::new("cargo")
            .current_dir(root())
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .output()
            .context("running cargo metadata")?;
        if !out.status.success() {
            bail!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let meta: serde_json::Value =
            serde_json::from_slice(&out.stdout).context("cargo metadata's JSON")?;
        let p = meta["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p["name"] == "spacetime")
            .context("cargo metadata lists no spacetime package")?;
        let field = |v: &serde_json::Value, what: &str| {
            v.as_str()
                .map(String::from)
                .with_context(|| format!("spacetime/Cargo.toml has no {what}"))
        };
        Ok(Meta {
            version: field(&p["version"], "version")?,
            maintainer: field(&p["authors"][0], "authors (the package's maintainer)")?,
        })
    }
}

/// DIR/changelog.Debian.gz: dist/debian/changelog with the maintainer filled in, compressed
/// as Debian wants it (gzip -9n: no name, no date, the same bytes every time).
fn changelog(dir: &Path, meta: &Meta) -> Result<()> {
    let template = fs::read_to_string(root().join("dist/debian/changelog"))
        .context("reading dist/debian/changelog")?;
    let text = template.replace("@MAINTAINER@", &meta.maintainer);
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let plain = dir.join("changelog.Debian");
    fs::write(&plain, text).with_context(|| format!("writing {}", plain.display()))?;
    let _ = fs::remove_file(dir.join("changelog.Debian.gz"));
    run(Command::new("gzip").args(["-9n"]).arg(&plain))
}

/// Tags lintian reports, each with why it stays; any other tag fails the build.
const LINTIAN_EXPLAINED: [(&str, &str); 4] = [
    (
        "initial-upload-closes-no-bugs",
        "installed directly, not uploaded to Debian: there is no ITP bug to close",
    ),
    (
        "binary-has-unneeded-section",
        ".comment names the compilers (a few hundred bytes); symbols and debug info are stripped",
    ),
    (
        "shared-library-lacks-prerequisites",
        "the binary is a static PIE (an ELF shared object with no dynamic loader and nothing \
         NEEDED), which lintian takes for a library: it loads none",
    ),
    (
        "package-supports-alternative-init-but-no-init.d-script",
        "the agent and the watch service rely on systemd (socket activation, capability \
         bounding); under another init, `spacetime agent` is started by hand",
    ),
];

fn lintian_debs() -> toolchain::Debs {
    toolchain::Debs {
        packages: vec!["lintian"],
        why: "`cargo xtask deb` checks the package with lintian",
    }
}

fn ensure_lintian() -> Result<()> {
    toolchain::apt_install_all(&[lintian_debs()])
}

/// What packaging needs and is missing, made ready: the aarch64 target for `dist --target
/// aarch64-unknown-linux-musl`. Returns the Debian packages it needs besides (lintian for
/// `deb`, the aarch64 linker), for the caller to install with the rest in one go.
pub fn prepare_tools() -> Result<Vec<toolchain::Debs>> {
    toolchain::ensure_rust_target(Arch::Arm64.musl())?;
    let mut debs = vec![lintian_debs()];
    debs.extend(Arch::Arm64.cross_debs());
    Ok(debs)
}

fn lintian(deb: &Path) -> Result<()> {
    ensure_lintian()?;
    let out = Command::new("lintian")
        .args(["--no-tag-display-limit", "--display-info"])
        .arg(deb)
        .output()
        .context("running lintian")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut unexplained = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let tag = line.splitn(3, ": ").nth(2).unwrap_or(line);
        let tag = tag.split_whitespace().next().unwrap_or(tag);
        match LINTIAN_EXPLAINED.iter().find(|(t, _)| *t == tag) {
            Some((_, why)) => eprintln!("xtask: lintian: {line} (kept: {why})"),
            None if tag == "spelling-error-in-binary" && !spelled_by_us(line)? => eprintln!(
                "xtask: lintian: {line} (kept: no source of spacetime has that word: bytes of \
                 machine code, or a dependency's text)"
            ),
            None => unexplained.push(line.to_string()),
        }
    }
    if !unexplained.is_empty() {
        bail!("lintian:\n{}", unexplained.join("\n"));
    }
    eprintln!("xtask: lintian: every tag explained");
    Ok(())
}

/// Whether the word a `spelling-error-in-binary` line names (`… spelling-error-in-binary WORD
/// CORRECTION [FILE]`) is written in spacetime's own sources. lintian reads every printable
/// run of a binary: machine code spells three-letter words now and then, and which ones
/// changes with any change of the code.
fn spelled_by_us(line: &str) -> Result<bool> {
    let word = line
        .split_whitespace()
        .skip_while(|w| *w != "spelling-error-in-binary")
        .nth(1)
        .unwrap_or_default();
    if word.is_empty() {
        return Ok(true);
    }
    let mut files = Vec::new();
    for dir in [
        "spacetime/src",
        "spacetime-common/src",
        "spacetime-ebpf/src",
    ] {
        crate::layers::walk(&root().join(dir), &mut files)?;
    }
    for f in files {
        let text = fs::read_to_string(&f).with_context(|| format!("reading {}", f.display()))?;
        let whole = |(i, _): &(usize, &str)| {
            let before = text[..*i].chars().next_back();
            let after = text[i + word.len()..].chars().next();
            !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
        };
        if text.match_indices(word).any(|m| whole(&m)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The static binaries for `archs`, built by one cargo (the host's build scripts built once,
/// both targets' crates side by side; the eBPF object they embed is the same for every
/// architecture, built once by spacetime/build.rs); returns their paths, in order.
pub fn build_static(archs: &[Arch], build: Build) -> Result<Vec<PathBuf>> {
    crate::toolchain::ensure()?;
    let mut cargo = Arch::cargo_for(archs, build)?;
    // Resolved with the test crate's library, as `cargo test` resolves it: alone, `-p spacetime`
    // turns on other features of a dependency deep in the graph (crc32fast's `default`, which
    // only png asks for), and the tests cross-built for an emulated guest then compiled every
    // crate from aya up a second time (about 110 s of the CI's chain). The code is the same.
    cargo.args([
        "build",
        "--release",
        "-p",
        "spacetime",
        "-p",
        "spacetime-tests",
        "--bin",
        "spacetime",
        "--lib",
    ]);
    for arch in archs {
        let how = match build {
            Build::Shipped => "static",
            Build::Check => {
                "static; a check build, the spacetime crate unoptimized: not for shipping"
            }
        };
        eprintln!("xtask: building spacetime for {} ({how})", arch.musl());
        cargo.args(["--target", arch.musl()]);
    }
    run(&mut cargo)?;
    let mut bins = Vec::new();
    for &arch in archs {
        let bin = target_dir().join(arch.musl()).join("release/spacetime");
        let head = fs::read(&bin).with_context(|| format!("reading {}", bin.display()))?;
        if Arch::machine_of(&head) != Some(arch.elf_machine()) {
            bail!("{} is not an {} ELF binary", bin.display(), arch.debian());
        }
        bins.push(bin);
    }
    Ok(bins)
}

/// `cargo xtask dist`: the static binary for each of `archs` (one build) and its files in
/// target/dist/NAME.tar.gz; returns the binaries in the staged trees.
pub fn dist(archs: &[Arch], build: Build) -> Result<Vec<PathBuf>> {
    let bins = build_static(archs, build)?;
    archs
        .iter()
        .zip(bins)
        .map(|(&arch, bin)| tarball(arch, &bin))
        .collect()
}

/// `arch`'s static binary `bin` staged with its files, in a tarball; returns the staged binary.
fn tarball(arch: Arch, bin: &Path) -> Result<PathBuf> {
    let name = format!(
        "spacetime-{}-{}",
        env!("CARGO_PKG_VERSION"),
        arch.dist_name()
    );
    let dist = target_dir().join("dist");
    let tree = dist.join(&name);
    // The completions and manual pages are the same text for every architecture: another
    // architecture's are written by the host's release build.
    let writer = if arch.is_host() {
        None
    } else {
        crate::build()?;
        Some(crate::spacetime_bin())
    };
    stage(&tree, bin, writer.as_deref())?;
    // The tarball unpacks to NAME/{bin,share,lib}: the staged /usr.
    let usr = tree.join("usr");
    for entry in fs::read_dir(&usr).with_context(|| format!("reading {}", usr.display()))? {
        let entry = entry?;
        fs::rename(entry.path(), tree.join(entry.file_name()))?;
    }
    fs::remove_dir(&usr)?;
    let tarball = dist.join(format!("{name}.tar.gz"));
    run(Command::new("tar")
        .current_dir(&dist)
        .args(["--owner=0", "--group=0", "--numeric-owner", "-czf"])
        .arg(&tarball)
        .arg(&name))?;
    let size = |p: &Path| fs::metadata(p).map(|m| m.len() as f64 / (1 << 20) as f64);
    eprintln!(
        "xtask: {} ({:.1} MiB; the static binary {:.1} MiB)",
        tarball.display(),
        size(&tarball)?,
        size(bin)?
    );
    if !arch.is_host() {
        eprintln!(
            "xtask: an {} binary does not run here: `cargo xtask vm-test --arch {}` runs it in a guest",
            arch.debian(),
            arch.debian()
        );
        return Ok(tree.join("bin/spacetime"));
    }
    // It runs here as built, without the glibc it was not linked against.
    let started = Instant::now();
    let out = Command::new(tree.join("bin/spacetime"))
        .args(["trace", "-q", "--", "true"])
        .env("SPACETIME_SOCKET", "/nonexistent/spacetime.sock")
        .output()
        .context("running the static binary")?;
    if !out.status.success() {
        bail!(
            "the static binary failed to trace `true`: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!(
        "xtask: the static binary traced `true` here in {:.0} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(tree.join("bin/spacetime"))
}

/// Runs `cmd` with a time limit; its output, or why not.
pub fn output_within(cmd: &mut Command, limit: Duration) -> Result<std::process::Output> {
    let shown = format!("{cmd:?}");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {shown}"))?;
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => Ok(out?),
        Err(_) => {
            // SAFETY: our own child, not reaped (the waiting thread has not returned).
            unsafe { libc::kill(id as i32, libc::SIGKILL) };
            bail!("{shown} did not finish within {limit:?}")
        }
    }
}
