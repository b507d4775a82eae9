//! Running `spacetime bench` in the tests: its JSON export, the workload's truth lines, its
//! stdout and stderr, in a temp dir of its own.

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::{Child, Command},
    time::Duration,
};

use serde_json::Value;

use crate::{spacetime_bin, TempDir, Truth};

/// The longest a bench in the tests may take.
pub const LIMIT: Duration = Duration::from_secs(180);

/// A finished `spacetime bench`.
pub struct Out {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub dir: TempDir,
}

impl Out {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The `--json` export (every bench here writes one to `bench.json`).
    pub fn json(&self) -> Value {
        let text = std::fs::read(self.path("bench.json"))
            .unwrap_or_else(|e| panic!("bench.json: {e}; stderr: {}", self.stderr));
        let v = serde_json::from_slice(&text)
            .unwrap_or_else(|e| panic!("bench.json does not parse: {e}; stderr: {}", self.stderr));
        // Through an agent when the suite runs through one.
        crate::agent::check_programs(&v);
        v
    }

    /// The workload's truth lines, in the order the runs wrote them.
    pub fn truth(&self) -> Vec<Truth> {
        read_lines(&self.path("truth.jsonl"))
            .iter()
            .map(|l| Truth(serde_json::from_str(l).expect("truth line parses")))
            .collect()
    }

    pub fn context(&self) -> String {
        format!(
            "status {}; stdout:\n{}\nstderr:\n{}",
            self.code,
            String::from_utf8_lossy(&self.stdout),
            self.stderr
        )
    }
}

pub fn read_lines(p: &Path) -> Vec<String> {
    match std::fs::read_to_string(p) {
        Ok(t) => t.lines().map(String::from).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("{}: {e}", p.display()),
    }
}

/// Starts `spacetime bench --json DIR/bench.json FLAGS… COMMANDS…` with `ST_TRUTH` in DIR;
/// `DIR` in a flag or a command is replaced by the directory.
pub fn start(
    tag: &str,
    flags: &[&str],
    commands: &[OsString],
    own_group: bool,
) -> (Child, TempDir) {
    let dir = TempDir::new(tag);
    let d = dir.path().to_str().expect("utf-8 temp dir").to_string();
    let mut c = Command::new(spacetime_bin());
    c.arg("bench")
        .arg("--json")
        .arg(dir.path().join("bench.json"));
    c.args(flags.iter().map(|f| f.replace("DIR", &d)));
    // In a command too, when it is text (a command of raw bytes is passed as it is).
    c.args(commands.iter().map(|a| match a.to_str() {
        Some(t) => OsString::from(t.replace("DIR", &d)),
        None => a.clone(),
    }));
    for k in ["SUDO_UID", "SUDO_GID", "SUDO_USER"] {
        c.env_remove(k);
    }
    c.env("ST_TRUTH", dir.path().join("truth.jsonl"));
    let file = |n: &str| std::fs::File::create(dir.path().join(n)).expect("output file");
    // Not /dev/null: a command that reads /dev/null was given it by spacetime.
    c.stdin(file("stdin"))
        .stdout(file("stdout"))
        .stderr(file("stderr"));
    if own_group {
        use std::os::unix::process::CommandExt;
        c.process_group(0);
    }
    let child = c.spawn().expect("spawn spacetime bench");
    (child, dir)
}

pub fn finish(mut child: Child, dir: TempDir) -> Out {
    let status = crate::poll::exit_within(&mut child, LIMIT)
        .unwrap_or_else(|| panic!("spacetime bench did not finish in {LIMIT:?}"));
    let stderr =
        String::from_utf8_lossy(&std::fs::read(dir.path().join("stderr")).unwrap_or_default())
            .into_owned();
    Out {
        code: status.code().unwrap_or(-1),
        stdout: std::fs::read(dir.path().join("stdout")).unwrap_or_default(),
        stderr,
        dir,
    }
}

/// `spacetime bench` with `commands`, `WL` in them replaced by the workload's path.
pub fn bench(wl: &str, tag: &str, flags: &[&str], commands: &[&str]) -> Out {
    let cmds: Vec<OsString> = commands
        .iter()
        .map(|c| c.replace("WL", wl).into())
        .collect();
    let (child, dir) = start(tag, flags, &cmds, false);
    finish(child, dir)
}

pub fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap_or_else(|| panic!("not an integer: {x}")))
        .collect()
}

/// The statistics of a figure agree with its own values.
pub fn check_stats(what: &str, s: &Value) {
    let values = u64s(&s["values"]);
    let n = values.len() as f64;
    let mean = values.iter().sum::<u64>() as f64 / n;
    let got = s["mean"].as_f64().expect("mean");
    assert!(
        (got - mean).abs() <= mean * 1e-12,
        "{what}: mean {got}, values {values:?}"
    );
    assert_eq!(
        s["min"].as_u64(),
        values.iter().min().copied(),
        "{what}: min"
    );
    assert_eq!(
        s["max"].as_u64(),
        values.iter().max().copied(),
        "{what}: max"
    );
}
