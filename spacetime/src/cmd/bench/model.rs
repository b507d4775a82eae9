//! What a bench measured: each run's figures, each command's runs, and their statistics.

use std::{collections::BTreeMap, ffi::OsString};

use serde::Serialize;

use super::{params::Values, stats::Stats};

/// One benchmark: the command line run (after parameter substitution), its name, its
/// parameter values and the commands run around it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BenchCommand {
    /// The command line, exact bytes.
    pub text: Vec<u8>,
    /// What is exec'd: `SHELL -c TEXT`, or TEXT split like a shell (`--shell none`).
    pub argv: Vec<OsString>,
    /// `--command-name`, its parameters substituted.
    pub name: Option<String>,
    /// Parameter values, in the order the parameters were given.
    pub parameters: Values,
    /// Those the command's text does not mention (shown beside its name).
    pub unused: Values,
    pub hooks: Hooks,
}

/// The commands run around a benchmark, as argv (parameters substituted).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hooks {
    /// Once before its runs.
    pub setup: Option<Vec<OsString>>,
    /// Before each run.
    pub prepare: Option<Vec<OsString>>,
    /// After each run.
    pub conclude: Option<Vec<OsString>>,
    /// Once after its runs.
    pub cleanup: Option<Vec<OsString>>,
}

impl BenchCommand {
    /// For a terminal: the name (or the text, controls and invalid UTF-8 escaped), and the
    /// parameters it does not mention, as hyperfine shows them.
    pub fn shown(&self) -> String {
        let mut s = match &self.name {
            Some(n) => crate::util::term::escape(n.as_bytes()),
            None => crate::util::term::escape(&self.text),
        };
        if !self.unused.is_empty() {
            let p: Vec<String> = self
                .unused
                .iter()
                .map(|(n, v)| format!("{n} = {v}"))
                .collect();
            s.push_str(&format!(
                " ({})",
                crate::util::term::escape(p.join(", ").as_bytes())
            ));
        }
        s
    }

    /// The command line as a JSON or CSV string: exact when it is UTF-8.
    pub fn lossy(&self) -> String {
        String::from_utf8_lossy(&self.text).into_owned()
    }

    /// hyperfine's `command`: the name, else the command line.
    pub fn label(&self) -> String {
        self.name.clone().unwrap_or_else(|| self.lossy())
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
    /// hyperfine's `command`: the name given with -n, else the command line.
    pub command: String,
    /// hyperfine's figures, in its keys and units (seconds).
    #[serde(flatten)]
    pub hyperfine: Hyperfine,
    /// The command line run (parameters substituted), exact when UTF-8.
    pub command_line: String,
    /// The command line's exact bytes in base64 when they are not UTF-8.
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
    /// The command escaped for a terminal, with the parameters it does not mention.
    #[serde(skip)]
    pub shown: String,
    /// The command line's exact bytes (the CSV's).
    #[serde(skip)]
    pub text: Vec<u8>,
    /// The parameter values, in the order given.
    #[serde(skip)]
    pub params: Values,
}

/// What hyperfine's `--export-json` writes for a command, from the same runs: times in
/// seconds, `memory_usage_byte` (hyperfine 1.19's) the largest process's peak of each run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Hyperfine {
    pub mean: f64,
    /// Null for a single run.
    pub stddev: Option<f64>,
    pub median: f64,
    /// Mean user and system CPU time.
    pub user: f64,
    pub system: f64,
    pub min: f64,
    pub max: f64,
    pub times: Vec<f64>,
    pub memory_usage_byte: Vec<u64>,
    /// The parameter values, when the command has any.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub parameters: BTreeMap<String, String>,
}

impl Hyperfine {
    fn of(wall: &Stats, user: &Stats, sys: &Stats, peak: &Stats, params: &Values) -> Hyperfine {
        let s = |ns: f64| ns / 1e9;
        Hyperfine {
            mean: s(wall.mean),
            stddev: wall.stddev.map(s),
            median: s(wall.median),
            user: s(user.mean),
            system: s(sys.mean),
            min: s(wall.min as f64),
            max: s(wall.max as f64),
            times: wall.values.iter().map(|&v| s(v as f64)).collect(),
            memory_usage_byte: peak.values.clone(),
            parameters: params.iter().cloned().collect(),
        }
    }
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
        let (wall_ns, user_ns, sys_ns) = (
            pick(|r| r.wall_ns)?,
            pick(|r| r.user_ns)?,
            pick(|r| r.sys_ns)?,
        );
        let peak_rss_bytes = pick(|r| r.peak_rss_bytes)?;
        Some(CommandResult {
            command: c.command.label(),
            hyperfine: Hyperfine::of(
                &wall_ns,
                &user_ns,
                &sys_ns,
                &peak_rss_bytes,
                &c.command.parameters,
            ),
            command_line: c.command.lossy(),
            command_b64: b64,
            runs: c.runs.len(),
            exit_codes: c.runs.iter().map(|r| r.exit_code).collect(),
            wall_ns,
            user_ns,
            sys_ns,
            peak_rss_bytes,
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
            params: c.command.parameters.clone(),
        })
    }

    /// Every run was a single process: its peak is the tree's.
    pub fn single_process(&self) -> bool {
        self.processes.max <= 1
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
                ..BenchCommand::default()
            },
            runs,
        })
        .expect("runs")
    }
}
