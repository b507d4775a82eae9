//! `spacetime agent`: its options, and the daemon ([`crate::run::agent`]) started with them.

use std::{path::PathBuf, time::Duration};

use crate::run::agent::{
    Config, AGENT_QUEUED_BYTES, IDLE_TIMEOUT, PROCESSES_PER_SESSION, RSS_LINGER,
};

/// `spacetime agent [--socket PATH]`.
#[derive(Debug, clap::Args)]
pub struct AgentArgs {
    /// Where to listen (default: $SPACETIME_SOCKET, else /run/spacetime/agent.sock); its
    /// directory must be root's and writable by no one else
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Most processes one non-root session may have traced at once (the kernel refuses to
    /// trace forks beyond it, and the client's report counts them); one user's sessions
    /// together may have this many too
    #[arg(long, value_name = "N", default_value_t = PROCESSES_PER_SESSION,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub session_limit: u32,
    /// Seconds a connection may hold a session with nothing traced, or a watch leave what
    /// waits for it unread, before the agent closes it
    #[arg(long, value_name = "SECS", default_value_t = IDLE_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout: u64,
    /// Seconds the rss_stat program stays attached after the last session that shows memory
    /// over time: a trace that starts meanwhile need not wait for the kernel to attach it
    /// again (15-25 ms); 0 detaches it at once
    #[arg(long, value_name = "SECS", default_value_t = RSS_LINGER.as_secs())]
    pub rss_linger: u64,
    /// MiB of records the agent may hold for clients that have not read them yet, all
    /// together (a user's share is a quarter, one connection's an eighth); beyond it the
    /// records of the user holding the most are dropped first, and counted as that user's
    #[arg(long, value_name = "MIB", default_value_t = (AGENT_QUEUED_BYTES >> 20) as u64,
          value_parser = clap::value_parser!(u64).range(8..=65536))]
    pub queue_mib: u64,
}

/// Entry point of the subcommand: 0 after a SIGTERM, SIGINT or SIGHUP, 125 when it cannot
/// serve.
pub fn main(args: AgentArgs) -> i32 {
    let config = Config {
        socket: args.socket,
        session_limit: args.session_limit,
        idle_timeout: Duration::from_secs(args.idle_timeout),
        rss_linger: Duration::from_secs(args.rss_linger),
        queued_bytes: (args.queue_mib as usize) << 20,
    };
    match crate::run::agent::serve(&config) {
        Ok(()) => 0,
        Err(e) => {
            crate::errln!("spacetime agent: {e:#}");
            crate::util::exit_code::EXIT_OWN_FAILURE
        }
    }
}
