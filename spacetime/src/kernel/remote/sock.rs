//! Unix `SOCK_SEQPACKET` sockets, through rustix: message boundaries kept by the kernel, a
//! file descriptor passed alongside a message (SCM_RIGHTS), the peer's credentials
//! (SO_PEERCRED).

use std::{
    io,
    mem::MaybeUninit,
    os::fd::{BorrowedFd, OwnedFd},
    path::Path,
};

use rustix::net::{
    self, AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use super::proto::MAX_MESSAGE;

fn address(path: &Path) -> io::Result<SocketAddrUnix> {
    SocketAddrUnix::new(path).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {}: {e}", path.display()),
        )
    })
}

fn socket(nonblock: bool) -> io::Result<OwnedFd> {
    let flags = match nonblock {
        true => SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        false => SocketFlags::CLOEXEC,
    };
    Ok(net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        flags,
        None,
    )?)
}

/// A non-blocking listening socket bound at `path`, which must not exist. Where its file is
/// created and with what mode is the caller's (`agent::listen`).
pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    let fd = socket(true)?;
    net::bind(&fd, &address(path)?)?;
    net::listen(&fd, 64)?;
    Ok(fd)
}

/// A connection to the agent at `path` (blocking).
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = socket(false)?;
    net::connect(&fd, &address(path)?)?;
    Ok(fd)
}

/// The next waiting connection, non-blocking (None when none waits or the peer left
/// before it was taken).
pub fn accept(listener: BorrowedFd<'_>) -> io::Result<Option<OwnedFd>> {
    match net::accept_with(listener, SocketFlags::NONBLOCK | SocketFlags::CLOEXEC) {
        Ok(fd) => Ok(Some(fd)),
        Err(e)
            if e == rustix::io::Errno::AGAIN
                || e == rustix::io::Errno::INTR
                || e == rustix::io::Errno::CONNABORTED
                || e == rustix::io::Errno::PROTO =>
        {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// The peer's credentials as the kernel recorded them at connect: its pid (in our
/// namespace), effective uid and gid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

pub fn peer_cred(fd: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let c = net::sockopt::socket_peercred(fd)?;
    Ok(PeerCred {
        pid: c.pid.as_raw_nonzero().get() as u32,
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
    })
}

/// Sets the send buffer (with the privileged option first: the agent is root).
pub fn set_sndbuf(fd: BorrowedFd<'_>, bytes: usize) {
    if net::sockopt::set_socket_send_buffer_size_force(fd, bytes).is_err() {
        let _ = net::sockopt::set_socket_send_buffer_size(fd, bytes);
    }
}

/// Sends one message, with `pass` as SCM_RIGHTS. WouldBlock on a full non-blocking socket.
pub fn send(fd: BorrowedFd<'_>, msg: &[u8], pass: Option<BorrowedFd<'_>>) -> io::Result<()> {
    let iov = [io::IoSlice::new(msg)];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    let passed;
    if let Some(p) = pass {
        passed = [p];
        control.push(SendAncillaryMessage::ScmRights(&passed));
    }
    loop {
        match net::sendmsg(fd, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Most messages [`send_many`] sends in one call.
pub const SEND_BATCH: usize = 8;

/// Sends the first [`SEND_BATCH`] of `msgs` in one call, each its own message, in order;
/// returns how many went. WouldBlock when the socket takes none now. One call, not one per
/// message: a reader waiting on the socket is woken once, and on the same CPU it runs once
/// all are there rather than between each (three switches at every run's end, 0.1 ms).
pub fn send_many(fd: BorrowedFd<'_>, msgs: &[&[u8]]) -> io::Result<usize> {
    let n = msgs.len().min(SEND_BATCH);
    if n == 0 {
        return Ok(0);
    }
    let iovs: [[io::IoSlice<'_>; 1]; SEND_BATCH] =
        std::array::from_fn(|i| [io::IoSlice::new(msgs.get(i).copied().unwrap_or_default())]);
    let mut controls: [SendAncillaryBuffer<'_, '_, '_>; SEND_BATCH] =
        std::array::from_fn(|_| SendAncillaryBuffer::default());
    let mut hdrs: Vec<net::MMsgHdr<'_>> = iovs
        .iter()
        .zip(controls.iter_mut())
        .take(n)
        .map(|(iov, control)| net::MMsgHdr::new(iov, control))
        .collect();
    loop {
        match net::sendmmsg(fd, &mut hdrs, SendFlags::NOSIGNAL) {
            Ok(sent) => return Ok(sent),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// One received message.
pub struct Received {
    pub len: usize,
    /// A descriptor passed with it (only the first is kept; others are closed).
    pub fd: Option<OwnedFd>,
    /// The message was longer than the buffer (cut): a protocol violation.
    pub truncated: bool,
}

/// Receives one message into `buf` (at least [`MAX_MESSAGE`] + 1 bytes). `len` 0 is the end
/// of the connection. WouldBlock when none waits (non-blocking socket, or `wait` false).
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], wait: bool) -> io::Result<Received> {
    debug_assert!(buf.len() > MAX_MESSAGE);
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut flags = RecvFlags::CMSG_CLOEXEC;
    if !wait {
        flags |= RecvFlags::DONTWAIT;
    }
    let r = loop {
        let mut iov = [io::IoSliceMut::new(buf)];
        match net::recvmsg(fd, &mut iov, &mut control, flags) {
            Ok(r) => break r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    };
    let mut passed = None;
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(fds) = m {
            // Descriptors beyond the first are dropped: closed.
            for owned in fds {
                passed.get_or_insert(owned);
            }
        }
    }
    Ok(Received {
        len: r.bytes,
        fd: passed,
        truncated: r.flags.intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC),
    })
}

/// Waits up to `timeout_ms` for `fd` to be readable.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout_ms: i32) {
    let mut pfd = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::event::Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    };
    let _ = rustix::event::poll(&mut pfd, Some(&timeout));
}

/// Either end of a connected pair (tests).
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(net::socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
        None,
    )?)
}
