//! `cargo xtask install`: the release binary, its shell completions, its manual page, the
//! licences and the systemd units (the agent and its socket, `spacetime watch --metrics`),
//! under a prefix (and a staging DESTDIR for packagers), each path printed as it is written.
//! Run as a user, it builds as that user and asks for root (sudo) only to copy: the copy is
//! this same program run again as root with `--bin`, so root needs no Rust toolchain.

use std::{
    fs,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

#[derive(Debug, Clone, clap::Args)]
pub struct Options {
    /// Installation prefix: the binary goes to PREFIX/bin, the rest under PREFIX/share and
    /// PREFIX/lib/systemd/system
    #[arg(long, default_value = "/usr/local")]
    prefix: PathBuf,
    /// Stage the files under this directory instead of / (paths inside them stay PREFIX's)
    #[arg(long)]
    destdir: Option<PathBuf>,
    /// Install this binary instead of building the release binary
    #[arg(long, value_name = "PATH")]
    bin: Option<PathBuf>,
    /// A binary of the same source that runs here, to write the completions and manual pages
    /// when `bin` is built for another architecture (the tarball for arm64).
    #[arg(skip)]
    writer: Option<PathBuf>,
}

impl Options {
    /// `--prefix PREFIX --destdir DESTDIR --bin BIN`: what the package and the tarball stage.
    pub fn staged(prefix: &str, destdir: &Path, bin: &Path) -> Options {
        Options {
            prefix: prefix.into(),
            destdir: Some(destdir.to_path_buf()),
            bin: Some(bin.to_path_buf()),
            writer: None,
        }
    }

    /// The same, with `writer` writing the generated files (`bin` does not run here).
    pub fn staged_foreign(prefix: &str, destdir: &Path, bin: &Path, writer: &Path) -> Options {
        Options {
            writer: Some(writer.to_path_buf()),
            ..Options::staged(prefix, destdir, bin)
        }
    }
}

/// Where each file goes, relative to the prefix, and its mode. zsh reads distribution
/// packages' completions from vendor-completions under /usr (Debian's zsh has no
/// /usr/share/zsh/site-functions in its fpath), site-functions elsewhere. The manual pages
/// (spacetime.1 and one per subcommand) go to [`MAN_DIR`], as many as `spacetime man --dir`
/// writes.
fn layout(prefix: &Path) -> [(&'static str, &'static str, u32); 9] {
    let zsh = if prefix == Path::new("/usr") {
        "share/zsh/vendor-completions/_spacetime"
    } else {
        "share/zsh/site-functions/_spacetime"
    };
    [
        ("bin", "bin/spacetime", 0o755),
        ("bash", "share/bash-completion/completions/spacetime", 0o644),
        ("zsh", zsh, 0o644),
        (
            "fish",
            "share/fish/vendor_completions.d/spacetime.fish",
            0o644,
        ),
        ("unit", "lib/systemd/system/spacetime-watch.service", 0o644),
        (
            "agent-unit",
            "lib/systemd/system/spacetime-agent.service",
            0o644,
        ),
        (
            "agent-socket",
            "lib/systemd/system/spacetime-agent.socket",
            0o644,
        ),
        ("mit", "share/doc/spacetime/LICENSE-MIT", 0o644),
        ("apache", "share/doc/spacetime/LICENSE-APACHE", 0o644),
    ]
}

/// Where the manual pages go, relative to the prefix.
const MAN_DIR: &str = "share/man/man1";

/// The manual pages `bin` writes: (file name, roff), in name order.
fn man_pages(bin: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    let dir = std::env::temp_dir().join(format!("spacetime-man.{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let written = Command::new(bin)
        .args(["man", "--dir"])
        .arg(&dir)
        .output()
        .with_context(|| format!("running {} man --dir", bin.display()));
    let pages = written.and_then(|out| {
        if !out.status.success() {
            bail!(
                "{} man --dir failed: {}",
                bin.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let mut pages = Vec::new();
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            pages.push((name, fs::read(entry.path())?));
        }
        pages.sort();
        Ok(pages)
    });
    let _ = fs::remove_dir_all(&dir);
    let pages = pages?;
    if !pages.iter().any(|(n, _)| n == "spacetime.1") {
        bail!("{} man --dir wrote no spacetime.1", bin.display());
    }
    Ok(pages)
}

/// Writes `bytes` to `dst` with `mode`, beside and renamed: a running binary or a reader
/// never sees half a file.
fn put(dst: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    let dir = dst.parent().expect("every path has a directory");
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{}.tmp", std::process::id()));
    fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    fs::set_permissions(&tmp, fs::Permissions::from_mode(mode))?;
    fs::rename(&tmp, dst).with_context(|| format!("installing {}", dst.display()))?;
    eprintln!("xtask: installed {}", dst.display());
    Ok(())
}

/// stdout of `spacetime ARGS`.
fn generated(bin: &Path, args: &[&str]) -> Result<Vec<u8>> {
    let out = Command::new(bin)
        .args(args)
        .output()
        .with_context(|| format!("running {} {}", bin.display(), args.join(" ")))?;
    if !out.status.success() || out.stdout.is_empty() {
        bail!(
            "{} {} failed: {}",
            bin.display(),
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

fn content(what: &str, bin: &Path, writer: &Path, prefix: &Path) -> Result<Vec<u8>> {
    let root = crate::root();
    Ok(match what {
        "bin" => fs::read(bin).with_context(|| format!("reading {}", bin.display()))?,
        "bash" | "zsh" | "fish" => generated(writer, &["completions", what])?,
        "unit" => {
            let unit = fs::read_to_string(root.join("dist/spacetime-watch.service"))
                .context("reading dist/spacetime-watch.service")?;
            unit.replace("@BINDIR@", &prefix.join("bin").to_string_lossy())
                .into_bytes()
        }
        "agent-unit" => {
            let unit = fs::read_to_string(root.join("contrib/systemd/spacetime-agent.service"))
                .context("reading contrib/systemd/spacetime-agent.service")?;
            unit.replace("@BINDIR@", &prefix.join("bin").to_string_lossy())
                .into_bytes()
        }
        "agent-socket" => fs::read(root.join("contrib/systemd/spacetime-agent.socket"))
            .context("reading contrib/systemd/spacetime-agent.socket")?,
        "mit" => fs::read(root.join("LICENSE-MIT"))?,
        "apache" => fs::read(root.join("LICENSE-APACHE"))?,
        _ => unreachable!("no such file kind {what}"),
    })
}

pub fn install(opts: Options) -> Result<()> {
    if !opts.prefix.is_absolute() {
        bail!("--prefix must be an absolute path");
    }
    let bin = match opts.bin.clone() {
        Some(b) => b,
        None => {
            crate::build()?;
            crate::spacetime_bin()
        }
    };
    let target = match &opts.destdir {
        Some(d) => d.clone(),
        None => opts.prefix.clone(),
    };
    if !crate::is_root() && !writable(&target) {
        return as_root(&opts, &bin);
    }
    let stage = |rel: &str| -> PathBuf {
        let full = opts.prefix.join(rel);
        match &opts.destdir {
            Some(d) => d.join(full.strip_prefix("/").unwrap_or(&full)),
            None => full,
        }
    };
    let writer = opts.writer.clone().unwrap_or_else(|| bin.clone());
    for (what, rel, mode) in layout(&opts.prefix) {
        put(
            &stage(rel),
            &content(what, &bin, &writer, &opts.prefix)?,
            mode,
        )?;
    }
    for (name, page) in man_pages(&writer)? {
        put(&stage(&format!("{MAN_DIR}/{name}")), &page, 0o644)?;
    }
    if opts.destdir.is_none() {
        eprintln!(
            "xtask: to run the metrics service: systemctl daemon-reload && \
             systemctl enable --now spacetime-watch (OpenMetrics on 127.0.0.1:9464)"
        );
    }
    Ok(())
}

/// Whether this user can write under `dir` (its nearest existing ancestor).
fn writable(dir: &Path) -> bool {
    let Some(existing) = dir.ancestors().find(|d| d.exists()) else {
        return false;
    };
    let Ok(c) = std::ffi::CString::new(existing.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The copy, as root: this program again under sudo with the binary just built, when a
/// terminal can take sudo's password; otherwise the exact command to run.
fn as_root(opts: &Options, bin: &Path) -> Result<()> {
    let me = std::env::current_exe().context("finding the xtask binary")?;
    let mut argv: Vec<std::ffi::OsString> = vec![me.into(), "install".into()];
    argv.extend(["--prefix".into(), opts.prefix.clone().into()]);
    if let Some(d) = &opts.destdir {
        argv.extend(["--destdir".into(), d.clone().into()]);
    }
    argv.extend(["--bin".into(), bin.into()]);
    let shown: Vec<String> = argv
        .iter()
        .map(|a| {
            let a = a.to_string_lossy();
            if a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-+=:".contains(c))
            {
                a.into_owned()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect();
    let line = format!("sudo {}", shown.join(" "));
    // SAFETY: isatty on a descriptor number.
    let tty = unsafe { libc::isatty(0) } == 1;
    let sudo = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("sudo").is_file()));
    if !(tty && sudo) {
        bail!(
            "installing under {} needs root; built as you, now run:\n  {line}",
            opts.prefix.display()
        );
    }
    eprintln!("xtask: built as you; copying as root: {line}");
    crate::run(Command::new("sudo").args(&argv))
}
