//! Whose programs a watch reads: loaded here (root), or a `spacetime agent`'s, which loads a
//! system-mode set for the watch and, for a user who is not root, filters it by that user's
//! uid in the kernel (a non-root watch sees its own exits only).

use super::{filter::Filter, WatchArgs, TASKSTATS_RCVBUF};
use crate::{
    kernel::remote::proto::want,
    kernel::source::{self, agent::AgentSource, own::OwnSource, KernelSource, Programs},
};

/// Through the agent when its socket answers (not for `--pid-tree`, which tracks a tree in
/// the kernel, nor with `--no-agent`); otherwise programs loaded here (root only), with a
/// taskstats listener of their own unless `--no-taskstats`.
pub(super) fn open(args: &WatchArgs, filter: &Filter) -> anyhow::Result<Box<dyn KernelSource>> {
    let programs = match args.no_agent || filter.pid_tree().is_some() {
        true => Programs::Own,
        false => Programs::AgentElseOwn,
    };
    let agent =
        |conn| -> anyhow::Result<Box<dyn KernelSource>> { Ok(Box::new(AgentSource::new(conn))) };
    let own = || -> anyhow::Result<Box<dyn KernelSource>> {
        let probes = super::load_probes(args, filter)?;
        // Opened after the programs are attached: every taskstats record has its BPF exit.
        let taskstats = (!args.no_taskstats).then_some(TASKSTATS_RCVBUF);
        Ok(Box::new(OwnSource::with(probes, taskstats)?))
    };
    source::open(programs, want::WATCH, 0, || None, agent, own)
}
