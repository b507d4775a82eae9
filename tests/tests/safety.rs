//! Bytes and pids from untrusted processes: argv and exe that are not UTF-8 come out exact
//! in the JSON (base64), control bytes in argv and comm never reach a terminal raw, and a
//! signal forwarded after CMD exits never reaches a stranger that reused a traced pid.

use std::ffi::OsString;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::ffi::{OsStrExt as _, OsStringExt as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::{engine::general_purpose::STANDARD, Engine as _};
use serde_json::Value;
use spacetime_tests::raw::pidfd_open;
use spacetime_tests::watch::{token, Watch};
use spacetime_tests::{TempDir, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn b64_list(v: &Value) -> Vec<Vec<u8>> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a base64 array: {v}"))
        .iter()
        .map(|s| {
            STANDARD
                .decode(s.as_str().expect("a string"))
                .unwrap_or_else(|e| panic!("bad base64 {s}: {e}"))
        })
        .collect()
}

fn b64(v: &Value) -> Vec<u8> {
    STANDARD
        .decode(v.as_str().unwrap_or_else(|| panic!("not a string: {v}")))
        .unwrap_or_else(|e| panic!("bad base64 {v}: {e}"))
}

/// A copy of /bin/true under a name that is not UTF-8, and an argv with bytes that are not.
fn hostile_program(dir: &Path, tok: &str) -> (OsString, Vec<OsString>) {
    let mut name = b"tr\xffue-\x9b".to_vec();
    name.extend_from_slice(tok.as_bytes());
    let exe = dir.join(std::ffi::OsStr::from_bytes(&name));
    std::fs::copy("/bin/true", &exe).expect("copy /bin/true");
    let exe = exe.into_os_string();
    let argv = vec![
        exe.clone(),
        OsString::from_vec(b"a\xff\xfeb".to_vec()),
        OsString::from_vec(b"\xc3\x28-\x80".to_vec()),
        OsString::from(tok),
    ];
    (exe, argv)
}

fn argv_bytes(argv: &[OsString]) -> Vec<Vec<u8>> {
    argv.iter().map(|a| a.as_bytes().to_vec()).collect()
}

#[test]
fn non_utf8_argv_and_exe_are_exact_in_trace_json() {
    let dir = TempDir::new("argv-bytes");
    let tok = token("bytes");
    let (exe, argv) = hostile_program(dir.path(), &tok);
    let out = Trace::new(&argv).tag("argv-bytes").run();
    out.assert_code(0);
    let v = out.json_value();
    let root = &v["processes"][0];
    let img = root["images"]
        .as_array()
        .and_then(|i| i.last())
        .unwrap_or_else(|| panic!("no image: {root}"));
    assert_eq!(b64(&img["exe_b64"]), exe.as_bytes(), "exe_b64\n{img}");
    assert_eq!(
        b64_list(&img["argv_b64"]),
        argv_bytes(&argv),
        "argv_b64\n{img}"
    );
    assert_eq!(
        img["argv"][3],
        tok.as_str(),
        "UTF-8 elements stay exact strings"
    );
    assert_eq!(
        b64_list(&v["command_b64"]),
        argv_bytes(&argv),
        "command_b64"
    );
    // An image whose names are all UTF-8 carries no base64 fields.
    let plain = Trace::new(["/bin/true", "plain"]).tag("argv-plain").run();
    let pv = plain.json_value();
    let pimg = &pv["processes"][0]["images"][0];
    assert!(
        pimg.get("argv_b64").is_none() && pimg.get("exe_b64").is_none(),
        "{pimg}"
    );
}

#[test]
fn non_utf8_argv_and_exe_are_exact_in_watch_json() {
    let dir = TempDir::new("watch-bytes");
    let tok = token("wbytes");
    let (exe, argv) = hostile_program(dir.path(), &tok);
    let w = Watch::new().flag("--json").start();
    let status = Command::new(&exe)
        .args(&argv[1..])
        .status()
        .expect("run the program");
    assert!(status.success());
    w.wait_for_stdout(&tok, Duration::from_secs(30));
    let out = w.interrupt();
    out.assert_clean();
    let line = out
        .json_lines()
        .into_iter()
        .find(|l| l["argv"][3] == tok.as_str())
        .unwrap_or_else(|| panic!("no exit with {tok}\n{}", out.context()));
    assert_eq!(b64(&line["exe_b64"]), exe.as_bytes(), "{line}");
    assert_eq!(b64_list(&line["argv_b64"]), argv_bytes(&argv), "{line}");
}

/// Controls a terminal acts on: C0 but newline, DEL, C1 (a raw C1 byte, invalid UTF-8 on its
/// own, reads back as U+FFFD).
fn raw_controls(s: &str) -> Vec<char> {
    s.chars()
        .filter(|&c| (c.is_control() && c != '\n') || c == '\u{fffd}')
        .collect()
}

/// An argv that would retitle, clear and overwrite a terminal, and a comm that would too.
fn hostile_argv(tok: &str) -> Vec<OsString> {
    vec![
        OsString::from(WL),
        OsString::from("rename"),
        OsString::from_vec(b"\x1b]0;pwn\x07\r\n\xc2\x9b\x7f".to_vec()),
        OsString::from_vec(b"\x1b]0;owned\x07\x1b[2J\rFAKE ROW\n\x9b31m".to_vec()),
        OsString::from_vec("\u{9b}\u{85}\u{202e}".as_bytes().to_vec()),
        OsString::from(tok),
    ]
}

#[test]
fn control_bytes_never_reach_the_trace_summary_raw() {
    let tok = token("ctl");
    let out = Trace::new(hostile_argv(&tok)).tag("ctl").run();
    out.assert_code(0);
    let bad = raw_controls(&out.stderr);
    assert!(bad.is_empty(), "raw controls {bad:?} in\n{}", out.stderr);
    assert!(
        out.stderr.contains("\\e]0;owned\\a\\e[2J\\rFAKE ROW\\n"),
        "the escaped argv is shown\n{}",
        out.stderr
    );
    // The JSON keeps the bytes exact.
    let v = out.json_value();
    assert_eq!(
        v["processes"][0]["images"][0]["argv"][4],
        "\u{9b}\u{85}\u{202e}"
    );
}

#[test]
fn control_bytes_never_reach_the_watch_table_raw() {
    let tok = token("wctl");
    let w = Watch::new().flags(["--threads", "--ancestry"]).start();
    let argv = hostile_argv(&tok);
    let status = Command::new(&argv[0])
        .args(&argv[1..])
        .status()
        .expect("run");
    assert!(status.success());
    // Both rows, on every kernel: before 6.16 the thread's exit record can come after its
    // process's (exit_mm() wakes the joiner first), and watch keeps the ended process for it.
    w.wait_until(
        "both the thread and the process rows",
        Duration::from_secs(30),
        |s| s.matches(tok.as_str()).count() >= 2,
    );
    let out = w.interrupt();
    out.assert_clean();
    let ours: Vec<&str> = out.stdout.lines().filter(|l| l.contains(&tok)).collect();
    for l in &ours {
        let bad = raw_controls(l);
        assert!(bad.is_empty(), "raw controls {bad:?} in {l:?}");
    }
    assert!(
        ours.iter()
            .any(|l| l.contains("[thread \\e]0;pwn\\a\\r\\n\\u{9b}")),
        "the thread row shows its escaped comm\n{}",
        ours.join("\n")
    );
    let bad = raw_controls(&out.stdout);
    assert!(bad.is_empty(), "raw controls {bad:?} anywhere on stdout");
    let bad = raw_controls(&out.stderr);
    assert!(bad.is_empty(), "raw controls {bad:?} in the summary");
}

// Waits on the state of other processes, which no event announces.
use spacetime_tests::poll::wait_until as wait_for;

fn read_pid(p: &Path) -> i32 {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}

/// A pidfd for `pid`, proven (after it is opened) to pin the `sleep 300` the script started
/// (its fork may not have exec'd yet).
fn pin_sleeper(pid: i32) -> OwnedFd {
    let fd = pidfd_open(pid, 0).unwrap_or_else(|e| panic!("pidfd_open({pid}): {e}"));
    wait_for("D to exec `sleep 300`", Duration::from_secs(60), || {
        assert!(!exited(&fd), "D ({pid}) exited before the signal");
        std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == b"sleep\x00300\x00")
    });
    fd
}

