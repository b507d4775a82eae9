//! Where the trace's outputs go and what happens when they cannot be written: a path that
//! cannot be created stops spacetime before CMD runs; stderr full or closed and a report that
//! fails at the end leave CMD's status (and the summary) intact; `-o`, `--format` and
//! `--json -` give scripts what they read, checked against the JSON report of the same run.

use std::fs::File;
use std::os::fd::{FromRawFd as _, OwnedFd};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;
use spacetime_tests::{spacetime_bin, TempDir, Trace};

/// `spacetime trace ARGS…` with stdin closed and the given stderr; its status and output.
fn spacetime(args: &[&str], stderr: Stdio) -> Output {
    Command::new(spacetime_bin())
        .arg("trace")
        .args(args)
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .env_remove("SUDO_USER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .output()
        .expect("run spacetime")
}

fn marker_script(marker: &Path, code: i32) -> String {
    format!("touch {}; exit {code}", marker.display())
}

#[test]
fn missing_output_directory_stops_before_cmd_runs() {
    let dir = TempDir::new("missing-dir");
    let marker = dir.path().join("ran");
    for flag in ["--json", "--perfetto", "-o"] {
        let out = Trace::new(["sh", "-c", &marker_script(&marker, 3)])
            .no_json()
            .flag(flag)
            .flag(dir.path().join("no/such/dir/out"))
            .tag("missing-dir")
            .run();
        out.assert_code(125);
        assert!(!marker.exists(), "{flag}: CMD ran\n{}", out.context());
        let lines: Vec<&str> = out.stderr.lines().collect();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("no/such/dir/out") && l.contains("nothing was run")),
            "{flag}: one sentence naming the path\n{}",
            out.context()
        );
    }
}

fn full_stderr() -> Stdio {
    Stdio::from(
        File::options()
            .write(true)
            .open("/dev/full")
            .expect("/dev/full"),
    )
}

/// The write end of a pipe whose read end is already closed: every write fails (EPIPE).
fn broken_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: a valid array for two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors we own.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(r);
    Stdio::from(w)
}

#[test]
fn stderr_full_or_closed_keeps_cmds_status() {
    let dir = TempDir::new("stderr-full");
    for (what, stderr) in [
        ("/dev/full", full_stderr()),
        ("a broken pipe", broken_pipe()),
    ] {
        let marker = dir.path().join(what.replace(['/', ' '], "_"));
        let out = spacetime(&["--", "sh", "-c", &marker_script(&marker, 7)], stderr);
        assert_eq!(
            out.status.code(),
            Some(7),
            "stderr on {what}: CMD's status must pass through: {:?}",
            out.status
        );
        assert!(marker.exists(), "stderr on {what}: CMD did not run");
    }
}

/// A tmpfs of one page, already full, mounted on `dir` until dropped.
struct FullTmpfs<'a>(&'a Path);

impl<'a> FullTmpfs<'a> {
    fn mount(dir: &'a Path) -> FullTmpfs<'a> {
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4k", "tmpfs"])
            .arg(dir)
            .status()
            .expect("mount");
        assert!(
            st.success(),
            "mount a tmpfs on {} (needs root)",
            dir.display()
        );
        let fs = FullTmpfs(dir);
        // Fill it: the write stops at ENOSPC.
        let _ = std::fs::write(dir.join("fill"), vec![0u8; 64 << 10]);
        fs
    }
}

impl Drop for FullTmpfs<'_> {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0).status();
    }
}

#[test]
fn report_that_fails_at_the_end_keeps_summary_and_status() {
    let dir = TempDir::new("full-fs");
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).expect("mkdir");
    let _fs = FullTmpfs::mount(&mnt);
    let json = mnt.join("report.json");
    let marker = dir.path().join("ran");
    let out = Trace::new(["sh", "-c", &marker_script(&marker, 4)])
        .no_json()
        .flag("--json")
        .flag(&json)
        .tag("full-fs")
        .run();
    out.assert_code(4);
    assert!(marker.exists(), "CMD ran");
    let errors: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.contains("writing the JSON report"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line\n{}", out.context());
    assert!(
        out.stderr.contains("complete: "),
        "summary kept\n{}",
        out.context()
    );
}

fn run_json(args: &[&str]) -> (Output, TempDir) {
    let dir = TempDir::new("format");
    let out = Command::new(spacetime_bin())
        .current_dir(dir.path())
        .arg("trace")
        .args(args)
        .env_remove("SUDO_UID")
        .stdin(Stdio::null())
        .output()
        .expect("run spacetime");
    (out, dir)
}

