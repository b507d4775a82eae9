//! aya's loader without aya's parse of the kernel's BTF.
//!
//! `EbpfLoader::new()` reads and parses /sys/kernel/btf/vmlinux (~10 ms of CPU, 5.5 MB read)
//! whether or not the BTF is used, and has no way to skip it; spacetime then sets `.btf(None)`
//! (its own offsets replace CO-RE relocations, and the fentry programs get a BTF of their own
//! only on kernels that need them). So the loader is built in a short-lived thread that first
//! stops sharing its root and cwd with the process (`unshare(CLONE_FS)`) and then `chroot`s
//! into a directory where that path does not exist: aya's `Btf::from_sys_fs()` fails there and
//! `new()` leaves its BTF empty. Nothing else in `new()` touches the filesystem (empty hash
//! maps and defaults); the hash maps' random keys, which std could read from /dev/urandom
//! when the getrandom syscall is refused, are drawn before the chroot.

use std::{ffi::CStr, io, path::Path, time::Instant};

use aya::EbpfLoader;

use super::BTF_PATH;

/// A directory that exists whenever the kernel has BTF (checked before loading) and holds
/// no `sys/kernel/btf/vmlinux`.
const HIDING_ROOT: &CStr = c"/sys/kernel/btf";

/// aya's loader, and how it was built, for `-vv` and tests.
pub struct Loader {
    pub loader: EbpfLoader<'static>,
    /// aya's own BTF parse was skipped (the kernel's BTF was not visible in the thread).
    pub btf_hidden: bool,
    /// Why it was not, when the thread could not be confined (no CAP_SYS_CHROOT, a seccomp
    /// policy refusing unshare or chroot).
    pub fallback: Option<String>,
    /// Time the thread took, aya's feature probes included.
    pub elapsed_us: u64,
}

/// Starts building aya's loader on another thread; join it when the loader is needed.
/// aya's feature probes (BPF syscalls only, run once per process) are done there too, before
/// the confinement, so they overlap the caller's own work instead of delaying the load.
pub fn spawn() -> std::thread::JoinHandle<Loader> {
    std::thread::spawn(build)
}

fn build() -> Loader {
    let started = Instant::now();
    let _ = aya::features();
    // Seeds this thread's hash-map keys while /dev/urandom is still reachable.
    let _ = std::collections::hash_map::RandomState::new();
    let fallback = confine_thread().err().map(|e| e.to_string());
    let btf_hidden = fallback.is_none() && !Path::new(BTF_PATH).exists();
    let loader = EbpfLoader::new();
    Loader {
        loader,
        btf_hidden,
        fallback,
        elapsed_us: started.elapsed().as_micros() as u64,
    }
}

/// Gives the calling thread a root of its own in which the kernel's BTF is not visible.
/// Must only run on a thread that ends soon after: it keeps that root until it exits.
fn confine_thread() -> io::Result<()> {
    // SAFETY: plain syscall. CLONE_FS alone is allowed in a multi-threaded process and only
    // affects this thread; if it fails, nothing changed and no chroot is attempted (it would
    // move the whole process).
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("unshare(CLONE_FS): {e}")));
    }
    // SAFETY: a valid NUL-terminated path; the root changed is this thread's own (unshared).
    if unsafe { libc::chroot(HIDING_ROOT.as_ptr()) } != 0 {
        let e = io::Error::last_os_error();
        let dir = HIDING_ROOT.to_string_lossy();
        return Err(io::Error::new(e.kind(), format!("chroot {dir}: {e}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(path: &str) -> std::path::PathBuf {
        std::fs::read_link(path).unwrap_or_else(|e| panic!("readlink {path}: {e}"))
    }

    /// The thread's confinement hides the BTF from aya and leaves the process's (and this
    /// thread's) root and cwd as they were.
    #[test]
    fn loader_thread_hides_btf_and_leaves_root_and_cwd() {
        if !Path::new(BTF_PATH).exists() {
            panic!("{BTF_PATH} is missing: this test needs a kernel with BTF");
        }
        let before = [
            link("/proc/self/root"),
            link("/proc/self/cwd"),
            link("/proc/thread-self/root"),
            link("/proc/thread-self/cwd"),
        ];
        let built = spawn().join().expect("the loader thread panicked");
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } == 0 {
            assert!(
                built.btf_hidden,
                "as root the BTF must be hidden from aya (fallback: {:?})",
                built.fallback
            );
        }
        let after = [
            link("/proc/self/root"),
            link("/proc/self/cwd"),
            link("/proc/thread-self/root"),
            link("/proc/thread-self/cwd"),
        ];
        assert_eq!(
            before, after,
            "root or cwd changed outside the loader thread"
        );
        assert!(
            Path::new(BTF_PATH).exists(),
            "{BTF_PATH} not visible any more"
        );
        // A relative path still resolves from the unchanged cwd (cargo runs tests in the crate).
        std::fs::File::open("Cargo.toml").expect("relative open after the loader thread");
    }
}
