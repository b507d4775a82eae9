//! `own_pid`: a program that is loaded but never attached. A held child runs it once with
//! BPF_PROG_TEST_RUN, which executes a raw tracepoint program in the calling task, so it
//! records the child's kernel pid and PID-namespace level: how spacetime learns the kernel's
//! pid of CMD when it runs inside a PID namespace.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use aya::{programs::RawTracePoint, Ebpf};
use spacetime_common::pidns_slot;

use super::{maps::Maps, LoadError};

/// The `own_pid` program (never attached; see [`run_own_pid`]). Without it spacetime still
/// works in the initial PID namespace, so a failure is only logged.
pub(super) fn load_own_pid(ebpf: &mut Ebpf) {
    let Some(prog) = ebpf.program_mut(OWN_PID) else {
        log::debug!("eBPF program {OWN_PID} is missing from the object");
        return;
    };
    let loaded = <&mut RawTracePoint>::try_from(prog).and_then(|p| p.load());
    if let Err(e) = loaded {
        log::debug!("loading {OWN_PID}: {e}");
    }
}

const OWN_PID: &str = "own_pid";

/// `union bpf_attr` as BPF_PROG_TEST_RUN reads it.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// Runs the `own_pid` program (fd `prog`) once in the calling task's context: a raw
/// tracepoint's test run executes in the caller, so the program records the caller's kernel
/// pid and PID-namespace level (see [`super::Probes::learned_pid`]). Returns 0 or an errno.
/// Only a system call: safe between fork and exec.
pub fn run_own_pid(prog: RawFd) -> i32 {
    const BPF_PROG_TEST_RUN: libc::c_long = 10;
    let attr = TestRunAttr {
        prog_fd: prog as u32,
        ..TestRunAttr::default()
    };
    // SAFETY: a valid attribute block of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_TEST_RUN,
            &attr as *const TestRunAttr,
            std::mem::size_of::<TestRunAttr>(),
        )
    };
    if r == 0 {
        0
    } else {
        // SAFETY: reads this thread's errno.
        unsafe { *libc::__errno_location() }
    }
}

/// What a run of `own_pid` recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnedPid {
    /// The kernel (initial namespace) pid of the task that ran it.
    pub kernel_pid: u32,
    /// Its PID namespace's level: 0 for the initial namespace.
    pub level: u32,
}

/// The `own_pid` program, to be run by a child with [`run_own_pid`]; None when it did not
/// load.
pub(super) fn program(ebpf: &Ebpf) -> Option<RawFd> {
    let prog: &RawTracePoint = ebpf.program(OWN_PID)?.try_into().ok()?;
    Some(prog.fd().ok()?.as_fd().as_raw_fd())
}

/// What `own_pid` records (`PIDNS`, taken out of the loaded object).
pub(super) struct OwnPid {
    maps: Maps,
}

const PIDNS: &str = "PIDNS";

impl OwnPid {
    pub(super) fn take(ebpf: &mut Ebpf) -> Result<OwnPid, LoadError> {
        Ok(OwnPid {
            maps: Maps::take(ebpf, &[PIDNS])?,
        })
    }

    /// What the last run of `own_pid` recorded; None when it never ran.
    pub(super) fn learned(&self) -> Result<Option<LearnedPid>, LoadError> {
        const NAME: &str = PIDNS;
        let map = self.maps.map(NAME).ok_or(LoadError::MissingMap(NAME))?;
        let arr: aya::maps::Array<_, u32> = aya::maps::Array::try_from(map)
            .map_err(|source| LoadError::Map { name: NAME, source })?;
        let get = |i| {
            arr.get(&i, 0)
                .map_err(|source| LoadError::Map { name: NAME, source })
        };
        let kernel_pid = get(pidns_slot::KERNEL_PID)?;
        Ok((kernel_pid != 0).then_some(LearnedPid {
            kernel_pid,
            level: get(pidns_slot::LEVEL)?,
        }))
    }

    /// Forgets the pid the last run learnt, so the next run's is its own.
    pub(super) fn forget(&mut self) -> Result<(), LoadError> {
        let map = self
            .maps
            .map_mut(PIDNS)
            .ok_or(LoadError::MissingMap(PIDNS))?;
        let mut pidns: aya::maps::Array<_, u32> =
            aya::maps::Array::try_from(map).map_err(|source| LoadError::Map {
                name: PIDNS,
                source,
            })?;
        pidns
            .set(pidns_slot::KERNEL_PID, 0, 0)
            .map_err(|source| LoadError::Map {
                name: PIDNS,
                source,
            })
    }
}
