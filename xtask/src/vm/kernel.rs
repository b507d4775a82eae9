//! Debian's cloud kernels, by release and architecture: found with apt by name, downloaded
//! once, unpacked; and the few other packages an arm64 guest takes from Debian (busybox,
//! setpriv and its libraries).
//!
//! Each release's suite is read through a list of its own (`Dir::Etc::sourcelist`) and state
//! of its own, with the architecture as apt's only one, so the machine's apt sources and
//! architectures are never touched and any Debian host reaches all three releases.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use crate::{arch::Arch, run};

/// Where apt finds Debian (the mirror the machines' own sources use).
const MIRROR: &str = "http://deb.debian.org/debian";
const SECURITY: &str = "http://deb.debian.org/debian-security";
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// A Debian release whose cloud kernel a guest boots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Debian {
    /// Debian 11 (bullseye): Linux 5.10.
    #[value(name = "11")]
    Bullseye,
    /// Debian 12 (bookworm): Linux 6.1.
    #[value(name = "12")]
    Bookworm,
    /// Debian 13 (trixie): Linux 6.12.
    #[value(name = "13")]
    Trixie,
}

impl Debian {
    pub fn number(self) -> u8 {
        match self {
            Debian::Bullseye => 11,
            Debian::Bookworm => 12,
            Debian::Trixie => 13,
        }
    }

    fn suite(self) -> &'static str {
        match self {
            Debian::Bullseye => "bullseye",
            Debian::Bookworm => "bookworm",
            Debian::Trixie => "trixie",
        }
    }

    /// The suites its kernels come from: the release's own, and for 12 its updates and security
    /// suites as the machines' own sources list them (the newest 6.1 revisions are there; the
    /// mirror serves only part of 11's security pool, so 11 and 13 take the release's own).
    fn lists(self) -> String {
        let main = |s: &str| format!("deb [signed-by={KEYRING}] {MIRROR} {s} main\n");
        match self {
            Debian::Bookworm => format!(
                "{}{}deb [signed-by={KEYRING}] {SECURITY} bookworm-security main\n",
                main("bookworm"),
                main("bookworm-updates")
            ),
            _ => main(self.suite()),
        }
    }

    /// The package name up to the number that orders its revisions (`linux-image-5.10.0-32-…`,
    /// `linux-image-6.12.117+deb13-…`), and what must follow that number.
    fn prefix(self) -> (&'static str, &'static str) {
        match self {
            Debian::Bullseye => ("linux-image-5.10.0-", "-cloud"),
            Debian::Bookworm => ("linux-image-6.1.0-", "-cloud"),
            Debian::Trixie => ("linux-image-6.12.", "+deb13-cloud"),
        }
    }

    /// The kernel series, as said in messages.
    pub fn linux(self) -> &'static str {
        match self {
            Debian::Bullseye => "5.10",
            Debian::Bookworm => "6.1",
            Debian::Trixie => "6.12",
        }
    }

    /// The revision of a package or .deb name of this release's cloud kernel (the ABI for
    /// 11 and 12, the patch level for 13); None for any other name.
    pub fn revision(self, arch: Arch, name: &str) -> Option<u32> {
        let (prefix, then) = self.prefix();
        let rest = name.strip_prefix(prefix)?;
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let tail = &rest[digits..];
        let unsigned = tail.strip_prefix(then)?;
        (format!("-cloud{unsigned}").starts_with(&format!("-cloud-{}-unsigned", arch.debian())))
            .then(|| rest[..digits].parse().ok())
            .flatten()
    }
}

/// apt with a list of `release`'s suite only and `arch` its only architecture, its state
/// under `dir`.
fn apt(release: Debian, arch: Arch, dir: &Path, program: &str) -> Result<Command> {
    let state = dir.join("apt");
    for sub in ["lists/partial", "cache/archives/partial"] {
        fs::create_dir_all(state.join(sub))
            .with_context(|| format!("creating {}", state.join(sub).display()))?;
    }
    let list = state.join("sources.list");
    fs::write(&list, release.lists()).with_context(|| format!("writing {}", list.display()))?;
    let mut c = Command::new(program);
    let opt = |k: &str, v: &Path| format!("{k}={}", v.display());
    c.args(["-o", &opt("Dir::Etc::sourcelist", &list)])
        .args(["-o", "Dir::Etc::sourceparts=/dev/null"])
        .args(["-o", &opt("Dir::State::lists", &state.join("lists"))])
        .args(["-o", &opt("Dir::Cache", &state.join("cache"))])
        .args(["-o", "APT::Sandbox::User=root"])
        .args(["-o", &format!("APT::Architecture={}", arch.debian())])
        .args(["-o", &format!("APT::Architectures::={}", arch.debian())]);
    Ok(c)
}

/// The newest cloud kernel package of `release` that apt offers.
fn newest_package(release: Debian, arch: Arch, dir: &Path) -> Result<String> {
    let search = || -> Result<Vec<String>> {
        let pattern = format!("^linux-image-.*-cloud-{}-unsigned$", arch.debian());
        let out = apt(release, arch, dir, "apt-cache")?
            .args(["search", "--names-only", &pattern])
            .output()
            .context("running apt-cache search")?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| release.revision(arch, n).is_some())
            .map(str::to_owned)
            .collect())
    };
    let mut names = search()?;
    if names.is_empty() {
        eprintln!("xtask: reading Debian {}'s package lists", release.number());
        run(apt(release, arch, dir, "apt-get")?.args(["update", "-qq"]))?;
        names = search()?;
    }
    names
        .into_iter()
        .max_by_key(|n| release.revision(arch, n))
        .with_context(|| {
            format!(
                "apt offers no Linux {} cloud kernel of Debian {}",
                release.linux(),
                release.number()
            )
        })
}

