//! CPU over time: the `cpu_tick` program on a software CPU clock at [`TICK_HZ`] on every
//! online CPU. Best effort: where it cannot be loaded or attached (a kernel without
//! perf_event BPF programs, `perf_event_paranoid` and no CAP_PERFMON, a CPU that went
//! offline), CPU over time falls back to each process's CPU spread over its life, and says why.
//!
//! `trace` attaches it with the other programs; the agent loads it once and attaches it only
//! while a session that shows CPU over time is open ([`super::Probes::set_cpu_ticking`]).

use aya::{
    programs::{
        perf_event::{
            PerfEventConfig, PerfEventLinkId, PerfEventScope, SamplePolicy, SoftwareEvent,
        },
        PerfEvent,
    },
    util::online_cpus,
    Ebpf,
};

use spacetime_common::CPU_TICK_HZ as TICK_HZ;

/// What [`super::Probes::load`] does with the CPU clock program.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuClock {
    /// Neither loaded nor attached: nothing shows CPU over time.
    #[default]
    Off,
    /// Loaded (verified) only: attached later, while something needs it (the agent).
    Loaded,
    /// Loaded and attached on every online CPU.
    Attached,
}

fn program(ebpf: &mut Ebpf) -> Result<&mut PerfEvent, String> {
    ebpf.program_mut("cpu_tick")
        .ok_or("the cpu_tick program is missing")?
        .try_into()
        .map_err(|e| format!("cpu_tick: {e}"))
}

/// Loads `cpu_tick` into the kernel (verifies it); attaching is [`attach`].
fn load(ebpf: &mut Ebpf) -> Result<(), String> {
    program(ebpf)?
        .load()
        .map_err(|e| format!("loading cpu_tick: {e}"))
}

/// Attaches the loaded `cpu_tick` on each online CPU: its links, or why not (then none is
/// left attached).
fn attach(ebpf: &mut Ebpf) -> Result<Vec<PerfEventLinkId>, String> {
    let prog = program(ebpf)?;
    let cpus = online_cpus().map_err(|(path, e)| format!("reading {path}: {e}"))?;
    let mut links = Vec::with_capacity(cpus.len());
    for &cpu in &cpus {
        let attached = prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Frequency(TICK_HZ),
            false,
        );
        match attached {
            Ok(link) => links.push(link),
            Err(e) => {
                for link in links {
                    let _ = prog.detach(link);
                }
                return Err(format!("attaching cpu_tick on CPU {cpu}: {e}"));
            }
        }
    }
    Ok(links)
}

/// The CPU clock program: loaded or why not, and its links while attached.
pub(super) struct CpuTicks {
    /// Loaded (verified); else why not (`None`: not asked for).
    loaded: Option<Result<(), String>>,
    /// One per CPU while attached.
    links: Vec<PerfEventLinkId>,
}

impl CpuTicks {
    /// What [`super::Probes::load`] does with the program, as `how` asks: whether it is
    /// loaded (or why not: a failed attach says why too), and its links when attached.
    pub(super) fn start(ebpf: &mut Ebpf, how: CpuClock) -> CpuTicks {
        let (loaded, links) = start(ebpf, how);
        CpuTicks { loaded, links }
    }

    /// Loaded or why not (`None`: not asked for).
    pub(super) fn loaded(&self) -> &Option<Result<(), String>> {
        &self.loaded
    }

    /// The line `-v` lists among the mechanisms: how CPU over time is made, if it is.
    pub(super) fn mechanism(&self) -> Option<String> {
        match (&self.loaded, self.links.len()) {
            (Some(Ok(())), 0) | (None, _) => None,
            (Some(Ok(())), cpus) => Some(format!(
                "CPU over time: threads' run time sampled by a CPU clock at {TICK_HZ} Hz on {cpus} CPUs"
            )),
            (Some(Err(why)), _) => Some(format!(
                "CPU over time: each process's CPU spread over its life (no CPU clock program: {why})"
            )),
        }
    }

    /// The CPU clock program runs now: on how many CPUs (0: it does not).
    pub(super) fn ticking(&self) -> usize {
        self.links.len()
    }

    /// Attaches or detaches the CPU clock program of `ebpf` (a no-op when already so);
    /// returns the CPUs it runs on. Detached, no tick runs anywhere; attached, each tick that
    /// finds an untraced task costs one hash lookup. Err: why it cannot run (not loaded, or
    /// the attach failed: then it stays detached).
    pub(super) fn set(&mut self, ebpf: &mut Ebpf, on: bool) -> Result<usize, String> {
        let attached = !self.links.is_empty();
        if on == attached {
            return Ok(self.links.len());
        }
        if on {
            match &self.loaded {
                Some(Ok(())) => {}
                Some(Err(why)) => return Err(why.clone()),
                None => return Err("the cpu_tick program was not loaded".into()),
            }
            self.links = attach(ebpf)?;
            return Ok(self.links.len());
        }
        let prog = program(ebpf)?;
        let mut links = std::mem::take(&mut self.links).into_iter();
        while let Some(link) = links.next() {
            if let Err(e) = prog.detach(link) {
                // What is still attached stays known, to be detached again.
                self.links = links.collect();
                return Err(format!("detaching cpu_tick: {e}"));
            }
        }
        Ok(0)
    }
}

fn start(ebpf: &mut Ebpf, how: CpuClock) -> (Option<Result<(), String>>, Vec<PerfEventLinkId>) {
    if how == CpuClock::Off {
        return (None, Vec::new());
    }
    if let Err(why) = load(ebpf) {
        return (Some(Err(why)), Vec::new());
    }
    if how == CpuClock::Loaded {
        return (Some(Ok(())), Vec::new());
    }
    match attach(ebpf) {
        Ok(links) => (Some(Ok(())), links),
        Err(why) => (Some(Err(why)), Vec::new()),
    }
}
