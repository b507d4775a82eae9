//! Starting the traced command.
//!
//! The child is forked and held on a pipe until its pid is tracked by the kernel programs, then
//! released to exec CMD, so its first exec is seen. Started through sudo, CMD runs as the
//! invoking user so a traced build leaves no root-owned files.

use std::{
    ffi::{CString, OsStr, OsString},
    io,
    os::{
        fd::{AsRawFd, OwnedFd, RawFd},
        unix::{ffi::OsStrExt, fs::PermissionsExt},
    },
    path::{Path, PathBuf},
};

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{0}: command not found")]
    NotFound(String),
    #[error("{0}: permission denied (not an executable file)")]
    NotExecutable(String),
    #[error("{cmd}: cannot execute: {source}")]
    Exec { cmd: String, source: io::Error },
    #[error("starting {cmd}: {source}")]
    Spawn { cmd: String, source: io::Error },
    #[error("finding the sudo user's groups: {0}")]
    Groups(String),
}

impl LaunchError {
    /// The conventional status: 127 when CMD does not exist, 126 when it cannot run.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::NotFound(_) => 127,
            LaunchError::Exec { source, .. } if source.raw_os_error() == Some(libc::ENOENT) => 127,
            LaunchError::Groups(_) | LaunchError::Spawn { .. } => 125,
            _ => 126,
        }
    }
}

/// A command as an error message names it: escaped for a terminal (its bytes are the user's,
/// not necessarily UTF-8).
fn shown(cmd: &OsStr) -> String {
    crate::util::term::escape(cmd.as_bytes())
}

fn is_executable_file(p: &Path) -> Option<bool> {
    let m = std::fs::metadata(p).ok()?;
    Some(m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Finds CMD like execvp would: a name with a slash is used as is, others are searched in
/// PATH.
pub fn resolve(cmd: &OsStr) -> Result<PathBuf, LaunchError> {
    let shown = shown(cmd);
    if cmd.is_empty() {
        return Err(LaunchError::NotFound(shown));
    }
    if cmd.as_bytes().contains(&b'/') {
        let p = PathBuf::from(cmd);
        return match is_executable_file(&p) {
            None => Err(LaunchError::NotFound(shown)),
            Some(false) => Err(LaunchError::NotExecutable(shown)),
            Some(true) => Ok(p),
        };
    }
    let path =
        std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/local/bin:/usr/bin:/bin"));
    let mut saw_non_executable = false;
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let candidate = dir.join(cmd);
        match is_executable_file(&candidate) {
            Some(true) => return Ok(candidate),
            Some(false) => saw_non_executable = true,
            None => {}
        }
    }
    if saw_non_executable {
        Err(LaunchError::NotExecutable(shown))
    } else {
        Err(LaunchError::NotFound(shown))
    }
}

/// Who CMD runs as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub uid: libc::uid_t,
    pub gid: libc::gid_t,
    pub groups: Vec<libc::gid_t>,
}

/// The invoking user when spacetime runs as root through sudo (SUDO_UID/SUDO_GID/SUDO_USER),
/// with their supplementary groups.
pub fn sudo_credentials() -> Result<Option<Credentials>, LaunchError> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    let Some(uid) = num("SUDO_UID") else {
        return Ok(None);
    };
    if uid == 0 {
        return Ok(None);
    }
    let gid = num("SUDO_GID").unwrap_or(uid);
    let groups = match std::env::var("SUDO_USER") {
        Ok(user) if !user.is_empty() => group_list(&user, gid)?,
        _ => vec![gid],
    };
    Ok(Some(Credentials { uid, gid, groups }))
}

fn group_list(user: &str, gid: libc::gid_t) -> Result<Vec<libc::gid_t>, LaunchError> {
    let name =
        CString::new(user).map_err(|_| LaunchError::Groups(format!("bad user name {user:?}")))?;
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let mut count = n;
        // SAFETY: buffer of `count` gids; getgrouplist updates count.
        let r = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if r >= 0 {
            groups.truncate(count.max(0) as usize);
            return Ok(groups);
        }
        if count <= n || count > 65536 {
            // An unknown user: only the primary group.
            return Ok(vec![gid]);
        }
        n = count;
    }
}

