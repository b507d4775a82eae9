//! The agent's listening socket: made at `--socket PATH` without ever following a link an
//! unprivileged user could plant, or taken from systemd (socket activation).
//!
//! The directory is opened once and checked: owned by root and writable by nobody else
//! (else another user could swap the socket file for a link between two calls). Everything
//! after goes through that open directory: an old socket is removed only if it is a socket,
//! the new one is bound through /proc/self/fd/N (the directory itself, not its path again)
//! with its mode set by the umask at bind (0666: the checks on each request decide, not the
//! file's mode), never by a chmod of a path; at exit it is removed only if it is still the one
//! bound.

use std::{
    ffi::OsString,
    io,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
    os::unix::fs::DirBuilderExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use rustix::fs::{self, AtFlags, FileType, Mode, OFlags, CWD};

use crate::kernel::remote::sock;

/// Why the socket cannot be made there.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{0}: the socket's directory must be owned by root and writable by no one else (another user could replace the socket with a link)")]
    UnsafeDirectory(PathBuf),
    #[error("{0} exists and is not a socket: refusing to replace it")]
    NotASocket(PathBuf),
    #[error("{0}: not a path to a socket file")]
    NoName(PathBuf),
}

/// The listening socket and where its file is.
pub struct Listener {
    pub fd: OwnedFd,
    /// None: systemd's, which systemd removes.
    file: Option<SocketFile>,
}

struct SocketFile {
    dir: OwnedFd,
    name: OsString,
    /// (device, inode) of the file bound: removed at exit only if still it.
    id: (u64, u64),
}

impl Listener {
    /// The socket systemd passed (`LISTEN_PID` is us and `LISTEN_FDS` 1: descriptor 3),
    /// made non-blocking; else a new one at `path`.
    pub fn open(path: &Path) -> Result<Listener, ListenError> {
        if let Some(fd) = activated_socket() {
            return Ok(Listener { fd, file: None });
        }
        let (fd, file) = bind_at(path)?;
        Ok(Listener {
            fd,
            file: Some(file),
        })
    }

    /// Whether systemd made the socket.
    pub fn by_systemd(&self) -> bool {
        self.file.is_none()
    }

    /// Removes the socket file if it is still the one bound (a socket systemd made is left
    /// to it).
    pub fn remove(self) {
        drop(self.fd);
        if let Some(f) = self.file {
            let ours = fs::statat(&f.dir, &f.name, AtFlags::SYMLINK_NOFOLLOW)
                .is_ok_and(|st| (st.st_dev, st.st_ino) == f.id);
            if ours {
                if let Err(e) = fs::unlinkat(&f.dir, &f.name, AtFlags::empty()) {
                    log::debug!("removing the socket file: {e}");
                }
            }
        }
    }
}

fn io_at(path: &Path) -> impl Fn(rustix::io::Errno) -> ListenError + '_ {
    move |e| ListenError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// Opens `dir` (made 0755 when missing) and checks it is root's alone.
fn safe_dir(dir: &Path) -> Result<OwnedFd, ListenError> {
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|source| ListenError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
    }
    let fd = fs::openat(
        CWD,
        dir,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io_at(dir))?;
    let st = fs::fstat(&fd).map_err(io_at(dir))?;
    if st.st_uid != 0 || st.st_mode & 0o022 != 0 {
        return Err(ListenError::UnsafeDirectory(dir.to_path_buf()));
    }
    Ok(fd)
}

