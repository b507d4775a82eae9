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

/// Reads `path` to its end and hands `f` the bytes; with `one_piece`, a read that returns less
/// than asked is the end. The first page is read on the stack: a process's `stat`, `status`
/// or an `fdinfo` fits it, so reading one allocates nothing. (The daemons take every block
/// from musl's allocator, which mapped a 16 KiB group for a page-sized buffer and unmapped it
/// at its free: two more system calls and a TLB flush for each file the agent's proof read.)
fn read_with<T>(path: &Path, one_piece: bool, f: impl FnOnce(&[u8]) -> T) -> io::Result<T> {
    let fd = open(path)?;
    let mut page = [0u8; 4096];
    let len = read_into(&fd, &mut page, 0, one_piece)?;
    if len < page.len() {
        return Ok(f(&page[..len]));
    }
    // Longer than a page: on the heap from here.
    let mut buf = page.to_vec();
    let mut len = len;
    while len == buf.len() {
        buf.resize(buf.len() * 2, 0);
        len = read_into(&fd, &mut buf, len, one_piece)?;
    }
    Ok(f(&buf[..len]))
}

/// Reads into `buf` from `len` on until it is full or the file ends (with `one_piece`, a read
/// short of what was asked ends it); returns how much `buf` now holds.
fn read_into(fd: &OwnedFd, buf: &mut [u8], mut len: usize, one_piece: bool) -> io::Result<usize> {
    while len < buf.len() {
        match rustix::io::read(fd, &mut buf[len..]) {
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
    Ok(len)
}

/// The bytes of a /proc file (or any small file).
pub fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    read_with(path.as_ref(), false, <[u8]>::to_vec)
}

/// The bytes of a /proc file the kernel renders in one piece at every read, handed to `f`
/// where they were read (nothing is allocated for a file that fits a page): a process's
/// `stat`, `status` or an `fdinfo` (`single_open` seq files, whose buffer grows until the
/// whole text fits), or a sysctl. The first read that returns less than asked has it all,
/// and the read that would say the end is saved. Not for files of many records (`maps`):
/// their seq file stops each read at a page, short of what was asked, with more to come.
pub fn with_one_piece<T>(path: impl AsRef<Path>, f: impl FnOnce(&[u8]) -> T) -> io::Result<T> {
    read_with(path.as_ref(), true, f)
}

/// [`with_one_piece`] as text; not UTF-8 is an error.
pub fn with_one_piece_text<T>(path: impl AsRef<Path>, f: impl FnOnce(&str) -> T) -> io::Result<T> {
    read_with(path.as_ref(), true, |b| {
        std::str::from_utf8(b)
            .map(f)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    })?
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
                let one = super::with_one_piece(p, <[u8]>::to_vec).expect(p);
                assert_eq!(stable(&one), stable(&ours), "{p} in one piece");
                assert_eq!(lines(&one), lines(&ours), "{p} in one piece: {one:?}");
                assert!(one.ends_with(b"\n"), "{p} read whole in one piece: {one:?}");
            }
        }
        // Past the first page, and at its edge, whole and in one piece alike.
        let path = std::env::temp_dir().join(format!("proc-text-{}", std::process::id()));
        for len in [10_000u32, 8192, 4096, 4095] {
            let text: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            std::fs::write(&path, &text).expect("a temporary file");
            let read = super::read(&path).expect("read back");
            let one = super::with_one_piece(&path, <[u8]>::to_vec).expect("read back");
            assert!(read == text, "{len} bytes read back as written");
            assert!(one == text, "{len} bytes read back in one piece as written");
        }
        let _ = std::fs::remove_file(&path);
    }
}
