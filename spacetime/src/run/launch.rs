//! Starting the traced command.
//!
//! The child is started (sharing spacetime's memory until it execs) and held on a pipe until
//! its pid is tracked by the kernel programs, then released to exec CMD, so its first exec is
//! seen. Started through sudo, CMD runs as the
//! invoking user so a traced build leaves no root-owned files.

use std::{
    ffi::{CString, OsStr, OsString},
    io,
    os::{
        fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd},
        unix::{ffi::OsStrExt, fs::PermissionsExt},
    },
    path::{Path, PathBuf},
    ptr::NonNull,
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
}

impl LaunchError {
    /// The conventional status: 127 when CMD does not exist, 126 when it cannot run.
    pub fn exit_code(&self) -> i32 {
        match self {
            LaunchError::NotFound(_) => 127,
            LaunchError::Exec { source, .. } if source.raw_os_error() == Some(libc::ENOENT) => 127,
            LaunchError::Spawn { .. } => 125,
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
pub fn sudo_credentials() -> Option<Credentials> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let num = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u32>().ok());
    let uid = num("SUDO_UID")?;
    if uid == 0 {
        return None;
    }
    let gid = num("SUDO_GID").unwrap_or(uid);
    let groups = match std::env::var("SUDO_USER") {
        Ok(user) if !user.is_empty() => crate::util::nss::groups_of(&user, gid),
        _ => vec![gid],
    };
    Some(Credentials { uid, gid, groups })
}

/// A child waiting for [`Held::release`] before it execs CMD.
pub struct Held {
    /// As spacetime's PID namespace numbers it (what `clone` returned).
    pub pid: libc::pid_t,
    /// The child ran the program that records its kernel pid: 0, or the errno that failed
    /// (None when no program was given).
    pub own_pid_run: Option<i32>,
    // Closed before `memory` is dropped (fields drop in this order): a child never released
    // reads the end of the pipe and exits, and `memory` waits for that.
    release: OwnedFd,
    exec_error: OwnedFd,
    cmd: String,
    memory: ChildMemory,
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

/// What the child reads of ours until it execs or exits, at a fixed address (boxed): the
/// child shares our memory, so none of it may move or be freed meanwhile.
struct ChildArgs {
    path: CString,
    /// Owns what `argv` points into.
    _args: Vec<CString>,
    /// Null-terminated.
    argv: Vec<*const libc::c_char>,
    creds: Option<ChildCreds>,
    own_pid: Option<RawFd>,
    stdio: Stdio,
    /// The child's ends: the hold pipe's read end and our write end of it (the child closes
    /// its copy, so that our closing it ends the child's wait), the exec error and the
    /// own-pid report write ends.
    hold: RawFd,
    release: RawFd,
    exec_error: RawFd,
    ran: RawFd,
}

/// The credentials CMD takes, as the system calls want them.
struct ChildCreds {
    uid: rustix::process::Uid,
    gid: rustix::process::Gid,
    groups: Vec<rustix::process::Gid>,
}

impl ChildCreds {
    fn of(c: &Credentials) -> ChildCreds {
        use rustix::process::{Gid, Uid};
        ChildCreds {
            uid: Uid::from_raw(c.uid),
            gid: Gid::from_raw(c.gid),
            groups: c.groups.iter().map(|&g| Gid::from_raw(g)).collect(),
        }
    }
}

/// The child's own stack, and what it reads of ours, kept until it no longer runs on our
/// memory: it exec'd (a new address space of its own), or it is gone.
struct ChildMemory {
    /// Read by the child alone.
    _args: Box<ChildArgs>,
    stack: NonNull<libc::c_void>,
    stack_len: usize,
    pidfd: OwnedFd,
    /// Cleared once the child exec'd: from then on it does not touch our memory.
    in_use: bool,
}

/// The child's stack: what `child` and an exec need, with room to spare, above a guard page.
const CHILD_STACK: usize = 128 << 10;

impl Drop for ChildMemory {
    fn drop(&mut self) {
        if self.in_use {
            // Until it is gone (not reaped: whoever waits for it still can; gone already
            // when reaped). Closing the release pipe before this ends its wait.
            let _ = rustix::process::waitid(
                rustix::process::WaitId::PidFd(self.pidfd.as_fd()),
                rustix::process::WaitIdOptions::EXITED | rustix::process::WaitIdOptions::NOWAIT,
            );
        }
        // SAFETY: the mapping made for the stack, unused now.
        unsafe {
            let _ = rustix::mm::munmap(self.stack.as_ptr(), self.stack_len);
        }
    }
}

/// Starts a child that waits on a pipe, then execs `path` with `argv` as `creds`. With
/// `own_pid` (see [`crate::kernel::loader::run_own_pid`]) the child first runs that program, so the
/// kernel records its kernel pid: inside a PID namespace `clone` only gives the namespace's.
/// `stdio` says where its standard streams go.
///
/// The child shares spacetime's memory (`CLONE_VM`, as `posix_spawn` does) on a stack of its
/// own until it execs: no page table is copied and no page of spacetime's becomes
/// copy-on-write (a fork cost a traced /bin/true 0.1 ms: the copy, then a fault on each page
/// either side wrote first, and the exec tearing the copy down). Unlike `posix_spawn`'s, the
/// child waits for its release while spacetime goes on; what it does meanwhile is in `child`.
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
    let args = Box::new(ChildArgs {
        path: c_path,
        _args: c_args,
        argv: c_argv,
        creds: creds.map(ChildCreds::of),
        own_pid,
        stdio,
        hold: hold_r.as_raw_fd(),
        release: hold_w.as_raw_fd(),
        exec_error: err_w.as_raw_fd(),
        ran: ran_w.as_raw_fd(),
    });
    let (stack, stack_len) = child_stack().map_err(spawn_err)?;
    let mut pidfd: libc::c_int = -1;
    // SAFETY: the child runs `held_child` on its own stack (top of the mapping, 16-aligned)
    // with `args`, both kept by `ChildMemory` until it exec'd or is gone; CLONE_PIDFD stores
    // its pidfd in `pidfd`. Without CLONE_FILES the child gets its own copy of our
    // descriptors, as after a fork.
    let pid = unsafe {
        libc::clone(
            held_child,
            stack.as_ptr().cast::<u8>().add(stack_len).cast(),
            libc::CLONE_VM | libc::CLONE_PIDFD | libc::SIGCHLD,
            (&*args as *const ChildArgs).cast_mut().cast(),
            &mut pidfd as *mut libc::c_int,
        )
    };
    if pid < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: the mapping made above; no child uses it.
        unsafe {
            let _ = rustix::mm::munmap(stack.as_ptr(), stack_len);
        }
        return Err(spawn_err(e));
    }
    // SAFETY: CLONE_PIDFD gave a new descriptor, ours alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    let memory = ChildMemory {
        _args: args,
        stack,
        stack_len,
        pidfd,
        in_use: true,
    };
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
        memory,
    })
}

