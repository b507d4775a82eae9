//! Counters and histograms of the exits reported, exposed for Prometheus (`--metrics
//! ADDR:PORT`): [`expose`] renders them as OpenMetrics or as the classic text format,
//! whichever the scraper asks for ([`crate::run::metrics_http`] answers the scrapes); [`own`]
//! reads spacetime's own `process_*` figures.

use std::collections::HashMap;

use crate::model::exit_view::ExitView;
use crate::model::tree::ExitStatus;

pub(crate) mod expose;
pub(crate) mod identity;
mod own;

pub use expose::Format;

/// The default for `--metrics-comm-limit`: distinct comm label values before later ones are
/// counted under [`OVERFLOW_COMM`].
pub const DEFAULT_COMM_LIMIT: usize = 1000;

/// The `comm` label of exits whose comm came after the limit. 16 characters: a comm is at most
/// 15 bytes (TASK_COMM_LEN - 1), so no real program can name itself this and collide with it.
pub const OVERFLOW_COMM: &str = "[other programs]";

/// Buckets per doubling of the histograms: consecutive bounds differ by 2^(1/8) ≈ 1.0905, so a
/// quantile Prometheus interpolates inside its bucket is within 9.1 % of the true one,
/// whatever the distribution (between the first bound and the last).
pub const BUCKETS_PER_OCTAVE: u32 = 8;

/// A histogram's bucket layout: upper bounds `first · 2^(k/8)` for `octaves` doublings, and
/// their `le` label values, formatted once.
pub struct Buckets {
    pub bounds: Vec<f64>,
    pub les: Vec<String>,
}

impl Buckets {
    /// `round` makes a bound a value people read (whole bytes, 4 significant digits of a
    /// second): the ratio between bounds stays within 0.2 % of 2^(1/8).
    fn geometric(first: f64, octaves: u32, round: fn(f64) -> f64) -> Buckets {
        let n = octaves * BUCKETS_PER_OCTAVE;
        let bounds: Vec<f64> = (0..=n)
            .map(|k| round(first * 2f64.powf(f64::from(k) / f64::from(BUCKETS_PER_OCTAVE))))
            .collect();
        let les = bounds
            .iter()
            .map(|b| expose::float(*b))
            .chain(["+Inf".to_string()])
            .collect();
        Buckets { bounds, les }
    }
}

/// Peak RSS (bytes): 512 KiB to 64 GiB, 137 bounds.
pub static RSS_BUCKETS: std::sync::LazyLock<Buckets> =
    std::sync::LazyLock::new(|| Buckets::geometric(512.0 * 1024.0, 17, f64::round));

/// Run time (seconds): 1 ms to 4096 s (68 min), 177 bounds.
pub static RUNTIME_BUCKETS: std::sync::LazyLock<Buckets> = std::sync::LazyLock::new(|| {
    Buckets::geometric(1.0 / 1024.0, 22, |v| {
        let scale = 10f64.powi(3 - v.log10().floor() as i32);
        (v * scale).round() / scale
    })
});

/// Status label values, indexing [`CommStats::exits`].
pub const STATUSES: [&str; 3] = ["ok", "failed", "signaled"];

#[derive(Debug, Default, Clone, PartialEq)]
pub struct Histogram {
    /// Non-cumulative counts per bucket; the last is +Inf. Empty until the first value.
    counts: Vec<u64>,
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, b: &Buckets, v: f64) {
        if self.counts.is_empty() {
            self.counts = vec![0; b.bounds.len() + 1];
        }
        let i = b.bounds.partition_point(|&x| x < v);
        self.counts[i] += 1;
        self.sum += v;
    }

    /// Cumulative counts, one per bound and the last for +Inf.
    pub fn cumulative<'a>(&'a self, b: &Buckets) -> impl Iterator<Item = u64> + 'a {
        (0..=b.bounds.len()).scan(0, |acc, i| {
            *acc += self.counts.get(i).copied().unwrap_or(0);
            Some(*acc)
        })
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// What the exits of one comm (or unit, or container) add up to.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CommStats {
    /// Exits by status: [ok, failed, signaled].
    pub exits: [u64; 3],
    pub user_ns: u64,
    pub sys_ns: u64,
    /// Their run times and peaks.
    pub runtime: Histogram,
    pub rss: Histogram,
}

impl CommStats {
    /// Counts an exit; its run time and peak too with `histograms`.
    fn add(&mut self, status: usize, x: &ExitView, histograms: bool) {
        self.exits[status] += 1;
        self.user_ns += x.user_ns;
        self.sys_ns += x.sys_ns;
        if !histograms {
            return;
        }
        if let Some(rt) = x.runtime_ns() {
            self.runtime.observe(&RUNTIME_BUCKETS, rt as f64 / 1e9);
        }
        if let Some(rss) = x.peak_rss_bytes {
            self.rss.observe(&RSS_BUCKETS, rss as f64);
        }
    }
}

