//! The summary written to stderr when `watch` stops: exits seen, top comms, biggest peaks,
//! loss and taskstats coverage; and its machine-readable form (`--summary-json`).

use std::{fmt::Write as _, time::Duration};

use serde::Serialize;

use crate::model::table::TableStats;
use crate::{model::exit_view::ExitView, report::metrics::Metrics};
use crate::{
    report::{selfstats::OwnCost, text::count},
    util::{term, units},
};

/// Processes with the biggest peaks listed.
const TOP_PEAKS: usize = 5;

#[derive(Debug, Default)]
pub struct Peaks {
    /// (peak bytes, pid, command), biggest first.
    top: Vec<(u64, u32, String)>,
}

impl Peaks {
    pub fn observe(&mut self, x: &ExitView) {
        let Some(peak) = x.peak_rss_bytes else {
            return;
        };
        if self.top.len() == TOP_PEAKS && self.top.last().is_some_and(|l| l.0 >= peak) {
            return;
        }
        // Escaped for the terminal as it is kept: the summary prints it as is.
        let mut cmd = term::fit_command(&term::join(x.image.argv()), 60);
        if cmd.is_empty() {
            cmd = format!("[{}]", term::escape(x.comm));
        }
        let at = self.top.partition_point(|t| t.0 >= peak);
        self.top.insert(at, (peak, x.pid, cmd));
        self.top.truncate(TOP_PEAKS);
    }
}

pub struct Final<'a> {
    pub elapsed: Duration,
    pub metrics: &'a Metrics,
    pub peaks: &'a Peaks,
    pub table: TableStats,
    pub filtered: bool,
    /// Why exits were not cross-checked against taskstats, when they were not.
    pub taskstats_unavailable: Option<String>,
    /// What the taskstats line says instead of the three counts, when it cannot give them.
    pub coverage_note: Option<String>,
    /// Why the agent went away, when it did.
    pub agent_gone: Option<String>,
}

/// The summary as `--summary-json` writes it: one object.
#[derive(Debug, Serialize)]
pub struct Json<'a> {
    pub elapsed_ns: u64,
    /// "SIGINT", "SIGTERM", "SIGHUP", "duration", "count", "output_closed" or "output_failed".
    pub stopped_by: &'a str,
    /// Every exit seen, filters or not.
    pub process_exits: u64,
    pub thread_exits: u64,
    /// Exits reported (matching the filters).
    pub reported: u64,
    /// Exit records that never became a report: ring buffer full, or undecodable.
    pub lost_events: u64,
    pub loss: Loss,
    /// Records the kernel-side filter kept from being sent (fork, exec with argv, image end
    /// of processes that do not pass `--uid`, `--cgroup` or `--pid-tree`).
    pub kernel_filtered: u64,
    /// Exits of the watched uid's processes the watcher could not ptrace at their exit
    /// (a non-root watch through the agent): not reported.
    pub hidden: u64,
    /// argv cut to keep the live table within `--argv-budget`.
    pub argv_evicted: u64,
    /// Exec lines written (`--events exec`).
    pub execs_reported: u64,
    pub taskstats: TaskstatsJson<'a>,
    pub spacetime: &'a OwnCost,
}

#[derive(Debug, Serialize)]
pub struct Loss {
    pub ringbuf_lost: u64,
    /// Records the agent dropped because the watch read too slowly.
    pub agent_queue_full: u64,
    /// Why the agent went away, when it did: what came after is missing, uncounted.
    pub agent_gone: Option<String>,
    pub decode_errors: u64,
    pub read_failures: u64,
    /// Taskstats receive overruns (records the kernel dropped).
    pub enobufs: u64,
}

#[derive(Debug, Serialize)]
pub struct TaskstatsJson<'a> {
    pub available: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<&'a str>,
    pub matched: u64,
    pub bpf_only: u64,
    pub taskstats_only: u64,
    /// Why `bpf_only` and `taskstats_only` are not counted (an old taskstats version).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<&'a str>,
}

/// Loss as the summary counts it: records lost in the ring buffer or the agent's queue, or
/// undecodable.
fn lost_events(m: &Metrics) -> u64 {
    m.ringbuf_lost + m.agent_queue_full + m.decode_errors
}

