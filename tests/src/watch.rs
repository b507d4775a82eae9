//! Helpers for the `spacetime watch` tests: start a watch, wait until it is ready, stop it
//! with a signal, parse its JSON lines; fetch and validate its OpenMetrics endpoint.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::{CommandExt as _, ExitStatusExt as _};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::collect::{reader, Collector};
use crate::{notify::Notify, show_argv, spacetime_bin, TempDir};

pub use crate::poll::READY_TIMEOUT;

/// A `spacetime watch` invocation.
pub struct Watch {
    flags: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    timeout: Duration,
    /// A command spacetime runs under (e.g. `setpriv --reuid=65534 …`).
    under: Vec<OsString>,
}

impl Default for Watch {
    fn default() -> Self {
        Self::new()
    }
}

impl Watch {
    pub fn new() -> Self {
        Watch {
            flags: Vec::new(),
            envs: Vec::new(),
            timeout: crate::hang_guard(Duration::from_secs(180)),
            under: Vec::new(),
        }
    }

    /// Starts spacetime through `prefix…`, which must exec it.
    pub fn under<I, S>(mut self, prefix: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.under = prefix.into_iter().map(|s| s.as_ref().to_owned()).collect();
        self
    }

    /// Sets an environment variable for spacetime (a locale, `COLUMNS`).
    pub fn env(mut self, k: impl AsRef<OsStr>, v: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((k.as_ref().to_owned(), v.as_ref().to_owned()));
        self
    }

    pub fn flag(mut self, f: impl AsRef<OsStr>) -> Self {
        self.flags.push(f.as_ref().to_owned());
        self
    }

    pub fn flags<I, S>(mut self, fs: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.flags
            .extend(fs.into_iter().map(|f| f.as_ref().to_owned()));
        self
    }

    /// Time limit for the whole run, as on this machine (scaled in the guest).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = crate::hang_guard(t);
        self
    }

    /// Starts `spacetime watch FLAGS…` and waits until it is ready (every later exit will be
    /// seen): its `READY=1` on `NOTIFY_SOCKET`, as systemd learns it.
    pub fn start(self) -> RunningWatch {
        let bin = spacetime_bin();
        let mut c = match self.under.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let dir = TempDir::new("watch-ready");
        let notify = Notify::bind(dir.path());
        c.arg("watch")
            .args(&self.flags)
            .envs(self.envs.iter().cloned())
            .env("NOTIFY_SOCKET", notify.path());
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            c.pre_exec(|| {
                for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                    libc::signal(sig, libc::SIG_DFL);
                }
                Ok(())
            });
        }
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut argv = vec![bin.as_os_str().to_owned(), "watch".into()];
        argv.extend(self.flags.iter().cloned());
        let mut child = c
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = reader(child.stdout.take().expect("piped stdout"));
        let stderr = reader(child.stderr.take().expect("piped stderr"));
        let w = RunningWatch {
            child,
            argv,
            stdout,
            stderr,
            started: Instant::now(),
            timeout: self.timeout,
        };
        if let Err(why) = notify.wait_ready(READY_TIMEOUT, || w.running()) {
            panic!(
                "{} never said it was ready ({why:?})\nstderr:\n{}",
                show_argv(&w.argv),
                w.stderr_now()
            );
        }
        w
    }
}

/// A running `spacetime watch`.
pub struct RunningWatch {
    child: Child,
    argv: Vec<OsString>,
    stdout: Collector,
    stderr: Collector,
    started: Instant,
    timeout: Duration,
}

impl RunningWatch {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// stderr so far.
    pub fn stderr_now(&self) -> String {
        self.stderr.text_so_far()
    }

    /// stdout so far.
    pub fn stdout_now(&self) -> String {
        self.stdout.text_so_far()
    }

    /// Waits until stderr contains `needle`; panics (with stderr) after `timeout` or if
    /// spacetime exits first.
    pub fn wait_for_stderr(&self, needle: &str, timeout: Duration) {
        let timeout = crate::hang_guard(timeout);
        // Some(true): printed; Some(false): it exited first.
        let printed = crate::poll::poll(timeout, Duration::from_millis(10), || {
            if self.stderr_now().contains(needle) {
                return Some(true);
            }
            (!self.running()).then_some(false)
        });
        assert!(
            printed == Some(true),
            "{} never printed {needle:?} ({})\nstderr:\n{}",
            show_argv(&self.argv),
            if printed.is_none() {
                "timed out"
            } else {
                "it exited"
            },
            self.stderr_now()
        );
    }

    /// spacetime (or the command it runs under) has not exited.
    fn running(&self) -> bool {
        let pid = self.child.id() as i32;
        // SAFETY: kill with signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 && !self.is_zombie() }
    }

