//! The report as the tests read it (a typed view of the JSON contract), the exactness bound
//! for peaks, and the invariants every report must hold.

use super::*;

/// `{"code": N}` or `{"signal": N}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Exit {
    #[serde(rename = "code")]
    Code(i32),
    #[serde(rename = "signal")]
    Signal(i32),
}

#[derive(Debug, Clone, Deserialize)]
pub struct Report {
    pub command: Vec<String>,
    pub exit: Exit,
    pub wall_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    pub lost_events: u64,
    pub totals: Totals,
    pub processes: Vec<Process>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Totals {
    pub processes: u64,
    pub threads: u64,
    pub peak_rss_bytes: u64,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Process {
    pub pid: i32,
    pub ppid: i32,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    pub threads: u64,
    pub exit: Option<Exit>,
    pub peak_rss_bytes: u64,
    pub images: Vec<Image>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Image {
    pub exe: String,
    pub argv: Vec<String>,
    pub start_ns: u64,
    /// Null only while the image is still running (a survivor of `--stop-on-root-exit`).
    pub peak_rss_bytes: Option<u64>,
}

impl Image {
    /// The image's peak; panics (naming the image) when the report has none.
    pub fn peak(&self) -> u64 {
        self.peak_rss_bytes
            .unwrap_or_else(|| panic!("image {} {:?} has no peak_rss_bytes", self.exe, self.argv))
    }
}

impl Report {
    /// The traced command's process: the one whose parent is not in the report.
    pub fn root(&self) -> &Process {
        let pids: BTreeSet<i32> = self.processes.iter().map(|p| p.pid).collect();
        let roots: Vec<&Process> = self
            .processes
            .iter()
            .filter(|p| !pids.contains(&p.ppid))
            .collect();
        assert_eq!(
            roots.len(),
            1,
            "expected exactly one process whose ppid is outside the report (the root), got pids {:?}",
            roots.iter().map(|p| (p.pid, p.ppid)).collect::<Vec<_>>()
        );
        roots[0]
    }

    pub fn pids(&self) -> Vec<i32> {
        self.processes.iter().map(|p| p.pid).collect()
    }

    /// Processes whose fork-time parent is `ppid`.
    pub fn children_of(&self, ppid: i32) -> Vec<&Process> {
        self.processes.iter().filter(|p| p.ppid == ppid).collect()
    }
}

/// The process entry for `pid`; panics listing the report's pids if absent or duplicated.
pub fn find_process(report: &Report, pid: i32) -> &Process {
    let found: Vec<&Process> = report.processes.iter().filter(|p| p.pid == pid).collect();
    match found.len() {
        1 => found[0],
        0 => {
            let mut pids = report.pids();
            pids.sort_unstable();
            let shown: Vec<String> = pids.iter().take(64).map(|p| p.to_string()).collect();
            panic!(
                "pid {pid} is not in the report ({} processes: {}{})",
                pids.len(),
                shown.join(" "),
                if pids.len() > 64 { " …" } else { "" }
            )
        }
        // Pids wrap (pid_max is 32768 here) and the report keeps reused pids apart: the workload
        // that recorded the truth is the newest process with that pid.
        _ => found
            .into_iter()
            .max_by_key(|p| p.start_ns)
            .unwrap_or_else(|| panic!("pid {pid}: no entry")),
    }
}

/// Tolerance for comparing a peak RSS with the process's own VmHWM, read right before it
/// exits: 4 pages. The figures are exact (measured: 0 difference at exit; +1 page for images
/// ended by exec, which touches a page after the workload's last reading). spacetime follows
/// every RSS change, so it also counts the few pages a workload touches after its own last
/// reading, while it formats and writes its truth line and runs its exit path (first use of
/// those code pages maps them; seen: +3 and, under load, +5 pages for a forked child of the
/// 3x2 tree). Anything larger is a real error, e.g. reading only the shared part of the
/// per-CPU counters (a whole per-CPU batch: 64+ pages here).
pub fn rss_tolerance(_want: u64) -> u64 {
    8 * PAGE
}

/// Asserts `|got - want| <= tol`; `what` should name the pid. Always prints the difference
/// (`rss-diff:` lines, visible with `--nocapture`) so the tolerance can be tightened.
pub fn assert_close_bytes(what: &str, got: u64, want: u64, tol: u64) {
    let diff = got as i128 - want as i128;
    eprintln!(
        "rss-diff: {what}: got {got} want {want} diff {diff:+} bytes ({:+.1} pages, tolerance {} pages)",
        diff as f64 / PAGE as f64,
        tol / PAGE
    );
    assert!(
        diff.unsigned_abs() <= u128::from(tol),
        "{what}: got {got} bytes ({:.1} MiB), want {want} bytes ({:.1} MiB): off by {diff:+} bytes \
         ({:+.1} pages), tolerance {tol} bytes",
        got as f64 / MIB as f64,
        want as f64 / MIB as f64,
        diff as f64 / PAGE as f64
    );
}

/// `assert_close_bytes` with `rss_tolerance(want)`.
pub fn assert_rss(what: &str, got: u64, want: u64) {
    assert_close_bytes(what, got, want, rss_tolerance(want));
}

/// Checks the report's internal consistency; called by `Outcome::report()` for every test.
pub fn check_invariants(report: &Report) {
    let n = report.processes.len() as u64;
    assert!(n >= 1, "report has no processes");
    assert_eq!(report.lost_events, 0, "lost_events must be 0");
    assert_eq!(
        report.totals.processes, n,
        "totals.processes must equal the number of process entries"
    );
    let threads: u64 = report.processes.iter().map(|p| p.threads).sum();
    assert_eq!(
        report.totals.threads, threads,
        "totals.threads must equal the sum of processes[].threads"
    );
    let max_peak = report
        .processes
        .iter()
        .map(|p| p.peak_rss_bytes)
        .max()
        .unwrap_or(0);
    assert_eq!(
        report.totals.peak_rss_bytes, max_peak,
        "totals.peak_rss_bytes must be the largest process peak"
    );
    // A pid may come back (pids wrap), as a different process: (pid, start) is unique and two
    // processes with one pid never overlap in time.
    let mut seen = BTreeSet::new();
    let mut by_pid: std::collections::BTreeMap<i32, Vec<(u64, Option<u64>)>> = Default::default();
    for p in &report.processes {
        by_pid
            .entry(p.pid)
            .or_default()
            .push((p.start_ns, p.end_ns));
    }
    for (pid, mut lives) in by_pid {
        lives.sort();
        for w in lives.windows(2) {
            let ended = w[0].1.unwrap_or(u64::MAX);
            assert!(
                ended <= w[1].0,
                "pid {pid} is two processes at once: {:?} and {:?}",
                w[0],
                w[1]
            );
        }
    }
    for p in &report.processes {
        assert!(
            seen.insert((p.pid, p.start_ns)),
            "pid {} started at {} appears more than once",
            p.pid,
            p.start_ns
        );
        check_process(p);
    }
    let root = report.root();
    assert_eq!(
        root.images[0].argv, report.command,
        "root pid {}: images[0].argv must be the traced command",
        root.pid
    );
    if root.exit.is_some() {
        assert_eq!(
            root.exit,
            Some(report.exit),
            "root pid {}: its exit must equal the report's exit",
            root.pid
        );
    }
}

/// One process's own consistency: threads, images and their peaks, end and exit.
fn check_process(p: &Process) {
    let pid = p.pid;
    assert!(p.threads >= 1, "pid {pid}: threads = 0");
    assert!(!p.images.is_empty(), "pid {pid}: no images");
    for img in &p.images {
        assert!(
            img.peak_rss_bytes.is_some() || p.end_ns.is_none(),
            "pid {pid}: image {} has no peak although the process exited",
            img.exe
        );
    }
    let img_max = p
        .images
        .iter()
        .filter_map(|i| i.peak_rss_bytes)
        .max()
        .unwrap_or(0);
    assert_eq!(
        p.peak_rss_bytes, img_max,
        "pid {pid}: peak_rss_bytes must be the max over its images"
    );
    assert_eq!(
        p.end_ns.is_none(),
        p.exit.is_none(),
        "pid {pid}: end_ns ({:?}) and exit ({:?}) must be null together",
        p.end_ns,
        p.exit
    );
    if let Some(end) = p.end_ns {
        assert!(
            end >= p.start_ns,
            "pid {pid}: end_ns {end} < start_ns {}",
            p.start_ns
        );
    }
    let mut prev = p.start_ns;
    for (k, img) in p.images.iter().enumerate() {
        assert!(
            img.start_ns >= prev,
            "pid {pid}: images[{k}].start_ns {} is before the process start / previous image ({prev})",
            img.start_ns
        );
        if let Some(end) = p.end_ns {
            assert!(
                img.start_ns <= end,
                "pid {pid}: images[{k}].start_ns {} after end_ns {end}",
                img.start_ns
            );
        }
        prev = img.start_ns;
    }
}
