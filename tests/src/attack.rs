//! Shared pieces of the attack suite (tests/tests/agent_attack*.rs): the unprivileged raw
//! client run as a chosen uid, its answers read line by line, and the agent's own figures
//! (RSS, CPU time) read from /proc.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The unprivileged user of the suite (`nobody`), and a second one that exists nowhere but
/// in the kernel (setpriv takes any number): "another user".
pub const ATTACKER: u32 = 65534;
pub const OTHER_USER: u32 = 60123;

/// `st-agent-client SOCKET ARGS…` running as `uid` (gid the same, no groups), stdin piped.
pub struct Client {
    child: Child,
    pub stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl Client {
    pub fn start(bin: &str, socket: &Path, uid: u32, args: &[&str]) -> Client {
        let mut child = Command::new("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .args(["--clear-groups", "--", bin])
            .arg(socket)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting st-agent-client {args:?}: {e}"));
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Client {
            stdin: child.stdin.take(),
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Reads lines until one starts with `key`; returns the rest of it.
    /// `timeout` as on this machine ([`crate::hang_guard`] scales it in the guest).
    pub fn until(&mut self, key: &str, timeout: Duration) -> String {
        let timeout = crate::hang_guard(timeout);
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.starts_with("error ") {
                        panic!("st-agent-client failed: {line}\nall: {:?}", self.seen);
                    }
                    if let Some(rest) = line.strip_prefix(key) {
                        return rest.trim().to_string();
                    }
                }
                Err(_) => panic!(
                    "st-agent-client said no `{key}` within {timeout:?}; it said: {:?}",
                    self.seen
                ),
            }
        }
    }

    /// A number after `key`.
    pub fn number(&mut self, key: &str, timeout: Duration) -> u64 {
        let v = self.until(key, timeout);
        v.split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("`{key}` is not followed by a number: {v:?}"))
    }

    /// Writes a line to its stdin.
    pub fn say(&mut self, line: &str) {
        let s = self.stdin.as_mut().expect("stdin still open");
        writeln!(s, "{line}").expect("writing to st-agent-client");
    }

    /// Closes its stdin (what `hold` modes wait for) and reaps it.
    pub fn end(mut self) -> Vec<String> {
        drop(self.stdin.take());
        let st = self.child.wait().expect("reaping st-agent-client");
        assert!(
            st.success(),
            "st-agent-client: {st:?}; said {:?}",
            self.seen
        );
        self.seen.extend(self.lines.try_iter());
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until process `pid` runs a program whose first argument is `argv0` (it exec'd).
pub fn wait_exec(pid: u32, argv0: &str) {
    let what = format!("exec of {argv0} by pid {pid}");
    crate::poll::wait_for(&what, crate::poll::READY_TIMEOUT, || {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        cmdline.starts_with(argv0.as_bytes()).then_some(())
    });
}

/// A `Name:  N kB` line of /proc/PID/status, bytes.
fn status_bytes(pid: i32, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .unwrap_or_else(|| panic!("no {name} for pid {pid}"))
}

/// A process's resident set (VmRSS), bytes: what it costs the machine, its mapped ring
/// buffers included.
pub fn rss_bytes(pid: i32) -> u64 {
    status_bytes(pid, "VmRSS:")
}

/// A process's resident anonymous memory (RssAnon), bytes: its heap, what it allocated.
pub fn anon_bytes(pid: i32) -> u64 {
    status_bytes(pid, "RssAnon:")
}

/// A process's CPU time so far (user + system), clock ticks.
pub fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14 and 15 of the line: 12th and 13th after the state.
    f[11].parse::<u64>().unwrap_or(0) + f[12].parse::<u64>().unwrap_or(0)
}

/// The largest resident set and heap of a process over a while, bytes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Peaks {
    pub rss: u64,
    pub anon: u64,
}

/// Samples `pid`'s RSS and heap every 20 ms while `busy` runs; returns its result and the
/// largest of each.
pub fn peak_rss_during<T>(pid: i32, busy: impl FnOnce() -> T) -> (T, Peaks) {
    let (tx, rx) = mpsc::channel::<()>();
    let sample = move |p: &mut Peaks| {
        p.rss = p.rss.max(rss_bytes(pid));
        p.anon = p.anon.max(anon_bytes(pid));
    };
    let sampler = std::thread::spawn(move || {
        let mut peak = Peaks::default();
        loop {
            sample(&mut peak);
            if rx.recv_timeout(Duration::from_millis(20)).is_ok() {
                return peak;
            }
        }
    });
    let r = busy();
    let _ = tx.send(());
    let mut peak = sampler.join().expect("the RSS sampler");
    sample(&mut peak);
    (r, peak)
}

/// Runs root processes (`/bin/true`) one after another until dropped: other users' processes
/// for an attacker to try to learn about, landing on pids the attacker cycles through.
pub struct Victims {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ran: std::sync::Arc<std::sync::atomic::AtomicU64>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Victims {
    pub fn start() -> Victims {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ran = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (s, r) = (stop.clone(), ran.clone());
        let thread = std::thread::spawn(move || {
            let mut n = 0;
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                if Command::new("/bin/true").status().is_ok() {
                    n += 1;
                    r.store(n, std::sync::atomic::Ordering::Relaxed);
                }
            }
            n
        });
        Victims {
            stop,
            ran,
            thread: Some(thread),
        }
    }

    /// How many have run (exited and been reaped) so far.
    pub fn ran(&self) -> u64 {
        self.ran.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops them; how many ran.
    pub fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

impl Drop for Victims {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Starts a root process (`/bin/true`) on pid `pid` if the pid is free: the kernel hands
/// out the pid after `ns_last_pid` next (root, initial namespace). Returns whether it landed
/// there (another process may take it first).
pub fn root_process_on(pid: u32) -> bool {
    if std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string()).is_err() {
        return false;
    }
    match Command::new("/bin/true").spawn() {
        Ok(mut c) => {
            let landed = c.id() == pid;
            let _ = c.wait();
            landed
        }
        Err(_) => false,
    }
}
