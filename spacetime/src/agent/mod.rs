//! `spacetime agent`: a root daemon that loads the kernel programs once and traces for any
//! user who connects, each in a session of its own. [`proto`] is what travels on its socket,
//! [`sock`] the socket itself.

pub mod client;
mod clients;
mod daemon;
pub mod proto;
mod ready;
mod route;
pub mod sock;
pub mod verify;
mod watchers;

pub use daemon::{main, AgentArgs};

/// Where the agent listens unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/spacetime/agent.sock";
/// The environment variable that names another socket.
pub const SOCKET_ENV: &str = "SPACETIME_SOCKET";

/// The socket the clients use: `SPACETIME_SOCKET` or the default.
pub fn socket_path() -> std::path::PathBuf {
    match std::env::var_os(SOCKET_ENV) {
        Some(p) if !p.is_empty() => p.into(),
        _ => DEFAULT_SOCKET.into(),
    }
}