/// A forked child waiting for [`Held::release`] before it execs CMD.
pub struct Held {
    /// As spacetime's PID namespace numbers it (what `fork` returned).
    pub pid: libc::pid_t,
    /// The child ran the program that records its kernel pid: 0, or the errno that failed
    /// (None when no program was given).
    pub own_pid_run: Option<i32>,
    release: OwnedFd,
    exec_error: OwnedFd,
    cmd: String,
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?)
}

fn cstring(s: &OsStr) -> Result<CString, LaunchError> {
    CString::new(s.as_bytes()).map_err(|_| LaunchError::Exec {
        cmd: shown(s),
        source: io::Error::from_raw_os_error(libc::EINVAL),
    })
}

/// Where a started command's standard streams go: a descriptor each (the caller keeps it
/// open until the command has started), or spacetime's own (None, the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stdio {
    pub stdin: Option<RawFd>,
    pub stdout: Option<RawFd>,
    pub stderr: Option<RawFd>,
}

/// [`spawn_held_with`] the command sharing spacetime's standard streams.
pub fn spawn_held(
    path: &Path,
    argv: &[OsString],
    creds: Option<&Credentials>,
    own_pid: Option<RawFd>,
) -> Result<Held, LaunchError> {
    spawn_held_with(path, argv, creds, own_pid, Stdio::default())
}

/// Forks a child that waits on a pipe, then execs `path` with `argv` as `creds`. With
/// `own_pid` (see [`crate::kernel::loader::run_own_pid`]) the child first runs that program, so the
/// kernel records its kernel pid: inside a PID namespace `fork` only gives the namespace's.
/// `stdio` says where its standard streams go.
/// Must be called while the process is single-threaded (before any runtime starts).
pub fn spawn_held_with(
    path: &Path,
    argv: &[OsString],
    creds: Option<&Credentials>,
    own_pid: Option<RawFd>,
    stdio: Stdio,
) -> Result<Held, LaunchError> {
    let cmd = argv.first().map(|a| shown(a)).unwrap_or_default();
    let spawn_err = |source| LaunchError::Spawn {
        cmd: cmd.clone(),
        source,
    };
    let c_path = cstring(path.as_os_str())?;
    let c_args = argv
        .iter()
        .map(|a| cstring(a))
        .collect::<Result<Vec<_>, _>>()?;
    let mut c_argv: Vec<*const libc::c_char> = c_args.iter().map(|a| a.as_ptr()).collect();
    c_argv.push(std::ptr::null());
    let (hold_r, hold_w) = pipe().map_err(spawn_err)?;
    let (err_r, err_w) = pipe().map_err(spawn_err)?;
    let (ran_r, ran_w) = pipe().map_err(spawn_err)?;

    // SAFETY: the caller guarantees a single thread; the child only makes async-signal-safe
    // calls on memory prepared before the fork.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(spawn_err(io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: as above; the child never returns.
        unsafe {
            if let Some(prog) = own_pid {
                // Before the credentials change: running a BPF program needs spacetime's.
                let st = crate::kernel::loader::run_own_pid(prog).to_ne_bytes();
                libc::write(ran_w.as_raw_fd(), st.as_ptr().cast(), st.len());
            }
            // dup2 clears close-on-exec on the copy: the stream stays open in CMD.
            for (fd, to) in [(stdio.stdin, 0), (stdio.stdout, 1), (stdio.stderr, 2)] {
                if fd.is_some_and(|fd| libc::dup2(fd, to) != to) {
                    libc::_exit(125);
                }
            }
            child(
                hold_r.as_raw_fd(),
                err_w.as_raw_fd(),
                &c_path,
                &c_argv,
                creds,
            )
        }
    }
    drop(hold_r);
    drop(err_w);
    drop(ran_w);
    let own_pid_run = own_pid.map(|_| match read_i32(&ran_r) {
        Some(st) => st,
        // The child died before reporting.
        None => libc::ESRCH,
    });
    Ok(Held {
        pid,
        own_pid_run,
        release: hold_w,
        exec_error: err_r,
        cmd,
    })
}

/// Reads one native-endian i32 from `fd`; None at end of file or on an error.
fn read_i32(fd: &OwnedFd) -> Option<i32> {
    let (buf, got) = read_4(fd);
    (got == 4).then(|| i32::from_ne_bytes(buf))
}

