//! A raw client of `spacetime agent`: its protocol (spacetime::kernel::remote::proto) spoken
//! message by message, as an attacker would, with nothing of spacetime's own client in the
//! way. Used by `st-agent-client`, the attack suite's unprivileged client.

use std::collections::HashSet;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use spacetime::kernel::remote::{
    proto::{self, Msg, Welcome},
    sock,
};

/// One connection to the agent.
pub struct Raw {
    pub fd: OwnedFd,
    buf: Vec<u8>,
}

/// What came, or did not.
#[derive(Debug)]
pub enum Got {
    Msg(Msg),
    Timeout,
    Closed,
    Bad(String),
}

/// The agent's answer to a track request.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Tracked(u32),
    Refused(String),
    Gone(String),
}

impl Raw {
    pub fn connect(socket: &Path) -> io::Result<Raw> {
        Ok(Raw {
            fd: sock::connect(socket)?,
            buf: vec![0; proto::MAX_MESSAGE + 1],
        })
    }

    pub fn send(&self, m: &Msg) -> io::Result<()> {
        sock::send(self.fd.as_fd(), &m.encode(), None)
    }

    /// Sends without blocking (WouldBlock when the socket is full).
    pub fn send_nowait(&self, m: &Msg) -> io::Result<()> {
        let bytes = m.encode();
        // SAFETY: a valid buffer of `len` bytes on our own socket.
        let n = unsafe {
            libc::send(
                std::os::fd::AsRawFd::as_raw_fd(&self.fd),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    pub fn send_fd(&self, m: &Msg, fd: BorrowedFd<'_>) -> io::Result<()> {
        sock::send(self.fd.as_fd(), &m.encode(), Some(fd))
    }

    /// The next message, waiting up to `timeout`.
    pub fn recv(&mut self, timeout: Duration) -> Got {
        let deadline = Instant::now() + timeout;
        loop {
            match sock::recv(self.fd.as_fd(), &mut self.buf, false) {
                Ok(r) if r.len == 0 => return Got::Closed,
                Ok(r) => {
                    return match Msg::parse(&self.buf[..r.len]) {
                        Ok(m) => Got::Msg(m),
                        Err(e) => Got::Bad(e.to_string()),
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => return Got::Closed,
                Err(e) => return Got::Bad(e.to_string()),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Got::Timeout;
            }
            sock::wait_readable(self.fd.as_fd(), left.as_millis().min(1000) as i32 + 1);
        }
    }

    /// Says hello asking for `want`; the welcome, or why not.
    pub fn hello(&mut self, want: u8) -> Result<Welcome, String> {
        let hello = Msg::Hello {
            version: proto::VERSION,
            want,
            max_processes: 0,
        };
        self.send(&hello).map_err(|e| format!("hello: {e}"))?;
        match self.recv(Duration::from_secs(60)) {
            Got::Msg(Msg::Welcome(w)) => Ok(w),
            Got::Msg(Msg::Refused { reason, .. }) => {
                Err(format!("refused {}", String::from_utf8_lossy(&reason)))
            }
            other => Err(format!("no welcome: {other:?}")),
        }
    }

    /// Connects and says hello.
    pub fn session(socket: &Path, want: u8) -> Result<(Raw, Welcome), String> {
        let mut r = Raw::connect(socket).map_err(|e| format!("connect: {e}"))?;
        let w = r.hello(want)?;
        Ok((r, w))
    }

    /// Asks the agent to track the process `pidfd` pins; other messages meanwhile go to
    /// `others`.
    pub fn track(&mut self, pidfd: BorrowedFd<'_>, others: &mut Vec<Msg>) -> Answer {
        if let Err(e) = self.send_fd(&Msg::Track, pidfd) {
            return Answer::Gone(format!("track: {e}"));
        }
        loop {
            match self.recv(Duration::from_secs(60)) {
                Got::Msg(Msg::Tracked { kernel_pid, .. }) => return Answer::Tracked(kernel_pid),
                Got::Msg(Msg::Refused { reason, .. }) => {
                    return Answer::Refused(String::from_utf8_lossy(&reason).into_owned())
                }
                Got::Msg(m) => others.push(m),
                other => return Answer::Gone(format!("{other:?}")),
            }
        }
    }

    /// Fetches every record of the session the agent holds now: what came up to Flushed.
    pub fn flush(&mut self, seq: u32) -> Result<Vec<Msg>, String> {
        self.send(&Msg::Flush { seq })
            .map_err(|e| format!("flush: {e}"))?;
        let mut out = Vec::new();
        loop {
            match self.recv(Duration::from_secs(60)) {
                Got::Msg(Msg::Flushed { seq: s }) if s == seq => return Ok(out),
                Got::Msg(m) => out.push(m),
                other => return Err(format!("no Flushed: {other:?}")),
            }
        }
    }
}

/// `pidfd_open(pid, flags)`.
pub fn pidfd_open(pid: i32, flags: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// What a client received that is about a process it did not start (another user's, a
/// stranger on a reused pid): every record header's tgid and every taskstats record's pid
/// must be one of `own`, and every taskstats record's uid `uid`.
pub fn foreign(msgs: &[Msg], own: &HashSet<u32>, uid: u32) -> Vec<String> {
    use spacetime::kernel::events::decode;
    let mut out = Vec::new();
    for m in msgs {
        match m {
            Msg::Records(rs) => {
                for r in rs {
                    match decode(r) {
                        Ok(ev) if !own.contains(&ev.header().tgid) => out.push(format!(
                            "record kind {} of tgid {}",
                            ev.header().kind,
                            ev.header().tgid
                        )),
                        Ok(_) => {}
                        Err(e) => out.push(format!("an undecodable record: {e}")),
                    }
                }
            }
            Msg::Taskstats(ds) => {
                for (pid, ruid) in ds.iter().flat_map(|d| proto::datagram_identities(d)) {
                    if pid != 0 && (!own.contains(&pid) || ruid != uid) {
                        out.push(format!("taskstats of pid {pid} uid {ruid}"));
                    }
                }
            }
            _ => {}
        }
    }
    out
}