/// `release`'s cloud kernel, downloaded once and unpacked under `dir`; returns the vmlinuz.
pub fn debian_kernel(release: Debian, arch: Arch, dir: &Path) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // The newest of this release's kernel packages in `dir`.
    let pick = |debs: Vec<(PathBuf, String)>| {
        debs.into_iter()
            .filter_map(|(p, n)| Some((release.revision(arch, &n)?, p)))
            .max_by(|a, b| a.0.cmp(&b.0))
            .map(|(_, p)| p)
    };
    let deb = cached_deb(dir, pick, || {
        let package = newest_package(release, arch, dir)?;
        eprintln!(
            "xtask: downloading {package} with apt-get (cached in {})",
            dir.display()
        );
        run(apt(release, arch, dir, "apt-get")?
            .current_dir(dir)
            .args(["download", &package]))
    })?;
    let boot = unpack(&deb, dir)?.join("boot");
    fs::read_dir(&boot)
        .with_context(|| format!("reading {}", boot.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .with_context(|| format!("no vmlinuz-* in {}", boot.display()))
}

/// `package` of `release` for `arch`, downloaded once (the version apt offers then) and
/// unpacked under `dir`; returns the unpacked tree.
pub fn debian_package(release: Debian, arch: Arch, dir: &Path, package: &str) -> Result<PathBuf> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let prefix = format!("{package}_");
    let pick = |debs: Vec<(PathBuf, String)>| {
        debs.into_iter()
            .find(|(_, n)| n.starts_with(&prefix))
            .map(|(p, _)| p)
    };
    let deb = cached_deb(dir, pick, || {
        eprintln!(
            "xtask: downloading {package}:{} with apt-get (cached in {})",
            arch.debian(),
            dir.display()
        );
        let download = |d: &Path| {
            run(apt(release, arch, d, "apt-get")?
                .current_dir(d)
                .args(["download", package]))
        };
        if download(dir).is_err() {
            run(apt(release, arch, dir, "apt-get")?.args(["update", "-qq"]))?;
            download(dir)?;
        }
        Ok(())
    })?;
    unpack(&deb, dir)
}

/// The .deb `pick` chooses among those in `dir` (path and file name), downloaded into `dir`
/// by `fetch` the first time.
fn cached_deb(
    dir: &Path,
    pick: impl Fn(Vec<(PathBuf, String)>) -> Option<PathBuf>,
    fetch: impl FnOnce() -> Result<()>,
) -> Result<PathBuf> {
    let debs = || -> Vec<(PathBuf, String)> {
        let Ok(entries) = fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.path())
            .filter_map(|p| {
                let name = p.file_name()?.to_str()?.to_string();
                name.ends_with(".deb").then_some((p, name))
            })
            .collect()
    };
    if let Some(deb) = pick(debs()) {
        eprintln!("xtask: using the cached package {}", deb.display());
        return Ok(deb);
    }
    fetch()?;
    pick(debs()).context("apt-get download left no .deb")
}

/// Unpacks a .deb once (beside it) and returns the unpacked tree.
fn unpack(deb: &Path, dir: &Path) -> Result<PathBuf> {
    let stem = deb
        .file_stem()
        .and_then(|s| s.to_str())
        .context("kernel .deb name")?;
    let unpacked = dir.join(stem);
    if !unpacked.is_dir() {
        let partial = dir.join(format!("{stem}.partial"));
        let _ = fs::remove_dir_all(&partial);
        run(Command::new("dpkg").arg("-x").arg(deb).arg(&partial))?;
        fs::rename(&partial, &unpacked)?;
    }
    Ok(unpacked)
}

#[cfg(test)]
mod tests {
    use super::{Arch, Debian};

    #[test]
    fn revisions_from_names() {
        let r = |d: Debian, n: &str| d.revision(Arch::Amd64, n);
        let b = Debian::Bookworm;
        assert_eq!(r(b, "linux-image-6.1.0-54-cloud-amd64-unsigned"), Some(54));
        assert_eq!(
            r(
                b,
                "linux-image-6.1.0-54-cloud-amd64-unsigned_6.1.190-1_amd64.deb"
            ),
            Some(54)
        );
        assert_eq!(r(b, "linux-image-6.1.0-54-amd64-unsigned"), None);
        assert_eq!(r(b, "linux-image-6.1.0-x-cloud-amd64-unsigned"), None);
        // Debian 11's backport of 6.1 is not its own kernel.
        assert_eq!(
            r(b, "linux-image-6.1.0-0.deb11.52-cloud-amd64-unsigned"),
            None
        );
        let o = Debian::Bullseye;
        assert_eq!(r(o, "linux-image-5.10.0-32-cloud-amd64-unsigned"), Some(32));
        assert_eq!(
            r(o, "linux-image-6.1.0-0.deb11.52-cloud-amd64-unsigned"),
            None
        );
        let t = Debian::Trixie;
        assert_eq!(
            r(t, "linux-image-6.12.117+deb13-cloud-amd64-unsigned"),
            Some(117)
        );
        assert_eq!(
            r(
                t,
                "linux-image-6.12.117+deb13-cloud-amd64-unsigned_6.12.117-1_amd64.deb"
            ),
            Some(117)
        );
        assert_eq!(r(t, "linux-image-6.12.117+deb13-amd64-unsigned"), None);
        let arm = |n: &str| b.revision(Arch::Arm64, n);
        assert_eq!(arm("linux-image-6.1.0-57-cloud-arm64-unsigned"), Some(57));
        assert_eq!(arm("linux-image-6.1.0-57-cloud-amd64-unsigned"), None);
        assert_eq!(r(b, "linux-image-6.1.0-57-cloud-arm64-unsigned"), None);
    }
}
