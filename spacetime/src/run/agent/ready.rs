//! What the agent checks and says as it starts: the capabilities it needs besides loading the
//! programs (named when missing), then one line on stderr (the journal, under systemd) saying
//! where it listens, who may connect and its limits, and `READY=1` to systemd (`Type=notify`).

use std::{os::unix::fs::MetadataExt as _, path::Path};

use crate::util::caps::{Cap, CapSet};

/// What the agent cannot serve without: one sentence naming the capability.
pub fn check_capabilities() -> anyhow::Result<()> {
    let Some(eff) = CapSet::effective() else {
        return Ok(());
    };
    // Without it, every client but root is refused (its namespace and its process's /proc
    // entries unreadable): better not to start than to refuse everyone. Whether a client's
    // process lives is asked of its pidfd by poll, which needs no capability.
    for (cap, why) in [(
        Cap::SysPtrace,
        "to read a client's PID namespace and its process's /proc entries",
    )] {
        if !eff.has(cap) {
            anyhow::bail!(
                "{} is needed {why}: without it the agent could serve root alone",
                cap.name()
            );
        }
    }
    if !eff.has(Cap::NetAdmin) {
        crate::errln!(
            "spacetime agent: without CAP_NET_ADMIN the kernel's taskstats exit records cannot be read: exits are not cross-checked"
        );
    }
    Ok(())
}

/// The limits the start line states.
pub struct Limits {
    pub sessions_per_user: usize,
    pub connections_per_user: usize,
    pub connections: usize,
    pub processes_per_session: u32,
}

/// Who may connect to the socket at `path`, from its mode and owner (connecting needs write
/// permission on the socket file).
pub fn who_may_connect(path: &Path) -> String {
    let Ok(m) = std::fs::metadata(path) else {
        return "unknown (the socket file cannot be read)".into();
    };
    let mode = m.mode() & 0o777;
    if mode & 0o002 != 0 {
        "every local user (each traces only its own processes)".into()
    } else if mode & 0o020 != 0 {
        format!("root and the members of group {}", m.gid())
    } else {
        format!("uid {} only (socket mode {mode:04o})", m.uid())
    }
}

/// The path the listening socket is bound to (systemd's may differ from `--socket`), or
/// `asked` when the kernel does not say.
pub fn listening_path(listener: &std::os::fd::OwnedFd, asked: &Path) -> std::path::PathBuf {
    // A duplicate, as a std listener only to ask its address (getsockname works on any
    // socket type).
    listener
        .try_clone()
        .map(std::os::unix::net::UnixListener::from)
        .and_then(|l| l.local_addr())
        .ok()
        .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        .unwrap_or_else(|| asked.to_path_buf())
}

/// The start line: where, who, limits, and the programs' load time.
pub fn start_line(path: &Path, by_systemd: bool, limits: &Limits, load_ms: f64) -> String {
    let origin = if by_systemd {
        "passed by systemd"
    } else {
        "made here"
    };
    format!(
        "spacetime agent {}: listening on {} ({origin}); who may connect: {}; limits: {} \
         sessions and {} connections per user, {} connections in all, {} processes per \
         session (root: no process limit); programs loaded in {load_ms:.1} ms",
        env!("CARGO_PKG_VERSION"),
        crate::util::term::escape(path.as_os_str().as_encoded_bytes()),
        who_may_connect(path),
        limits.sessions_per_user,
        limits.connections_per_user,
        limits.connections,
        limits.processes_per_session,
    )
}

/// Prints the start line and tells systemd the agent is ready (nothing when not under
/// systemd's `Type=notify`).
pub fn announce(line: &str) {
    crate::errln!("{line}");
    if let Err(e) = crate::util::notify::ready(line) {
        crate::errln!("spacetime agent: telling systemd it is ready: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_place_people_and_limits() {
        let dir = std::env::temp_dir().join(format!("st-ready-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("sock");
        std::fs::write(&file, b"").expect("file");
        let limits = Limits {
            sessions_per_user: 8,
            connections_per_user: 16,
            connections: 256,
            processes_per_session: 16384,
        };
        use std::os::unix::fs::PermissionsExt as _;
        for (mode, who) in [
            (0o666, "every local user"),
            (0o660, "root and the members of group"),
            (0o600, "only (socket mode 0600)"),
        ] {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).expect("chmod");
            let line = start_line(&file, false, &limits, 41.23);
            assert!(line.contains(who), "{mode:o}: {line}");
            assert!(
                line.contains(&format!("listening on {} (made here)", file.display()))
                    && line.contains("8 sessions and 16 connections per user")
                    && line.contains("256 connections in all")
                    && line.contains("16384 processes per session")
                    && line.ends_with("programs loaded in 41.2 ms"),
                "{line}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
