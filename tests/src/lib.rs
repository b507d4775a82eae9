//! Helpers for spacetime's integration tests: run `spacetime trace --json … -- CMD` on the
//! `st-workload` program, collect the report and the workload's own truth lines, and compare
//! them per pid.
//!
//! The workload's path is only known inside this package's integration tests
//! (`env!("CARGO_BIN_EXE_st-workload")`), so test files pass it in.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

pub mod chart;
pub mod openmetrics;
pub mod prometheus;
pub mod python;
pub mod watch;

pub const PAGE: u64 = 4096;
pub const MIB: u64 = 1 << 20;

/// Default time limit for one `spacetime trace` run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// The workspace root (parent of this package's directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The spacetime binary: `$SPACETIME_BIN`, else `<workspace>/target/release/spacetime`.
pub fn spacetime_bin() -> PathBuf {
    let (path, from_env) = match std::env::var_os("SPACETIME_BIN") {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (workspace_root().join("target/release/spacetime"), false),
    };
    if !path.is_file() {
        if from_env {
            panic!("SPACETIME_BIN={} does not exist", path.display());
        }
        panic!(
            "spacetime binary not found at {}: build it with `cargo xtask build` \
             (or point SPACETIME_BIN at it)",
            path.display()
        );
    }
    path
}

// ---------------------------------------------------------------------------------------------
// Temp dirs

/// A fresh, world-writable (0777) directory under `std::env::temp_dir()`, removed on drop
/// (kept if `ST_KEEP_TMP` is set, for debugging).
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "spacetime-tests-{tag}-{}-{}-{nanos}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("create temp dir {}: {e}", path.display()));
        // Explicit chmod: create_dir's mode is subject to the umask.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))
            .unwrap_or_else(|e| panic!("chmod 0777 {}: {e}", path.display()));
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("ST_KEEP_TMP").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        } else {
            eprintln!("keeping {}", self.path.display());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The report (typed view of the JSON contract)

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
        let pid = p.pid;
        assert!(
            seen.insert((pid, p.start_ns)),
            "pid {pid} started at {} appears more than once",
            p.start_ns
        );
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

// ---------------------------------------------------------------------------------------------
// Truth lines

/// One line of the workload's truth file.
#[derive(Debug, Clone)]
pub struct Truth(pub Value);

impl Truth {
    pub fn mode(&self) -> &str {
        self.0["mode"].as_str().unwrap_or("")
    }

    pub fn int(&self, key: &str) -> i64 {
        self.0[key]
            .as_i64()
            .unwrap_or_else(|| panic!("truth line has no integer {key:?}: {}", self.0))
    }

    pub fn pid(&self) -> i32 {
        self.int("pid") as i32
    }

    pub fn ppid(&self) -> i32 {
        self.int("ppid") as i32
    }

    pub fn str(&self, key: &str) -> &str {
        self.0[key]
            .as_str()
            .unwrap_or_else(|| panic!("truth line has no string {key:?}: {}", self.0))
    }

    pub fn ints(&self, key: &str) -> Vec<i64> {
        self.0[key]
            .as_array()
            .unwrap_or_else(|| panic!("truth line has no array {key:?}: {}", self.0))
            .iter()
            .map(|v| {
                v.as_i64()
                    .unwrap_or_else(|| panic!("truth {key:?} has a non-integer: {}", self.0))
            })
            .collect()
    }

    /// VmHWM in bytes, as the process read it right before exiting/exec'ing.
    pub fn vmhwm_bytes(&self) -> u64 {
        let kib = self.int("vmhwm_kib");
        assert!(kib > 0, "truth line has no VmHWM: {}", self.0);
        kib as u64 * 1024
    }
}

/// The truth lines a workload wrote to `path` (none if it is missing).
pub fn read_truth(path: &Path) -> Vec<Truth> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("read truth file {}: {e}", path.display()),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            Truth(serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("malformed truth line (interleaved writes?): {e}: {l:?}")
            }))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Running spacetime

