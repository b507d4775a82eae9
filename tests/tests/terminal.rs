//! What a user sees in a real terminal: an 80-column tmux pane where no line of `trace`'s
//! summary, `watch`'s table and summary, `bench`'s blocks, comparison and parameter table or
//! `--help` is longer than the pane (tmux would wrap it) and a long program path keeps its
//! name; plain ASCII in a C locale; notices only when they help.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use spacetime_tests::{
    spacetime_bin,
    watch::{run, token, Watch},
    TempDir, Trace,
};

/// The name the long path ends with: a program whose name must stay visible.
const PROG: &str = "cc1-visible-name";

/// A copy of /bin/true under a long directory path with non-ASCII components.
fn long_program(dir: &Path) -> PathBuf {
    let deep = dir
        .join("usr-lib-gcc-x86_64-linux-gnu-twelve-libexec-plugin-directory")
        .join("ünïcødé-dïrëctörÿ-with-a-long-name-too")
        .join("another-level-of-nesting-for-good-measure");
    std::fs::create_dir_all(&deep).expect("mkdir");
    let prog = deep.join(PROG);
    std::fs::copy("/bin/true", &prog).expect("copy /bin/true");
    prog
}

/// A private tmux server (its own socket: the user's default server is never touched)
/// running one 80x40 pane.
struct Tmux {
    sock: PathBuf,
}

impl Tmux {
    /// Runs `script` under `sh` in a new 80x40 pane with a UTF-8 locale; the pane stays open
    /// (reading from the terminal) after the script ends.
    fn start(dir: &Path, script: &str) -> Tmux {
        let sock = dir.join("tmux.sock");
        let t = Tmux { sock };
        let body = format!("{script}; echo TMUX-SCRIPT-DONE; exec cat");
        let ok = t
            .cmd()
            .args(["new-session", "-d", "-x", "80", "-y", "40", "-s", "st"])
            .args(["sh", "-c", &body])
            .env("LANG", "C.UTF-8")
            .env_remove("LC_ALL")
            .env_remove("LC_CTYPE")
            .env_remove("COLUMNS")
            .status()
            .expect("run tmux (cargo xtask test installs it)");
        assert!(ok.success(), "tmux new-session failed");
        t
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-u")
            .arg("-f")
            .arg("/dev/null")
            .arg("-S")
            .arg(&self.sock);
        c
    }

