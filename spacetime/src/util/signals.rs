//! Signals: their names, and delivery as readable events rather than handlers.

use std::{
    io,
    os::fd::{FromRawFd, OwnedFd},
};

/// Blocks `signals` and returns a signalfd that reports them. Call before any thread exists,
/// so every thread inherits the mask; a child must unblock them before exec.
pub fn signal_fd(signals: &[libc::c_int]) -> io::Result<OwnedFd> {
    // SAFETY: sigset manipulation on a local set; signalfd returns a new descriptor we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &s in signals {
            libc::sigaddset(&mut set, s);
        }
        if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
        let fd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

/// Pending signals: (number, sent by a process rather than by the kernel or the terminal).
pub fn read_signals(fd: libc::c_int) -> Vec<(libc::c_int, bool)> {
    let mut out = Vec::new();
    loop {
        // SAFETY: signalfd_siginfo is plain C integers: all-zero is a value.
        let mut info: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
        let size = std::mem::size_of::<libc::signalfd_siginfo>();
        // SAFETY: reads one siginfo into a properly sized buffer.
        let n = unsafe { libc::read(fd, (&mut info as *mut libc::signalfd_siginfo).cast(), size) };
        if n != size as isize {
            return out;
        }
        // SI_USER, SI_QUEUE, SI_TKILL are <= 0; the terminal's signals come as SI_KERNEL and
        // already reached CMD's process group.
        out.push((info.ssi_signo as libc::c_int, info.ssi_code <= 0));
    }
}

/// A signal's name as `kill -l` spells it with its prefix (`SIGKILL`); `SIG64` for one
/// without a name of its own (the real-time range).
pub fn name(sig: i32) -> String {
    const NAMES: [&str; 32] = [
        "0",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match NAMES.get(sig as usize) {
        Some(n) if sig > 0 => n.to_string(),
        _ => format!("SIG{sig}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(super::name(9), "SIGKILL");
        assert_eq!(super::name(5), "SIGTRAP");
        assert_eq!(super::name(31), "SIGSYS");
        assert_eq!(super::name(64), "SIG64");
        assert_eq!(super::name(0), "SIG0");
    }
}
