//! Helpers for spacetime's integration tests: run `spacetime trace --json … -- CMD` on the
//! `st-workload` program, collect the report and the workload's own truth lines, and compare
//! them per pid.
//!
//! The workload's path is only known inside this package's integration tests
//! (`env!("CARGO_BIN_EXE_st-workload")`), so test files pass it in.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use collect::{reader, Collector};

pub mod agent;
pub mod attack;
pub mod bench;
pub mod build;
pub mod chart;
pub mod chromium;
pub mod clock;
pub(crate) mod collect;
pub mod cputime;
pub mod gate;
pub mod notify;
pub mod openmetrics;
pub mod pictures;
pub mod poll;
mod procs;
pub mod prometheus;
pub mod pss_rounds;
pub mod python;
pub mod raw;
mod report;
mod speed;
pub mod sysctl;
mod truth;
pub mod watch;

pub use clock::{monotonic_ns, unix_ns};
pub use report::*;
pub use speed::*;
pub use truth::*;

pub const PAGE: u64 = 4096;
pub const MIB: u64 = 1 << 20;

/// Whether the running kernel is Linux `major.minor` or later, from its release.
pub fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_else(|e| panic!("reading the kernel release: {e}"));
    let mut parts = release.trim().split(['.', '-']).map(|p| p.parse::<u32>());
    match (parts.next(), parts.next()) {
        (Some(Ok(ma)), Some(Ok(mi))) => (ma, mi) >= (major, minor),
        _ => panic!("kernel release {release:?} is not MAJOR.MINOR"),
    }
}

/// Whether the running kernel's BPF has the atomic instructions that return a value
/// (fetch-and-add, exchange, compare-and-exchange), which came with Linux 5.12. Read from the
/// kernel's release, a truth apart from spacetime's own probe of the verifier.
pub fn kernel_has_fetch_atomics() -> bool {
    kernel_at_least(5, 12)
}

/// The words `doctor` and `trace -v` use for a kernel without fetch atomics.
pub const NO_FETCH_ATOMICS: &str =
    "this kernel's BPF lacks atomic fetch instructions (Linux 5.12+)";

/// How many processes a storm starts: `host`, or `emulated` in the VM test's guest. Both are
/// sized so that what the test asserts holds (a ring that holds them all, or one they wrap).
pub fn storm_size(host: usize, emulated: usize) -> usize {
    repetitions(host, emulated)
}

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
            timeout: default_timeout(),
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

    /// Through this agent (SPACETIME_SOCKET).
    pub fn through(self, agent: &agent::Agent) -> Self {
        self.env("SPACETIME_SOCKET", agent.socket())
    }

    /// As the unprivileged user 65534 (setpriv around spacetime; the temp dir is 0777).
    pub fn as_nobody(self) -> Self {
        self.under([
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
    }

    /// Don't pass `--json`.
    pub fn no_json(mut self) -> Self {
        self.json = false;
        self
    }

    /// Time limit for the run, as on this machine ([`hang_guard`] scales it in the guest).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = hang_guard(t);
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
        // SAFETY: the hook only calls signal(2), async-signal-safe after fork.
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
            dir: Some(dir),
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

/// A running `spacetime trace`.
pub struct Running {
    child: Child,
    argv: Vec<OsString>,
    /// Taken by `wait` (the outcome keeps it).
    dir: Option<TempDir>,
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
        self.dir.as_ref().expect("the run's directory").path()
    }

    /// Sends `sig` to spacetime itself.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) takes no pointers; the child is reaped only by `wait` (which takes
        // self), so the pid is still spacetime's.
        let r = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(
            r,
            0,
            "kill({}, {sig}): {}",
            self.pid(),
            std::io::Error::last_os_error()
        );
    }

    /// Waits until spacetime's stderr so far holds `needle` (panics after the timeout).
    pub fn wait_stderr(&self, needle: &str) {
        let left = self.timeout.saturating_sub(self.started.elapsed());
        poll::wait_for(&format!("{needle:?} on stderr"), left, || {
            self.stderr.text_so_far().contains(needle).then_some(())
        });
    }

    /// Waits until a descendant of spacetime has exactly `argv` as its command line (it has
    /// exec'd it) and returns its pid. Panics with spacetime's stderr as soon as spacetime has
    /// exited without one, or after `timeout`: a trace that never started its command says why.
    pub fn wait_for_descendant(&mut self, argv: &[&str], timeout: Duration) -> i32 {
        let spacetime = self.pid();
        let timeout = crate::hang_guard(timeout);
        let found = poll::poll(timeout, Duration::from_millis(10), || {
            if let Some(pid) = procs::find_descendant(spacetime, argv) {
                return Some(Ok(pid));
            }
            match self.child.try_wait() {
                Ok(None) => None,
                Ok(Some(status)) => Some(Err(format!("spacetime exited first ({status})"))),
                Err(e) => Some(Err(format!("wait for pid {spacetime}: {e}"))),
            }
        });
        let why = match found {
            Some(Ok(pid)) => return pid,
            Some(Err(why)) => why,
            None => format!("none within {timeout:?}"),
        };
        self.fail(&format!(
            "no descendant of pid {spacetime} running {argv:?}: {why}"
        ))
    }

    /// Panics with `what`, the run's command line and what spacetime wrote on stderr so far.
    fn fail(&mut self, what: &str) -> ! {
        let stderr = self.stderr.take(Duration::from_millis(500));
        panic!(
            "{what}: {}\nstderr:\n{}",
            show_argv(&self.argv),
            String::from_utf8_lossy(&stderr)
        );
    }

    /// Waits for spacetime to exit (kills it and panics after the timeout).
    pub fn wait(mut self) -> Outcome {
        let left = self.timeout.saturating_sub(self.started.elapsed());
        let Some(status) = poll::exit_within(&mut self.child, left) else {
            let timeout = self.timeout;
            self.fail(&format!("spacetime did not exit within {timeout:?}"))
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
            argv: std::mem::take(&mut self.argv),
            elapsed,
            dir: self.dir.take().expect("the run's directory"),
        }
    }
}

/// A test that panics half-way must not leave a trace running.
impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
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

    /// The parsed `--json` file as an untyped value (panics if missing or not JSON; and,
    /// when the suite runs through an agent, unless it did: [`agent::check_programs`]).
    pub fn json_value(&self) -> Value {
        let text = self
            .json
            .as_deref()
            .unwrap_or_else(|| panic!("no --json report was written\n{}", self.context()));
        let v = serde_json::from_str(text).unwrap_or_else(|e| {
            panic!(
                "--json report is not valid JSON: {e}\n{}\n{}",
                &text[..floor_boundary(text, 2000)],
                self.context()
            )
        });
        agent::check_programs(&v);
        v
    }

    /// The typed report, after `check_invariants`.
    pub fn report(&self) -> Report {
        let v = self.json_value();
        // The typed view is of a lossless run (`check_invariants`): a lossy one may leave a
        // process's peak unknown (null, as the contract allows), which the view has no room
        // for. Say the loss, not a type mismatch.
        let lost = v["lost_events"].as_u64();
        assert_eq!(lost, Some(0), "the run lost events\n{}", self.context());
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

/// The integer at `path` in a JSON value (`["totals", "wall_ns"]`); panics naming the path.
pub fn u64_at(v: &serde_json::Value, path: &[&str]) -> u64 {
    let mut cur = v;
    for k in path {
        cur = &cur[*k];
    }
    cur.as_u64()
        .unwrap_or_else(|| panic!("{} is not an integer: {cur}", path.join(".")))
}
