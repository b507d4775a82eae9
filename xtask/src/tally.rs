//! Runs a `cargo test` and counts what its test binaries say, so that `cargo xtask test` can
//! run every file (no fail-fast across files), say which failed, and end on one line that
//! counts every test of both passes.

use std::{
    io::{BufRead, BufReader, Read},
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::Instant,
};

use anyhow::{Context, Result};

/// What the test binaries of one or more `cargo test` runs said.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    pub passed: u64,
    pub failed: u64,
    pub ignored: u64,
    /// The targets cargo reported as failed (`--test memory`, `--lib`…), in order.
    pub failed_targets: Vec<String>,
    /// How many binaries' result lines said FAILED.
    failed_results: u64,
    /// (target, seconds) as each binary reported its own run.
    pub durations: Vec<(String, f64)>,
}

impl Tally {
    pub fn add(&mut self, other: Tally) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.failed_targets.extend(other.failed_targets);
        self.failed_results += other.failed_results;
        self.durations.extend(other.durations);
    }

    pub fn ok(&self) -> bool {
        self.failed == 0 && self.failed_targets.is_empty()
    }

    /// `test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished
    /// in 1.23s`: the counts and the seconds.
    pub fn result_line(&mut self, line: &str, target: &str) -> bool {
        let Some(at) = line.find("test result: ") else {
            return false;
        };
        let mut seconds = None;
        if line[at..].starts_with("test result: FAILED") {
            self.failed_results += 1;
        }
        for part in line[at..].split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(what), Some(n)) = (words.next(), words.next()) else {
                continue;
            };
            if let Some(s) = part.trim().strip_prefix("finished in ") {
                seconds = s.trim_end_matches('s').parse().ok();
                continue;
            }
            let Ok(n) = n.parse::<u64>() else { continue };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
        if let Some(s) = seconds {
            self.durations.push((target.to_owned(), s));
        }
        true
    }

    /// The closing line: `N passed, N failed, N skipped` (ignored tests are the skipped).
    pub fn line(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed,
            self.failed + self.crashed(),
            self.ignored
        )
    }

    /// Failed targets that printed no failing test of their own: a binary that crashed, or
    /// ended before its result line. Each counts as one failure.
    fn crashed(&self) -> u64 {
        (self.failed_targets.len() as u64).saturating_sub(self.failed_results)
    }

    /// The slowest binaries, for the breakdown of where the suite's time goes.
    pub fn slowest(&self, n: usize) -> Vec<(String, f64)> {
        let mut d = self.durations.clone();
        d.sort_by(|a, b| b.1.total_cmp(&a.1));
        d.truncate(n);
        d
    }
}

/// The target a `Running` line of cargo names: `tests/memory.rs (target/…)` → `memory`,
/// `unittests src/lib.rs (target/…/spacetime-…)` → `spacetime`.
fn running_target(line: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix("Running ")?;
    let path = rest.split(" (").nth(1)?.trim_end_matches(')');
    let file = path.rsplit('/').next()?;
    Some(
        file.rsplit_once('-')
            .map_or(file, |(name, _)| name)
            .to_owned(),
    )
}

/// `error: test failed, to rerun pass `--test memory`` → `--test memory`.
fn failed_target(line: &str) -> Option<String> {
    let rest = line.split("to rerun pass `").nth(1)?;
    Some(rest.split('`').next()?.to_owned())
}

/// Runs `cmd` (a `cargo test`), forwarding its output as it comes, and counts its results.
/// Its own exit status is not an error: the tally says what failed.
pub fn run(cmd: &mut Command) -> Result<(Tally, std::process::ExitStatus)> {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {shown}"))?;
    let tally = Arc::new(Mutex::new(Tally::default()));
    // The binary that is running: cargo names it on stderr, its results come on stdout.
    let current = Arc::new(Mutex::new(String::new()));
    let err = child.stderr.take().context("cargo's stderr")?;
    let out = child.stdout.take().context("cargo's stdout")?;
    let (t, c) = (tally.clone(), current.clone());
    let errs = std::thread::spawn(move || {
        forward(err, true, |line| {
            if let Some(name) = running_target(line) {
                *c.lock().unwrap_or_else(|p| p.into_inner()) = name;
            }
            if let Some(target) = failed_target(line) {
                let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                if !t.failed_targets.contains(&target) {
                    t.failed_targets.push(target);
                }
            }
        })
    });
    let (t, c) = (tally.clone(), current);
    forward(out, false, |line| {
        let target = c.lock().unwrap_or_else(|p| p.into_inner()).clone();
        t.lock()
            .unwrap_or_else(|p| p.into_inner())
            .result_line(line, &target);
    });
    let _ = errs.join();
    let status = child
        .wait()
        .with_context(|| format!("waiting for {shown}"))?;
    let mut tally = tally.lock().unwrap_or_else(|p| p.into_inner()).clone();
    if !status.success() && tally.ok() {
        // cargo failed before or outside any test binary (a build error): one failure.
        tally.failed_targets.push(format!("{shown} ({status})"));
    }
    Ok((tally, status))
}

/// Copies `from` line by line to stdout or stderr, handing each line to `f`.
fn forward(from: impl Read, to_stderr: bool, mut f: impl FnMut(&str)) {
    for line in BufReader::new(from).lines().map_while(Result::ok) {
        if to_stderr {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
        f(&line);
    }
}

/// Prints what the passes counted: the failed targets, the slowest binaries, the closing line.
pub fn report(tally: &Tally, started: Instant) {
    if !tally.durations.is_empty() {
        eprintln!("xtask: the slowest test binaries (seconds, as each reported its run):");
        for (name, s) in tally.slowest(8) {
            eprintln!("xtask:   {s:7.1}  {name}");
        }
    }
    for t in &tally.failed_targets {
        eprintln!("xtask: FAILED: {t}");
    }
    eprintln!(
        "xtask: tests ran for {:.0} s",
        started.elapsed().as_secs_f64()
    );
    println!("tests: {}", tally.line());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_result_lines_and_their_time() {
        let mut t = Tally::default();
        assert!(t.result_line(
            "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 3 filtered out; finished in 1.50s",
            "memory"
        ));
        assert!(t.result_line(
            "test result: FAILED. 4 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.25s",
            "cpu"
        ));
        assert!(!t.result_line("running 12 tests", "x"));
        assert_eq!((t.passed, t.failed, t.ignored), (16, 2, 1));
        assert_eq!(t.durations, [("memory".into(), 1.5), ("cpu".into(), 0.25)]);
        assert_eq!(t.line(), "16 passed, 2 failed, 1 skipped");
    }

    #[test]
    fn a_crashed_binary_counts_as_a_failure() {
        let mut t = Tally {
            passed: 3,
            ..Tally::default()
        };
        t.failed_targets.push("--test exit".into());
        assert!(!t.ok());
        assert_eq!(t.line(), "3 passed, 1 failed, 0 skipped");
    }

    #[test]
    fn names_from_cargo_lines() {
        assert_eq!(
            running_target("     Running tests/memory.rs (target/release/deps/memory-0123abcd)")
                .as_deref(),
            Some("memory")
        );
        assert_eq!(
            running_target(
                "     Running unittests src/lib.rs (target/release/deps/spacetime_stats-99ff)"
            )
            .as_deref(),
            Some("spacetime_stats")
        );
        assert_eq!(
            failed_target("error: test failed, to rerun pass `-p spacetime-tests --test memory`")
                .as_deref(),
            Some("-p spacetime-tests --test memory")
        );
    }
}
