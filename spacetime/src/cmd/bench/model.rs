//! What a bench measured: each run's figures, each command's runs, and their statistics.

use std::ffi::OsString;

use serde::Serialize;

use super::stats::Stats;

/// One command to benchmark: the text the user gave (shown and exported) and the argv run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BenchCommand {
    /// The command as given, exact bytes.
    pub text: Vec<u8>,
    /// What is exec'd: `sh -c TEXT`, or TEXT split like a shell (`--no-shell`).
    pub argv: Vec<OsString>,
}

impl BenchCommand {
    /// The text for a terminal: controls and invalid UTF-8 escaped.
    pub fn shown(&self) -> String {
        crate::util::term::escape(&self.text)
    }

    /// The text as a JSON or CSV string: exact when it is UTF-8.
    pub fn lossy(&self) -> String {
        String::from_utf8_lossy(&self.text).into_owned()
    }
}

/// One traced run's figures, from its trace report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunFigures {
    pub wall_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    /// The largest single-process peak RSS.
    pub peak_rss_bytes: u64,
    /// The tree-wide concurrent RSS peak; None without the kernel's RSS tracking.
    pub tree_peak_rss_bytes: Option<u64>,
    pub processes: u64,
    /// CMD's status as a shell gives it (128+N for signal N).
    pub exit_code: i32,
    /// Records that never reached spacetime, undecodable records and argv gaps: a run with
    /// any is flagged, its figures may miss something.
    pub lost_events: u64,
    /// The run's memory cgroup peak (`--cgroup-peak`): every page charged once.
    pub cgroup_peak_bytes: Option<u64>,
}

impl RunFigures {
    pub fn complete(&self) -> bool {
        self.lost_events == 0
    }
}

/// A command's runs, in order.
#[derive(Debug, Clone)]
pub struct CommandRuns {
    pub command: BenchCommand,
    pub runs: Vec<RunFigures>,
}

/// A command's statistics: what every export and the terminal summary show.
#[derive(Debug, Clone, Serialize)]
pub struct CommandResult {
    pub command: String,
    /// The command's exact bytes in base64 when they are not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_b64: Option<String>,
    pub runs: usize,
    pub exit_codes: Vec<i32>,
    pub wall_ns: Stats,
    pub user_ns: Stats,
    pub sys_ns: Stats,
    pub peak_rss_bytes: Stats,
    /// Null when a run has no tree peak (no kernel RSS tracking).
    pub tree_peak_rss_bytes: Option<Stats>,
    pub processes: Stats,
    /// With `--cgroup-peak`, when every run has one: the distinct-page peak of the tree (pages
    /// shared after fork counted once, page cache included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cgroup_peak_bytes: Option<Stats>,
    /// Per run: records lost, undecodable or cut (0 for a complete run).
    pub lost_events: Vec<u64>,
    /// Indices of the runs with loss: their figures may miss something.
    pub incomplete_runs: Vec<usize>,
    /// The command escaped for a terminal.
    #[serde(skip)]
    pub shown: String,
    /// The command's exact bytes (the CSV's).
    #[serde(skip)]
    pub text: Vec<u8>,
}

impl CommandResult {
    /// None for a command without runs.
    pub fn of(c: &CommandRuns) -> Option<CommandResult> {
        let pick = |f: fn(&RunFigures) -> u64| Stats::of(&c.runs.iter().map(f).collect::<Vec<_>>());
        let tree: Option<Vec<u64>> = c.runs.iter().map(|r| r.tree_peak_rss_bytes).collect();
        let cgroup: Option<Vec<u64>> = c.runs.iter().map(|r| r.cgroup_peak_bytes).collect();
        let b64 = std::str::from_utf8(&c.command.text).is_err().then(|| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(&c.command.text)
        });
        Some(CommandResult {
            command: c.command.lossy(),
            command_b64: b64,
            runs: c.runs.len(),
            exit_codes: c.runs.iter().map(|r| r.exit_code).collect(),
            wall_ns: pick(|r| r.wall_ns)?,
            user_ns: pick(|r| r.user_ns)?,
            sys_ns: pick(|r| r.sys_ns)?,
            peak_rss_bytes: pick(|r| r.peak_rss_bytes)?,
            tree_peak_rss_bytes: tree.and_then(|v| Stats::of(&v)),
            processes: pick(|r| r.processes)?,
            cgroup_peak_bytes: cgroup.and_then(|v| Stats::of(&v)),
            lost_events: c.runs.iter().map(|r| r.lost_events).collect(),
            incomplete_runs: (c.runs.iter().enumerate())
                .filter(|(_, r)| !r.complete())
                .map(|(i, _)| i)
                .collect(),
            shown: c.command.shown(),
            text: c.command.text.clone(),
        })
    }

    /// Runs whose command exited non-zero.
    pub fn failed_runs(&self) -> usize {
        self.exit_codes.iter().filter(|&&c| c != 0).count()
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A command's result from runs of the given wall times and peaks (the tree peak one page
    /// above the process peak, user half and system a quarter of the wall time).
    pub(crate) fn result(text: &str, walls: &[u64], peaks: &[u64]) -> CommandResult {
        let runs = walls
            .iter()
            .zip(peaks)
            .map(|(&w, &p)| RunFigures {
                wall_ns: w,
                user_ns: w / 2,
                sys_ns: w / 4,
                peak_rss_bytes: p,
                tree_peak_rss_bytes: Some(p + 4096),
                processes: 1,
                exit_code: 0,
                lost_events: 0,
                cgroup_peak_bytes: None,
            })
            .collect();
        CommandResult::of(&CommandRuns {
            command: BenchCommand {
                text: text.as_bytes().to_vec(),
                argv: vec![],
            },
            runs,
        })
        .expect("runs")
    }
}
