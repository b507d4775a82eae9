//! Signals delivered as readable events rather than handlers.

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