/// Whether the process `pidfd` pins has exited: the kernel makes a pidfd readable then.
fn exited(pidfd: &OwnedFd) -> bool {
    let mut p = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    assert!(
        n >= 0,
        "poll on a pidfd: {}",
        std::io::Error::last_os_error()
    );
    n == 1
}

/// Starts a process that holds `pid` (steered with the kernel's ns_last_pid; retried when
/// another process took the pid first).
fn stranger_at(pid: i32) -> Child {
    for _ in 0..500 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("write ns_last_pid (needs root)");
        let mut c = Command::new("sleep")
            .arg("300")
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn sleep");
        if c.id() as i32 == pid {
            return c;
        }
        let _ = c.kill();
        let _ = c.wait();
    }
    panic!("could not start a process at pid {pid}");
}

#[test]
fn forwarded_signal_spares_a_stranger_holding_a_traced_pid() {
    let dir = TempDir::new("stranger");
    let d = dir.path();
    // With one tracking slot the root's children are seen forking but not exiting: C exits
    // unseen, then D outlives the root, keeping the trace running. C lives 200 ms: a pid
    // taken again within the tick (10 ms) its first holder started in cannot be told apart
    // by /proc, and the kernel never recycles one that fast unless root steers it. `r` is
    // written whole (renamed into place): read while the shell wrote it, it was once empty.
    let script = format!(
        "sh -c 'sleep 0.2' & echo $! > {c}; wait $!; sleep 300 & echo $! > {dd}; echo $$ > {r}.new; mv {r}.new {r}",
        c = d.join("c").display(),
        dd = d.join("d").display(),
        r = d.join("r").display()
    );
    let running = Trace::new(["sh", "-c", &script])
        .flag("--max-processes")
        .flag("1")
        .tag("stranger")
        .spawn();
    wait_for("the root to be reaped", Duration::from_secs(60), || {
        d.join("r").exists() && !Path::new(&format!("/proc/{}", read_pid(&d.join("r")))).exists()
    });
    let c = read_pid(&d.join("c"));
    let dpid = read_pid(&d.join("d"));
    assert!(gone(c), "C ({c}) has exited");
    // D is watched through a pidfd: steering the next pid to C's makes D's the next one
    // handed out, and a kernel thread took it the moment D died (seen in a guest).
    let d_pinned = pin_sleeper(dpid);
    let mut stranger = stranger_at(c);
    running.signal(libc::SIGTERM);
    let out = running.wait();
    let alive = stranger.try_wait().expect("try_wait").is_none();
    let _ = stranger.kill();
    let _ = stranger.wait();
    assert!(
        alive,
        "the stranger at pid {c} was killed\n{}",
        out.context()
    );
    out.assert_code(0);
    // The signal is sent before spacetime exits; D dies when it is next scheduled.
    wait_for(
        "D, proven ours, to die of the forwarded SIGTERM",
        Duration::from_secs(60),
        || exited(&d_pinned),
    );
    let v = out.json_value();
    let procs = v["processes"].as_array().expect("processes");
    let state = |pid: i32| {
        procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("no pid {pid} in the report\n{}", out.context()))["state"]
            .clone()
    };
    assert_eq!(
        state(c),
        "unknown",
        "C's exit was never seen and it is gone"
    );
    assert!(
        v["totals"]["unknown"].as_u64() >= Some(1),
        "{}",
        v["totals"]
    );
    assert!(out.stderr.contains("unknown"), "{}", out.stderr);
}

