//! The summary written to stderr when `watch` stops: exits seen, top comms, biggest peaks,
//! loss and taskstats coverage.

use std::{fmt::Write as _, time::Duration};

use super::{exit::ExitView, metrics::Metrics, table::TableStats};
use crate::units;

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
        let mut cmd = String::new();
        for (i, a) in x.image.argv().enumerate() {
            if i > 0 {
                cmd.push(' ');
            }
            cmd.push_str(&String::from_utf8_lossy(a));
            if cmd.len() > 60 {
                cmd.truncate(cmd.floor_boundary(60));
                cmd.push('…');
                break;
            }
        }
        if cmd.is_empty() {
            cmd = format!("[{}]", x.comm);
        }
        let at = self.top.partition_point(|t| t.0 >= peak);
        self.top.insert(at, (peak, x.pid, cmd));
        self.top.truncate(TOP_PEAKS);
    }
}

trait FloorBoundary {
    fn floor_boundary(&self, i: usize) -> usize;
}

impl FloorBoundary for String {
    fn floor_boundary(&self, i: usize) -> usize {
        let mut i = i.min(self.len());
        while !self.is_char_boundary(i) {
            i -= 1;
        }
        i
    }
}

pub struct Final<'a> {
    pub elapsed: Duration,
    pub metrics: &'a Metrics,
    pub peaks: &'a Peaks,
    pub table: TableStats,
    pub filtered: bool,
    pub coverage_note: Option<String>,
}

pub fn render(f: &Final) -> String {
    let m = f.metrics;
    let mut o = String::new();
    let _ = write!(
        o,
        "spacetime: watched {}: {} process exits",
        units::duration_ns(f.elapsed.as_nanos() as u64),
        m.seen_processes
    );
    if f.filtered {
        let _ = write!(o, ", {} matching the filters", m.reported);
    }
    if m.seen_threads > 0 {
        let _ = write!(o, " (and {} thread exits)", m.seen_threads);
    }
    o.push('\n');
    let top = m.top_comms(8);
    if !top.is_empty() {
        let list: Vec<String> = top.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let _ = writeln!(o, "  top comms:     {}", list.join(" · "));
    }
    for (i, (peak, pid, cmd)) in f.peaks.top.iter().enumerate() {
        let label = if i == 0 { "biggest peaks:" } else { "" };
        let _ = writeln!(
            o,
            "  {label:<14} {:>9}  pid {pid:<7} {cmd}",
            units::bytes(*peak)
        );
    }
    let lost = m.ringbuf_lost + m.decode_errors;
    let _ = writeln!(
        o,
        "  loss:          {} (ring buffer full: {}, undecodable: {}, kernel read failures: {}, \
         taskstats ENOBUFS: {})",
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
            let _ = writeln!(o, "  taskstats:     {note}");
        }
        None => {
            let _ = writeln!(
                o,
                "  taskstats:     {} matched, {} BPF only, {} taskstats only",
                m.matched, m.bpf_only, m.taskstats_only
            );
        }
    }
    let t = f.table;
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
    if t.full + t.stale + t.unknown_exits + t.args_gaps > 0 {
        let _ = writeln!(
            o,
            "  table:         {} exits of unknown processes, {} stale entries, {} not added \
             (table full), {} argv gaps",
            t.unknown_exits, t.stale, t.full, t.args_gaps
        );
    }
    o
}
