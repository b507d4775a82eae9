//! The agent's connection as a kernel source: the client side of `spacetime agent`
//! ([`client`]), what travels on its socket ([`proto`]) and the socket itself ([`sock`]).
//! Through it a command gets the same ring records and taskstats datagrams as from programs
//! loaded here.

pub(crate) mod client;
mod codes;
pub mod proto;
pub mod sock;

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
