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

use std::{ffi::CStr, io, path::Path, sync::Mutex, time::Instant};

use aya::{programs::RawTracePoint, Ebpf, EbpfLoader};

use super::{LoadError, BTF_PATH};
use crate::util::clock::thread_cpu_ns;

/// Raw-tracepoint programs by the CPU the verifier spends on them, costliest first (6.18,
/// the CPU `-vv` logs for each: fork 3.8 ms, rss_exec 2.9, exit 2.4, prepare_exec 2.1,
/// rss_stat 2, exec 1.6, each of the others under 1 ms). Names not listed come last.
const VERIFY_ORDER: [&str; 10] = [
    "sched_process_fork",
    "rss_exec",
    "sched_process_exit",
    "sched_prepare_exec",
    "rss_stat",
    "sched_process_exec",
    "rss_exit",
    "dead_switch",
    "sched_process_free",
    "exec_args",
];

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
    // CLONE_FS alone is allowed in a multi-threaded process and only affects this thread; if
    // it fails, nothing changed and no chroot is attempted (it would move the whole process).
    // SAFETY: FS only, not FILES: the descriptor table stays shared, so every thread still
    // sees every descriptor.
    if let Err(e) = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FS) } {
        let e = io::Error::from(e);
        return Err(io::Error::new(e.kind(), format!("unshare(CLONE_FS): {e}")));
    }
    // The root changed is this thread's own (unshared above).
    if let Err(e) = rustix::process::chroot(HIDING_ROOT) {
        let e = io::Error::from(e);
        let dir = HIDING_ROOT.to_string_lossy();
        return Err(io::Error::new(e.kind(), format!("chroot {dir}: {e}")));
    }
    Ok(())
}

/// Loads (the kernel verifies) the raw-tracepoint programs of `hooks` (program, tracepoint):
/// one worker per CPU, at most one per program, each taking the costliest program left. The
/// kernel verifies programs of different threads concurrently, so on two CPUs the ~17 ms of
/// verification take ~9 ms. Attaching
/// stays with the caller, in its order. Returns each program's load time in µs.
pub fn verify_all(
    ebpf: &mut Ebpf,
    hooks: &[(&'static str, &'static str)],
) -> Result<Vec<(String, u64)>, LoadError> {
    let mut progs = Vec::with_capacity(hooks.len());
    for (name, prog) in ebpf.programs_mut() {
        if let Some(&(name, tracepoint)) = hooks.iter().find(|(n, _)| *n == name) {
            let prog: &mut RawTracePoint = prog
                .try_into()
                .map_err(|source| LoadError::Attach { tracepoint, source })?;
            progs.push((name, tracepoint, prog));
        }
    }
    if let Some(&(missing, _)) = hooks.iter().find(|(n, _)| !progs.iter().any(|p| p.0 == *n)) {
        return Err(LoadError::MissingProgram(missing));
    }
    // A build without fetch atomics costs what its usual build does.
    let rank = |name: &str| {
        let name = super::atomics::program_of(name);
        VERIFY_ORDER.iter().position(|n| *n == name)
    };
    progs.sort_by_key(|p| rank(p.0).unwrap_or(VERIFY_ORDER.len()));
    let workers = online_cpus().clamp(1, progs.len().max(1));
    let queue = Mutex::new(progs.into_iter());
    let next = || queue.lock().map_or(None, |mut q| q.next());
    let results = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    while let Some((name, tracepoint, prog)) = next() {
                        let loaded = load_one(name, prog)
                            .map_err(|source| LoadError::Attach { tracepoint, source });
                        let failed = loaded.is_err();
                        done.push(loaded);
                        if failed {
                            break;
                        }
                    }
                    done
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
    });
    let mut load_us = Vec::new();
    for worker in results {
        let worker = worker.map_err(|_| LoadError::ThreadPanicked("verifying a program"))?;
        for loaded in worker {
            load_us.push(loaded?);
        }
    }
    Ok(load_us)
}

/// Runs a program's `load` again while the kernel says the verifier was interrupted (EAGAIN:
/// a signal reached the loading thread), 5 times at most as libbpf does (seen once, beside
/// a test's 32 000 forks).
pub(super) fn retry_interrupted(
    name: &str,
    mut load: impl FnMut() -> Result<(), aya::programs::ProgramError>,
) -> Result<(), aya::programs::ProgramError> {
    let mut attempts = 1;
    loop {
        match load() {
            Err(aya::programs::ProgramError::LoadError { io_error, .. })
                if io_error.raw_os_error() == Some(libc::EAGAIN) && attempts < 5 =>
            {
                attempts += 1;
                log::debug!("loading {name}: the verifier was interrupted; again ({attempts})");
            }
            r => return r,
        }
    }
}

/// Loads one program, timing it (wall, and the CPU its thread spent: the verifier's own).
fn load_one(
    name: &'static str,
    prog: &mut RawTracePoint,
) -> Result<(String, u64), aya::programs::ProgramError> {
    let t = Instant::now();
    // This thread's CPU time: what the kernel spent verifying the program, whatever else the
    // machine runs.
    let cpu = thread_cpu_ns();
    retry_interrupted(name, || prog.load())?;
    let us = t.elapsed().as_micros() as u64;
    log::debug!(
        "start-up: {name} loaded in {:.1} ms ({:.1} ms of CPU)",
        us as f64 / 1e3,
        thread_cpu_ns().saturating_sub(cpu) as f64 / 1e6
    );
    Ok((name.to_string(), us))
}

/// CPUs this process may run on (its affinity mask), 1 if it cannot be read.
fn online_cpus() -> usize {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return 1;
        }
        libc::CPU_COUNT(&set).max(1) as usize
    }
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
        if rustix::process::geteuid().is_root() {
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