    fn is_zombie(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .map(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .unwrap_or(true)
    }

    /// Waits until stdout holds a line containing `needle` (the exit was reported).
    pub fn wait_for_stdout(&self, needle: &str, timeout: Duration) {
        self.wait_until(
            &format!("output line containing {needle:?}"),
            timeout,
            |out| out.contains(needle),
        );
    }

    /// Waits until `done` holds for the whole standard output so far, `what` naming it in
    /// the panic message when it does not within `timeout`.
    pub fn wait_until(&self, what: &str, timeout: Duration, done: impl Fn(&str) -> bool) {
        let timeout = crate::hang_guard(timeout);
        let seen = crate::poll::poll(timeout, Duration::from_millis(20), || {
            done(&self.stdout_now()).then_some(())
        });
        assert!(
            seen.is_some(),
            "{}: no {what} within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
            show_argv(&self.argv),
            self.stdout_now(),
            self.stderr_now()
        );
    }

    /// The OpenMetrics address it announced on stderr.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.wait_for_stderr("/metrics", Duration::from_secs(60));
        let err = self.stderr_now();
        let line = err
            .lines()
            .find(|l| l.contains("metrics on http://"))
            .unwrap_or_else(|| panic!("no metrics address on stderr:\n{err}"));
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|r| r.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("cannot parse the address in {line:?}"));
        addr.parse()
            .unwrap_or_else(|e| panic!("bad address {addr:?} in {line:?}: {e}"))
    }

    /// Sends `sig` to spacetime.
    pub fn signal(&self, sig: i32) {
        // SAFETY: plain syscall.
        let r = unsafe { libc::kill(self.pid(), sig) };
        assert_eq!(r, 0, "kill({}, {sig})", self.pid());
    }

    /// Sends SIGINT and waits for spacetime to exit.
    pub fn interrupt(self) -> WatchOutcome {
        self.signal(libc::SIGINT);
        self.wait()
    }

    /// Waits for spacetime to exit (kills it and panics after the timeout).
    pub fn wait(mut self) -> WatchOutcome {
        let left = self.timeout.saturating_sub(self.started.elapsed());
        let Some(status) = crate::poll::exit_within(&mut self.child, left) else {
            panic!(
                "spacetime did not exit within {:?}: {}\nstderr:\n{}",
                self.timeout,
                show_argv(&self.argv),
                self.stderr_now()
            );
        };
        let grace = Duration::from_secs(5);
        WatchOutcome {
            status,
            stdout: String::from_utf8_lossy(&self.stdout.take(grace)).into_owned(),
            stderr: String::from_utf8_lossy(&self.stderr.take(grace)).into_owned(),
            argv: std::mem::take(&mut self.argv),
        }
    }
}

/// A test that panics half-way must not leave a system-wide watch running.
impl Drop for RunningWatch {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A finished `spacetime watch`.
pub struct WatchOutcome {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub argv: Vec<OsString>,
}

impl WatchOutcome {
    pub fn context(&self) -> String {
        let mut err = self.stderr.clone();
        if err.len() > 6000 {
            err = format!("…{}", &err[crate::floor_boundary(&err, err.len() - 6000)..]);
        }
        format!(
            "{}\nstatus: {:?} (signal {:?})\nstderr:\n{err}",
            show_argv(&self.argv),
            self.status,
            self.status.signal()
        )
    }

    /// Asserts a clean stop: exit status 0 and the summary on stderr.
    pub fn assert_clean(&self) {
        assert_eq!(
            self.status.code(),
            Some(0),
            "spacetime watch must exit with status 0\n{}",
            self.context()
        );
        assert!(
            self.stderr.contains("spacetime: watched ") && self.stderr.contains("  loss:"),
            "no summary on stderr\n{}",
            self.context()
        );
    }

    /// Every stdout line parsed as a JSON object (panics naming the first bad line).
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| {
                    panic!("stdout line is not JSON: {e}: {l:?}\n{}", self.context())
                });
                assert!(v.is_object(), "JSON line is not an object: {l}");
                v
            })
            .collect()
    }

    /// The JSON exits with `token` as one of their arguments.
    pub fn exits_with(&self, token: &str) -> Vec<Value> {
        self.json_lines()
            .into_iter()
            .filter(|v| argv_of(v).iter().any(|a| a == token))
            .collect()
    }

    /// The JSON exits with an argument containing `s`.
    pub fn exits_containing(&self, s: &str) -> Vec<Value> {
        self.json_lines()
            .into_iter()
            .filter(|v| argv_of(v).iter().any(|a| a.contains(s)))
            .collect()
    }

    /// The figure after `label` in the summary's loss line, e.g. "ring buffer full".
    pub fn summary_count(&self, label: &str) -> u64 {
        let at = self
            .stderr
            .find(&format!("{label}: "))
            .unwrap_or_else(|| panic!("no {label:?} in the summary\n{}", self.context()));
        let rest = &self.stderr[at + label.len() + 2..];
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        digits
            .parse()
            .unwrap_or_else(|_| panic!("no number after {label:?}\n{}", self.context()))
    }
}