pub fn json<'a>(f: &'a Final, stopped_by: &'a str, own: &'a OwnCost) -> Json<'a> {
    let m = f.metrics;
    Json {
        elapsed_ns: u64::try_from(f.elapsed.as_nanos()).unwrap_or(u64::MAX),
        stopped_by,
        process_exits: m.seen_processes,
        thread_exits: m.seen_threads,
        reported: m.reported,
        lost_events: lost_events(m),
        kernel_filtered: m.kernel_filtered,
        hidden: m.hidden,
        argv_evicted: f.table.argv_evicted,
        execs_reported: m.execs_reported,
        loss: Loss {
            ringbuf_lost: m.ringbuf_lost,
            agent_queue_full: m.agent_queue_full,
            agent_gone: f.agent_gone.clone(),
            decode_errors: m.decode_errors,
            read_failures: m.read_failures,
            enobufs: m.enobufs,
        },
        taskstats: TaskstatsJson {
            available: f.taskstats_unavailable.is_none(),
            unavailable_reason: f.taskstats_unavailable.as_deref(),
            matched: m.matched,
            bpf_only: m.bpf_only,
            taskstats_only: m.taskstats_only,
            note: f
                .coverage_note
                .as_deref()
                .filter(|_| f.taskstats_unavailable.is_none()),
        },
        spacetime: own,
    }
}

/// The summary for stderr, fitted to its terminal (else `COLUMNS`, else 120 columns).
pub fn render(f: &Final) -> String {
    use std::io::IsTerminal;
    let fd = std::io::stderr().is_terminal().then(std::io::stderr);
    render_at(f, term::columns(fd, false).unwrap_or(120))
}

/// The summary with every line at most `width` columns: long lines wrap between words under
/// their label, a command is cut keeping its program's name.
pub fn render_at(f: &Final, width: usize) -> String {
    let width = width.max(20);
    let mut out = String::new();
    for l in render_lines(f, width).lines() {
        if term::width(l) <= width {
            let _ = writeln!(out, "{l}");
            continue;
        }
        let indent = if l.starts_with("  ") { 17 } else { 2 };
        for w in term::wrap(l, width, indent) {
            let _ = writeln!(out, "{w}");
        }
    }
    term::localize(&out).into_owned()
}

fn render_lines(f: &Final, width: usize) -> String {
    let m = f.metrics;
    let mut o = String::new();
    let _ = write!(
        o,
        "spacetime: watched {}: {}",
        units::duration_ns(f.elapsed.as_nanos() as u64),
        count(m.seen_processes, "process exit", "process exits")
    );
    if f.filtered {
        let _ = write!(o, ", {} matching the filters", m.reported);
    }
    if m.seen_threads > 0 {
        let threads = count(m.seen_threads, "thread exit", "thread exits");
        let _ = write!(o, " (and {threads})");
    }
    o.push('\n');
    let top = m.top_comms(8);
    if !top.is_empty() {
        let list: Vec<String> = top
            .iter()
            .map(|(c, n)| format!("{} {n}", term::escape(c.as_bytes())))
            .collect();
        let _ = writeln!(o, "  top comms:     {}", list.join(" · "));
    }
    for (i, (peak, pid, cmd)) in f.peaks.top.iter().enumerate() {
        let label = if i == 0 { "biggest peaks:" } else { "" };
        let head = format!("  {label:<14} {:>9}  pid {pid:<7} ", units::bytes(*peak));
        let room = width.saturating_sub(term::width(&head)).max(12);
        // Cut, not wrapped: the line then fits as it is.
        let cmd = term::fit_command(cmd, room);
        let _ = writeln!(o, "{head}{cmd}");
    }
    loss_lines(f, &mut o);
    table_lines(f, &mut o);
    o
}

/// What was lost, and how taskstats matched the kernel's records.
fn loss_lines(f: &Final, o: &mut String) {
    let m = f.metrics;
    let lost = lost_events(m);
    if let Some(why) = &f.agent_gone {
        let _ = writeln!(
            o,
            "  loss:          unknown: the agent went away ({}); exits after that were not seen",
            term::escape(why.as_bytes())
        );
    }
    let agent_queue = match m.agent_queue_full {
        0 => String::new(),
        n => format!("agent queue full: {n}, "),
    };
    let _ = writeln!(
        o,
        "  loss:          {} (ring buffer full: {}, {agent_queue}undecodable: {}, kernel read \
         failures: {}, taskstats ENOBUFS: {})",
        if lost + m.read_failures + m.enobufs == 0 {
            "none".to_string()
        } else {
            format!("{lost} events lost")
        },
        m.ringbuf_lost,
        m.decode_errors,
        m.read_failures,
        m.enobufs
    );
    match &f.coverage_note {
        Some(note) => {
            let _ = writeln!(o, "  taskstats:     {}", term::escape(note.as_bytes()));
        }
        None => {
            let _ = writeln!(
                o,
                "  taskstats:     {} matched, {} BPF only, {} taskstats only",
                m.matched, m.bpf_only, m.taskstats_only
            );
        }
    }
}

