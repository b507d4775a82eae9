//! PID namespaces. The kernel programs number processes as the initial PID namespace does;
//! inside a namespace `fork()`, `getpid()` and a /proc mounted there number them as that
//! namespace does. These tell which numbering a source uses.

use crate::kernel::loader::{run_own_pid, LearnedPid, Probes};

/// The inode number of the initial PID namespace (PROC_PID_INIT_INO): fixed by the kernel.
const PROC_PID_INIT_INO: u64 = 0xEFFF_FFFC;

/// Whether spacetime runs in the initial PID namespace. Assumed when /proc is not there to ask.
pub fn in_initial_namespace() -> bool {
    match std::fs::metadata("/proc/self/ns/pid") {
        Ok(m) => std::os::unix::fs::MetadataExt::ino(&m) == PROC_PID_INIT_INO,
        Err(e) => {
            log::debug!("/proc/self/ns/pid: {e}; assuming the initial PID namespace");
            true
        }
    }
}

/// The kernel pid and namespace level of spacetime itself, from a test run of `own_pid` in
/// this process; None when the kernel cannot run it.
pub fn own_kernel_pid(probes: &Probes) -> Option<LearnedPid> {
    let prog = probes.own_pid_program()?;
    match run_own_pid(prog) {
        0 => probes.learned_pid().ok().flatten(),
        errno => {
            log::debug!(
                "running own_pid: {}",
                std::io::Error::from_raw_os_error(errno)
            );
            None
        }
    }
}

/// Whether /proc numbers processes as the kernel programs do: its `self` names this process
/// by its kernel pid. False inside a PID namespace with its own /proc (or when unsure).
pub fn proc_has_kernel_pids(probes: &Probes) -> bool {
    if in_initial_namespace() {
        return true;
    }
    let Some(own) = own_kernel_pid(probes) else {
        return false;
    };
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse::<u32>().ok())
        == Some(own.kernel_pid)
}

/// Whether /proc numbers processes as spacetime's own namespace does: its `self` is
/// `getpid()`. (In the initial namespace that is also the kernel's numbering.)
pub fn proc_has_own_pids() -> bool {
    std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse::<u32>().ok())
        == Some(std::process::id())
}
