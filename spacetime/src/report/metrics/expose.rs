//! The exposition: the same families in OpenMetrics 1.0 or in Prometheus's classic text format
//! 0.0.4, chosen per scrape by the `Accept` header.
//!
//! Hand-written rather than with `prometheus-client`: that crate writes OpenMetrics only, and
//! text-format consumers (promtool, older scrapers, curl users) need 0.0.4. The two differ in a
//! few lines per family (counter names, UNIT, info, `# EOF`), which [`Writer`] handles.

use std::fmt::Write as _;

use super::{own::OwnProcess, Buckets, CommStats, Histogram, Metrics, OVERFLOW_COMM};
use super::{RSS_BUCKETS, RUNTIME_BUCKETS, STATUSES};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    OpenMetrics,
    /// Prometheus text format 0.0.4.
    Text,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Format::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// What a family is, and so how each format declares it.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    Info,
}

struct Writer {
    out: String,
    format: Format,
}

impl Writer {
    /// Declares a family; returns the name its samples carry (`_total` for counters, `_info`
    /// for info).
    fn family(&mut self, name: &str, kind: Kind, unit: Option<&str>, help: &str) -> String {
        let (om_type, text_type, suffix) = match kind {
            Kind::Counter => ("counter", "counter", "_total"),
            Kind::Gauge => ("gauge", "gauge", ""),
            Kind::Histogram => ("histogram", "histogram", ""),
            Kind::Info => ("info", "gauge", "_info"),
        };
        let sample = format!("{name}{suffix}");
        match self.format {
            Format::OpenMetrics => {
                let _ = writeln!(self.out, "# TYPE {name} {om_type}");
                if let Some(u) = unit {
                    let _ = writeln!(self.out, "# UNIT {name} {u}");
                }
                let _ = writeln!(self.out, "# HELP {name} {help}");
            }
            Format::Text => {
                let _ = writeln!(self.out, "# HELP {sample} {help}");
                let _ = writeln!(self.out, "# TYPE {sample} {text_type}");
            }
        }
        sample
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// One histogram's samples (its buckets, count and sum) with `labels` before `le`.
    fn histogram(&mut self, name: &str, labels: &[(&str, &str)], b: &Buckets, h: &Histogram) {
        let bucket = format!("{name}_bucket");
        let mut with_le: Vec<(&str, &str)> = labels.to_vec();
        with_le.push(("le", ""));
        let mut total = 0;
        for (le, cum) in b.les.iter().zip(h.cumulative(b)) {
            *with_le.last_mut().expect("le") = ("le", le);
            self.sample(&bucket, &with_le, cum);
            total = cum;
        }
        self.sample(&format!("{name}_count"), labels, total);
        self.sample(&format!("{name}_sum"), labels, float(h.sum()));
    }
}

/// Renders every family in `format`.
pub fn render(m: &Metrics, format: Format) -> String {
    let mut w = Writer {
        out: String::with_capacity(8192 + m.by_comm.len() * 160),
        format,
    };
    build_info(&mut w);
    exits(&mut w, m);
    for b in &m.by_identity {
        by_identity(&mut w, b, m.histograms);
    }
    let seen = w.family(
        "spacetime_watch_seen_exits",
        Kind::Counter,
        None,
        "Every exit the kernel reported, filtered out or not.",
    );
    w.sample(&seen, &[("kind", "process")], m.seen_processes);
    w.sample(&seen, &[("kind", "thread")], m.seen_threads);
    w.family(
        "spacetime_watch_runtime_seconds",
        Kind::Histogram,
        Some("seconds"),
        "Wall-clock run time of the processes reported.",
    );
    w.histogram(
        "spacetime_watch_runtime_seconds",
        &[],
        &RUNTIME_BUCKETS,
        &m.runtime,
    );
    w.family(
        "spacetime_watch_peak_rss_bytes",
        Kind::Histogram,
        Some("bytes"),
        "Peak resident set size of the processes reported.",
    );
    w.histogram("spacetime_watch_peak_rss_bytes", &[], &RSS_BUCKETS, &m.rss);
    health(&mut w, m);
    if let Some(own) = OwnProcess::read() {
        own_process(&mut w, &own);
    }
    if format == Format::OpenMetrics {
        w.out.push_str("# EOF\n");
    }
    w.out
}

fn build_info(w: &mut Writer) {
    let name = w.family(
        "spacetime_build",
        Kind::Info,
        None,
        "The spacetime build serving these metrics.",
    );
    w.sample(&name, &[("version", env!("CARGO_PKG_VERSION"))], 1);
}

/// Exits and their CPU time by comm, sorted so that scrapes diff cleanly; the overflow value
/// last.
fn exits(w: &mut Writer, m: &Metrics) {
    let mut comms: Vec<(&str, &CommStats)> = m.by_comm.iter().map(|(k, v)| (&**k, v)).collect();
    comms.sort_unstable_by(|a, b| a.0.cmp(b.0));
    if m.overflowed() > 0 {
        comms.push((OVERFLOW_COMM, &m.other));
    }
    let exits = w.family(
        "spacetime_watch_exits",
        Kind::Counter,
        None,
        "Process exits reported (matching the filters), by comm and status; comms past \
         --metrics-comm-limit are counted under comm=\"[other programs]\".",
    );
    for (comm, c) in &comms {
        for (status, n) in STATUSES.iter().zip(c.exits) {
            if n > 0 {
                w.sample(&exits, &[("comm", comm), ("status", status)], n);
            }
        }
    }
    let cpu = w.family(
        "spacetime_watch_cpu_seconds",
        Kind::Counter,
        Some("seconds"),
        "CPU time of the processes reported, by comm and mode, as wait4() accounts it.",
    );
    for (comm, c) in &comms {
        for (mode, ns) in [("user", c.user_ns), ("system", c.sys_ns)] {
            w.sample(
                &cpu,
                &[("comm", comm), ("mode", mode)],
                float(ns as f64 / 1e9),
            );
        }
    }
    let source = w.family(
        "spacetime_watch_cpu_figures",
        Kind::Counter,
        None,
        "Process rows by where their CPU time came from: the release (what wait4 returned) or \
         the exit (no release within the wait; misses the last slice).",
    );
    w.sample(&source, &[("source", "release")], m.cpu_released);
    w.sample(&source, &[("source", "exit")], m.cpu_at_exit);
    if m.histograms {
        histograms_of(w, "comm", "comm", &comms);
    }
}

/// Run time and peak RSS histograms by `label` (comm, unit or container): p99 of a program's
/// peak is `histogram_quantile(0.99, sum by (comm, le) (rate(…_bucket[5m])))`.
fn histograms_of(w: &mut Writer, word: &str, label: &str, rows: &[(&str, &CommStats)]) {
    /// Which of a row's histograms.
    type Pick = fn(&CommStats) -> &Histogram;
    let families: [(&str, &str, &str, &Buckets, Pick); 2] = [
        (
            "runtime_seconds",
            "seconds",
            "Wall-clock run time",
            &RUNTIME_BUCKETS,
            |c| &c.runtime,
        ),
        (
            "peak_rss_bytes",
            "bytes",
            "Peak resident set size",
            &RSS_BUCKETS,
            |c| &c.rss,
        ),
    ];
    for (suffix, unit, what, b, pick) in families {
        let name = format!("spacetime_watch_{word}_{suffix}");
        w.family(
            &name,
            Kind::Histogram,
            Some(unit),
            &format!("{what} of the processes reported, by {label}."),
        );
        for (value, c) in rows {
            w.histogram(&name, &[(label, value)], b, pick(c));
        }
    }
}

/// `--metrics-label`: exits and CPU time by unit or container, in their own families (and
/// their histograms with `--metrics-histograms`).
fn by_identity(w: &mut Writer, b: &super::identity::ByIdentity, histograms: bool) {
    let label = b.label.name();
    let rows = b.rows();
    let exits = w.family(
        &format!("spacetime_watch_{label}_exits"),
        Kind::Counter,
        None,
        &format!(
            "Process exits reported, by {label} and status; {label}s past \
             --metrics-comm-limit are counted under {label}=\"{}\", processes outside any \
             under {label}=\"{}\".",
            b.label.other(),
            b.label.none()
        ),
    );
    for (value, c) in &rows {
        for (status, n) in STATUSES.iter().zip(c.exits) {
            if n > 0 {
                w.sample(&exits, &[(label, value), ("status", status)], n);
            }
        }
    }
    let cpu = w.family(
        &format!("spacetime_watch_{label}_cpu_seconds"),
        Kind::Counter,
        Some("seconds"),
        &format!("CPU time of the processes reported, by {label} and mode."),
    );
    for (value, c) in &rows {
        for (mode, ns) in [("user", c.user_ns), ("system", c.sys_ns)] {
            w.sample(
                &cpu,
                &[(label, value), ("mode", mode)],
                float(ns as f64 / 1e9),
            );
        }
    }
    if histograms {
        histograms_of(w, label, label, &rows);
    }
}

/// Loss, cross-check coverage and the endpoint's own state.
fn health(w: &mut Writer, m: &Metrics) {
    let lost = w.family(
        "spacetime_watch_lost_events",
        Kind::Counter,
        None,
        "Events lost: kernel ring buffer full, the agent's queue for this watch full, failed \
         kernel reads, undecodable records, taskstats receive overruns (ENOBUFS: one or more \
         records each).",
    );
    for (source, v) in [
        ("ring_buffer", m.ringbuf_lost),
        ("agent_queue", m.agent_queue_full),
        ("kernel_read_failures", m.read_failures),
        ("undecodable", m.decode_errors),
        ("taskstats_enobufs", m.enobufs),
    ] {
        w.sample(&lost, &[("source", source)], v);
    }
    if m.taskstats_enabled {
        let cov = w.family(
            "spacetime_watch_taskstats_coverage",
            Kind::Counter,
            None,
            "Process exits cross-checked against the kernel's taskstats records.",
        );
        for (result, v) in [
            ("matched", m.matched),
            ("bpf_only", m.bpf_only),
            ("taskstats_only", m.taskstats_only),
        ] {
            w.sample(&cov, &[("result", result)], v);
        }
    }
    let live = w.family(
        "spacetime_watch_processes",
        Kind::Gauge,
        None,
        "Live processes in the process table.",
    );
    w.sample(&live, &[], m.table_size);
    let limit = w.family(
        "spacetime_watch_metrics_comm_limit",
        Kind::Gauge,
        None,
        "Distinct comm label values kept (--metrics-comm-limit).",
    );
    w.sample(&limit, &[], m.comm_limit);
    let refused = w.family(
        "spacetime_watch_metrics_refused_connections",
        Kind::Counter,
        None,
        "Metrics connections closed unanswered: too many open at once (reason=\"busy\"), or \
         accept() failed, e.g. out of file descriptors (reason=\"accept_error\").",
    );
    w.sample(&refused, &[("reason", "busy")], m.rejected_connections);
    w.sample(&refused, &[("reason", "accept_error")], m.accept_errors);
}

/// The standard `process_*` metrics of client libraries, for spacetime itself.
fn own_process(w: &mut Writer, p: &OwnProcess) {
    let rows: [(&str, Kind, Option<&str>, &str, f64); 6] = [
        (
            "process_cpu_seconds",
            Kind::Counter,
            Some("seconds"),
            "Total user and system CPU time spent by spacetime.",
            p.cpu_seconds,
        ),
        (
            "process_resident_memory_bytes",
            Kind::Gauge,
            Some("bytes"),
            "Resident memory size of spacetime.",
            p.resident_bytes as f64,
        ),
        (
            "process_virtual_memory_bytes",
            Kind::Gauge,
            Some("bytes"),
            "Virtual memory size of spacetime.",
            p.virtual_bytes as f64,
        ),
        (
            "process_start_time_seconds",
            Kind::Gauge,
            Some("seconds"),
            "Start time of spacetime since the unix epoch.",
            p.start_time_seconds,
        ),
        (
            "process_open_fds",
            Kind::Gauge,
            None,
            "Open file descriptors of spacetime.",
            p.open_fds as f64,
        ),
        (
            "process_max_fds",
            Kind::Gauge,
            None,
            "Limit on spacetime's open file descriptors.",
            p.max_fds as f64,
        ),
    ];
    for (name, kind, unit, help, value) in rows {
        let sample = w.family(name, kind, unit, help);
        w.sample(&sample, &[], float(value));
    }
}

/// A float as OpenMetrics wants it: always with a decimal point or exponent.
pub fn float(v: f64) -> String {
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'E']) || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// Label value escaping, the same in both formats: backslash, double quote, newline.
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains(['\\', '"', '\n']) {
        return s.into();
    }
    let mut o = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o.into()
}

#[cfg(test)]
#[path = "expose_tests.rs"]
mod tests;