/// A `spacetime trace` invocation. By default it passes `--json <tmp>/report.json` and sets
/// `ST_TRUTH=<tmp>/truth.jsonl` for the command; `SUDO_*` variables are removed from the
/// environment unless the test sets them (so `sudo cargo test` doesn't change behaviour).
pub struct Trace {
    flags: Vec<OsString>,
    cmd: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    json: bool,
    timeout: Duration,
    tag: String,
    /// A command spacetime runs under (e.g. `unshare --pid --fork`).
    under: Vec<OsString>,
}

impl Trace {
    /// `spacetime trace [flags] -- CMD…`
    pub fn new<I, S>(cmd: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Trace {
            flags: Vec::new(),
            cmd: cmd.into_iter().map(|s| s.as_ref().to_owned()).collect(),
            envs: Vec::new(),
            json: true,
            timeout: DEFAULT_TIMEOUT,
            tag: "run".into(),
            under: Vec::new(),
        }
    }

    /// Starts spacetime through `prefix…` (which must exec or wait for it and pass its status
    /// on), e.g. `unshare --pid --fork --mount-proc`.
    pub fn under<I, S>(mut self, prefix: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.under = prefix.into_iter().map(|s| s.as_ref().to_owned()).collect();
        self
    }

    /// Adds a spacetime option (before `--`).
    pub fn flag(mut self, f: impl AsRef<OsStr>) -> Self {
        self.flags.push(f.as_ref().to_owned());
        self
    }

    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((k.as_ref().to_owned(), v.as_ref().to_owned()));
        self
    }

    /// Don't pass `--json`.
    pub fn no_json(mut self) -> Self {
        self.json = false;
        self
    }

    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Names the temp dir (helps when keeping them with ST_KEEP_TMP).
    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = tag.into();
        self
    }

    /// Starts spacetime without waiting.
    pub fn spawn(self) -> Running {
        let bin = spacetime_bin();
        let dir = TempDir::new(&self.tag);
        let json_path = dir.path().join("report.json");
        let truth_path = dir.path().join("truth.jsonl");
        let mut c = match self.under.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        c.arg("trace");
        if self.json {
            c.arg("--json").arg(&json_path);
        }
        c.args(&self.flags).arg("--").args(&self.cmd);
        for k in [
            "SUDO_UID",
            "SUDO_GID",
            "SUDO_USER",
            "SUDO_COMMAND",
            "SUDO_HOME",
        ] {
            c.env_remove(k);
        }
        c.env("ST_TRUTH", &truth_path);
        for (k, v) in &self.envs {
            c.env(k, v);
        }
        // Start spacetime the way an interactive shell would: default dispositions for the
        // signals it must forward (a non-interactive shell running `cargo test &` leaves
        // SIGINT/SIGQUIT ignored, which the command would otherwise inherit).
        unsafe {
            c.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGQUIT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut argv = self.under.clone();
        argv.extend([bin.as_os_str().to_owned(), "trace".into()]);
        if self.json {
            argv.push("--json".into());
            argv.push(json_path.clone().into());
        }
        argv.extend(self.flags.iter().cloned());
        argv.push("--".into());
        argv.extend(self.cmd.iter().cloned());
        let mut child = c
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = reader(child.stdout.take().expect("piped stdout"));
        let stderr = reader(child.stderr.take().expect("piped stderr"));
        Running {
            child,
            argv,
            dir,
            json: self.json.then_some(json_path),
            truth_path,
            stdout,
            stderr,
            started: Instant::now(),
            timeout: self.timeout,
        }
    }

    /// Runs spacetime to completion (panics on timeout).
    pub fn run(self) -> Outcome {
        self.spawn().wait()
    }
}

/// Collects a pipe in the background. Survivors of the traced tree (e.g. with
/// `--stop-on-root-exit`) may hold the pipe open after spacetime exits, so `Running::wait`
/// doesn't wait for EOF indefinitely.
struct Collector {
    buf: Arc<Mutex<Vec<u8>>>,
    handle: JoinHandle<()>,
}