#[test]
fn format_and_output_file_match_the_json_report() {
    let (out, dir) = run_json(&[
        "--json",
        "r.json",
        "-o",
        "s.txt",
        "--format",
        "%e|%E|%U|%S|%M|%x|%T|%N|%Y|%L|%C|%%\\t.",
        "--",
        "sh",
        "-c",
        "head -c 3000000 /dev/zero > /dev/null; exit 6",
        "a\x1bb",
    ]);
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).expect("r.json"))
            .expect("JSON");
    let text = std::fs::read_to_string(dir.path().join("s.txt")).expect("s.txt");
    assert!(text.ends_with('\n'), "{text:?}");
    // As GNU time: a line about the non-zero status, then the format's.
    let (status, line) = text.split_once('\n').expect("two lines");
    assert_eq!(status, "Command exited with non-zero status 6");
    let f: Vec<&str> = line.trim_end_matches('\n').split('|').collect();
    let n = |k: &str| {
        v["totals"][k]
            .as_u64()
            .unwrap_or_else(|| panic!("totals.{k}: {v}"))
    };
    // Truncated to hundredths, as GNU time prints seconds.
    let secs = |ns: &Value| {
        let cs = ns.as_u64().expect("ns") / 10_000_000;
        format!("{}.{:02}", cs / 100, cs % 100)
    };
    assert_eq!(f[0], secs(&v["wall_ns"]), "%e");
    let wall_cs = v["wall_ns"].as_u64().expect("wall") / 10_000_000;
    assert_eq!(
        f[1],
        format!(
            "{}:{:02}.{:02}",
            wall_cs / 6000,
            wall_cs / 100 % 60,
            wall_cs % 100
        ),
        "%E"
    );
    assert_eq!(f[2], secs(&v["user_ns"]), "%U");
    assert_eq!(f[3], secs(&v["sys_ns"]), "%S");
    assert_eq!(f[4], (n("peak_rss_bytes") / 1024).to_string(), "%M");
    assert_eq!(f[5], "6", "%x");
    assert_eq!(f[6], (n("tree_peak_rss_bytes") / 1024).to_string(), "%T");
    assert_eq!(f[7], n("processes").to_string(), "%N");
    match v["totals"]["max_pss_bytes"].as_u64() {
        Some(p) => assert_eq!(f[8], (p / 1024).to_string(), "%Y"),
        None => assert_eq!(f[8], "?", "%Y"),
    }
    assert_eq!(f[9], v["lost_events"].to_string(), "%L");
    assert!(f[10].ends_with("exit 6 a\\eb"), "%C escaped: {:?}", f[10]);
    assert_eq!(f[11], "%\t.", "%% and \\t");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("PEAK RSS"),
        "the format replaces the summary"
    );
}

#[test]
fn output_file_appends_and_json_dash_is_stdout() {
    let (out, dir) = run_json(&["-o", "s.txt", "--json", "-", "--", "true"]);
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).expect("the report on stdout");
    assert_eq!(v["exit"]["code"], 0);
    assert!(!dir.path().join("-").exists(), "no file named -");
    let first = std::fs::read_to_string(dir.path().join("s.txt")).expect("s.txt");
    assert!(first.contains("complete: "), "{first}");
    let again = Command::new(spacetime_bin())
        .current_dir(dir.path())
        .args([
            "trace", "-o", "s.txt", "--append", "--format", "%x", "--", "sh", "-c", "exit 2",
        ])
        .status()
        .expect("run");
    assert_eq!(again.code(), Some(2));
    let both = std::fs::read_to_string(dir.path().join("s.txt")).expect("s.txt");
    assert_eq!(
        both,
        format!("{first}Command exited with non-zero status 2\n2\n"),
        "appended"
    );
}

/// Runs `spacetime watch ARGS` with stderr captured, making exits until it stops by itself
/// (each exit is written, and a write is what fails); returns (status code, stderr).
fn watch_until_it_stops(
    args: &[&std::ffi::OsStr],
    stdout: Stdio,
    why: &str,
) -> (Option<i32>, String) {
    let mut child = Command::new(spacetime_bin())
        .arg("watch")
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start spacetime watch");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() > until {
            let _ = child.kill();
            panic!("watch still running with {why}");
        }
        let _ = Command::new("true").status();
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn watch_stops_cleanly_when_its_output_closes() {
    let (code, stderr) = watch_until_it_stops(&[], broken_pipe(), "its output closed");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("stopped: the output was closed"),
        "{stderr}"
    );
    assert!(
        stderr.contains("spacetime: watched "),
        "the summary\n{stderr}"
    );
}

#[test]
fn watch_output_on_a_full_disk_is_a_failure_with_the_summary() {
    let dir = TempDir::new("watch-full");
    let _full = FullTmpfs::mount(dir.path());
    let log = dir.path().join("exits.jsonl");
    let args = ["--json".as_ref(), "-o".as_ref(), log.as_os_str()];
    let (code, stderr) = watch_until_it_stops(&args, Stdio::null(), "its output on a full disk");
    assert_eq!(code, Some(74), "{stderr}");
    assert!(stderr.contains("writing the output"), "{stderr}");
    assert!(
        stderr.contains("spacetime: watched "),
        "the summary\n{stderr}"
    );
}

/// A file system that unmounts itself, however the test ends.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A full disk: an output that does not fit is not left cut. The page goes through a file
/// beside it, renamed into place once whole; here it cannot be written whole, so the file that
/// was there stays as it was, no temporary file is left, the line says so, and CMD's status
/// and the other outputs are kept.
#[test]
fn an_output_that_does_not_fit_leaves_the_file_as_it_was() {
    let dir = TempDir::new("output-full");
    let small = dir.path().join("small");
    std::fs::create_dir(&small).expect("mkdir");
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=16k", "tmpfs"])
        .arg(&small)
        .status()
        .expect("mount");
    assert!(st.success(), "mount a 16 KiB tmpfs");
    let _mounted = Mounted(small.clone());
    let page = small.join("r.html");
    std::fs::write(&page, "the page of an earlier run\n").expect("an earlier page");
    let out = Trace::new(["sh", "-c", "exit 3"])
        .flag("--html")
        .flag(&page)
        .tag("output-full")
        .run();
    out.assert_code(3);
    assert_eq!(
        std::fs::read_to_string(&page).expect("the page"),
        "the page of an earlier run\n",
        "the earlier page was cut or replaced by part of the new one\n{}",
        out.context()
    );
    let left: Vec<_> = std::fs::read_dir(&small)
        .expect("read the tmpfs")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(left, [std::ffi::OsString::from("r.html")], "left behind");
    assert!(
        out.stderr.contains("writing the HTML report to")
            && out.stderr.contains("nothing was written there"),
        "{}",
        out.context()
    );
    // The JSON report (elsewhere) was written whole.
    assert!(out.json_value()["processes"].is_array());
}
