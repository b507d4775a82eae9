//! What is only known by trying: loading and attaching the programs, hearing a taskstats
//! exit record for a process started here, creating a memory cgroup, opening a session with
//! the agent. Each try is undone at once (programs detached, cgroup removed, session closed).

use std::{
    io,
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use super::{Check, Status};
use crate::kernel::{
    loader::{Atomics, FentryHook, LoadError, LoadOptions, Probes},
    remote::{
        client::{AgentConn, ConnectError},
        proto,
    },
    taskstats::{self, Unavailable},
};
use crate::util::term::escape;

/// How long a taskstats record may take to arrive for the test process.
const RECORD_WAIT: Duration = Duration::from_secs(3);

/// What loading the programs here told.
pub struct Loaded {
    pub check: Check,
    /// They loaded.
    pub own: bool,
    /// The fentry hooks the kernel would not attach (their figures are lost here).
    pub refused: Vec<FentryHook>,
}

/// Loads and attaches the programs (detached again at once). Nothing is tried when this
/// process may not load them.
pub fn load(may_load: bool) -> Loaded {
    let loaded = |check, own, refused| Loaded {
        check,
        own,
        refused,
    };
    if !may_load {
        let s = "not loaded here: this user may not (see capabilities)";
        return loaded(
            Check::new("programs", Status::Skipped, s.into()),
            false,
            vec![],
        );
    }
    let started = Instant::now();
    match Probes::load(&LoadOptions::default()) {
        Ok(p) => {
            let ms = started.elapsed().as_secs_f64() * 1e3;
            // What the kernel forced: an fentry it refused, the builds without fetch atomics.
            let limits: Vec<&str> = p
                .refused
                .first()
                .map(|r| r.line.as_str())
                .into_iter()
                .chain(p.atomics.limits())
                .collect();
            let check = match limits.is_empty() {
                true => Check::new(
                    "programs",
                    Status::Ok,
                    format!("loaded and attached in {ms:.1} ms"),
                ),
                false => Check::new(
                    "programs",
                    Status::Limited,
                    format!("loaded in {ms:.1} ms, but {}", limits.join("; ")),
                ),
            };
            loaded(check, true, p.refused.iter().map(|r| r.hook).collect())
        }
        Err(e) => loaded(
            Check::new("programs", Status::No, load_error(&e)),
            false,
            vec![],
        ),
    }
}

/// Why the programs did not load, and what this kernel's BPF lacks when that is known.
fn load_error(e: &LoadError) -> String {
    match Atomics::probe().limits() {
        None => format!("cannot be loaded here: {e}"),
        Some(l) => format!("cannot be loaded here: {e} ({l})"),
    }
}

/// Registers a taskstats listener and waits for the record of a process started here.
pub fn taskstats(net_admin: bool) -> Check {
    let no = |s: String| Check::new("taskstats", Status::No, s);
    if !net_admin {
        return no("registering for exit records needs CAP_NET_ADMIN: exits are cross-checked only through an agent".into());
    }
    let mut listener = match taskstats::open_listener(1 << 20) {
        Ok(l) => l,
        Err(Unavailable::OtherNetNamespace) => {
            return no(format!(
                "{}: exits are not cross-checked",
                Unavailable::OtherNetNamespace
            ))
        }
        Err(e) => return no(format!("{e}")),
    };
    let pid = match spawn_true() {
        Ok(pid) => pid,
        Err(e) => return no(format!("starting a test process: {e}")),
    };
    let deadline = Instant::now() + RECORD_WAIT;
    let mut records = Vec::new();
    loop {
        if let Err(e) = listener.drain(&mut records) {
            return no(format!("reading exit records: {e}"));
        }
        if records.iter().any(|r| r.ac_pid == pid) {
            return Check::new(
                "taskstats",
                Status::Ok,
                "an exit record arrived for a test process: exits are cross-checked".into(),
            );
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return no(format!("{}", Unavailable::NoRecords));
        }
        listener.wait_readable(left);
    }
}

/// Starts `true` and waits for it; its pid as the kernel's records name it (ours: taskstats
/// is only heard in the initial PID namespace, where the two agree).
fn spawn_true() -> io::Result<u32> {
    let mut c = Command::new("true")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pid = c.id();
    c.wait()?;
    Ok(pid)
}

/// `--cgroup-peak`: a memory cgroup created and removed again.
pub fn cgroup() -> Check {
    let layout = cgroup_layout();
    match crate::run::cgroup_peak::CgroupPeak::create() {
        Ok(cg) => {
            let s = format!(
                "{layout}; --cgroup-peak works (v{} memory controller, {})",
                cg.version.number(),
                cg.version.peak_file()
            );
            drop(cg);
            Check::new("cgroup", Status::Ok, s)
        }
        Err(e) => Check::new(
            "cgroup",
            Status::No,
            format!("{layout}; --cgroup-peak cannot work: {e}"),
        ),
    }
}

/// "cgroup v2", "cgroup v1", or both (hybrid), from /proc/self/mountinfo.
fn cgroup_layout() -> String {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let has = |t: &str| {
        info.lines()
            .any(|l| l.split_once(" - ").is_some_and(|(_, r)| r.starts_with(t)))
    };
    match (has("cgroup2 "), has("cgroup ")) {
        (true, true) => "cgroup v1 and v2 (hybrid)".into(),
        (true, false) => "cgroup v2".into(),
        (false, true) => "cgroup v1".into(),
        (false, false) => "no cgroup file system mounted".into(),
    }
}

/// The agent at `path`: whether it answers this user, and who may connect. `true` when it
/// opened a session (a trace can go through it).
pub fn agent(path: &Path, needed: bool) -> (Check, bool) {
    let shown = escape(path.as_os_str().as_encoded_bytes());
    let who = crate::run::agent::who_may_connect(path);
    let absent = |why: String| {
        let status = if needed { Status::No } else { Status::Skipped };
        let fix = if needed {
            ": start one (sudo systemctl enable --now spacetime-agent.socket, or sudo spacetime agent)"
        } else {
            " (not needed: the programs load here)"
        };
        Check::new("agent", status, format!("{why}{fix}"))
    };
    match AgentConn::connect_for(path, proto::want::TRACE, 0, || None) {
        Ok(conn) => {
            let w = &conn.welcome;
            let ts = if w.taskstats_error.is_empty() {
                "its exits cross-checked".to_string()
            } else {
                format!(
                    "no taskstats: {}",
                    escape(&w.taskstats_error).trim_end_matches('.')
                )
            };
            let s = format!(
                "answers at {shown} (protocol {}, session opened in {:.1} ms); who may connect: \
                 {who}; {ts}",
                proto::VERSION,
                conn.ready_ms
            );
            (Check::new("agent", Status::Ok, s), true)
        }
        Err(ConnectError::Absent(_)) => (absent(format!("none answers at {shown}")), false),
        Err(ConnectError::Io { source, .. })
            if source.kind() == io::ErrorKind::PermissionDenied =>
        {
            let s = format!("{shown} is not open to this user (who may connect: {who})");
            (absent(s), false)
        }
        Err(e) => (
            Check::new(
                "agent",
                if needed { Status::No } else { Status::Limited },
                escape(e.to_string().as_bytes()),
            ),
            false,
        ),
    }
}
