//! Following RSS in the kernel (`rss_stat`), switched on and off while loaded: the agent
//! attaches it only while a session follows memory.

use aya::{programs::raw_trace_point::RawTracePointLinkId, Ebpf};
use spacetime_common::switch;

use super::{
    attach_raw,
    maps::Maps,
    sessions::{array_mut, map_err},
    LoadError,
};

/// The `rss_stat` program's link while it is attached, and the switch that pauses what
/// starts following an mm.
pub(super) struct RssFollowing {
    link: Option<RawTracePointLinkId>,
    /// `rss_stat`, or its build for the kernel (see [`super::Atomics`]).
    program: &'static str,
    /// `SWITCHES`, taken out of the loaded object.
    switches: Maps,
}

impl RssFollowing {
    /// `link`: `program`'s, attached at load.
    pub(super) fn take(
        ebpf: &mut Ebpf,
        link: Option<RawTracePointLinkId>,
        program: &'static str,
    ) -> Result<RssFollowing, LoadError> {
        Ok(RssFollowing {
            link,
            program,
            switches: Maps::take(ebpf, &["SWITCHES"])?,
        })
    }

    /// Whether the kernel follows RSS changes now (`rss_stat` attached).
    pub(super) fn following(&self) -> bool {
        self.link.is_some()
    }

    /// Attaches or detaches the `rss_stat` program of `ebpf` (a no-op when already so);
    /// `loaded`: it was loaded (else it can only be off). With no session following RSS, no
    /// program runs on every RSS change of the machine. While detached, forks and execs start
    /// following no new mm (its figures would go stale). An mm followed from before keeps its
    /// last figures, and misses the peaks of the pause; its next change once attached again
    /// sets it right (each change reads the counter's exact value).
    pub(super) fn set(&mut self, ebpf: &mut Ebpf, loaded: bool, on: bool) -> Result<(), LoadError> {
        if on == self.following() {
            return Ok(());
        }
        if !loaded {
            return if on {
                Err(LoadError::RssUnavailable)
            } else {
                Ok(())
            };
        }
        const PAUSED: &str = "SWITCHES";
        if on {
            self.link = Some(attach_raw(ebpf, self.program, "rss_stat")?);
            array_mut::<u32>(&mut self.switches, PAUSED)?
                .set(switch::RSS_PAUSED, 0, 0)
                .map_err(map_err(PAUSED))?;
            return Ok(());
        }
        // Paused first: no mm starts being followed once nothing keeps it current.
        array_mut::<u32>(&mut self.switches, PAUSED)?
            .set(switch::RSS_PAUSED, 1, 0)
            .map_err(map_err(PAUSED))?;
        let err = |source| LoadError::Attach {
            tracepoint: "rss_stat",
            source,
        };
        let prog: &mut aya::programs::RawTracePoint = ebpf
            .program_mut(self.program)
            .ok_or(LoadError::MissingProgram(self.program))?
            .try_into()
            .map_err(err)?;
        if let Some(link) = self.link.take() {
            prog.detach(link).map_err(err)?;
        }
        Ok(())
    }
}