    /// The pane's whole history, wrapped lines joined back (so a line tmux had to wrap shows
    /// as one longer than the pane).
    fn capture(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-J", "-S", "-", "-t", "st"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pane with its colours as escape sequences (`capture-pane -e`).
    fn capture_escapes(&self) -> String {
        let out = self
            .cmd()
            .args(["capture-pane", "-p", "-e", "-J", "-S", "-", "-t", "st"])
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the pane shows `needle`; panics with the pane after `timeout`.
    fn wait_for(&self, needle: &str, timeout: Duration) -> String {
        let until = Instant::now() + timeout;
        loop {
            let pane = self.capture();
            if pane.contains(needle) {
                return pane;
            }
            assert!(Instant::now() < until, "no {needle:?} in the pane:\n{pane}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").status();
    }
}

/// Panics if a line of the pane is wider than 80 columns (every character the tests print
/// is one column wide).
fn assert_fits_80(pane: &str) {
    for l in pane.lines() {
        let w = l.chars().count();
        assert!(w <= 80, "{w} columns: {l:?}\n{pane}");
    }
}

fn sh_quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', r"'\''"))
}

#[test]
fn trace_summary_fits_an_80_column_pane_and_keeps_the_program_name() {
    let dir = TempDir::new("tmux-trace");
    let prog = long_program(dir.path());
    let p = sh_quote(&prog);
    // A small tree: a shell running the long-named program three times with arguments.
    let script = format!(
        "{} trace -- sh -c \"{p} -quiet -imultiarch x86_64-linux-gnu -O2 -o /dev/null; {p} a; {p} b\"",
        sh_quote(&spacetime_bin())
    );
    let tmux = Tmux::start(dir.path(), &script);
    let pane = tmux.wait_for("TMUX-SCRIPT-DONE", Duration::from_secs(120));
    assert!(pane.contains("COMMAND"), "no summary:\n{pane}");
    assert_fits_80(&pane);
    // The three children of the shell in the tree.
    let rows: Vec<&str> = pane.lines().filter(|l| l.contains("─ ")).collect();
    assert_eq!(rows.len(), 3, "rows of the program missing:\n{pane}");
    for r in rows {
        assert!(
            r.contains(PROG),
            "the program's name is cut off: {r:?}\n{pane}"
        );
    }
    assert!(pane.contains("4 processes, 4 threads, 4 execs"), "{pane}");
}

/// A build of 31 files, one broken, with `make -k -j2` on an 80-column terminal: every line
/// fits, the failures are red (and plain with NO_COLOR), the recap is what the screen ends
/// with.
#[test]
fn a_failed_build_in_an_80_column_pane_ends_with_its_recap_and_shows_failures_in_red() {
    let dir = TempDir::new("tmux-build");
    for (tag, env) in [("colour", ""), ("plain", "NO_COLOR=1 ")] {
        let project = spacetime_tests::build::c_project(dir.path(), tag, 31, Some("f7.c"));
        // make's own error messages go elsewhere: the pane holds the summary.
        let script = format!(
            "{env}{} trace -- sh -c 'make -s -k -j2 -C {} 2>/dev/null'",
            sh_quote(&spacetime_bin()),
            sh_quote(&project),
        );
        // A server of its own per pass: the first one's socket may still be going away.
        let server = dir.path().join(format!("tmux-{tag}"));
        std::fs::create_dir(&server).expect("server directory");
        let tmux = Tmux::start(&server, &script);
        let pane = tmux.wait_for("TMUX-SCRIPT-DONE", Duration::from_secs(300));
        assert_fits_80(&pane);
        let lines: Vec<&str> = pane.lines().filter(|l| !l.trim().is_empty()).collect();
        let done = lines
            .iter()
            .position(|l| l.contains("TMUX-SCRIPT-DONE"))
            .expect("done");
        let recap = lines[done - 1];
        assert!(
            recap.starts_with("exit 2 · wall ") && recap.ends_with(" failed"),
            "the last line is the recap: {recap:?}\n{pane}"
        );
        assert!(pane.contains("FAILED: "), "{pane}");
        assert!(pane.contains("cc1 ×31"), "{pane}");
        let coloured = tmux.capture_escapes();
        let red = coloured
            .lines()
            .any(|l| l.contains("\x1b[31m") && l.contains("FAILED"));
        match tag {
            "colour" => assert!(red, "FAILED in red on a colour terminal:\n{coloured}"),
            _ => assert!(
                !coloured.contains("\x1b[31m"),
                "no red with NO_COLOR:\n{coloured}"
            ),
        }
    }
}

#[test]
fn bench_and_help_fit_an_80_column_pane() {
    let dir = TempDir::new("tmux-bench");
    let prog = long_program(dir.path());
    let st = sh_quote(&spacetime_bin());
    // A parameter scan of a long-named program (one process: -N), a comparison of trees
    // through a shell with a warning (runs that exited non-zero, kept by -i: a warning at any
    // speed, where "under 5 ms" is one only on a fast machine), then each subcommand's help.
    let script = format!(
        "{st} bench -N -r 3 -P n 1 3 '{p} --with-a-long-argument-list {{n}} x86_64-linux-gnu'; \
         {st} bench -i -r 3 'sh -c \"{p} 1; {p}\"' 'sh -c \"{p}; {p}; {p}; exit 3\"'; \
         for c in '' trace bench watch agent; do {st} $c --help; done",
        p = prog.display()
    );
    let tmux = Tmux::start(dir.path(), &script);
    let pane = tmux.wait_for("TMUX-SCRIPT-DONE", Duration::from_secs(180));
    for want in [
        "Benchmark 3:",
        "Summary",
        "Parameter scan",
        "Warning:",
        "Usage: spacetime bench",
    ] {
        assert!(
            pane.contains(want),
            "no {want:?} in the pane:
{pane}"
        );
    }
    assert!(
        pane.contains("Peak RSS (mean ± σ):"),
        "one process, one peak:
{pane}"
    );
    assert!(
        pane.contains("Peak RSS, tree:"),
        "several processes, both peaks:
{pane}"
    );
    assert!(!pane.contains("times less"), "{pane}");
    assert_fits_80(&pane);
}

#[test]
fn watch_table_and_summary_fit_an_80_column_pane() {
    let dir = TempDir::new("tmux-watch");
    let prog = long_program(dir.path());
    let script = format!(
        "{} watch --exe {PROG} --count 3",
        sh_quote(&spacetime_bin())
    );
    let tmux = Tmux::start(dir.path(), &script);
    tmux.wait_for("spacetime: watching", Duration::from_secs(60));
    for i in 0..3 {
        run(Command::new(&prog).args(["--an-argument", &token(&format!("tmux-{i}"))]));
    }
    let pane = tmux.wait_for("TMUX-SCRIPT-DONE", Duration::from_secs(60));
    assert_fits_80(&pane);
    let header = pane
        .lines()
        .find(|l| l.starts_with("TIME") && l.ends_with("COMMAND"))
        .unwrap_or_else(|| panic!("no table header:\n{pane}"));
    // Rows only: the "watching …" line names the filter, hence the program, too.
    let rows: Vec<&str> = pane
        .lines()
        .filter(|l| l.contains(PROG) && !l.starts_with("spacetime:"))
        .collect();
    assert!(rows.len() >= 3, "rows missing:\n{pane}");
    let at = header.find("COMMAND").expect("COMMAND");
    for r in rows.iter().filter(|r| !r.starts_with(' ')) {
        // Header and rows agree: the command starts under COMMAND.
        let cells: String = r.chars().skip(at).collect();
        assert!(
            cells.starts_with('/') || cells.starts_with(PROG),
            "{r:?} under {header:?}\n{pane}"
        );
    }
    assert!(pane.contains("3 matching the filters"), "{pane}");
}

/// Every byte is ASCII.
fn assert_ascii(what: &str, s: &[u8]) {
    if let Some(i) = s.iter().position(|b| !b.is_ascii()) {
        let from = i.saturating_sub(60);
        panic!(
            "{what}: non-ASCII byte at {i}: {:?}",
            String::from_utf8_lossy(&s[from..(i + 20).min(s.len())])
        );
    }
}

#[test]
fn c_locale_gets_plain_ascii_and_utf8_the_usual_characters() {
    // Long enough for a chart; a non-ASCII argument that must come out escaped.
    let cmd = [
        "sh",
        "-c",
        "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done",
        "ünïcødé",
    ];
    let out = Trace::new(cmd)
        .no_json()
        .flag("-v")
        .env("LC_ALL", "C")
        .env("LANG", "C.UTF-8")
        .run();
    out.assert_code(0);
    assert_ascii("trace stderr", out.stderr.as_bytes());
    assert_ascii("trace stdout", &out.stdout);
    assert!(
        out.stderr.contains("\\u{fc}n"),
        "argv not escaped:\n{}",
        out.stderr
    );
    assert!(out.stderr.contains(" | wall "), "{}", out.stderr);

    let utf8 = Trace::new(cmd)
        .no_json()
        .env("LC_ALL", "")
        .env("LC_CTYPE", "")
        .env("LANG", "en_US.UTF-8")
        .run();
    utf8.assert_code(0);
    assert!(utf8.stderr.contains("ünïcødé"), "{}", utf8.stderr);
    assert!(utf8.stderr.contains(" · wall "), "{}", utf8.stderr);

    let dir = TempDir::new("ascii-watch");
    let name = format!("asc{}", std::process::id());
    let prog = dir.path().join(&name);
    std::fs::copy("/bin/true", &prog).expect("copy /bin/true");
    let t = token("ascii");
    let w = Watch::new()
        .flags(["--exe", &name, "--count", "1", "--ancestry", "--images"])
        .env("LC_ALL", "POSIX")
        .start();
    run(Command::new(&prog).args(["ünïcødé", &t]));
    let out = w.wait();
    assert!(out.stdout.contains(&t), "{}", out.context());
    assert_ascii("watch stdout", out.stdout.as_bytes());
    assert_ascii("watch stderr", out.stderr.as_bytes());
}

#[test]
fn notices_only_with_verbose_and_plurals_right() {
    let delay = "delay accounting";
    let off =
        std::fs::read_to_string("/proc/sys/kernel/task_delayacct").is_ok_and(|v| v.trim() == "0");
    let plain = Trace::new(["/bin/true"]).no_json().run();
    plain.assert_code(0);
    assert!(!plain.stderr.contains(delay), "{}", plain.stderr);
    assert!(
        plain.stderr.contains("1 process, 1 thread, 1 exec"),
        "{}",
        plain.stderr
    );
    let quiet = Trace::new(["/bin/true"])
        .no_json()
        .flag("-q")
        .flag("-v")
        .run();
    assert!(!quiet.stderr.contains(delay), "-q: {}", quiet.stderr);
    if off {
        let verbose = Trace::new(["/bin/true"]).no_json().flag("-v").run();
        assert!(verbose.stderr.contains(delay), "-v: {}", verbose.stderr);
    }
    // No doubled prefix: spacetime's errors read "spacetime: <what>".
    let bad = Command::new(spacetime_bin())
        .args(["trace", "--", "/nonexistent/program"])
        .output()
        .expect("run spacetime");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!err.contains("spacetime: spacetime"), "{err}");
}
