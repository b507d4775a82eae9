//! The agent: a root daemon that loads the kernel programs once and traces for any user who
//! connects, each in a session of its own (`spacetime agent` starts it). [`crate::kernel::remote::proto`]
//! is what travels on its socket, [`crate::kernel::remote::sock`] the socket itself.

mod clients;
mod daemon;
mod finish;
mod hidden;
mod listen;
mod programs;
mod queues;
mod ready;
mod registry;
mod requests;
mod route;
mod users;
pub(crate) mod verify;
mod watchers;

pub use daemon::{serve, Config, IDLE_TIMEOUT, PROCESSES_PER_SESSION};
pub use programs::RSS_LINGER;
pub use queues::AGENT_QUEUED_BYTES;
pub(crate) use ready::who_may_connect;

pub use crate::kernel::remote::{socket_path, DEFAULT_SOCKET, SOCKET_ENV};
