//! `cargo xtask deb --check`: the package as a user gets it. Installed with apt-get, the
//! installed binary traces a command as root; the agent is started through its socket unit
//! where systemd runs, else by socket activation as the unit would (systemd-socket-activate,
//! on a private socket: the machine's default socket may serve others); an unprivileged user
//! traces through it; then the package is purged and nothing of it may be left.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Context, Result};

use crate::package::output_within;

const INSTALLED: &str = "/usr/bin/spacetime";

fn installed() -> bool {
    crate::toolchain::dpkg_installed("spacetime")
}

/// `spacetime trace -q --json FILE -- true` as `user` (None: root) through `socket`; the
/// report's "programs".
fn trace(user: Option<u32>, socket: &Path, dir: &Path) -> Result<String> {
    let json = dir.join(format!("report-{}.json", user.unwrap_or(0)));
    let mut c = match user {
        Some(uid) => {
            let mut c = Command::new("setpriv");
            c.arg(format!("--reuid={uid}"))
                .arg(format!("--regid={uid}"))
                .args(["--clear-groups", "--", INSTALLED]);
            c
        }
        None => Command::new(INSTALLED),
    };
    c.env("SPACETIME_SOCKET", socket)
        .args(["trace", "-q", "--json"])
        .arg(&json)
        .args(["--", "true"]);
    let out = output_within(&mut c, Duration::from_secs(60))?;
    if !out.status.success() {
        bail!(
            "the installed spacetime failed to trace as {user:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).context("the report")?)?;
    Ok(report["programs"].as_str().unwrap_or_default().to_string())
}

/// The agent, started the way the package's units start it; stopped when dropped.
struct Agent {
    child: Option<std::process::Child>,
    socket: std::path::PathBuf,
}

impl Agent {
    fn start(dir: &Path) -> Result<Agent> {
        if Path::new("/run/systemd/system").is_dir() {
            crate::run(Command::new("systemctl").args(["start", "spacetime-agent.socket"]))?;
            return Ok(Agent {
                child: None,
                socket: "/run/spacetime/agent.sock".into(),
            });
        }
        eprintln!("xtask: no systemd here: the agent socket-activated by systemd-socket-activate, as spacetime-agent.socket would");
        let socket = dir.join("agent.sock");
        let child = Command::new("systemd-socket-activate")
            .args(["--seqpacket", "-l"])
            .arg(&socket)
            .args([INSTALLED, "agent"])
            .stdin(Stdio::null())
            .spawn()
            .context("systemd-socket-activate (systemd) runs")?;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !socket.exists() {
            if std::time::Instant::now() > deadline {
                bail!("systemd-socket-activate made no socket");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        // As the socket unit's SocketMode.
        std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o666))?;
        Ok(Agent {
            child: Some(child),
            socket,
        })
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        match self.child.as_mut() {
            Some(c) => {
                // SAFETY: our own child (the activator exec'd the agent), not reaped yet.
                unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
                let _ = c.wait();
            }
            None => {
                let _ = Command::new("systemctl")
                    .args(["stop", "spacetime-agent.socket", "spacetime-agent.service"])
                    .status();
            }
        }
    }
}

/// The package's files (not directories), from its archive.
fn package_files(deb: &Path) -> Result<Vec<String>> {
    let out = Command::new("dpkg-deb").arg("-c").arg(deb).output()?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.starts_with('d'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|p| p.trim_start_matches('.').to_string())
        .collect())
}

/// `dpkg --verify`: every installed file as the package's md5sums say.
fn verify() -> Result<()> {
    let out = Command::new("dpkg")
        .args(["--verify", "spacetime"])
        .output()
        .context("running dpkg --verify")?;
    let said = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !said.trim().is_empty() {
        bail!(
            "dpkg --verify spacetime: {said}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("xtask: dpkg --verify finds every file as the package's md5sums say");
    Ok(())
}

pub fn check(deb: &Path) -> Result<()> {
    if !crate::is_root() {
        bail!("the package check installs the package: run it as root");
    }
    if installed() {
        bail!("a spacetime package is already installed here: the check would replace it");
    }
    let dir = std::env::temp_dir().join(format!("spacetime-deb-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o1777))?;
    let result = install_and_trace(deb, &dir);
    let purged = purge(deb);
    let _ = std::fs::remove_dir_all(&dir);
    result.and(purged)
}

fn install_and_trace(deb: &Path, dir: &Path) -> Result<()> {
    eprintln!("xtask: apt-get install {}", deb.display());
    let out = crate::toolchain::apt_get()
        .args(["install", "-y", "-qq"])
        .arg(deb.canonicalize()?)
        .output()
        .context("running apt-get install")?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{said}");
    if !out.status.success() {
        bail!("apt-get install failed with {}", out.status);
    }
    // Without systemd the socket cannot listen: what apt shows the user says so.
    let systemd = Path::new("/run/systemd/system").is_dir();
    let warned =
        said.contains("spacetime: systemd is not running here") && said.contains("spacetime agent");
    if !systemd && !warned {
        bail!("apt-get install said nothing of the agent's socket, which cannot listen without systemd");
    }
    verify()?;
    manual_pages()?;
    let own = trace(None, Path::new("/nonexistent/agent.sock"), dir)?;
    if own != "own" {
        bail!("root's trace with the installed binary said programs {own:?}");
    }
    let agent = Agent::start(dir)?;
    let through = trace(Some(65534), &agent.socket, dir)?;
    drop(agent);
    if through != "agent" {
        bail!("nobody's trace said programs {through:?}, not through the agent");
    }
    eprintln!("xtask: the installed spacetime traced as root (own programs) and as nobody (through the socket-activated agent)");
    Ok(())
}

/// `man` finds every spacetime page that spacetime(1) and the others refer to, installed.
fn manual_pages() -> Result<()> {
    let out = Command::new("man")
        .args(["-w", "spacetime"])
        .output()
        .context("running man -w")?;
    if !out.status.success() {
        bail!("man finds no spacetime(1) once the package is installed");
    }
    let rendered = Command::new("man")
        .arg("spacetime")
        .env("MANWIDTH", "200")
        .env("LC_ALL", "C")
        .output()
        .context("running man spacetime")?;
    let text = String::from_utf8_lossy(&rendered.stdout);
    let mut pages: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter_map(|w| w.strip_suffix("(1)"))
        .filter(|p| p.starts_with("spacetime-"))
        .collect();
    pages.sort_unstable();
    pages.dedup();
    if pages.is_empty() {
        bail!("spacetime(1) refers to no subcommand's page: {text}");
    }
    for page in &pages {
        let found = Command::new("man").args(["-w", page]).output()?;
        if !found.status.success() {
            bail!("spacetime(1) refers to {page}(1), which the package does not install");
        }
    }
    eprintln!(
        "xtask: man finds spacetime(1) and the {} pages it refers to",
        pages.len()
    );
    Ok(())
}

fn purge(deb: &Path) -> Result<()> {
    crate::run(crate::toolchain::apt_get().args(["purge", "-y", "-qq", "spacetime"]))?;
    if installed() {
        bail!("spacetime is still installed after the purge");
    }
    let mut left: Vec<String> = package_files(deb)?
        .into_iter()
        .filter(|f| Path::new(f).exists())
        .collect();
    for extra in [
        "/etc/systemd/system/sockets.target.wants/spacetime-agent.socket",
        "/var/lib/systemd/deb-systemd-helper-enabled/spacetime-agent.socket.dsh-also",
        "/var/lib/systemd/deb-systemd-helper-enabled/sockets.target.wants/spacetime-agent.socket",
        "/var/lib/systemd/deb-systemd-helper-masked/spacetime-agent.socket",
        "/usr/share/doc/spacetime",
    ] {
        if Path::new(extra).exists() {
            left.push(extra.into());
        }
    }
    if !left.is_empty() {
        bail!("left behind after the purge: {}", left.join(" "));
    }
    eprintln!("xtask: purged; nothing of the package is left");
    Ok(())
}
