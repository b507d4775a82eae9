//! Unix `SOCK_SEQPACKET` sockets with libc: message boundaries kept by the kernel, a file
//! descriptor passed alongside a message (SCM_RIGHTS), the peer's credentials (SO_PEERCRED).

use std::{
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd},
    os::unix::ffi::OsStrExt,
    path::Path,
};

use crate::kernel::remote::proto::MAX_MESSAGE;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn sockaddr(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeros is valid.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path {} is too long", path.display()),
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

fn socket(nonblock: bool) -> io::Result<OwnedFd> {
    let flags =
        libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | if nonblock { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain syscall; the result is a new descriptor we own.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, flags, 0) })?;
    // SAFETY: a fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A listening socket at `path` (non-blocking; an old socket file there is replaced).
pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    let fd = socket(true)?;
    let (addr, len) = sockaddr(path)?;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    // SAFETY: a valid address of `len` bytes.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 64) })?;
    Ok(fd)
}

/// A connection to the agent at `path` (blocking).
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = socket(false)?;
    let (addr, len) = sockaddr(path)?;
    // SAFETY: a valid address of `len` bytes.
    cvt(unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    })?;
    Ok(fd)
}

/// The next waiting connection, non-blocking (None when none waits).
pub fn accept(listener: RawFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: plain syscall; no address wanted.
    let fd = unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            _ => match e.raw_os_error() {
                // The peer left before we took the connection.
                Some(libc::ECONNABORTED) | Some(libc::EPROTO) => Ok(None),
                _ => Err(e),
            },
        };
    }
    // SAFETY: a fresh descriptor.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// The peer's pid, uid and gid as the kernel recorded them at connect (pid in our namespace).
pub fn peer_cred(fd: RawFd) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid buffer of `len` bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(cred)
}

/// Sets the send buffer (with the privileged option first: the agent is root).
pub fn set_sndbuf(fd: RawFd, bytes: usize) {
    let v = bytes as libc::c_int;
    for opt in [libc::SO_SNDBUFFORCE, libc::SO_SNDBUF] {
        // SAFETY: a valid int option.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return;
        }
    }
}

/// Sends one message, with `pass` as SCM_RIGHTS. WouldBlock on a full non-blocking socket.
pub fn send(fd: RawFd, msg: &[u8], pass: Option<RawFd>) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // u64 elements keep the control buffer aligned for cmsghdr.
    let mut cbuf = [0u64; 4];
    // SAFETY: msghdr is plain data; all zeros is valid.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if let Some(pass) = pass {
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
        hdr.msg_control = cbuf.as_mut_ptr().cast();
        hdr.msg_controllen = space as _;
        // SAFETY: the control buffer holds one cmsghdr with one fd (space <= 32 bytes).
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&hdr);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), pass);
        }
    }
    loop {
        // SAFETY: hdr points at live buffers.
        let n = unsafe { libc::sendmsg(fd, &hdr, libc::MSG_NOSIGNAL) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
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
/// of the connection. WouldBlock when none waits (non-blocking socket or MSG_DONTWAIT).
pub fn recv(fd: RawFd, buf: &mut [u8], flags: libc::c_int) -> io::Result<Received> {
    debug_assert!(buf.len() > MAX_MESSAGE);
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data; all zeros is valid.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = cbuf.as_mut_ptr().cast();
    hdr.msg_controllen = std::mem::size_of_val(&cbuf) as _;
    let n = loop {
        // SAFETY: hdr points at live buffers; descriptors received are closed on exec.
        let n = unsafe { libc::recvmsg(fd, &mut hdr, libc::MSG_CMSG_CLOEXEC | flags) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    };
    let mut passed = None;
    // SAFETY: walking the control messages the kernel wrote within msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let bytes = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    let raw = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    let owned = OwnedFd::from_raw_fd(raw);
                    if passed.is_none() {
                        passed = Some(owned);
                    }
                }
            }
            c = libc::CMSG_NXTHDR(&hdr, c);
        }
    }
    Ok(Received {
        len: n,
        fd: passed,
        truncated: hdr.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0,
    })
}
