//! Small /proc files read whole in as few calls as the kernel allows.
//!
//! `std::fs::read` and `read_to_string` ask the file's size first (a statx, which says 0 for
//! /proc) and then read in steps that grow from 32 bytes: eight calls for a 1.5 KiB
//! `status`, each of which has the kernel render the whole file again. A page-sized buffer
//! takes the same text in one read, and the one after it says the end. The agent proves a
//! client's process with seven such reads on every trace it serves.
//!
//! The file is opened through rustix: musl's `open` follows an `O_CLOEXEC` open with an
//! `fcntl(F_SETFD)` for kernels that ignored the flag (before 2.6.23), one more call per file.

use std::{io, os::fd::OwnedFd, path::Path};

use rustix::{
    fs::{Mode, OFlags},
    io::Errno,
};

fn open(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

/// Reads `path` to its end; with `one_piece`, a read that returns less than asked is the end.
fn read_from(path: &Path, one_piece: bool) -> io::Result<Vec<u8>> {
    let fd = open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match rustix::io::read(&fd, &mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => {
                len += n;
                if one_piece && len < buf.len() {
                    break;
                }
            }
            Err(Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// The bytes of a /proc file (or any small file).
pub fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    read_from(path.as_ref(), false)
}

/// The bytes of a /proc file the kernel renders in one piece at every read: a process's
/// `stat`, `status` or an `fdinfo` (`single_open` seq files, whose buffer grows until the
/// whole text fits), or a sysctl. The first read that returns less than asked has it all,
/// and the read that would say the end is saved. Not for files of many records (`maps`):
/// their seq file stops each read at a page, short of what was asked, with more to come.
pub fn read_one_piece(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    read_from(path.as_ref(), true)
}

/// [`read_one_piece`] as text; not UTF-8 is an error.
pub fn read_one_piece_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    String::from_utf8(read_one_piece(path)?)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The text of a /proc file; not UTF-8 is an error, as with `std::fs::read_to_string`.
pub fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    String::from_utf8(read(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_what_std_reads() {
        // What stays the same between two reads: status's, fdinfo's and maps' first line (the
        // name, the position, the executable's first mapping), stat's pid and name (its
        // counters move between reads).
        let first = |b: &[u8]| b.split(|&c| c == b'\n').next().map(<[u8]>::to_vec);
        let named = |b: &[u8]| {
            b.iter()
                .rposition(|&c| c == b')')
                .map(|end| b[..end].to_vec())
        };
        let lines = |b: &[u8]| b.iter().filter(|&&c| c == b'\n').count();
        // (file, what stays the same, whether the kernel renders it in one piece at each read)
        for (p, stable, one_piece) in [
            (
                "/proc/self/status",
                &first as &dyn Fn(&[u8]) -> Option<Vec<u8>>,
                true,
            ),
            ("/proc/self/stat", &named, true),
            ("/proc/self/fdinfo/0", &first, true),
            ("/proc/self/maps", &first, false),
        ] {
            let ours = super::read(p).expect(p);
            let std = std::fs::read(p).expect(p);
            assert!(stable(&ours).is_some(), "{p}: {ours:?}");
            assert_eq!(stable(&ours), stable(&std), "{p}");
            assert!(ours.ends_with(b"\n"), "{p} read whole");
            if one_piece {
                let one = super::read_one_piece(p).expect(p);
                assert_eq!(stable(&one), stable(&ours), "{p} in one piece");
                assert_eq!(lines(&one), lines(&ours), "{p} in one piece: {one:?}");
                assert!(one.ends_with(b"\n"), "{p} read whole in one piece: {one:?}");
            }
        }
        // Past the first page.
        let path = std::env::temp_dir().join(format!("proc-text-{}", std::process::id()));
        let text: Vec<u8> = (0..10_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        std::fs::write(&path, &text).expect("a temporary file");
        let read = super::read(&path);
        let _ = std::fs::remove_file(&path);
        assert!(
            read.expect("read back") == text,
            "10 000 bytes read back as written"
        );
    }
}
