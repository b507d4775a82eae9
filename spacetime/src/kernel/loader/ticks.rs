//! CPU over time: the `cpu_tick` program on a software CPU clock at [`TICK_HZ`] on every
//! online CPU. Best effort: where it cannot be loaded or attached (a kernel without
//! perf_event BPF programs, `perf_event_paranoid` and no CAP_PERFMON, a CPU that went
//! offline), CPU over time falls back to each process's CPU spread over its life, and says why.

use aya::{
    programs::{
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
        PerfEvent,
    },
    util::online_cpus,
    Ebpf,
};

use spacetime_common::CPU_TICK_HZ as TICK_HZ;

/// Loads `cpu_tick` and attaches it on each online CPU: the CPUs it runs on, or why not.
pub(super) fn attach(ebpf: &mut Ebpf) -> Result<usize, String> {
    let prog: &mut PerfEvent = ebpf
        .program_mut("cpu_tick")
        .ok_or("the cpu_tick program is missing")?
        .try_into()
        .map_err(|e| format!("cpu_tick: {e}"))?;
    prog.load().map_err(|e| format!("loading cpu_tick: {e}"))?;
    let cpus = online_cpus().map_err(|(path, e)| format!("reading {path}: {e}"))?;
    for &cpu in &cpus {
        prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Frequency(TICK_HZ),
            false,
        )
        .map_err(|e| format!("attaching cpu_tick on CPU {cpu}: {e}"))?;
    }
    Ok(cpus.len())
}
