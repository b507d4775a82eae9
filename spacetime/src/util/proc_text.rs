//! Small /proc files read whole in as few calls as the kernel allows.
//!
//! `std::fs::read` and `read_to_string` ask the file's size first (a statx, which says 0 for
//! /proc) and then read in steps that grow from 32 bytes: eight calls for a 1.5 KiB
//! `status`, each of which has the kernel render the whole file again. A page-sized buffer
//! takes the same text in one read, and the one after it says the end. The agent proves a
//! client's process with seven such reads on every trace it serves.

use std::{fs::File, io, io::Read, path::Path};

/// The bytes of a /proc file (or any small file).
pub fn read(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// The text of a /proc file; not UTF-8 is an error, as with `std::fs::read_to_string`.
pub fn read_to_string(path: impl AsRef<Path>) -> io::Result<String> {
    String::from_utf8(read(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_what_std_reads() {
        // What stays the same between two reads: status's and maps' first line (the name, the
        // executable's first mapping), stat's pid and name (its counters move between reads).
        let first = |b: &[u8]| b.split(|&c| c == b'\n').next().map(<[u8]>::to_vec);
        let named = |b: &[u8]| {
            b.iter()
                .rposition(|&c| c == b')')
                .map(|end| b[..end].to_vec())
        };
        for (p, stable) in [
            (
                "/proc/self/status",
                &first as &dyn Fn(&[u8]) -> Option<Vec<u8>>,
            ),
            ("/proc/self/stat", &named),
            ("/proc/self/maps", &first),
        ] {
            let ours = super::read(p).expect(p);
            let std = std::fs::read(p).expect(p);
            assert!(stable(&ours).is_some(), "{p}: {ours:?}");
            assert_eq!(stable(&ours), stable(&std), "{p}");
            assert!(ours.ends_with(b"\n"), "{p} read whole");
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
