//! Decoding of ring-buffer records into typed events. Every record is length-checked before it
//! is read: a short or unknown record is an error the caller counts, never a panic.

use spacetime_common::{
    flags, kind, CgroupNameEvent, EventHeader, ExitEvent, ForkEvent, ImageEndEvent, ReapEvent,
    RssEvent, TickEvent, ARGS_CHUNK, ARGS_EVENT_FIXED, CGROUP_NAME_DEPTH, EXEC_EVENT_FIXED,
    FILENAME_LEN, TASK_COMM_LEN,
};

/// A decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Fork(ForkEvent),
    Exec(Exec),
    Args(Args),
    ImageEnd(ImageEndEvent),
    Exit(ExitEvent),
    /// A traced process's RSS and the tree-wide sum, in pages.
    Rss(RssEvent),
    /// A process was released: its final CPU figures, as wait4 computes them.
    Reap(ReapEvent),
    /// A cgroup's path from the kernel's names, the first time a process exec'd in it (`watch`).
    CgroupName(CgroupName),
    /// A CPU clock tick found a traced thread running: its cumulative run time.
    Tick(TickEvent),
}

/// A cgroup's path, read in the kernel while the cgroup existed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupName {
    pub hdr: EventHeader,
    pub cgroup_id: u64,
    /// `/a/b/leaf`; `/…/b/leaf` when deeper than the kernel sends; `/` for the root.
    pub path: String,
}

impl Event {
    /// The session of the traced process the record is about (0: standalone, system mode).
    pub fn session(&self) -> u16 {
        self.header().session
    }

    pub fn header(&self) -> &EventHeader {
        match self {
            Event::Fork(e) => &e.hdr,
            Event::Exec(e) => &e.hdr,
            Event::Args(e) => &e.hdr,
            Event::ImageEnd(e) => &e.hdr,
            Event::Exit(e) => &e.hdr,
            Event::Rss(e) => &e.hdr,
            Event::Reap(e) => &e.hdr,
            Event::CgroupName(e) => &e.hdr,
            Event::Tick(e) => &e.hdr,
        }
    }
}

/// A program image starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exec {
    pub hdr: EventHeader,
    pub old_pid: u32,
    /// The real uid and the cgroup of the task that exec'd.
    pub uid: u32,
    pub cgroup_id: u64,
    /// Bytes as the kernel has them: any byte but NUL, not necessarily UTF-8.
    pub comm: Comm,
    pub filename: Vec<u8>,
    /// Total bytes of the argument area; more may follow in [`Args`] records.
    pub args_len: u32,
    /// The first bytes of the argument area.
    pub args: Vec<u8>,
}

/// A continuation of an exec's argument area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    pub hdr: EventHeader,
    pub offset: u32,
    pub data: Vec<u8>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record of {0} bytes is shorter than a header")]
    Short(usize),
    #[error("record kind {kind} needs {need} bytes, got {got}")]
    Truncated { kind: u16, need: usize, got: usize },
    #[error("unknown record kind {0}")]
    UnknownKind(u16),
    #[error("record of kind {kind} claims {claimed} payload bytes but carries {got}")]
    BadLength {
        kind: u16,
        claimed: usize,
        got: usize,
    },
}

/// Reads a `T` from the start of `buf` if it is long enough.
fn read_prefix<T: Copy>(buf: &[u8], kind: u16) -> Result<T, DecodeError> {
    let need = core::mem::size_of::<T>();
    if buf.len() < need {
        return Err(DecodeError::Truncated {
            kind,
            need,
            got: buf.len(),
        });
    }
    // SAFETY: `buf` holds at least size_of::<T>() bytes; T is a plain-old-data record type
    // (every bit pattern valid) and the read is unaligned.
    Ok(unsafe { core::ptr::read_unaligned(buf.as_ptr().cast::<T>()) })
}

/// Bytes up to the first NUL, kept exact (paths are bytes to the kernel, not UTF-8).
fn c_bytes(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

/// A task's comm, held inline (no allocation): up to 15 bytes, not necessarily UTF-8.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Comm {
    len: u8,
    bytes: [u8; TASK_COMM_LEN],
}

