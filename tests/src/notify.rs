//! Readiness as a service manager learns it (systemd's `Type=notify`): the command under test
//! sends `READY=1` on the datagram socket `NOTIFY_SOCKET` names, not a line of its log.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A socket for one command's readiness, in a directory of the caller's.
pub struct Notify {
    socket: UnixDatagram,
    path: PathBuf,
}

/// Why a command never said it was ready.
#[derive(Debug)]
pub enum NotReady {
    Ended,
    TimedOut,
}

impl Notify {
    /// Binds `dir/notify.sock`, writable by every user: a command run as another user
    /// (`setpriv`) must be able to send to it.
    pub fn bind(dir: &Path) -> Notify {
        let path = dir.join("notify.sock");
        let socket =
            UnixDatagram::bind(&path).unwrap_or_else(|e| panic!("binding {}: {e}", path.display()));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666))
            .unwrap_or_else(|e| panic!("chmod 0666 {}: {e}", path.display()));
        // Short slices: between two, whether the command still runs is asked.
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("a read timeout");
        Notify { socket, path }
    }

    /// The value for `NOTIFY_SOCKET`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for `READY=1`, while `running()` holds, at most `timeout`.
    pub fn wait_ready(
        &self,
        timeout: Duration,
        mut running: impl FnMut() -> bool,
    ) -> Result<(), NotReady> {
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(n) = self.socket.recv(&mut buf) {
                if buf[..n].split(|&b| b == b'\n').any(|l| l == b"READY=1") {
                    return Ok(());
                }
                continue;
            }
            if !running() {
                return Err(NotReady::Ended);
            }
            if Instant::now() > deadline {
                return Err(NotReady::TimedOut);
            }
        }
    }
}

impl Drop for Notify {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
