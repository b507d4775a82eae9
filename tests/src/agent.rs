//! A `spacetime agent` of a test's own, on a private socket, stopped when dropped; and the
//! check that a report came through an agent when the suite runs through one.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::{notify::Notify, spacetime_bin, TempDir};

/// Set by `cargo xtask test` for its run through an agent: every trace report must say
/// `"programs": VALUE`, so a silent fallback to own programs fails.
pub const EXPECT_PROGRAMS_ENV: &str = "ST_EXPECT_PROGRAMS";

/// A running agent.
pub struct Agent {
    child: Child,
    socket: PathBuf,
    stderr: mpsc::Receiver<String>,
    /// What [`Agent::wait_for_log`] read of its stderr so far.
    seen: Vec<String>,
    _dir: TempDir,
}

impl Agent {
    /// Starts `spacetime -v agent --socket <tmp>/agent.sock` and returns once it is ready
    /// (its `READY=1` on `NOTIFY_SOCKET`, sent once it listens).
    pub fn start(tag: &str) -> Agent {
        Agent::start_with(tag, &[])
    }

    /// [`Agent::start`] with more `spacetime agent` options.
    pub fn start_with(tag: &str, extra: &[&str]) -> Agent {
        let dir = TempDir::new(&format!("agent-{tag}"));
        // The agent refuses a socket directory others can write (they could swap the
        // socket for a link): root's, 0755, reachable by every user.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap_or_else(|e| panic!("chmod 0755 {}: {e}", dir.path().display()));
        let socket = dir.path().join("agent.sock");
        // Ready as systemd learns it (`Type=notify`): a READY=1 datagram, not a log line.
        let notify = Notify::bind(dir.path());
        let mut child = Command::new(spacetime_bin())
            .args(["-v", "agent", "--socket"])
            .arg(&socket)
            .args(extra)
            .env("NOTIFY_SOCKET", notify.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("starting spacetime agent: {e}"));
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let ready = notify.wait_ready(crate::poll::READY_TIMEOUT, || {
            matches!(child.try_wait(), Ok(None))
        });
        if let Err(why) = ready {
            let _ = child.kill();
            let _ = child.wait();
            // Its stderr reader ends with the process: everything it said is here.
            let said: Vec<String> = rx.iter().collect();
            panic!(
                "spacetime agent never said it was ready ({why:?}); stderr:\n{}",
                said.join("\n")
            );
        }
        Agent {
            child,
            socket,
            stderr: rx,
            seen: Vec::new(),
            _dir: dir,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Waits until a line of its stderr contains `needle` (a state the agent reached, as it
    /// says it), at most `within`; false if it did not say it by then.
    pub fn wait_for_log(&mut self, needle: &str, within: Duration) -> bool {
        if self.seen.iter().any(|l| l.contains(needle)) {
            return true;
        }
        let deadline = Instant::now() + within;
        while let Ok(line) = self
            .stderr
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            let hit = line.contains(needle);
            self.seen.push(line);
            if hit {
                return true;
            }
        }
        false
    }

    /// Kills it with `sig` and reaps it; returns its stderr since start-up, read to its end.
    pub fn kill(mut self, sig: i32) -> String {
        // SAFETY: our own unreaped child.
        unsafe { libc::kill(self.pid(), sig) };
        let status = self.child.wait().expect("reaping the agent");
        let mut out = std::mem::take(&mut self.seen);
        // The reader ends at the pipe's end, once the agent is gone: wait for it (bounded, in
        // case something the agent left holds the pipe open).
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(30)) {
            out.push(line);
        }
        out.push(format!("agent status: {status:?}"));
        out.join("\n")
    }

    /// Stops it with SIGTERM; panics unless it exits 0 and removed its socket.
    pub fn stop(self) {
        let socket = self.socket.clone();
        let out = self.kill(libc::SIGTERM);
        assert!(
            out.ends_with("agent status: ExitStatus(unix_wait_status(0))"),
            "the agent did not exit 0 on SIGTERM:\n{out}"
        );
        assert!(!socket.exists(), "the agent left its socket behind");
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: our own unreaped child.
            unsafe { libc::kill(self.pid(), libc::SIGTERM) };
            let _ = self.child.wait();
        }
    }
}

/// Panics when the suite runs through an agent and `report` did not come through it.
pub fn check_programs(report: &serde_json::Value) {
    if let Ok(want) = std::env::var(EXPECT_PROGRAMS_ENV) {
        assert_eq!(
            report["programs"].as_str(),
            Some(want.as_str()),
            "{EXPECT_PROGRAMS_ENV}={want}: the report's \"programs\" must say so (a silent fallback?)"
        );
    }
}
