//! A minimal generic-netlink socket: build and parse `nlmsghdr` / `genlmsghdr` / `nlattr`.
//!
//! Everything is in host byte order (netlink is), every header and attribute is padded to
//! 4 bytes (`NLMSG_ALIGN`, `NLA_ALIGN`). The parsers never index out of bounds: a header that
//! claims more bytes than the buffer holds, or fewer than the header itself, ends the walk
//! with [`Malformed`] (so a zero length can never loop forever).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use bytes::{BufMut, BytesMut};

pub(crate) const NLMSG_HDRLEN: usize = 16;
pub(crate) const GENL_HDRLEN: usize = 4;
pub(crate) const NLA_HDRLEN: usize = 4;

pub(crate) const NLMSG_ERROR: u16 = 2;
/// Types below this are netlink control messages (NOOP, ERROR, DONE, OVERRUN), not family
/// messages.
pub(crate) const NLMSG_MIN_TYPE: u16 = 0x10;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;

/// `nla_type` carries two flag bits on top of the type.
const NLA_TYPE_MASK: u16 = !(0x8000 | 0x4000);

pub(crate) const GENL_ID_CTRL: u16 = 0x10;
pub(crate) const CTRL_CMD_NEWFAMILY: u8 = 1;
pub(crate) const CTRL_CMD_GETFAMILY: u8 = 3;
pub(crate) const CTRL_ATTR_FAMILY_ID: u16 = 1;
pub(crate) const CTRL_ATTR_FAMILY_NAME: u16 = 2;

pub(crate) const fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Why a netlink buffer could not be walked further.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Malformed(pub &'static str);

pub(crate) fn ne_u16(b: &[u8], off: usize) -> Option<u16> {
    let s = b.get(off..off.checked_add(2)?)?;
    Some(u16::from_ne_bytes(s.try_into().ok()?))
}

pub(crate) fn ne_u32(b: &[u8], off: usize) -> Option<u32> {
    let s = b.get(off..off.checked_add(4)?)?;
    Some(u32::from_ne_bytes(s.try_into().ok()?))
}

pub(crate) fn ne_u64(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    Some(u64::from_ne_bytes(s.try_into().ok()?))
}

/// One netlink message: its header fields and the payload after the 16-byte header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NlMsg<'a> {
    pub ty: u16,
    pub seq: u32,
    pub payload: &'a [u8],
}

/// Walks the netlink messages of one datagram.
pub(crate) struct NlMsgIter<'a> {
    rest: &'a [u8],
}

impl<'a> NlMsgIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { rest: buf }
    }
}

impl<'a> Iterator for NlMsgIter<'a> {
    type Item = Result<NlMsg<'a>, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let buf = std::mem::take(&mut self.rest);
        if buf.len() < NLMSG_HDRLEN {
            return Some(Err(Malformed(
                "trailing bytes shorter than a netlink header",
            )));
        }
        let (Some(len), Some(ty), Some(seq)) = (ne_u32(buf, 0), ne_u16(buf, 4), ne_u32(buf, 8))
        else {
            return Some(Err(Malformed("netlink header unreadable")));
        };
        let len = len as usize;
        if len < NLMSG_HDRLEN {
            return Some(Err(Malformed("nlmsg_len smaller than the netlink header")));
        }
        if len > buf.len() {
            return Some(Err(Malformed("nlmsg_len beyond the end of the datagram")));
        }
        let payload = &buf[NLMSG_HDRLEN..len];
        // The last message may omit its padding.
        self.rest = buf.get(align4(len)..).unwrap_or(&[]);
        Some(Ok(NlMsg { ty, seq, payload }))
    }
}

/// One attribute: its type with the NESTED / NET_BYTEORDER flag bits removed, and its payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NlAttr<'a> {
    pub ty: u16,
    pub payload: &'a [u8],
}

/// Walks a run of attributes (a genetlink payload after its header, or a nested attribute).
pub(crate) struct NlAttrIter<'a> {
    rest: &'a [u8],
}

impl<'a> NlAttrIter<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { rest: buf }
    }
}

