//! The kernel's BTF mapped instead of copied: since Linux 6.16 /sys/kernel/btf/vmlinux can be
//! mmap'd read-only, which saves copying 5.5 MB into fresh heap pages at every start-up
//! (page faults and zeroing included). Older kernels refuse the mmap; the caller reads then.

use std::{fs::File, io, os::fd::AsRawFd, path::Path, ptr::NonNull};

/// A read-only private mapping of a whole file, unmapped on drop.
pub struct Mapped {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is read-only and owned: nothing writes to it, so it can be read from,
// and dropped on, any thread.
unsafe impl Send for Mapped {}
// SAFETY: as above, shared reads of immutable memory.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps `path` whole. Fails on an empty file and wherever the file refuses mmap.
    pub fn open(path: &Path) -> io::Result<Mapped> {
        let file = File::open(path)?;
        let len = usize::try_from(file.metadata()?.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "file too large to map"))?;
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "empty file"));
        }
        // SAFETY: a fresh mapping of `len` bytes of an open file, read-only; the kernel's BTF
        // never changes while the kernel runs, so the bytes stay what they were.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(ptr.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapped { ptr, len })
    }
}

impl std::ops::Deref for Mapped {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `open`, once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (major, minor) of the running kernel.
    fn kernel_version() -> (u32, u32) {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
        let mut parts = release
            .trim()
            .split(['.', '-'])
            .map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    #[test]
    fn kernel_btf_mapped_is_the_file() {
        let path = Path::new(super::super::VMLINUX_BTF);
        let read = std::fs::read(path).expect("this test needs the kernel's BTF");
        match Mapped::open(path) {
            Ok(m) => assert!(*m == read[..], "the mapped BTF differs from the file"),
            Err(e) => assert!(
                kernel_version() < (6, 16),
                "kernel {:?} should allow mapping its BTF: {e}",
                kernel_version()
            ),
        }
    }
}
