//! Running traced commands: a session loads the programs once (or connects to the agent) and
//! runs one traced command after another ([`session`]) through one event loop
//! ([`event_loop`], [`run_loop`]); [`launch`] starts the command held until it is tracked,
//! [`attach`] follows running processes, [`pidfd`] proves a pid is still the process meant
//! before it is signalled, [`outputs`] opens the files a trace writes before CMD starts,
//! [`cgroup_peak`] and [`delayacct`] are the optional kernel accounting a run switches on.

pub mod agent;
pub(crate) mod cgroup_peak;
pub(crate) mod delayacct;
pub(crate) mod event_loop;
pub mod launch;
pub mod metrics_http;
pub(crate) mod outputs;
pub(crate) mod run_loop;
pub mod session;

pub use crate::kernel::source::Programs;
pub use session::{Run, RunError, RunOptions, Session, SessionOptions, Spawn, Start};
