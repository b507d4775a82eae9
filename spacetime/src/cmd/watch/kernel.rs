//! Whose programs a watch reads: loaded here (root), or a `spacetime agent`'s, which loads a
//! system-mode set for the watch and, for a user who is not root, filters it by that user's
//! uid in the kernel (a non-root watch sees its own exits only).

use std::{cell::Cell, rc::Rc};

use super::{filter::Filter, WatchArgs};
use crate::{
    kernel::{
        loader::{KernelCounters, KernelLogger, Probes},
        remote::{
            client::AgentConn,
            proto::{self, want},
        },
    },
    report::selfstats::OwnCost,
    run::event_loop::Records,
};

pub(super) enum Kernel {
    Own(Box<Probes>),
    Agent {
        /// The counters the agent last sent.
        counters: Rc<Cell<KernelCounters>>,
        /// Why the agent went away, once it did.
        gone: Rc<std::cell::RefCell<Option<crate::kernel::remote::client::Gone>>>,
        /// Whose exits the agent lets this watch see ([`proto::SEES_ALL`]: everyone's).
        sees_uid: u32,
        ready_ms: f64,
        cpu_at_release: bool,
        /// Why the agent has no taskstats records (None: it sends them).
        taskstats_error: Option<String>,
    },
}

/// The programs, where their records come from, and the kernel programs' logger.
pub(super) type Opened = (Kernel, Box<dyn Records>, Option<KernelLogger>);

/// Through the agent when its socket answers (not for `--pid-tree`, which tracks a tree in
/// the kernel, nor with `--no-agent`); otherwise programs loaded here (root only).
pub(super) fn open(args: &WatchArgs, filter: &Filter) -> anyhow::Result<Opened> {
    let mut why = None;
    if !args.no_agent && filter.pid_tree().is_none() {
        let path = crate::kernel::remote::socket_path();
        match AgentConn::connect_for(&path, want::WATCH, 0) {
            Ok(conn) => {
                let error = &conn.welcome.taskstats_error;
                let kernel = Kernel::Agent {
                    counters: conn.counters.clone(),
                    gone: conn.gone_news.clone(),
                    sees_uid: conn.welcome.sees_uid,
                    ready_ms: conn.ready_ms,
                    cpu_at_release: conn.welcome.cpu_at_release,
                    taskstats_error: (!error.is_empty())
                        .then(|| String::from_utf8_lossy(error).into_owned()),
                };
                return Ok((kernel, Box::new(conn), None));
            }
            Err(e) => {
                log::debug!("{e}; loading the programs here");
                why = Some((e, path));
            }
        }
    }
    let mut probes = match (super::load_probes(args, filter), why) {
        (Ok(p), _) => p,
        (Err(e), Some((agent, path))) => {
            return Err(crate::kernel::remote::client::instead(e, agent, &path))
        }
        (Err(e), None) => return Err(e),
    };
    let ring = probes.take_events()?;
    let logger = probes.take_logger();
    Ok((Kernel::Own(Box::new(probes)), Box::new(ring), logger))
}

impl Kernel {
    pub(super) fn counters(&self) -> Option<KernelCounters> {
        match self {
            Kernel::Own(p) => p.counters().ok(),
            Kernel::Agent { counters, .. } => Some(counters.get()),
        }
    }

    /// Why the agent went away, once it did (the watch stops: nothing more comes).
    pub(super) fn agent_gone(&self) -> Option<String> {
        match self {
            Kernel::Own(_) => None,
            Kernel::Agent { gone, .. } => gone.borrow().as_ref().map(ToString::to_string),
        }
    }

    /// Whether the programs are an agent's.
    pub(super) fn through_agent(&self) -> bool {
        matches!(self, Kernel::Agent { .. })
    }

    /// The uid whose exits alone the agent lets this watch see, when it restricts it.
    pub(super) fn only_uid(&self) -> Option<u32> {
        match self {
            Kernel::Agent { sees_uid, .. } if *sees_uid != proto::SEES_ALL => Some(*sees_uid),
            _ => None,
        }
    }

    pub(super) fn cpu_at_release(&self) -> bool {
        match self {
            Kernel::Own(p) => p.cpu_at_release,
            Kernel::Agent { cpu_at_release, .. } => *cpu_at_release,
        }
    }

    pub(super) fn probes_mut(&mut self) -> Option<&mut Probes> {
        match self {
            Kernel::Own(p) => Some(p),
            Kernel::Agent { .. } => None,
        }
    }

    pub(super) fn own_cost(&self) -> OwnCost {
        match self {
            Kernel::Own(p) => OwnCost::measure(p),
            Kernel::Agent { ready_ms, .. } => OwnCost {
                load_us: (ready_ms * 1e3) as u64,
                ..OwnCost::measure_process()
            },
        }
    }

    /// `-v`: whose programs.
    pub(super) fn tell(&self) {
        match self {
            Kernel::Own(p) => crate::run::session::tell_loaded(p),
            Kernel::Agent { ready_ms, .. } => {
                crate::errln!("spacetime: programs: agent, ready in {ready_ms:.1} ms")
            }
        }
    }
}
