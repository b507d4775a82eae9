//! Decoding of ring-buffer records into typed events. Every record is length-checked before it
//! is read: a short or unknown record is an error the caller counts, never a panic.

use spacetime_common::{
    kind, EventHeader, ExitEvent, ForkEvent, ImageEndEvent, ReapEvent, RssEvent, ARGS_CHUNK,
    ARGS_EVENT_FIXED, EXEC_EVENT_FIXED, FILENAME_LEN, TASK_COMM_LEN,
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
}

impl Event {
    pub fn header(&self) -> &EventHeader {
        match self {
            Event::Fork(e) => &e.hdr,
            Event::Exec(e) => &e.hdr,
            Event::Args(e) => &e.hdr,
            Event::ImageEnd(e) => &e.hdr,
            Event::Exit(e) => &e.hdr,
            Event::Rss(e) => &e.hdr,
            Event::Reap(e) => &e.hdr,
        }
    }
}

/// A program image starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exec {
    pub hdr: EventHeader,
    pub old_pid: u32,
    pub comm: String,
    pub filename: String,
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
    Truncated { kind: u32, need: usize, got: usize },
    #[error("unknown record kind {0}")]
    UnknownKind(u32),
    #[error("record of kind {kind} claims {claimed} payload bytes but carries {got}")]
    BadLength {
        kind: u32,
        claimed: usize,
        got: usize,
    },
}

/// Reads a `T` from the start of `buf` if it is long enough.
fn read_prefix<T: Copy>(buf: &[u8], kind: u32) -> Result<T, DecodeError> {
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

/// Bytes up to the first NUL, as UTF-8 (lossy: paths are bytes to the kernel).
fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

pub fn decode(buf: &[u8]) -> Result<Event, DecodeError> {
    let hdr: EventHeader = read_prefix(buf, 0).map_err(|_| DecodeError::Short(buf.len()))?;
    match hdr.kind {
        kind::FORK => Ok(Event::Fork(read_prefix(buf, hdr.kind)?)),
        kind::IMAGE_END => Ok(Event::ImageEnd(read_prefix(buf, hdr.kind)?)),
        kind::EXIT => Ok(Event::Exit(read_prefix(buf, hdr.kind)?)),
        kind::RSS => Ok(Event::Rss(read_prefix(buf, hdr.kind)?)),
        kind::REAP => Ok(Event::Reap(read_prefix(buf, hdr.kind)?)),
        kind::EXEC => decode_exec(buf, hdr),
        kind::ARGS => decode_args(buf, hdr),
        k => Err(DecodeError::UnknownKind(k)),
    }
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
    let comm_off = base + 16;
    let name_off = comm_off + TASK_COMM_LEN;
    Ok(Event::Exec(Exec {
        hdr,
        old_pid,
        comm: c_string(&buf[comm_off..name_off]),
        filename: c_string(&buf[name_off..name_off + FILENAME_LEN]),
        args_len,
        args: payload[..args_here].to_vec(),
    }))
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

/// Splits a NUL-separated argument area into arguments. A trailing NUL ends the last one; an
/// area cut short keeps its last partial argument.
pub fn split_argv(area: &[u8]) -> Vec<String> {
    let area = area.strip_suffix(&[0]).unwrap_or(area);
    if area.is_empty() {
        return Vec::new();
    }
    area.split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

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

    fn hdr(kind: u32) -> EventHeader {
        EventHeader {
            kind,
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
        };
        assert_eq!(decode(&bytes_of(&f)), Ok(Event::Fork(f)));
    }

    #[test]
    fn exec_carries_only_its_payload() {
        let mut e = ExecEvent {
            hdr: hdr(kind::EXEC),
            old_pid: 11,
            args_len: 9,
            args_here: 9,
            _pad: 0,
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
        assert_eq!((x.comm.as_str(), x.filename.as_str()), ("ls", "/bin/ls"));
        assert_eq!(split_argv(&x.args), ["ls", "-l", "/x"]);
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

    #[test]
    fn argv_splitting() {
        assert_eq!(split_argv(b"a\0bc\0"), ["a", "bc"]);
        assert_eq!(split_argv(b"a\0\0c\0"), ["a", "", "c"]);
        assert_eq!(split_argv(b"a\0partial"), ["a", "partial"]);
        assert!(split_argv(b"").is_empty());
    }
}