/// Up to 4 bytes from a pipe, until end of file or an error: the bytes and how many came.
fn read_4(fd: &OwnedFd) -> ([u8; 4], usize) {
    let mut buf = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match rustix::io::read(fd, &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => break,
        }
    }
    (buf, got)
}

/// The child side: restore signals, become the target user, wait for release, exec.
///
/// # Safety
///
/// Called only in the child of a `fork` of a multi-threaded process, before it execs or
/// exits: it must do async-signal-safe work only (raw libc calls on memory allocated before
/// the fork; no allocation, no lock, no panic). `hold` and `err` are open pipe ends of the
/// parent's, `path` and `argv` (null-terminated) stay alive until the exec, as they were
/// allocated before the fork and the child never frees them.
unsafe fn child(
    hold: libc::c_int,
    err: libc::c_int,
    path: &CString,
    argv: &[*const libc::c_char],
    creds: Option<&Credentials>,
) -> ! {
    let fail = |errno: i32, status: i32| -> ! {
        let bytes = errno.to_ne_bytes();
        libc::write(err, bytes.as_ptr().cast(), bytes.len());
        libc::_exit(status)
    };
    // Signals blocked or ignored by spacetime must not leak into CMD (exec keeps both).
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    if let Some(c) = creds {
        if libc::setgroups(c.groups.len(), c.groups.as_ptr()) != 0
            || libc::setgid(c.gid) != 0
            || libc::setuid(c.uid) != 0
        {
            fail(*libc::__errno_location(), 125);
        }
    }
    let mut b = 0u8;
    loop {
        let n = libc::read(hold, (&mut b as *mut u8).cast(), 1);
        if n == 1 {
            break;
        }
        if n < 0 && *libc::__errno_location() == libc::EINTR {
            continue;
        }
        // spacetime went away before releasing us.
        libc::_exit(125);
    }
    libc::execv(path.as_ptr(), argv.as_ptr());
    let errno = *libc::__errno_location();
    fail(errno, if errno == libc::ENOENT { 127 } else { 126 })
}

impl Held {
    /// What the kernel side needs of it to track it.
    pub fn child(&self) -> crate::kernel::source::HeldChild {
        crate::kernel::source::HeldChild {
            pid: self.pid,
            own_pid_run: self.own_pid_run,
        }
    }

    /// Lets the child exec. Returns once the exec succeeded, or the reason it failed (the child
    /// has then exited with 126/127 and is left for the caller to reap).
    pub fn release(self) -> Result<libc::pid_t, LaunchError> {
        let b = [1u8];
        let wrote = match rustix::io::write(&self.release, &b) {
            Ok(1) => Ok(()),
            Ok(_) => Err(io::ErrorKind::WriteZero.into()),
            Err(e) => Err(io::Error::from(e)),
        };
        if let Err(source) = wrote {
            return Err(LaunchError::Spawn {
                cmd: self.cmd,
                source,
            });
        }
        drop(self.release);
        let (buf, got) = read_4(&self.exec_error);
        if got == 0 {
            return Ok(self.pid); // CLOEXEC closed the pipe: the exec succeeded.
        }
        let errno = i32::from_ne_bytes(buf);
        Err(match errno {
            libc::ENOENT => LaunchError::NotFound(self.cmd),
            libc::EACCES => LaunchError::NotExecutable(self.cmd),
            _ => LaunchError::Exec {
                cmd: self.cmd,
                source: io::Error::from_raw_os_error(errno),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_follows_execvp_rules() {
        assert!(resolve(OsStr::new("sh")).expect("sh in PATH").is_absolute());
        assert!(matches!(
            resolve(OsStr::new("/nonexistent/x")),
            Err(LaunchError::NotFound(_))
        ));
        assert!(matches!(
            resolve(OsStr::new("no-such-command-xyz")),
            Err(LaunchError::NotFound(_))
        ));
        assert!(matches!(
            resolve(OsStr::new("/etc/passwd")),
            Err(LaunchError::NotExecutable(_))
        ));
        assert!(matches!(
            resolve(OsStr::new("/etc")),
            Err(LaunchError::NotExecutable(_))
        ));
        assert_eq!(LaunchError::NotFound("x".into()).exit_code(), 127);
        assert_eq!(LaunchError::NotExecutable("x".into()).exit_code(), 126);
    }
}