fn reader<R: std::io::Read + Send + 'static>(mut r: R) -> Collector {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let b = buf.clone();
    let handle = std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match r.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => b
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    });
    Collector { buf, handle }
}

impl Collector {
    /// Everything read so far, after waiting up to `grace` for EOF.
    fn take(self, grace: Duration) -> Vec<u8> {
        let until = Instant::now() + grace;
        while !self.handle.is_finished() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        let out = std::mem::take(&mut *self.buf.lock().unwrap_or_else(|e| e.into_inner()));
        out
    }
}

/// A running `spacetime trace`.
pub struct Running {
    child: Child,
    argv: Vec<OsString>,
    dir: TempDir,
    json: Option<PathBuf>,
    truth_path: PathBuf,
    stdout: Collector,
    stderr: Collector,
    started: Instant,
    timeout: Duration,
}

impl Running {
    /// spacetime's pid.
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Sends `sig` to spacetime itself.
    pub fn signal(&self, sig: i32) {
        let r = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(
            r,
            0,
            "kill({}, {sig}): {}",
            self.pid(),
            std::io::Error::last_os_error()
        );
    }

    /// Waits for spacetime to exit (kills it and panics after the timeout).
    pub fn wait(mut self) -> Outcome {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break st,
                Ok(None) => {}
                Err(e) => panic!("wait for spacetime: {e}"),
            }
            if self.started.elapsed() > self.timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                let stderr = self.stderr.take(Duration::from_millis(500));
                panic!(
                    "spacetime did not exit within {:?}: {}\nstderr:\n{}",
                    self.timeout,
                    show_argv(&self.argv),
                    String::from_utf8_lossy(&stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.started.elapsed();
        // Snapshot the files first: survivors may still be running and writing.
        let json = self
            .json
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok());
        let truth = read_truth(&self.truth_path);
        let grace = Duration::from_millis(500);
        let stdout = self.stdout.take(grace);
        let stderr = String::from_utf8_lossy(&self.stderr.take(grace)).into_owned();
        Outcome {
            status,
            stdout,
            stderr,
            json,
            truth,
            argv: self.argv,
            elapsed,
            dir: self.dir,
        }
    }
}