/// What the process table and the kernel filter left out.
fn table_lines(f: &Final, o: &mut String) {
    let (m, t) = (f.metrics, f.table);
    if t.duplicate_exits > 0 {
        let _ = writeln!(
            o,
            "  duplicates:    {} second end records of a process (threads exiting together) \
             taken as thread exits",
            t.duplicate_exits
        );
    }
    if t.missed_at_start > 0 {
        let _ = writeln!(
            o,
            "  at start:      {} processes ended while the kernel programs were being attached",
            t.missed_at_start
        );
    }
    if m.kernel_filtered > 0 {
        let _ = writeln!(
            o,
            "  kernel filter: {} records not sent (fork, exec with argv, image end)",
            m.kernel_filtered
        );
    }
    if m.hidden > 0 {
        let _ = writeln!(
            o,
            "  hidden:        {} exits of processes this user could not ptrace at their exit \
             (setuid, setgid or capability programs, or not dumpable)",
            m.hidden
        );
    }
    if t.argv_evicted > 0 {
        let _ = writeln!(
            o,
            "  argv budget:   {} argv cut to their first {} bytes ({} freed; raise \
             --argv-budget)",
            t.argv_evicted,
            crate::model::table::KEEP_BYTES,
            units::bytes(t.argv_evicted_bytes)
        );
    }
    if t.unowned_thread_exits > 0 {
        let _ = writeln!(
            o,
            "  threads:       {} thread exits without a row (their process was not in the table)",
            t.unowned_thread_exits
        );
    }
    if t.full + t.stale + t.unknown_exits + t.args_gaps > 0 {
        let _ = writeln!(
            o,
            "  table:         {} exits of unknown processes, {} stale entries, {} not added \
             (table full), {} argv gaps",
            t.unknown_exits, t.stale, t.full, t.args_gaps
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fin<'a>(m: &'a Metrics, peaks: &'a Peaks, unavailable: Option<&str>) -> Final<'a> {
        Final {
            elapsed: Duration::from_millis(1500),
            metrics: m,
            peaks,
            table: TableStats::default(),
            filtered: true,
            taskstats_unavailable: unavailable.map(str::to_string),
            coverage_note: unavailable.map(|_| "not checked".to_string()),
            agent_gone: None,
        }
    }

    #[test]
    fn json_keys() {
        let mut m = Metrics::new(true, crate::report::metrics::DEFAULT_COMM_LIMIT);
        m.seen_processes = 12;
        m.seen_threads = 3;
        m.reported = 5;
        m.ringbuf_lost = 2;
        m.decode_errors = 1;
        m.read_failures = 4;
        m.enobufs = 7;
        m.matched = 11;
        m.bpf_only = 1;
        m.kernel_filtered = 9;
        m.execs_reported = 6;
        let peaks = Peaks::default();
        let own = OwnCost::default();
        let mut f = fin(&m, &peaks, None);
        f.table.argv_evicted = 8;
        let v = serde_json::to_value(json(&f, "count", &own)).expect("serialize");
        assert_eq!(
            v,
            serde_json::json!({
                "elapsed_ns": 1_500_000_000u64, "stopped_by": "count",
                "process_exits": 12, "thread_exits": 3, "reported": 5, "lost_events": 3,
                "loss": {"ringbuf_lost": 2, "agent_queue_full": 0, "agent_gone": null,
                         "decode_errors": 1, "read_failures": 4, "enobufs": 7},
                "kernel_filtered": 9, "hidden": 0, "argv_evicted": 8, "execs_reported": 6,
                "taskstats": {"available": true, "matched": 11, "bpf_only": 1, "taskstats_only": 0},
                "spacetime": {"user_ns": 0, "sys_ns": 0, "peak_rss_bytes": 0,
                              "bpf_stats_enabled": false, "kernel_programs": [],
                              "load_us": 0}
            })
        );
    }

    #[test]
    fn json_says_why_taskstats_is_missing() {
        let m = Metrics::new(false, crate::report::metrics::DEFAULT_COMM_LIMIT);
        let peaks = Peaks::default();
        let own = OwnCost::default();
        let f = fin(&m, &peaks, Some("--no-taskstats"));
        let v = serde_json::to_value(json(&f, "SIGINT", &own)).expect("serialize");
        assert_eq!(
            v["taskstats"],
            serde_json::json!({"available": false, "unavailable_reason": "--no-taskstats",
                               "matched": 0, "bpf_only": 0, "taskstats_only": 0})
        );
        assert_eq!(v["stopped_by"], "SIGINT");
    }
}