fn bind_at(path: &Path) -> Result<(OwnedFd, SocketFile), ListenError> {
    let name = path
        .file_name()
        .ok_or_else(|| ListenError::NoName(path.to_path_buf()))?
        .to_os_string();
    let dir_path = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let dir = safe_dir(dir_path)?;
    match fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Socket => {
            fs::unlinkat(&dir, &name, AtFlags::empty()).map_err(io_at(path))?
        }
        Ok(_) => return Err(ListenError::NotASocket(path.to_path_buf())),
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(io_at(path)(e)),
    }
    // Through the open directory, not its path: nothing between the check and the bind can
    // move the socket elsewhere. Mode 0666 from the umask at bind; the agent runs no other
    // thread yet, so none sees this umask.
    let at = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(&name);
    let old = rustix::process::umask(Mode::from_raw_mode(0o111));
    let bound = sock::listen(&at);
    rustix::process::umask(old);
    let fd = bound.map_err(|source| ListenError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let st = fs::statat(&dir, &name, AtFlags::SYMLINK_NOFOLLOW).map_err(io_at(path))?;
    let file = SocketFile {
        dir,
        name,
        id: (st.st_dev, st.st_ino),
    };
    Ok((fd, file))
}

/// The listening socket systemd passed (socket activation), made non-blocking.
fn activated_socket() -> Option<OwnedFd> {
    let ours = std::env::var("LISTEN_PID").ok()?.parse::<u32>().ok()? == std::process::id();
    if !ours || std::env::var("LISTEN_FDS").ok()?.trim() != "1" {
        return None;
    }
    // SAFETY: systemd hands descriptor 3 over to us; nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(3) };
    let flags = fs::fcntl_getfl(fd.as_fd()).ok()?;
    let _ = fs::fcntl_setfl(fd.as_fd(), flags | OFlags::NONBLOCK);
    let _ = rustix::io::fcntl_setfd(fd.as_fd(), rustix::io::FdFlags::CLOEXEC);
    Some(fd)
}

/// `accept()` failing for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS, ENOMEM)
/// leaves the connection waiting, so the listener stays readable: polled at once again, it
/// would spin. The listener is left out of the poll for a while instead (doubling up to a
/// second), and the failure is said at most once per [`AcceptBackoff::SAY_EVERY`], with the
/// count since.
#[derive(Default)]
pub(super) struct AcceptBackoff {
    until: Option<Instant>,
    delay: Duration,
    failures: u64,
    said: Option<Instant>,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);
    const SAY_EVERY: Duration = Duration::from_secs(10);

    pub fn listening(&self) -> bool {
        self.until.is_none_or(|t| Instant::now() >= t)
    }

    pub fn failed(&mut self, e: &std::io::Error) {
        self.failures += 1;
        self.delay = (self.delay * 2).clamp(Self::FIRST, Self::MAX);
        self.until = Some(Instant::now() + self.delay);
        if self.said.is_none_or(|t| t.elapsed() >= Self::SAY_EVERY) {
            log::warn!(
                "spacetime agent: accepting a connection: {e} ({} failures so far); waiting {:?} before the next",
                self.failures,
                self.delay
            );
            self.said = Some(Instant::now());
        }
    }

    pub fn accepted(&mut self) {
        self.delay = Duration::ZERO;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("spacetime-listen-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir(&d).expect("mkdir");
        d
    }

    /// A directory others can write is refused; a root-owned 0755 one gets a 0666 socket
    /// whatever the umask, which is removed at the end; a regular file in the way is kept.
    #[test]
    fn the_directory_is_checked_and_the_mode_set_at_bind() {
        if !rustix::process::geteuid().is_root() {
            panic!("this test needs root (the directory must be root's)");
        }
        let d = temp("dir");
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let sock = d.join("agent.sock");
        assert!(matches!(
            Listener::open(&sock),
            Err(ListenError::UnsafeDirectory(_))
        ));
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let l = Listener::open(&sock).expect("listen in a safe directory");
        let m = std::fs::symlink_metadata(&sock).expect("the socket file");
        assert_eq!(m.mode() & 0o777, 0o666, "mode set at bind");
        l.remove();
        assert!(!sock.exists(), "removed at the end");
        std::fs::write(&sock, b"keep").expect("a regular file");
        assert!(matches!(
            Listener::open(&sock),
            Err(ListenError::NotASocket(_))
        ));
        assert_eq!(std::fs::read(&sock).expect("kept"), b"keep");
        std::fs::remove_dir_all(&d).expect("rm");
    }
}