/// A stack for the child: [`CHILD_STACK`] bytes above a page it cannot touch.
fn child_stack() -> io::Result<(NonNull<libc::c_void>, usize)> {
    use rustix::mm::{mmap_anonymous, mprotect, MapFlags, MprotectFlags, ProtFlags};
    let guard = rustix::param::page_size();
    let len = CHILD_STACK + guard;
    // SAFETY: a new private mapping, ours.
    let p = unsafe {
        mmap_anonymous(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::PRIVATE | MapFlags::STACK,
        )?
    };
    // SAFETY: the lowest page of the mapping just made: a stack overflow faults there.
    unsafe { mprotect(p, guard, MprotectFlags::empty())? };
    Ok((NonNull::new(p).ok_or(io::ErrorKind::OutOfMemory)?, len))
}

/// The child's entry, on its own stack.
extern "C" fn held_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent keeps, unmoved, until this child exec'd or
    // is gone; the child only reads it.
    unsafe { child(&*(arg as *const ChildArgs)) }
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

/// The child side: run the own-pid program, point the standard streams, restore signals,
/// become the target user, wait for release, exec.
///
/// # Safety
///
/// Called only in the child `spawn_held_with` starts, which shares the parent's memory and,
/// its thread-local storage included, runs beside it until it execs or exits: it calls only
/// what is async-signal-safe and touches nothing of the parent's but `a` (no allocation, no
/// lock, no panic). glibc's `setuid` and its kin are not used: they signal every thread of
/// the process they think they are in (the parent's, here); rustix's raw system calls change
/// this process alone; its pipe reads and writes, rustix's too, write no errno. errno, which
/// it shares with the parent's thread, glibc writes only where its call fails: a `dup2` of
/// descriptors the caller keeps open does not, and an exec fails while the parent waits on a
/// pipe for the child's report.
unsafe fn child(a: &ChildArgs) -> ! {
    use rustix::io::{read, write, Errno};
    // The descriptors of `a` are this child's own copies, open until it execs or exits.
    let fd = |raw| BorrowedFd::borrow_raw(raw);
    let fail = |errno: i32, status: i32| -> ! {
        let _ = write(fd(a.exec_error), &errno.to_ne_bytes());
        libc::_exit(status)
    };
    // Our copy of the parent's end: only the parent's closing it may end the wait below.
    rustix::io::close(a.release);
    if let Some(prog) = a.own_pid {
        // Before the credentials change: running a BPF program needs spacetime's.
        let st = crate::kernel::loader::run_own_pid(prog).to_ne_bytes();
        let _ = write(fd(a.ran), &st);
    }
    // dup2 clears close-on-exec on the copy: the stream stays open in CMD.
    for (fd, to) in [(a.stdio.stdin, 0), (a.stdio.stdout, 1), (a.stdio.stderr, 2)] {
        if fd.is_some_and(|fd| libc::dup2(fd, to) != to) {
            libc::_exit(125);
        }
    }
    // Signals blocked or ignored by spacetime must not leak into CMD (exec keeps both).
    // spacetime installs no handler (it reads signals from a signalfd): none runs here.
    let mut set: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    if let Some(c) = &a.creds {
        use rustix::thread::{set_thread_gid, set_thread_groups, set_thread_uid};
        let set = set_thread_groups(&c.groups)
            .and_then(|()| set_thread_gid(c.gid))
            .and_then(|()| set_thread_uid(c.uid));
        if let Err(e) = set {
            fail(e.raw_os_error(), 125);
        }
    }
    let mut b = [0u8];
    loop {
        match read(fd(a.hold), &mut b) {
            Ok(1) => break,
            Err(Errno::INTR) => continue,
            // spacetime went away, or let go of us, before releasing us.
            _ => libc::_exit(125),
        }
    }
    libc::execv(a.path.as_ptr(), a.argv.as_ptr());
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
    pub fn release(mut self) -> Result<libc::pid_t, LaunchError> {
        let b = [1u8];
        let wrote = match rustix::io::write(&self.release, &b) {
            Ok(1) => Ok(()),
            Ok(_) => Err(io::ErrorKind::WriteZero.into()),
            Err(e) => Err(io::Error::from(e)),
        };
        if let Err(source) = wrote {
            return Err(LaunchError::Spawn {
                cmd: std::mem::take(&mut self.cmd),
                source,
            });
        }
        let (buf, got) = read_4(&self.exec_error);
        if got == 0 {
            // CLOEXEC closed the pipe: the exec succeeded, and the child runs in an address
            // space of its own.
            self.memory.in_use = false;
            return Ok(self.pid);
        }
        let errno = i32::from_ne_bytes(buf);
        let cmd = std::mem::take(&mut self.cmd);
        Err(match errno {
            libc::ENOENT => LaunchError::NotFound(cmd),
            libc::EACCES => LaunchError::NotExecutable(cmd),
            _ => LaunchError::Exec {
                cmd,
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

    /// Waits for our child `pid` and gives its exit code.
    fn exit_code_of(pid: libc::pid_t) -> Option<i32> {
        let p = rustix::process::Pid::from_raw(pid).expect("a pid");
        let (_, st) = rustix::process::waitpid(Some(p), rustix::process::WaitOptions::empty())
            .expect("waitpid")
            .expect("a status");
        st.exit_status()
    }

    fn held(argv: &[&str]) -> Held {
        let args: Vec<OsString> = argv.iter().map(OsString::from).collect();
        spawn_held(Path::new(argv[0]), &args, None, None).expect("started")
    }

    #[test]
    fn a_released_child_runs_the_command() {
        let h = held(&["/bin/sh", "-c", "exit 7"]);
        let pid = h.release().expect("exec'd");
        assert_eq!(exit_code_of(pid), Some(7));
    }

    /// Let go of without a release, the child ends (its copy of the release pipe's write end
    /// closed, it reads the end) and dropping waits for that before its stack goes.
    #[test]
    fn a_child_never_released_exits_125() {
        let h = held(&["/bin/sh", "-c", "exit 7"]);
        let pid = h.pid;
        drop(h);
        assert_eq!(exit_code_of(pid), Some(125));
    }

    /// An exec that fails after the release says why; the child is left to be reaped.
    #[test]
    fn an_exec_refused_after_the_release_is_said_and_the_child_left_to_reap() {
        let dir = std::env::temp_dir().join(format!("st-launch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let bad = dir.join("not-a-program");
        // An empty executable file (no format the kernel knows: ENOEXEC), made by mknod and
        // never opened: a file written here could still be open for writing in another test's
        // held child, forked meanwhile and not exec'd yet, and its exec would fail with ETXTBSY.
        let mode = rustix::fs::Mode::from_raw_mode(0o755);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &bad,
            rustix::fs::FileType::RegularFile,
            mode,
            0,
        )
        .expect("mknod");
        let h = held(&[bad.to_str().expect("a UTF-8 path")]);
        let pid = h.pid;
        match h.release() {
            Err(LaunchError::Exec { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOEXEC), "{source}")
            }
            other => panic!("expected an exec error, got {other:?}"),
        }
        assert_eq!(exit_code_of(pid), Some(126));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