impl<'a> Iterator for NlAttrIter<'a> {
    type Item = Result<NlAttr<'a>, Malformed>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let buf = std::mem::take(&mut self.rest);
        let (Some(len), Some(ty)) = (ne_u16(buf, 0), ne_u16(buf, 2)) else {
            return Some(Err(Malformed(
                "trailing bytes shorter than an attribute header",
            )));
        };
        let len = len as usize;
        if len < NLA_HDRLEN {
            return Some(Err(Malformed("nla_len smaller than the attribute header")));
        }
        if len > buf.len() {
            return Some(Err(Malformed("nla_len beyond the end of its container")));
        }
        let payload = &buf[NLA_HDRLEN..len];
        self.rest = buf.get(align4(len)..).unwrap_or(&[]);
        Some(Ok(NlAttr {
            ty: ty & NLA_TYPE_MASK,
            payload,
        }))
    }
}

/// Builds one generic netlink request: nlmsghdr + genlmsghdr + attributes.
pub(crate) fn genl_request(
    family: u16,
    flags: u16,
    seq: u32,
    cmd: u8,
    version: u8,
    attrs: &[(u16, &[u8])],
) -> BytesMut {
    let attrs_len: usize = attrs
        .iter()
        .map(|(_, d)| align4(NLA_HDRLEN + d.len()))
        .sum();
    let mut b = BytesMut::with_capacity(NLMSG_HDRLEN + GENL_HDRLEN + attrs_len);
    b.put_u32_ne(0); // nlmsg_len, patched below
    b.put_u16_ne(family);
    b.put_u16_ne(flags);
    b.put_u32_ne(seq);
    b.put_u32_ne(0); // nlmsg_pid: the kernel
    b.put_u8(cmd);
    b.put_u8(version);
    b.put_u16_ne(0);
    for (ty, data) in attrs {
        let len = NLA_HDRLEN + data.len();
        b.put_u16_ne(len as u16);
        b.put_u16_ne(*ty);
        b.put_slice(data);
        b.put_bytes(0, align4(len) - len);
    }
    let total = b.len() as u32;
    b[0..4].copy_from_slice(&total.to_ne_bytes());
    b
}

/// A `NETLINK_GENERIC` socket, non-blocking and close-on-exec.
#[derive(Debug)]
pub(crate) struct NetlinkSocket {
    fd: OwnedFd,
}