#[test]
fn long_non_ascii_path_with_more_processes_than_top() {
    // The per-program table once cut such a path inside a character: exit 101, no summary.
    let dir = TempDir::new("non-ascii");
    let mut path = dir.path().to_path_buf();
    for _ in 0..6 {
        path.push("répertoire-très-long-ünïcödé-目录");
    }
    std::fs::create_dir_all(&path).expect("mkdir");
    let prog = path.join("prögram");
    std::fs::copy("/bin/true", &prog).expect("copy /bin/true");
    let script = format!("for i in 1 2 3 4 5 6; do '{}'; done", prog.display());
    let out = Trace::new(["sh", "-c", &script])
        .flag("--top")
        .flag("2")
        .tag("non-ascii")
        .run();
    out.assert_code(0);
    assert!(
        out.stderr.contains("programs run") && out.stderr.contains("/prögram"),
        "the per-program table keeps the name\n{}",
        out.stderr
    );
}

#[test]
fn error_line_naming_a_command_is_escaped() {
    let out = Trace::new([OsString::from_vec(b"no-such-\x1b]0;pwn\x07-\x9b".to_vec())])
        .tag("not-found")
        .run();
    out.assert_code(127);
    let bad = raw_controls(&out.stderr);
    assert!(bad.is_empty(), "raw controls {bad:?} in {:?}", out.stderr);
    assert!(
        out.stderr.contains("no-such-\\e]0;pwn\\a-"),
        "{}",
        out.stderr
    );
}