/// Everything the endpoint and the final summary report.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// Exits reported (matching the filters), by comm.
    pub by_comm: HashMap<Box<str>, CommStats>,
    /// Exits whose comm did not fit `comm_limit`.
    pub other: CommStats,
    pub comm_limit: usize,
    pub reported: u64,
    /// Every exit seen, filters or not: processes and threads.
    pub seen_processes: u64,
    pub seen_threads: u64,
    pub runtime: Histogram,
    pub rss: Histogram,
    /// Loss: ring-buffer reserve failures (kernel), undecodable records, taskstats ENOBUFS.
    pub ringbuf_lost: u64,
    /// Records a `spacetime agent` dropped because this watch did not read them in time.
    pub agent_queue_full: u64,
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
    /// Scrapes refused because too many connections were open, and accept() failures (e.g.
    /// out of file descriptors), each followed by a pause.
    pub rejected_connections: u64,
    pub accept_errors: u64,
    /// Process rows whose CPU time came from their release record (what wait4 returned), and
    /// those that went out with the exit-time figure (no release in time).
    pub cpu_released: u64,
    pub cpu_at_exit: u64,
    /// Records the kernel-side filter kept from being sent (fork, exec with argv, image end).
    pub kernel_filtered: u64,
    /// Processes of the watched uid not shown: through an agent, a non-root watch sees only
    /// what it could ptrace at the exit (not a setuid program, say).
    pub hidden: u64,
    /// argv cut to keep the live table within `--argv-budget`.
    pub argv_evicted: u64,
    /// Exec lines written (`--events exec`).
    pub execs_reported: u64,
    /// `--metrics-label`: exits by unit or container.
    pub by_identity: Vec<identity::ByIdentity>,
    /// `--metrics-histograms`: run time and peak histograms by comm (and unit, container).
    pub histograms: bool,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics::new(false, DEFAULT_COMM_LIMIT)
    }
}

fn status_index(e: ExitStatus) -> usize {
    match e {
        ExitStatus::Code(0) => 0,
        ExitStatus::Code(_) => 1,
        ExitStatus::Signal { .. } => 2,
    }
}

impl Metrics {
    pub fn new(taskstats_enabled: bool, comm_limit: usize) -> Metrics {
        Metrics {
            by_comm: HashMap::new(),
            other: CommStats::default(),
            comm_limit,
            reported: 0,
            seen_processes: 0,
            seen_threads: 0,
            runtime: Histogram::default(),
            rss: Histogram::default(),
            ringbuf_lost: 0,
            agent_queue_full: 0,
            read_failures: 0,
            decode_errors: 0,
            enobufs: 0,
            matched: 0,
            bpf_only: 0,
            taskstats_only: 0,
            taskstats_enabled,
            table_size: 0,
            rejected_connections: 0,
            accept_errors: 0,
            cpu_released: 0,
            cpu_at_exit: 0,
            kernel_filtered: 0,
            hidden: 0,
            argv_evicted: 0,
            execs_reported: 0,
            by_identity: Vec::new(),
            histograms: false,
        }
    }

    /// Counts a reported process exit.
    pub fn observe(&mut self, x: &ExitView) {
        self.reported += 1;
        let s = status_index(x.exit);
        let room = self.by_comm.len() < self.comm_limit;
        let comm = comm_label(x.comm);
        let h = self.histograms;
        match self.by_comm.get_mut(&*comm) {
            Some(c) => c.add(s, x, h),
            None if room => self.by_comm.entry(comm.into()).or_default().add(s, x, h),
            None => self.other.add(s, x, h),
        }
        for b in &mut self.by_identity {
            b.observe(x, h);
        }
        if let Some(rt) = x.runtime_ns() {
            self.runtime.observe(&RUNTIME_BUCKETS, rt as f64 / 1e9);
        }
        if let Some(rss) = x.peak_rss_bytes {
            self.rss.observe(&RSS_BUCKETS, rss as f64);
        }
    }

    /// The most frequent comms among reported exits.
    pub fn top_comms(&self, n: usize) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self
            .by_comm
            .iter()
            .map(|(k, c)| (&**k, c.exits.iter().sum()))
            .collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        v.truncate(n);
        v
    }

    /// Exits counted under [`OVERFLOW_COMM`].
    pub fn overflowed(&self) -> u64 {
        self.other.exits.iter().sum()
    }
}

/// A program name as a label value: its text when it is UTF-8 (nearly always, and then
/// without allocating), else its valid parts with each other byte as `\xNN`, so names that
/// differ stay apart and none becomes U+FFFD.
fn comm_label(comm: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(comm) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => {
            let mut s = String::with_capacity(comm.len() + 8);
            for chunk in comm.utf8_chunks() {
                s.push_str(chunk.valid());
                for b in chunk.invalid() {
                    s.push_str(&format!("\\x{b:02x}"));
                }
            }
            std::borrow::Cow::Owned(s)
        }
    }
}

#[cfg(test)]
mod comm_label_tests {
    #[test]
    fn a_name_cut_inside_a_character_keeps_its_bytes_apart() {
        assert_eq!(super::comm_label(b"make"), "make");
        // The kernel's 15-byte cut can split U+009B (c2 9b): what is left is not U+FFFD.
        assert_eq!(super::comm_label(b"ab\xc2"), "ab\\xc2");
        assert_ne!(super::comm_label(b"ab\xc2"), super::comm_label(b"ab\xc3"));
    }
}