impl NetlinkSocket {
    pub fn open() -> io::Result<Self> {
        use rustix::net::{netlink, AddressFamily, SocketFlags, SocketType};
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            Some(netlink::GENERIC),
        )?;
        // Port id 0: the kernel picks ours.
        rustix::net::bind(&fd, &netlink::SocketAddrNetlink::new(0, 0))?;
        Ok(Self { fd })
    }

    /// Sends one datagram to the kernel (port id 0).
    pub fn send(&self, msg: &[u8]) -> io::Result<()> {
        let kernel = rustix::net::netlink::SocketAddrNetlink::new(0, 0);
        loop {
            match rustix::net::sendto(&self.fd, msg, rustix::net::SendFlags::empty(), &kernel) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Receives up to `lens.len()` datagrams in one call (recvmmsg) without blocking:
    /// datagram `i` lands in `buf[i * slot..][..slot]` and its *real* length (`MSG_TRUNC`) in
    /// `lens[i]`, larger than `slot` when it was truncated. Returns how many arrived.
    pub fn recv_batch(&self, buf: &mut [u8], slot: usize, lens: &mut [usize]) -> io::Result<usize> {
        const MAX: usize = 64;
        let n = lens.len().min(MAX).min(buf.len() / slot.max(1));
        if n == 0 {
            return Ok(0);
        }
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; MAX];
        // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
        let mut hdrs: [libc::mmsghdr; MAX] = unsafe { std::mem::zeroed() };
        for (i, chunk) in buf.chunks_exact_mut(slot).take(n).enumerate() {
            iov[i] = libc::iovec {
                iov_base: chunk.as_mut_ptr().cast(),
                iov_len: slot,
            };
            hdrs[i].msg_hdr.msg_iov = &mut iov[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        loop {
            // SAFETY: each header points at one iovec over a distinct `slot`-byte part of buf,
            // all alive for the call.
            let r = unsafe {
                libc::recvmmsg(
                    self.fd.as_raw_fd(),
                    hdrs.as_mut_ptr(),
                    n as libc::c_uint,
                    (libc::MSG_DONTWAIT | libc::MSG_TRUNC) as _,
                    std::ptr::null_mut(),
                )
            };
            if r >= 0 {
                let r = r as usize;
                for (len, h) in lens.iter_mut().zip(&hdrs[..r]) {
                    *len = h.msg_len as usize;
                }
                return Ok(r);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Receives one datagram without blocking. Returns the datagram's *real* length
    /// (`MSG_TRUNC`): larger than `buf.len()` means it was truncated.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        use rustix::net::RecvFlags;
        loop {
            match rustix::net::recv(&self.fd, &mut *buf, RecvFlags::DONTWAIT | RecvFlags::TRUNC) {
                Ok((_, real)) => return Ok(real),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Waits (blocking the thread) until readable or `deadline`; `false` on timeout.
    pub fn wait_readable(&self, deadline: Instant) -> io::Result<bool> {
        use rustix::event::{PollFd, PollFlags, Timespec};
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left == Duration::ZERO {
                return Ok(false);
            }
            // At least 1 ms, as the loop always waited: a zero timeout would spin.
            let left = left.max(Duration::from_millis(1));
            let timeout = Timespec {
                tv_sec: left.as_secs() as _,
                tv_nsec: left.subsec_nanos() as _,
            };
            let mut pfd = [PollFd::new(&self.fd, PollFlags::IN)];
            match rustix::event::poll(&mut pfd, Some(&timeout)) {
                Ok(n) if n > 0 => return Ok(true),
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// `SO_RCVBUFFORCE` (needs CAP_NET_ADMIN, ignores `net.core.rmem_max`) or `SO_RCVBUF`.
    pub fn set_rcvbuf(&self, bytes: usize, force: bool) -> io::Result<()> {
        use rustix::net::sockopt;
        // The kernel doubles the value and caps it at INT_MAX.
        let val = bytes.min(i32::MAX as usize / 2);
        if force {
            sockopt::set_socket_recv_buffer_size_force(&self.fd, val)?;
        } else {
            sockopt::set_socket_recv_buffer_size(&self.fd, val)?;
        }
        Ok(())
    }

    /// The receive buffer the kernel actually granted (`SO_RCVBUF`, already doubled).
    pub fn rcvbuf(&self) -> io::Result<usize> {
        Ok(rustix::net::sockopt::socket_recv_buffer_size(&self.fd)?)
    }
}

impl AsRawFd for NetlinkSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for NetlinkSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn taskstats_netlink_request_layout() {
        let m = genl_request(0x1c, NLM_F_REQUEST | NLM_F_ACK, 7, 1, 1, &[(3, b"0-1\0")]);
        // 16 header + 4 genl + 4 nla header + 4 data
        assert_eq!(m.len(), 28);
        assert_eq!(ne_u32(&m, 0), Some(28));
        assert_eq!(ne_u16(&m, 4), Some(0x1c));
        assert_eq!(ne_u16(&m, 6), Some(NLM_F_REQUEST | NLM_F_ACK));
        assert_eq!(ne_u32(&m, 8), Some(7));
        assert_eq!(&m[16..20], &[1, 1, 0, 0]);
        assert_eq!(ne_u16(&m, 20), Some(8));
        assert_eq!(ne_u16(&m, 22), Some(3));
        // odd-sized attribute gets zero padding
        let m = genl_request(0x10, NLM_F_REQUEST, 1, 3, 1, &[(2, b"TASKSTATS\0")]);
        assert_eq!(m.len(), 16 + 4 + 4 + 12);
        assert_eq!(&m[34..36], &[0, 0]);
        let msgs: Vec<_> = NlMsgIter::new(&m).collect();
        assert_eq!(msgs.len(), 1);
        let msg = msgs[0].unwrap();
        let attrs: Vec<_> = NlAttrIter::new(&msg.payload[GENL_HDRLEN..]).collect();
        assert_eq!(attrs.len(), 1);
        assert_eq!(attrs[0].unwrap().payload, b"TASKSTATS\0");
    }

    #[test]
    fn taskstats_netlink_iterators_stop_on_bad_lengths() {
        // nla_len 0 must not loop.
        let buf = [0u8, 0, 1, 0, 0, 0, 0, 0];
        let v: Vec<_> = NlAttrIter::new(&buf).collect();
        assert_eq!(v.len(), 1);
        assert!(v[0].is_err());
        // nlmsg_len beyond the buffer
        let mut m = genl_request(0x1c, 0, 1, 2, 1, &[]).to_vec();
        m[0] = 200;
        let v: Vec<_> = NlMsgIter::new(&m).collect();
        assert_eq!(v.len(), 1);
        assert!(v[0].is_err());
        // nlmsg_len 0
        let v: Vec<_> = NlMsgIter::new(&[0u8; 16]).collect();
        assert!(v[0].is_err());
    }
}
