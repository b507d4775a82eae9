//! Counters and histograms of the exits reported, rendered as OpenMetrics text and served over
//! a minimal HTTP/1.1 endpoint (`--metrics ADDR:PORT`).
//!
//! The server is hand-written on tokio's `TcpListener`: Prometheus only needs `GET /metrics`
//! answered with one body and the connection closed, which is about 60 lines; an HTTP crate
//! (hyper, axum) would add a dozen dependencies for nothing we use. The body is rendered by the
//! event loop when a connection is accepted (no locks: the loop owns the figures), and a task
//! per connection reads the request and writes the answer, with a time limit.

use std::{collections::HashMap, fmt::Write as _, time::Duration};

use tokio::net::TcpStream;

use super::exit::ExitView;
use crate::tree::ExitStatus;

/// Distinct comm label values; later ones are counted under `comm="other"`.
pub const MAX_COMMS: usize = 1000;
const RUNTIME_BUCKETS_S: [f64; 9] = [0.001, 0.01, 0.1, 0.5, 1.0, 10.0, 60.0, 600.0, 3600.0];
const RSS_BUCKETS: [u64; 8] = [
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
    1 << 30,
    4 << 30,
    16 << 30,
];

/// Status label: index into per-comm counts.
const STATUSES: [&str; 3] = ["ok", "failed", "signaled"];

#[derive(Debug, Default, Clone)]
pub struct Histogram<const N: usize> {
    /// Non-cumulative counts per bucket; the last is +Inf.
    counts: Vec<u64>,
    sum: f64,
}

impl<const N: usize> Histogram<N> {
    fn observe(&mut self, bounds: &[f64; N], v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; N + 1];
        }
        let i = bounds.iter().position(|&b| v <= b).unwrap_or(N);
        self.counts[i] += 1;
        self.sum += v;
    }
}

/// Everything the endpoint and the final summary report.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Exits reported (matching the filters), by comm: [ok, failed, signaled].
    pub by_comm: HashMap<Box<str>, [u64; 3]>,
    /// Exits whose comm did not fit `MAX_COMMS`.
    pub other: [u64; 3],
    pub reported: u64,
    /// Every exit seen, filters or not: processes and threads.
    pub seen_processes: u64,
    pub seen_threads: u64,
    runtime: Histogram<9>,
    rss: Histogram<8>,
    /// Loss: ring-buffer reserve failures (kernel), undecodable records, taskstats ENOBUFS.
    pub ringbuf_lost: u64,
    /// Kernel reads that failed: a record may have been dropped or left incomplete.
    pub read_failures: u64,
    pub decode_errors: u64,
    pub enobufs: u64,
    /// Taskstats coverage.
    pub matched: u64,
    pub bpf_only: u64,
    pub taskstats_only: u64,
    pub taskstats_enabled: bool,
    /// Live processes in the table.
    pub table_size: u64,
    /// CPU time of the processes reported (as wait4 reports it, where `cpu_final`).
    pub user_ns: u64,
    pub sys_ns: u64,
    /// Process rows whose CPU time came from their release record, and those that went out
    /// with the exit-time figure (no release in time).
    pub cpu_released: u64,
    pub cpu_at_exit: u64,
}

fn status_index(e: ExitStatus) -> usize {
    match e {
        ExitStatus::Code(0) => 0,
        ExitStatus::Code(_) => 1,
        ExitStatus::Signal { .. } => 2,
    }
}

impl Metrics {
    pub fn new(taskstats_enabled: bool) -> Metrics {
        Metrics {
            taskstats_enabled,
            ..Metrics::default()
        }
    }

    /// Counts a reported process exit.
    pub fn observe(&mut self, x: &ExitView) {
        self.reported += 1;
        let s = status_index(x.exit);
        let room = self.by_comm.len() < MAX_COMMS;
        match self.by_comm.get_mut(x.comm) {
            Some(c) => c[s] += 1,
            None if room => {
                let mut c = [0; 3];
                c[s] = 1;
                self.by_comm.insert(x.comm.into(), c);
            }
            None => self.other[s] += 1,
        }
        if let Some(rt) = x.runtime_ns() {
            self.runtime.observe(&RUNTIME_BUCKETS_S, rt as f64 / 1e9);
        }
        self.user_ns = self.user_ns.saturating_add(x.user_ns);
        self.sys_ns = self.sys_ns.saturating_add(x.sys_ns);
        if let Some(rss) = x.peak_rss_bytes {
            self.rss.observe(&RSS_BUCKETS.map(|b| b as f64), rss as f64);
        }
    }