impl Comm {
    /// The bytes of a NUL-terminated (or full) comm field.
    pub fn new(field: &[u8]) -> Comm {
        let b = c_bytes(&field[..field.len().min(TASK_COMM_LEN)]);
        let mut c = Comm {
            len: b.len() as u8,
            ..Comm::default()
        };
        c.bytes[..b.len()].copy_from_slice(b);
        c
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl From<&str> for Comm {
    fn from(s: &str) -> Comm {
        Comm::new(s.as_bytes())
    }
}

impl core::fmt::Debug for Comm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// The header every record starts with, alone: what a router needs of an exec record, whose
/// whole decode copies its file name and arguments.
pub fn decode_header(buf: &[u8]) -> Result<EventHeader, DecodeError> {
    read_prefix(buf, 0).map_err(|_| DecodeError::Short(buf.len()))
}

pub fn decode(buf: &[u8]) -> Result<Event, DecodeError> {
    let hdr = decode_header(buf)?;
    match hdr.kind {
        kind::FORK => Ok(Event::Fork(read_prefix(buf, hdr.kind)?)),
        kind::IMAGE_END => Ok(Event::ImageEnd(read_prefix(buf, hdr.kind)?)),
        kind::EXIT => Ok(Event::Exit(read_prefix(buf, hdr.kind)?)),
        kind::RSS => Ok(Event::Rss(read_prefix(buf, hdr.kind)?)),
        kind::REAP => Ok(Event::Reap(read_prefix(buf, hdr.kind)?)),
        kind::TICK => Ok(Event::Tick(read_prefix(buf, hdr.kind)?)),
        kind::EXEC => decode_exec(buf, hdr),
        kind::ARGS => decode_args(buf, hdr),
        kind::CGROUP_NAME => decode_cgroup_name(buf),
        k => Err(DecodeError::UnknownKind(k)),
    }
}

fn decode_cgroup_name(buf: &[u8]) -> Result<Event, DecodeError> {
    let e: CgroupNameEvent = read_prefix(buf, kind::CGROUP_NAME)?;
    let depth = e.depth as usize;
    if depth > CGROUP_NAME_DEPTH {
        return Err(DecodeError::BadLength {
            kind: kind::CGROUP_NAME,
            claimed: depth,
            got: CGROUP_NAME_DEPTH,
        });
    }
    let mut path = String::new();
    if e.flags & flags::CGROUP_NAME_DEEPER != 0 {
        path.push_str("/…");
    }
    for name in e.names[..depth].iter().rev() {
        path.push('/');
        path.push_str(&String::from_utf8_lossy(c_bytes(name)));
    }
    if path.is_empty() {
        path.push('/');
    }
    Ok(Event::CgroupName(CgroupName {
        hdr: e.hdr,
        cgroup_id: e.cgroup_id,
        path,
    }))
}

fn decode_exec(buf: &[u8], hdr: EventHeader) -> Result<Event, DecodeError> {
    if buf.len() < EXEC_EVENT_FIXED {
        return Err(DecodeError::Truncated {
            kind: hdr.kind,
            need: EXEC_EVENT_FIXED,
            got: buf.len(),
        });
    }
    let field =
        |off: usize| u32::from_ne_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]);
    let base = core::mem::size_of::<EventHeader>();
    let old_pid = field(base);
    let args_len = field(base + 4);
    let args_here = field(base + 8) as usize;
    let payload = &buf[EXEC_EVENT_FIXED..];
    if args_here > ARGS_CHUNK || args_here > payload.len() || args_here > args_len as usize {
        return Err(DecodeError::BadLength {
            kind: hdr.kind,
            claimed: args_here,
            got: payload.len(),
        });
    }
    let comm_off = core::mem::offset_of!(spacetime_common::ExecEvent, comm);
    let name_off = core::mem::offset_of!(spacetime_common::ExecEvent, filename);
    let (uid, cgroup_id) = exec_ids(buf);
    Ok(Event::Exec(Exec {
        hdr,
        old_pid,
        uid,
        cgroup_id,
        comm: Comm::new(&buf[comm_off..name_off]),
        filename: c_bytes(&buf[name_off..name_off + FILENAME_LEN]).to_vec(),
        args_len,
        args: payload[..args_here].to_vec(),
    }))
}

/// The uid and cgroup id of an exec record, read at their offsets (the record is at least
/// `EXEC_EVENT_FIXED` long, which covers both).
fn exec_ids(raw: &[u8]) -> (u32, u64) {
    let at = |off: usize, n: usize| raw.get(off..off + n);
    let uid = at(core::mem::offset_of!(spacetime_common::ExecEvent, uid), 4)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u32::from_ne_bytes);
    let cg = at(
        core::mem::offset_of!(spacetime_common::ExecEvent, cgroup_id),
        8,
    )
    .and_then(|b| b.try_into().ok())
    .map_or(0, u64::from_ne_bytes);
    (uid, cg)
}

fn decode_args(buf: &[u8], hdr: EventHeader) -> Result<Event, DecodeError> {
    if buf.len() < ARGS_EVENT_FIXED {
        return Err(DecodeError::Truncated {
            kind: hdr.kind,
            need: ARGS_EVENT_FIXED,
            got: buf.len(),
        });
    }
    let base = core::mem::size_of::<EventHeader>();
    let field =
        |off: usize| u32::from_ne_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]]);
    let offset = field(base);
    let len = field(base + 4) as usize;
    let payload = &buf[ARGS_EVENT_FIXED..];
    if len > ARGS_CHUNK || len > payload.len() {
        return Err(DecodeError::BadLength {
            kind: hdr.kind,
            claimed: len,
            got: payload.len(),
        });
    }
    Ok(Event::Args(Args {
        hdr,
        offset,
        data: payload[..len].to_vec(),
    }))
}

