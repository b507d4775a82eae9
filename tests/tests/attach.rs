//! `trace -p`: attach to a running tree, against workloads whose memory and exit codes are
//! known: every process's peak against its own VmHWM (those that predate the attach too),
//! exit codes from the kernel's records, children forked after the attach, a gone pid, a
//! non-root caller, and Ctrl-C with processes still running.

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Child, ChildStdin, Command, Stdio},
};

use serde_json::Value;
use spacetime_tests::{
    assert_rss, assert_world_executable, find_process, python, read_truth, spacetime_bin, Exit,
    Report, TempDir, MIB,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// A workload started by the test (its parent), killed and reaped if the test fails.
struct Workload {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Workload {
    fn start(args: &[&str], truth: &std::path::Path) -> Workload {
        let mut child = Command::new(WL)
            .args(args)
            .env("ST_TRUTH", truth)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start st-workload");
        let stdin = child.stdin.take();
        Workload { child, stdin }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The first line it prints.
    fn line(&mut self) -> String {
        let out = self.child.stdout.as_mut().expect("piped stdout");
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while out.read(&mut b).expect("read workload stdout") == 1 && b[0] != b'\n' {
            line.push(b[0]);
        }
        String::from_utf8_lossy(&line).into_owned()
    }

    fn release(&mut self) {
        let mut stdin = self.stdin.take().expect("stdin");
        stdin.write_all(b"x").expect("release the workload");
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        // Our own child, not yet reaped: its pid is still its own.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `spacetime trace --json FILE -p PIDS`, started, with its stderr read up to the line that
/// says it attached.
struct Attach {
    child: Child,
    said: String,
    json: std::path::PathBuf,
    rest: std::thread::JoinHandle<String>,
}

impl Attach {
    fn start(pids: &str, dir: &TempDir, extra: &[&str]) -> Attach {
        let json = dir.path().join("report.json");
        let mut child = Command::new(spacetime_bin())
            .arg("trace")
            .arg("--json")
            .arg(&json)
            .args(extra)
            .args(["-p", pids])
            .env("COLUMNS", "100")
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start spacetime");
        let mut err = BufReader::new(child.stderr.take().expect("stderr"));
        let mut said = String::new();
        while !said.contains("spacetime: attached to pid") {
            let mut line = String::new();
            if err.read_line(&mut line).expect("read spacetime stderr") == 0 {
                let st = child.wait().expect("wait spacetime");
                panic!("spacetime ended before attaching ({st}): {said}");
            }
            said.push_str(&line);
        }
        // The rest of stderr, so spacetime never blocks on a full pipe.
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        Attach {
            child,
            said,
            json,
            rest,
        }
    }

    fn finish(self) -> (i32, Value) {
        let (code, v, _) = self.finish_with_stderr();
        (code, v)
    }

    /// Also the rest of its stderr (the summary).
    fn finish_with_stderr(mut self) -> (i32, Value, String) {
        let st = self.child.wait().expect("wait spacetime");
        let code = st
            .code()
            .unwrap_or_else(|| panic!("spacetime died: {st}\n{}", self.said));
        let text = std::fs::read_to_string(&self.json)
            .unwrap_or_else(|e| panic!("no report ({e}); status {st}\n{}", self.said));
        let stderr = self.rest.join().expect("stderr reader");
        (
            code,
            serde_json::from_str(&text).expect("report is JSON"),
            stderr,
        )
    }
}

fn images_read_at_attach(v: &Value, pid: i32) -> Vec<bool> {
    let p = v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap_or_else(|| panic!("pid {pid} not in the report"));
    p["images"]
        .as_array()
        .expect("images")
        .iter()
        .map(|i| i["read_at_attach"] == true)
        .collect()
}

/// Attaches to a tree that already touched N MiB (and has a child that touched N/2), then
/// lets it fork K children touching M MiB each.
fn attach_tree(n: u64, m: u64, k: usize) -> Value {
    let dir = TempDir::new("attach");
    let truth_path = dir.path().join("truth.jsonl");
    let args = [n.to_string(), m.to_string(), k.to_string()];
    let mut wl = Workload::start(&["attach-tree", &args[0], &args[1], &args[2]], &truth_path);
    let ready = wl.line();
    let pre: i32 = ready
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("workload said {ready:?}"));
    let root = wl.pid();
    let run = Attach::start(&root.to_string(), &dir, &[]);
    wl.release();
    let (code, v, summary) = run.finish_with_stderr();
    let truth = read_truth(&truth_path);
    // Every process that failed is in the summary's failed section, before the tables.
    let failed: Vec<&str> = summary
        .lines()
        .skip_while(|l| !l.starts_with("FAILED:"))
        .take_while(|l| !l.trim().is_empty())
        .collect();
    for t in &truth {
        let code = match t.str("role") {
            "parent" => 7,
            "pre" => 5,
            _ => t.int("code"),
        };
        if code != 0 {
            assert!(
                failed.iter().any(|l| {
                    let mut w = l.split_whitespace();
                    w.next() == Some(&t.pid().to_string()) && w.next() == Some(&code.to_string())
                }),
                "pid {} (exit {code}) not in the failed section:\n{summary}",
                t.pid()
            );
        }
    }
    assert!(
        summary.find("FAILED:") < summary.find("PEAK RSS"),
        "the failures come before the tables:\n{summary}"
    );
    assert_eq!(
        code, 7,
        "spacetime's status is the attached root's exit code"
    );
    let report: Report = serde_json::from_value(v.clone()).expect("report contract");
    assert_eq!(
        report.processes.len(),
        2 + k,
        "root, its child from before, {k} forked after: pids {:?}",
        report.pids()
    );
    for t in &truth {
        let pid = t.pid();
        let p = find_process(&report, pid);
        let role = t.str("role");
        assert_rss(
            &format!("pid {pid} ({role}) peak_rss_bytes"),
            p.peak_rss_bytes,
            t.vmhwm_bytes(),
        );
        let (want_code, want_ppid, read_at_attach) = match role {
            "parent" => (7, None, vec![true]),
            "pre" => (5, Some(root), vec![true]),
            "post" => (t.int("code") as i32, Some(root), vec![false]),
            other => panic!("unknown role {other}"),
        };
        assert_eq!(
            p.exit,
            Some(Exit::Code(want_code)),
            "pid {pid} ({role}) exit"
        );
        if let Some(ppid) = want_ppid {
            assert_eq!(p.ppid, ppid, "pid {pid} ({role}) ppid");
        }
        assert_eq!(
            images_read_at_attach(&v, pid),
            read_at_attach,
            "pid {pid} ({role}): images read at the attach"
        );
        assert!(
            t.vmhwm_bytes() >= t.int("mib") as u64 * MIB,
            "truth: pid {pid} touched less than it says"
        );
    }
    assert_eq!(truth.len(), 2 + k, "truth lines: {truth:?}");
    assert!(
        truth.iter().any(|t| t.pid() == pre),
        "the pre-attach child recorded"
    );
    let largest = report.processes.iter().map(|p| p.peak_rss_bytes).max();
    assert_eq!(
        Some(report.totals.peak_rss_bytes),
        largest,
        "totals.peak_rss_bytes"
    );
    v
}

/// The report of an attach (images read at the attach, a root with no fork record) against
/// docs/trace-report.schema.json, by Python's jsonschema.
#[test]
fn an_attach_report_matches_the_schema() {
    let v = attach_tree(16, 8, 1);
    let dir = TempDir::new("attach-schema");
    let path = dir.path().join("attach-report.json");
    std::fs::write(&path, v.to_string()).expect("write the report");
    let out = python::check_reports(&[&path]);
    assert!(
        out.status.success(),
        "the attach report does not match the schema:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn attach_reports_an_existing_tree_and_its_later_forks() {
    attach_tree(48, 24, 2);
    attach_tree(96, 64, 3);
}

#[test]
fn a_gone_pid_is_refused() {
    let mut c = Command::new("true").spawn().expect("spawn true");
    let pid = c.id();
    c.wait().expect("reap true");
    let out = Command::new(spacetime_bin())
        .args(["trace", "-p", &pid.to_string()])
        .output()
        .expect("run spacetime");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "status; stderr: {err}");
    assert!(
        err.contains(&format!("pid {pid}: no such process")),
        "stderr: {err}"
    );
}

#[test]
fn a_non_root_caller_cannot_attach_to_a_root_process() {
    let bin = spacetime_bin();
    assert_world_executable(&bin);
    // A process of root's: the test's own child.
    let dir = TempDir::new("attach-nobody");
    let mut wl = Workload::start(&["attach-tree", "1", "1", "0"], &dir.path().join("t"));
    let _ = wl.line();
    let pid = wl.pid().to_string();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin)
        .args(["trace", "-p", &pid])
        .output()
        .expect("setpriv (util-linux) runs spacetime");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "status; stderr: {err}");
    assert!(
        err.contains(&format!(
            "pid {pid} is not uid 65534's to trace: it runs as uid 0"
        )),
        "stderr: {err}"
    );
    // Root through sudo acts for the invoking user: the same refusal.
    let out = Command::new(&bin)
        .args(["trace", "-p", &pid])
        .env("SUDO_UID", "65534")
        .output()
        .expect("run spacetime");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(125),
        "status under sudo; stderr: {err}"
    );
    assert!(err.contains("is not uid 65534's to trace"), "stderr: {err}");
    wl.release();
    let st = wl.child.wait().expect("reap the workload");
    assert_eq!(st.code(), Some(7), "the workload went on to its own end");
}

#[test]
fn ctrl_c_reports_the_still_running_with_their_peaks_so_far() {
    let dir = TempDir::new("attach-intr");
    let mut wl = Workload::start(&["attach-tree", "40", "1", "0"], &dir.path().join("t"));
    let ready = wl.line();
    let pre: i32 = ready
        .strip_prefix("ready ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("workload said {ready:?}"));
    let root = wl.pid();
    let run = Attach::start(&root.to_string(), &dir, &[]);
    // Both wait (the root on its stdin, the child on the root): their VmHWM is final.
    let hwm = |pid: i32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .expect("VmHWM");
        kib * 1024
    };
    let (hwm_root, hwm_pre) = (hwm(root), hwm(pre));
    // SAFETY: plain syscall to spacetime, our unreaped child.
    let r = unsafe { libc::kill(run.child.id() as i32, libc::SIGINT) };
    assert_eq!(r, 0);
    let (code, v) = run.finish();
    assert_eq!(code, 0, "stopped with the root still running");
    // The root is still running: the report has no exit (null), so it is read untyped.
    let procs = v["processes"].as_array().expect("processes");
    assert_eq!(procs.len(), 2, "processes: {procs:?}");
    for (pid, want) in [(root, hwm_root), (pre, hwm_pre)] {
        let p = procs
            .iter()
            .find(|p| p["pid"] == pid)
            .unwrap_or_else(|| panic!("pid {pid} not in the report"));
        assert!(
            p["exit"].is_null(),
            "pid {pid} still running: {}",
            p["exit"]
        );
        assert_eq!(p["state"], "running", "pid {pid} state");
        let got = p["peak_rss_bytes"].as_u64().expect("peak_rss_bytes");
        assert_rss(&format!("pid {pid} peak so far"), got, want);
    }
    assert!(v["exit"].is_null(), "no exit for a root still running");
    assert_eq!(v["totals"]["still_running"], 2);
    // Nothing was signalled: both still there.
    wl.release();
    let st = wl.child.wait().expect("reap the workload");
    assert_eq!(st.code(), Some(7), "the workload went on to its own end");
}

/// `[[t_ns, bytes], ...]` of pid's series in the report's timeline.
fn rss_series(v: &Value, pid: i32) -> Vec<(u64, u64)> {
    let entry = v["timeline"]["processes"]
        .as_array()
        .expect("timeline.processes")
        .iter()
        .find(|e| e["pid"] == pid)
        .unwrap_or_else(|| panic!("no series for pid {pid}: {}", v["timeline"]));
    entry["rss"]
        .as_array()
        .expect("rss")
        .iter()
        .map(|p| (p[0].as_u64().unwrap_or(0), p[1].as_u64().unwrap_or(0)))
        .collect()
}

/// A process that holds N MiB when spacetime attaches and then grows by M MiB, beside one
/// that holds its memory idle until its end: both followed from the attach on, each series
/// starting at the process's RSS then, the grower's reaching its VmHWM, the tree's peak and
/// the chart counting them.
#[test]
fn processes_older_than_the_attach_are_followed_from_it() {
    for (n, m, idle) in [(32u64, 24u64, 16u64), (8, 40, 64)] {
        let dir = TempDir::new("attach-grow");
        let (grow_truth, idle_truth) = (dir.path().join("grow"), dir.path().join("idle"));
        let mut grower = Workload::start(
            &["attach-grow", &n.to_string(), &m.to_string()],
            &grow_truth,
        );
        let mut holder = Workload::start(&["attach-grow", &idle.to_string(), "0"], &idle_truth);
        for wl in [&mut grower, &mut holder] {
            let said = wl.line();
            assert_eq!(said, "ready", "the workload said {said:?}");
        }
        let pids = format!("{},{}", grower.pid(), holder.pid());
        let run = Attach::start(&pids, &dir, &[]);
        grower.release();
        let gs = grower.child.wait().expect("reap the grower");
        assert_eq!(gs.code(), Some(0), "the grower's status");
        holder.release();
        let (code, v, stderr) = run.finish_with_stderr();
        assert_eq!(code, 0, "the root's exit code; stderr: {stderr}");
        let role = |path: &std::path::Path, role: &str| {
            read_truth(path)
                .into_iter()
                .find(|t| t.str("role") == role)
                .unwrap_or_else(|| panic!("no {role} line in {}", path.display()))
        };
        let kib = |t: &spacetime_tests::Truth, k: &str| t.int(k) as u64 * 1024;
        for (pid, path, ends_at, mib) in [
            (grower.pid(), &grow_truth, "the grower", n + m),
            (holder.pid(), &idle_truth, "the idle holder", idle),
        ] {
            let ready = role(path, "ready");
            let end = role(path, "end");
            let series = rss_series(&v, pid);
            let first = series
                .first()
                .unwrap_or_else(|| panic!("{ends_at}: empty series"));
            assert_rss(
                &format!("pid {pid} ({ends_at}): first point vs its VmRSS at the attach"),
                first.1,
                kib(&ready, "vmrss_kib"),
            );
            let top = series.iter().map(|p| p.1).max().unwrap_or(0);
            assert_rss(
                &format!("pid {pid} ({ends_at}): series top vs its VmHWM"),
                top,
                end.vmhwm_bytes(),
            );
            assert!(
                end.vmhwm_bytes() >= mib * MIB,
                "truth: pid {pid} touched less than it says"
            );
        }
        // The grower reached its peak while the holder held its memory: the tree's peak is
        // their sum, and the chart's tallest column is it.
        let tree_peak = v["totals"]["tree_peak_rss_bytes"]
            .as_u64()
            .unwrap_or_else(|| panic!("no tree peak: {}", v["totals"]));
        let both =
            role(&grow_truth, "end").vmhwm_bytes() + kib(&role(&idle_truth, "ready"), "vmrss_kib");
        assert_rss(
            "tree peak vs the grower's VmHWM plus the holder's RSS",
            tree_peak,
            both,
        );
        let tree_top = v["timeline"]["tree_rss"]
            .as_array()
            .expect("timeline.tree_rss")
            .iter()
            .filter_map(|p| p[1].as_u64())
            .max()
            .unwrap_or(0);
        assert_rss("the tree series' top vs the tree peak", tree_top, tree_peak);
        spacetime_tests::chart::assert_chart_reaches(&stderr, tree_peak);
        assert!(
            stderr.contains("their RSS followed from the attach on"),
            "the summary says what is followed:\n{stderr}"
        );
    }
}