    /// The most frequent comms among reported exits.
    pub fn top_comms(&self, n: usize) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self
            .by_comm
            .iter()
            .map(|(k, c)| (&**k, c.iter().sum()))
            .collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// The OpenMetrics text exposition.
    pub fn render(&self) -> String {
        let mut o = String::with_capacity(4096 + self.by_comm.len() * 64);
        family(
            &mut o,
            "spacetime_watch_exits",
            "counter",
            "Process exits reported (matching the filters), by comm and status.",
            None,
        );
        let mut comms: Vec<(&Box<str>, &[u64; 3])> = self.by_comm.iter().collect();
        comms.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let other = ("other".into(), self.other);
        let rest = (self.other != [0; 3]).then_some((&other.0, &other.1));
        for (comm, counts) in comms.into_iter().chain(rest) {
            for (i, status) in STATUSES.iter().enumerate() {
                if counts[i] > 0 {
                    let _ = writeln!(
                        o,
                        "spacetime_watch_exits_total{{comm=\"{}\",status=\"{status}\"}} {}",
                        escape(comm),
                        counts[i]
                    );
                }
            }
        }
        family(
            &mut o,
            "spacetime_watch_seen_exits",
            "counter",
            "Every exit the kernel reported, filtered out or not.",
            None,
        );
        let _ = writeln!(
            o,
            "spacetime_watch_seen_exits_total{{kind=\"process\"}} {}",
            self.seen_processes
        );
        let _ = writeln!(
            o,
            "spacetime_watch_seen_exits_total{{kind=\"thread\"}} {}",
            self.seen_threads
        );
        histogram(
            &mut o,
            "spacetime_watch_runtime_seconds",
            "seconds",
            "Wall-clock run time of the processes reported.",
            &RUNTIME_BUCKETS_S,
            &self.runtime,
        );
        family(
            &mut o,
            "spacetime_watch_cpu_seconds",
            "counter",
            "CPU time of the processes reported, as wait4 reports it, by mode.",
            Some("seconds"),
        );
        for (mode, ns) in [("user", self.user_ns), ("system", self.sys_ns)] {
            let _ = writeln!(
                o,
                "spacetime_watch_cpu_seconds_total{{mode=\"{mode}\"}} {}",
                ns as f64 / 1e9
            );
        }
        family(
            &mut o,
            "spacetime_watch_cpu_figures",
            "counter",
            "Process rows by where their CPU time came from: the release (what wait4 \
             returned) or the exit (no release within the wait; misses the last slice).",
            None,
        );
        for (source, v) in [("release", self.cpu_released), ("exit", self.cpu_at_exit)] {
            let _ = writeln!(
                o,
                "spacetime_watch_cpu_figures_total{{source=\"{source}\"}} {v}"
            );
        }
        histogram(
            &mut o,
            "spacetime_watch_peak_rss_bytes",
            "bytes",
            "Peak resident set size of the processes reported.",
            &RSS_BUCKETS.map(|b| b as f64),
            &self.rss,
        );
        family(
            &mut o,
            "spacetime_watch_lost_events",
            "counter",
            "Events lost: kernel ring buffer full, undecodable records, taskstats receive \
             overruns (ENOBUFS: one or more records each).",
            None,
        );
        for (source, v) in [
            ("ring_buffer", self.ringbuf_lost),
            ("kernel_read_failures", self.read_failures),
            ("undecodable", self.decode_errors),
            ("taskstats_enobufs", self.enobufs),
        ] {
            let _ = writeln!(
                o,
                "spacetime_watch_lost_events_total{{source=\"{source}\"}} {v}"
            );
        }
        if self.taskstats_enabled {
            family(
                &mut o,
                "spacetime_watch_taskstats_coverage",
                "counter",
                "Process exits cross-checked against the kernel's taskstats records.",
                None,
            );
            for (result, v) in [
                ("matched", self.matched),
                ("bpf_only", self.bpf_only),
                ("taskstats_only", self.taskstats_only),
            ] {
                let _ = writeln!(
                    o,
                    "spacetime_watch_taskstats_coverage_total{{result=\"{result}\"}} {v}"
                );
            }
        }
        family(
            &mut o,
            "spacetime_watch_processes",
            "gauge",
            "Live processes in the process table.",
            None,
        );
        let _ = writeln!(o, "spacetime_watch_processes {}", self.table_size);
        o.push_str("# EOF\n");
        o
    }
}

