//! The systemd units: `systemd-analyze security` rates each at 3.0 or better; the agent's
//! capability set is enough for what it serves (an unprivileged user's trace, with the exit
//! cross-check), under the unit's other constraints that can be applied
//! without systemd (no new privileges, no writable-and-executable memory); a capability
//! missing is named when it starts; it says on one line where it listens, who may connect and
//! its limits, and tells systemd it is ready (`Type=notify`).

use std::io::{BufRead as _, BufReader};
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use spacetime_tests::{spacetime_bin, workspace_root, TempDir, Trace};

const AGENT_UNIT: &str = "contrib/systemd/spacetime-agent.service";
const WATCH_UNIT: &str = "dist/spacetime-watch.service";

fn unit_text(rel: &str) -> String {
    std::fs::read_to_string(workspace_root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// `systemd-analyze security --offline=true`'s overall exposure for a unit file.
fn exposure(rel: &str, dir: &Path) -> f64 {
    let name = Path::new(rel).file_name().expect("a file name");
    let file = dir.join(name);
    std::fs::write(&file, unit_text(rel).replace("@BINDIR@", "/usr/bin")).expect("unit copy");
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&file)
        .output()
        .expect("systemd-analyze (systemd) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| {
            l.split_once("Overall exposure level for ")?
                .1
                .split_once(": ")
        })
        .and_then(|(_, v)| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no exposure level for {rel}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

#[test]
fn both_units_rate_3_or_better() {
    let dir = TempDir::new("units-rating");
    for (rel, most) in [(AGENT_UNIT, 3.0), (WATCH_UNIT, 3.0)] {
        let level = exposure(rel, dir.path());
        eprintln!("{rel}: exposure {level}");
        assert!(level <= most, "{rel} rates {level}, above {most}");
    }
}

/// The agent unit's CapabilityBoundingSet, as setpriv's `-all,+bpf,…`.
fn agent_caps(without: Option<&str>) -> String {
    let unit = unit_text(AGENT_UNIT);
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("a CapabilityBoundingSet line");
    let mut set = String::from("-all");
    for cap in line.split_whitespace().filter(|c| Some(*c) != without) {
        set.push_str(",+");
        set.push_str(&cap.trim_start_matches("CAP_").to_lowercase());
    }
    set
}

/// `spacetime agent` as root with nothing but `caps`, no new privileges and (as the unit's
/// MemoryDenyWriteExecute) no memory that is both writable and executable.
fn agent_command(caps: &str, socket: &Path) -> Command {
    assert!(
        unit_text(AGENT_UNIT).contains("\nMemoryDenyWriteExecute=yes\n"),
        "the unit no longer denies W+X memory: update this test"
    );
    let mut c = Command::new("setpriv");
    c.arg("--no-new-privs")
        .arg(format!("--bounding-set={caps}"))
        .arg("--inh-caps=-all")
        .arg("--")
        .arg(spacetime_bin())
        .args(["agent", "--socket"])
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: one prctl between fork and exec, no allocation. PR_SET_MDWE (Linux 6.3+) is
    // inherited across exec, like systemd's seccomp filter for MemoryDenyWriteExecute.
    unsafe {
        c.pre_exec(|| {
            let r = libc::prctl(
                libc::PR_SET_MDWE,
                libc::PR_MDWE_REFUSE_EXEC_GAIN as libc::c_ulong,
                0,
                0,
                0,
            );
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    c
}

#[test]
fn the_agent_units_capabilities_serve_an_unprivileged_user() {
    let dir = TempDir::new("agent-unit-caps");
    let socket = dir.path().join("agent.sock");
    let notify_path = dir.path().join("notify");
    let notify = UnixDatagram::bind(&notify_path).expect("a notify socket");
    notify
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let caps = agent_caps(None);
    let mut child = agent_command(&caps, &socket)
        .env("NOTIFY_SOCKET", &notify_path)
        .spawn()
        .expect("setpriv (util-linux) runs the agent");
    let mut err = BufReader::new(child.stderr.take().expect("stderr"));
    let mut line = String::new();
    err.read_line(&mut line).expect("the agent's first line");
    let mut buf = vec![0u8; 4096];
    let n = notify.recv(&mut buf).unwrap_or_else(|e| {
        let _ = child.kill();
        panic!("no READY=1 from the agent ({e}); it said: {line}")
    });
    let said = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        said.lines().next() == Some("READY=1") && said.contains("STATUS=spacetime agent "),
        "the notification: {said:?}"
    );
    assert!(
        line.starts_with("spacetime agent ")
            && line.contains(&format!("listening on {} (made here)", socket.display()))
            && line.contains("who may connect: every local user")
            && line.contains("8 sessions and 16 connections per user")
            && line.contains("16384 processes per session")
            && line.contains("programs loaded in "),
        "the start line: {line}"
    );

    let out = Trace::new(["/bin/sh", "-c", "/bin/true; /bin/true"])
        .env("SPACETIME_SOCKET", &socket)
        .as_nobody()
        .tag("agent-unit-nobody")
        .run();
    out.assert_code(0);
    let v = out.json_value();
    assert_eq!(v["programs"], "agent", "{}", out.context());
    assert_eq!(v["processes"].as_array().map(Vec::len), Some(3), "{v}");
    assert_eq!(
        v["taskstats"]["available"], true,
        "no exit cross-check with {caps}: {v}"
    );
    assert_eq!(v["taskstats"]["matched"], 3, "{v}");

    // SAFETY: our own unreaped child (setpriv exec'd the agent).
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("reaping the agent");
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut err, &mut rest);
    assert!(status.success(), "agent with {caps}: {status:?}: {rest}");
}

#[test]
fn an_agent_without_a_capability_of_its_unit_names_it() {
    for cap in ["CAP_SYS_PTRACE", "CAP_KILL", "CAP_BPF"] {
        let dir = TempDir::new("agent-unit-without");
        let out = agent_command(&agent_caps(Some(cap)), &dir.path().join("agent.sock"))
            .output()
            .expect("setpriv runs the agent");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "without {cap}: {err}");
        assert!(
            err.contains(cap) && err.lines().count() == 1,
            "without {cap} the agent must say so in one line: {err}"
        );
    }
}