/// The largest char boundary <= `i` (str::floor_char_boundary needs a newer Rust than our MSRV).
fn floor_boundary(s: &str, i: usize) -> usize {
    let mut i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn show_argv(argv: &[OsString]) -> String {
    let s: Vec<String> = argv
        .iter()
        .map(|a| {
            let a = a.to_string_lossy();
            if a.len() > 80 {
                format!("{}…({} bytes)", &a[..floor_boundary(&a, 60)], a.len())
            } else {
                a.into_owned()
            }
        })
        .collect();
    s.join(" ")
}

/// The result of a finished `spacetime trace`.
pub struct Outcome {
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    /// The raw `--json` file, if it was requested and written.
    pub json: Option<String>,
    /// The workload's truth lines, in file order.
    pub truth: Vec<Truth>,
    pub argv: Vec<OsString>,
    /// Wall time from spawning spacetime to its exit.
    pub elapsed: Duration,
    pub dir: TempDir,
}

impl Outcome {
    /// A description for panic messages: the command line, the status and spacetime's stderr.
    pub fn context(&self) -> String {
        let mut err = self.stderr.clone();
        if err.len() > 8000 {
            let cut = floor_boundary(&err, err.len() - 8000);
            err = format!("…{}", &err[cut..]);
        }
        format!(
            "{}\nstatus: {:?}\nstderr:\n{err}",
            show_argv(&self.argv),
            self.status
        )
    }

    /// Shell-style status: exit code, or 128+N if spacetime itself died of signal N.
    pub fn code(&self) -> i32 {
        self.status
            .code()
            .or_else(|| self.status.signal().map(|s| 128 + s))
            .unwrap_or(-1)
    }

    /// Asserts spacetime exited normally with `code` (not by a signal of its own).
    pub fn assert_code(&self, code: i32) {
        assert_eq!(
            self.status.code(),
            Some(code),
            "spacetime exit status: want code {code}\n{}",
            self.context()
        );
    }

    pub fn stdout_str(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    /// The parsed `--json` file as an untyped value (panics if missing or not JSON).
    pub fn json_value(&self) -> Value {
        let text = self
            .json
            .as_deref()
            .unwrap_or_else(|| panic!("no --json report was written\n{}", self.context()));
        serde_json::from_str(text).unwrap_or_else(|e| {
            panic!(
                "--json report is not valid JSON: {e}\n{}\n{}",
                &text[..floor_boundary(text, 2000)],
                self.context()
            )
        })
    }

    /// The typed report, after `check_invariants`.
    pub fn report(&self) -> Report {
        let v = self.json_value();
        let r: Report = serde_json::from_value(v).unwrap_or_else(|e| {
            panic!(
                "--json report does not match the contract: {e}\n{}",
                self.context()
            )
        });
        check_invariants(&r);
        r
    }

    /// All truth lines of `mode`.
    pub fn truth_of(&self, mode: &str) -> Vec<&Truth> {
        self.truth.iter().filter(|t| t.mode() == mode).collect()
    }

    /// The single truth line of `mode` (panics if there isn't exactly one).
    pub fn truth_one(&self, mode: &str) -> &Truth {
        let v = self.truth_of(mode);
        assert_eq!(
            v.len(),
            1,
            "want exactly one truth line of mode {mode:?}, got {:?}\n{}",
            self.truth.iter().map(|t| &t.0).collect::<Vec<_>>(),
            self.context()
        );
        v[0]
    }

    /// The truth line written by `pid` with `mode` (panics if not exactly one).
    pub fn truth_by_pid(&self, mode: &str, pid: i32) -> &Truth {
        let v: Vec<&Truth> = self
            .truth_of(mode)
            .into_iter()
            .filter(|t| t.pid() == pid)
            .collect();
        assert_eq!(
            v.len(),
            1,
            "want exactly one truth line of mode {mode:?} from pid {pid}"
        );
        v[0]
    }
}

// ---------------------------------------------------------------------------------------------
// /proc helpers

/// (ppid, argv) of every process in /proc.
fn proc_table() -> BTreeMap<i32, (i32, Vec<String>)> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid …"; comm may contain spaces and parens.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let argv = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        out.insert(pid, (ppid, argv));
    }
    out
}

/// Waits until a descendant of `ancestor` has exactly `argv` as its command line (i.e. has
/// exec'd it); returns its pid. Panics after `timeout`.
pub fn wait_for_descendant(ancestor: i32, argv: &[&str], timeout: Duration) -> i32 {
    let start = Instant::now();
    loop {
        let table = proc_table();
        for (&pid, (_, args)) in &table {
            if args.len() != argv.len() || args.iter().zip(argv).any(|(a, b)| a != b) {
                continue;
            }
            let mut p = pid;
            for _ in 0..64 {
                match table.get(&p) {
                    Some(&(pp, _)) if pp == ancestor => return pid,
                    Some(&(pp, _)) if pp > 1 => p = pp,
                    _ => break,
                }
            }
        }
        assert!(
            start.elapsed() < timeout,
            "no descendant of pid {ancestor} running {argv:?} within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Panics unless every directory above `path` is searchable and `path` is executable by
/// "other" (needed when spacetime drops to an unprivileged user).
pub fn assert_world_executable(path: &Path) {
    let mut p = path.to_path_buf();
    loop {
        let mode = std::fs::metadata(&p)
            .unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
            .permissions()
            .mode();
        assert!(
            mode & 0o001 != 0,
            "{} (mode {:o}) is not executable/searchable by other users, so an unprivileged \
             user can't run {}: put CARGO_TARGET_DIR somewhere world-accessible",
            p.display(),
            mode & 0o7777,
            path.display()
        );
        if !p.pop() || p.as_os_str().is_empty() || p == Path::new("/") {
            break;
        }
    }
}