fn family(o: &mut String, name: &str, ty: &str, help: &str, unit: Option<&str>) {
    let _ = writeln!(o, "# TYPE {name} {ty}");
    if let Some(u) = unit {
        let _ = writeln!(o, "# UNIT {name} {u}");
    }
    let _ = writeln!(o, "# HELP {name} {help}");
}

fn histogram<const N: usize>(
    o: &mut String,
    name: &str,
    unit: &str,
    help: &str,
    bounds: &[f64; N],
    h: &Histogram<N>,
) {
    family(o, name, "histogram", help, Some(unit));
    let mut cum = 0;
    for (i, b) in bounds.iter().enumerate() {
        cum += h.counts.get(i).copied().unwrap_or(0);
        let _ = writeln!(o, "{name}_bucket{{le=\"{}\"}} {cum}", float(*b));
    }
    cum += h.counts.get(N).copied().unwrap_or(0);
    let _ = writeln!(o, "{name}_bucket{{le=\"+Inf\"}} {cum}");
    let _ = writeln!(o, "{name}_count {cum}");
    let _ = writeln!(o, "{name}_sum {}", float(h.sum));
}

/// A float as OpenMetrics wants it: always with a decimal point or exponent.
fn float(v: f64) -> String {
    let s = format!("{v:?}");
    if s.contains(['.', 'e', 'E']) || s.contains("inf") || s.contains("NaN") {
        s
    } else {
        format!("{s}.0")
    }
}

/// Label value escaping: backslash, double quote, newline.
fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '"' => o.push_str("\\\""),
            '\n' => o.push_str("\\n"),
            c => o.push(c),
        }
    }
    o
}

const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Answers one HTTP/1.1 request on `conn` with `body` (for GET /metrics and GET /), then
/// closes it. Gives up after 5 s.
pub async fn serve(conn: TcpStream, body: String) {
    let _ = tokio::time::timeout(Duration::from_secs(5), async move {
        let mut req = Vec::with_capacity(1024);
        let mut buf = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") && !req.windows(2).any(|w| w == b"\n\n")
        {
            if conn.readable().await.is_err() {
                return;
            }
            match conn.try_read(&mut buf) {
                Ok(0) => return,
                Ok(n) => req.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
            if req.len() > 16 << 10 {
                break;
            }
        }
        let head = String::from_utf8_lossy(&req);
        let mut words = head.lines().next().unwrap_or("").split_whitespace();
        let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let path = path.split('?').next().unwrap_or("");
        let (status, ctype, content) = match (method, path) {
            ("GET" | "HEAD", "/metrics" | "/") => ("200 OK", CONTENT_TYPE, body.as_str()),
            ("GET" | "HEAD", _) => ("404 Not Found", "text/plain", "not found: try /metrics\n"),
            _ => (
                "405 Method Not Allowed",
                "text/plain",
                "only GET is supported\n",
            ),
        };
        let mut resp = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            content.len()
        );
        if method != "HEAD" {
            resp.push_str(content);
        }
        let mut rest = resp.as_bytes();
        while !rest.is_empty() {
            if conn.writable().await.is_err() {
                return;
            }
            match conn.try_write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
        // Dropping the stream closes the connection.
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_and_escapes() {
        assert_eq!(float(1.0), "1.0");
        assert_eq!(float(0.001), "0.001");
        assert_eq!(float(1073741824.0), "1073741824.0");
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn histogram_is_cumulative() {
        let mut h = Histogram::<3>::default();
        let b = [1.0, 2.0, 3.0];
        for v in [0.5, 1.5, 1.7, 9.0] {
            h.observe(&b, v);
        }
        let mut o = String::new();
        histogram(&mut o, "x_seconds", "seconds", "h", &b, &h);
        assert!(o.contains("x_seconds_bucket{le=\"1.0\"} 1\n"), "{o}");
        assert!(o.contains("x_seconds_bucket{le=\"2.0\"} 3\n"), "{o}");
        assert!(o.contains("x_seconds_bucket{le=\"+Inf\"} 4\n"), "{o}");
        assert!(o.contains("x_seconds_count 4\n"), "{o}");
    }

    #[test]
    fn empty_render_ends_with_eof() {
        let m = Metrics::default();
        let text = m.render();
        assert!(text.ends_with("# EOF\n"));
        assert!(text.contains("spacetime_watch_runtime_seconds_bucket{le=\"+Inf\"} 0"));
    }
}
