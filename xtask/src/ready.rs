//! Waiting for a `spacetime agent` or `spacetime watch` started here to be ready, as systemd
//! does for a `Type=notify` unit: a `READY=1` datagram on the socket named by `NOTIFY_SOCKET`,
//! not a line of its log.

use std::{
    os::unix::net::UnixDatagram,
    path::{Path, PathBuf},
    process::{Child, Command},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

/// A datagram socket a command tells it is ready on.
pub struct Notify {
    socket: UnixDatagram,
    path: PathBuf,
}

impl Notify {
    /// Binds `dir/notify.sock` (`dir` private to this run).
    pub fn bind(dir: &Path) -> Result<Notify> {
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let socket =
            UnixDatagram::bind(&path).with_context(|| format!("binding {}", path.display()))?;
        // Short slices: between two, whether the agent ended is checked.
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        Ok(Notify { socket, path })
    }

    /// Points `cmd`'s `NOTIFY_SOCKET` here.
    pub fn to(&self, cmd: &mut Command) {
        cmd.env("NOTIFY_SOCKET", &self.path);
    }

    /// Returns once `child` (`what`, for messages) sent `READY=1`; fails when it ends first
    /// or after `limit`.
    pub fn wait_ready(&self, what: &str, child: &mut Child, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let mut buf = [0u8; 4096];
        loop {
            match self.socket.recv(&mut buf) {
                Ok(n) if is_ready(&buf[..n]) => return Ok(()),
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {}
                Err(e) => return Err(e).with_context(|| format!("reading {what}'s notification")),
            }
            if let Some(status) = child.try_wait()? {
                bail!("{what} ended before it was ready ({status})");
            }
            if Instant::now() > deadline {
                bail!("{what} not ready after {} s", limit.as_secs());
            }
        }
    }
}

impl Drop for Notify {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// sd_notify's message: newline-separated `KEY=VALUE` assignments.
fn is_ready(message: &[u8]) -> bool {
    message.split(|&b| b == b'\n').any(|l| l == b"READY=1")
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::is_ready;

    #[test]
    fn ready_is_one_assignment_among_others() {
        assert!(is_ready(b"READY=1\nSTATUS=listening"));
        assert!(is_ready(b"STATUS=x\nREADY=1"));
        assert!(!is_ready(b"STATUS=READY=1"));
        assert!(!is_ready(b"READY=0"));
    }
}
