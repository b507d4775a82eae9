//! `adopt_mms`: the task iterator that starts following the mms of processes that predate a
//! `trace -p` attach (see the kernel side's `adopt`). Loaded only by an attach: a traced
//! command never pays its verification.

use std::io::Read;

use aya::{programs::Iter, Ebpf};

use super::LoadError;

/// Runs the iterator `program` (`adopt_mms`, or its build for the kernel: see
/// [`super::Atomics`]) of `ebpf` once over every task: each tracked process whose mm is not
/// followed yet is followed from now on, its RSS now its first point.
pub(super) fn adopt_running(ebpf: &mut Ebpf, program: &'static str) -> Result<(), LoadError> {
    let err = |source| LoadError::Attach {
        tracepoint: "iter/task",
        source,
    };
    let started = std::time::Instant::now();
    let btf = aya::Btf::from_sys_fs().map_err(LoadError::KernelBtf)?;
    let prog: &mut Iter = ebpf
        .program_mut(program)
        .ok_or(LoadError::MissingProgram(program))?
        .try_into()
        .map_err(err)?;
    prog.load("task", &btf).map_err(err)?;
    let link = prog.attach().map_err(err)?;
    let link = prog.take_link(link).map_err(err)?;
    let io = |source| LoadError::Io {
        path: "the adopt_mms task iterator",
        source,
    };
    let mut file = link.into_file().map_err(|e| io(std::io::Error::other(e)))?;
    // Reading the iterator runs the program over every task; it writes nothing.
    let mut out = Vec::new();
    file.read_to_end(&mut out).map_err(io)?;
    // One run is all it is for: unloading frees the kernel's copy.
    prog.unload().map_err(err)?;
    log::debug!(
        "attach: mms of running processes followed in {:.1} ms",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
