//! Whose programs a watch reads: loaded here (root), or a `spacetime agent`'s, which loads a
//! system-mode set for the watch and, for a user who is not root, filters it by that user's
//! uid in the kernel (a non-root watch sees its own exits only).

use super::{filter::Filter, WatchArgs, TASKSTATS_RCVBUF};
use crate::{
    kernel::remote::{client::AgentConn, proto::want},
    run::source::{agent::AgentSource, own::OwnSource, KernelSource},
};

/// Through the agent when its socket answers (not for `--pid-tree`, which tracks a tree in
/// the kernel, nor with `--no-agent`); otherwise programs loaded here (root only), with a
/// taskstats listener of their own unless `--no-taskstats`.
pub(super) fn open(args: &WatchArgs, filter: &Filter) -> anyhow::Result<Box<dyn KernelSource>> {
    let mut why = None;
    if !args.no_agent && filter.pid_tree().is_none() {
        let path = crate::kernel::remote::socket_path();
        match AgentConn::connect_for(&path, want::WATCH, 0) {
            Ok(conn) => return Ok(Box::new(AgentSource::new(conn))),
            Err(e) => {
                log::debug!("{e}; loading the programs here");
                why = Some((e, path));
            }
        }
    }
    let probes = match (super::load_probes(args, filter), why) {
        (Ok(p), _) => p,
        (Err(e), Some((agent, path))) => {
            return Err(crate::kernel::remote::client::instead(e, agent, &path))
        }
        (Err(e), None) => return Err(e),
    };
    // Opened after the programs are attached: every taskstats record has its BPF exit.
    let taskstats = (!args.no_taskstats).then_some(TASKSTATS_RCVBUF);
    Ok(Box::new(OwnSource::with(probes, taskstats)?))
}
