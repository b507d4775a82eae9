//! `spacetime watch` options, and the parsers for their values.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;

use crate::report::metrics;
use crate::util::parse::buffer_size;
pub use crate::util::parse::{bytes as parse_bytes, duration as parse_duration};

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Only processes whose name (comm) matches PATTERN (glob; repeatable)
    #[arg(long, value_name = "PATTERN")]
    pub comm: Vec<String>,
    /// Only processes whose executable matches GLOB; a pattern without '/' matches the file
    /// name (repeatable)
    #[arg(long, value_name = "GLOB")]
    pub exe: Vec<String>,
    /// Only processes of this user: a uid or a user name (repeatable)
    #[arg(long, value_name = "USER")]
    pub uid: Vec<String>,
    /// Only processes in this cgroup (v2 path such as /system.slice/cron.service) or below it;
    /// glob characters match the whole path (repeatable)
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<String>,
    /// Only processes whose peak RSS reached SIZE (K, M, G suffixes)
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub min_rss: Option<u64>,
    /// Only processes that ran at least this long (e.g. 500ms, 2s, 1m)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub min_runtime: Option<Duration>,
    /// Only PID and the processes it forks from now on (and their descendants)
    #[arg(long, value_name = "PID")]
    pub pid_tree: Option<u32>,
    /// Only processes that failed: a non-zero exit code or a fatal signal
    #[arg(long)]
    pub failed: bool,
    /// Also report thread exits
    #[arg(long)]
    pub threads: bool,
    /// Show each process's parent chain (who forked whom, kept while descendants live)
    #[arg(long)]
    pub ancestry: bool,
    /// Show every program image of a process (one per exec) with its own peak RSS
    #[arg(long)]
    pub images: bool,
    /// JSON lines on stdout (or FILE): one object per exit
    #[arg(long)]
    pub json: bool,
    /// Append the output to FILE instead of writing it to stdout (`-`: standard output);
    /// SIGHUP reopens FILE (after a log rotation) instead of stopping the watch
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Table: do not cut lines to the terminal's width, and add a CGROUP column
    #[arg(short = 'w', long)]
    pub wide: bool,
    /// When the watch stops, write its summary to FILE as one JSON object (exits seen, loss,
    /// taskstats coverage, spacetime's own CPU, memory and in-kernel time; `-`: standard
    /// output, after the last row)
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
    /// Stop after this long (e.g. 30s, 5m)
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Stop after N exits have been reported (at least 1)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Serve OpenMetrics on ADDR:PORT (a bare port listens on 127.0.0.1)
    #[arg(long, value_name = "ADDR:PORT", value_parser = parse_listen)]
    pub metrics: Option<SocketAddr>,
    /// Distinct program names (comm) given their own metrics series; exits of later ones are
    /// counted under comm="[other programs]" (a value no program can take: comms are at most
    /// 15 bytes)
    #[arg(long, value_name = "N", default_value_t = metrics::DEFAULT_COMM_LIMIT,
          value_parser = parse_comm_limit)]
    pub metrics_comm_limit: usize,
    /// Do not cross-check exits against the kernel's taskstats records
    #[arg(long)]
    pub no_taskstats: bool,
    /// Load the kernel programs here (root) even when a `spacetime agent` answers on its
    /// socket (through the agent, a user who is not root sees its own exits only)
    #[arg(long)]
    pub no_agent: bool,
    /// Size of the kernel's ring buffer (bytes; K, M, G suffixes; rounded up to a power of two)
    #[arg(long, value_name = "SIZE", default_value = "16M", value_parser = buffer_size)]
    pub ring_buffer: u32,
    /// Most processes kept in the live process table
    #[arg(long, value_name = "N", default_value_t = 131072)]
    pub max_processes: usize,
    /// Also serve histograms of run time and peak RSS by comm (and by unit or container with
    /// --metrics-label), buckets 2^(1/8) apart: a quantile from them is within 9.1 % of the
    /// truth. About 320 series per comm
    #[arg(long)]
    pub metrics_histograms: bool,
    /// Also count exits and CPU time by systemd unit or container, in their own metric
    /// families, bounded like comm (repeatable)
    #[arg(long, value_name = "LABEL", value_enum)]
    pub metrics_label: Vec<metrics::identity::IdLabel>,
    /// What to report: exit (the default), exec (each program as it starts, with its argv and
    /// parent chain), or both: exec,exit
    #[arg(long, value_name = "LIST", default_value = "exit", value_parser = parse_events)]
    pub events: Events,
    /// Most bytes of argv kept for running processes (K, M, G suffixes); beyond it the
    /// largest are cut to their first 256 bytes, counted in the summary
    #[arg(long, value_name = "SIZE", default_value = "32M", value_parser = parse_bytes)]
    pub argv_budget: u64,
}

/// The events `--events` lists, as spelt there.
pub const EVENT_NAMES: [&str; 2] = ["exec", "exit"];

/// Which events `--events` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Events {
    pub exec: bool,
    pub exit: bool,
}

fn parse_events(s: &str) -> Result<Events, String> {
    let mut e = Events {
        exec: false,
        exit: false,
    };
    for part in s.split(',').map(str::trim) {
        match part {
            "exec" => e.exec = true,
            "exit" => e.exit = true,
            _ => {
                return Err(format!(
                    "{part:?} is not an event (use exec, exit or exec,exit)"
                ))
            }
        }
    }
    Ok(e)
}

fn parse_comm_limit(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=100_000).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} must be a number from 1 to 100000")),
    }
}

/// Parses `ADDR:PORT`, `[V6]:PORT` or a bare `PORT` (on 127.0.0.1).
pub fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(port) = s.trim().parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.trim()
        .parse()
        .map_err(|_| format!("{s:?} is not ADDR:PORT (e.g. 127.0.0.1:9090)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events() {
        let both = Events {
            exec: true,
            exit: true,
        };
        assert_eq!(parse_events("exec,exit"), Ok(both));
        assert_eq!(parse_events("exit, exec"), Ok(both));
        assert_eq!(
            parse_events("exec"),
            Ok(Events {
                exec: true,
                exit: false
            })
        );
        assert!(parse_events("fork").is_err());
        assert!(parse_events("").is_err());
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(
            parse_listen("9100"),
            Ok(SocketAddr::from(([127, 0, 0, 1], 9100)))
        );
        assert_eq!(
            parse_listen("0.0.0.0:80"),
            Ok(SocketAddr::from(([0, 0, 0, 0], 80)))
        );
        assert!(parse_listen("[::1]:9").is_ok());
        assert!(parse_listen("localhost").is_err());
    }
}