#[cfg(test)]
pub(crate) mod records;

#[cfg(test)]
mod tests {
    use super::*;
    use spacetime_common::{flags, ExecEvent};

    fn bytes_of<T>(v: &T) -> Vec<u8> {
        // SAFETY: test records are plain data.
        unsafe {
            core::slice::from_raw_parts((v as *const T).cast::<u8>(), core::mem::size_of::<T>())
        }
        .to_vec()
    }

    fn hdr(kind: u16) -> EventHeader {
        EventHeader {
            kind,
            session: 3,
            flags: 0,
            ts_ns: 5,
            tgid: 10,
            pid: 11,
            leader_start_ns: 7,
        }
    }

    #[test]
    fn fork_round_trips() {
        let f = ForkEvent {
            hdr: hdr(kind::FORK),
            child_pid: 12,
            child_tgid: 12,
            child_start_ns: 9,
            ..ForkEvent::default()
        };
        let bytes = bytes_of(&f);
        // The session sits in the header's third and fourth bytes, after the kind.
        assert_eq!(u16::from_ne_bytes([bytes[2], bytes[3]]), 3);
        let e = decode(&bytes).expect("fork decodes");
        assert_eq!(e.session(), 3);
        assert_eq!(e, Event::Fork(f));
    }

    #[test]
    fn cgroup_names_come_leaf_first_and_make_a_path() {
        let mut e = CgroupNameEvent {
            hdr: hdr(kind::CGROUP_NAME),
            cgroup_id: 42,
            depth: 2,
            flags: 0,
            names: [[0; spacetime_common::CGROUP_NAME_LEN]; CGROUP_NAME_DEPTH],
        };
        e.names[0][..12].copy_from_slice(b"docker.scope");
        e.names[1][..12].copy_from_slice(b"system.slice");
        let path = |e: &CgroupNameEvent| match decode(&bytes_of(e)) {
            Ok(Event::CgroupName(c)) => (c.cgroup_id, c.path),
            other => panic!("{other:?}"),
        };
        assert_eq!(path(&e), (42, "/system.slice/docker.scope".into()));
        e.flags = flags::CGROUP_NAME_DEEPER;
        assert_eq!(path(&e).1, "/…/system.slice/docker.scope");
        e.flags = 0;
        e.depth = 0;
        assert_eq!(path(&e).1, "/", "the root");
        e.depth = CGROUP_NAME_DEPTH as u32 + 1;
        assert!(decode(&bytes_of(&e)).is_err(), "a depth past the names");
        assert!(decode(&bytes_of(&e)[..40]).is_err(), "short");
    }

    #[test]
    fn exec_carries_only_its_payload() {
        let mut e = ExecEvent {
            hdr: hdr(kind::EXEC),
            old_pid: 11,
            args_len: 9,
            args_here: 9,
            uid: 0,
            cgroup_id: 0,
            comm: [0; TASK_COMM_LEN],
            filename: [0; FILENAME_LEN],
            args: [0; ARGS_CHUNK],
        };
        e.comm[..2].copy_from_slice(b"ls");
        e.filename[..7].copy_from_slice(b"/bin/ls");
        e.args[..9].copy_from_slice(b"ls\0-l\0/x\0");
        let full = bytes_of(&e);
        let sent = &full[..EXEC_EVENT_FIXED + 9];
        let Ok(Event::Exec(x)) = decode(sent) else {
            panic!("exec did not decode")
        };
        assert_eq!(
            (x.comm.as_bytes(), x.filename.as_slice()),
            (b"ls".as_slice(), b"/bin/ls".as_slice())
        );
        assert_eq!(
            crate::util::arg_area::argv_of(crate::util::arg_area::without_final_nul(&x.args))
                .collect::<Vec<_>>(),
            [b"ls".as_slice(), b"-l", b"/x"]
        );
        // A record claiming more payload than it carries is rejected.
        assert!(matches!(
            decode(&full[..EXEC_EVENT_FIXED + 3]),
            Err(DecodeError::BadLength { .. })
        ));
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let x = ExitEvent {
            hdr: hdr(kind::EXIT),
            exit_code: 256,
            ..Default::default()
        };
        let b = bytes_of(&x);
        for n in 0..b.len() {
            assert!(decode(&b[..n]).is_err(), "{n} bytes decoded");
        }
        let mut unknown = b.clone();
        unknown[0] = 99;
        assert_eq!(decode(&unknown), Err(DecodeError::UnknownKind(99)));
        assert_eq!(flags::EXIT_GROUP_DEAD, 1);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
        for len in 0..600 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    s as u8
                })
                .collect();
            let mut b = buf.clone();
            if b.len() >= 4 {
                b[..4].copy_from_slice(&((len as u32 % 6) + 1).to_ne_bytes());
            }
            let _ = decode(&buf);
            let _ = decode(&b);
        }
    }
}