/// `argv` of a JSON exit, as strings.
pub fn argv_of(v: &Value) -> Vec<String> {
    v["argv"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// A unique token for argv, so a test finds its own processes among the system's.
pub fn token(what: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    format!(
        "st-{what}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Runs a command to completion, ignoring its status; returns its pid.
pub fn run(cmd: &mut Command) -> u32 {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let pid = child.id();
    child
        .wait()
        .unwrap_or_else(|e| panic!("wait for {cmd:?}: {e}"));
    pid
}

/// A plain HTTP/1.1 GET asking for OpenMetrics: (status code, headers lower-cased, body).
pub fn http_get(addr: SocketAddr, path: &str) -> (u16, BTreeMap<String, String>, String) {
    http_get_accepting(addr, path, "application/openmetrics-text; version=1.0.0")
}

/// A plain HTTP/1.1 GET with this `Accept` header (none when empty).
pub fn http_get_accepting(
    addr: SocketAddr,
    path: &str,
    accept: &str,
) -> (u16, BTreeMap<String, String>, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("set timeout");
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{}\r\n",
        if accept.is_empty() {
            String::new()
        } else {
            format!("Accept: {accept}\r\n")
        }
    )
    .expect("send request");
    let mut resp = Vec::new();
    s.read_to_end(&mut resp)
        .unwrap_or_else(|e| panic!("read response from {addr}: {e}"));
    let resp = String::from_utf8(resp).expect("response is UTF-8");
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {resp:?}"));
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let code = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    if let Some(len) = headers_len(&resp) {
        assert_eq!(len, body.len(), "Content-Length does not match the body");
    }
    (code, headers, body.to_string())
}

fn headers_len(resp: &str) -> Option<usize> {
    resp.lines()
        .take_while(|l| !l.trim().is_empty())
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().to_string())
        })
        .and_then(|v| v.parse().ok())
}

pub use crate::openmetrics::{parse_openmetrics, Family, Sample};

/// Where cgroup2 is mounted, from /proc/self/mountinfo.
pub fn cgroup2_mount() -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| pre.split_whitespace().nth(4).map(str::to_string))
            .flatten()
    })
}

/// A cgroup v2 directory made for a test (with its missing parents), removed on drop.
pub struct TempCgroup {
    /// Below the cgroup2 root, e.g. `/st-x/docker-….scope`.
    pub rel: String,
    made: Vec<std::path::PathBuf>,
}

impl TempCgroup {
    /// Creates `rel` below the cgroup2 mount; panics when there is none.
    pub fn new(rel: &str) -> TempCgroup {
        let mount = cgroup2_mount().expect("no cgroup2 mount: the watch tests need one");
        let mut made = Vec::new();
        let mut dir = std::path::PathBuf::from(&mount);
        for part in rel.split('/').filter(|p| !p.is_empty()) {
            dir.push(part);
            if !dir.exists() {
                std::fs::create_dir(&dir)
                    .unwrap_or_else(|e| panic!("create cgroup {}: {e}", dir.display()));
                made.push(dir.clone());
            }
        }
        TempCgroup {
            rel: rel.to_string(),
            made,
        }
    }

    /// Makes `cmd` join this cgroup before it execs.
    pub fn join(&self, cmd: &mut Command) {
        let dir = self.made.last().expect("a cgroup was made");
        let procs = std::ffi::CString::new(dir.join("cgroup.procs").to_str().expect("utf-8"))
            .expect("path without NUL");
        // SAFETY: open/write/close only between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                Ok(())
            });
        }
    }
}

impl Drop for TempCgroup {
    fn drop(&mut self) {
        for d in self.made.iter().rev() {
            let _ = std::fs::remove_dir(d);
        }
    }
}

/// `st-workload quiet-exit CODE TOKEN` (the workload at `wl`) and its token: a process that
/// exits with `code` and whose argv names this test (see [`token`]).
pub fn quiet_exit(wl: &str, code: i32, what: &str) -> (String, std::process::Command) {
    let t = token(what);
    let mut c = std::process::Command::new(wl);
    c.args(["quiet-exit", &code.to_string(), &t]);
    (t, c)
}

/// Lets a holder (a shell waiting on its stdin) go on, and waits for it to end.
pub fn release(h: &mut std::process::Child) {
    h.stdin
        .take()
        .expect("stdin")
        .write_all(b"go\n")
        .expect("release holder");
    h.wait().expect("wait holder");
}
