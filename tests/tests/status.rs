//! The live status line in a real terminal (tmux, 80×24, a private server): it is drawn on the
//! last row while CMD runs and never mixes with CMD's output, in the screen or the scrollback;
//! `-q` and a stderr that is not a terminal get no escape sequence at all.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use spacetime_tests::{gate::Gate, spacetime_bin, TempDir, Trace};

const ROWS: usize = 24;
/// 40 lines over ~2 s: long enough for the line (shown after 200 ms here) to be seen, and more
/// lines than the pane has rows, so CMD's output scrolls into the scrollback past the line.
const LOOP: &str = "for i in $(seq 1 40); do echo line $i; sleep 0.05; done";
const DEADLINE: Duration = Duration::from_secs(60);

/// A tmux server of the test's own (its own socket), killed on drop.
struct Tmux {
    dir: TempDir,
    sock: PathBuf,
}

impl Tmux {
    /// A detached 80×24 pane running `cmd` under script(1), which records the bytes that
    /// reach the terminal in `<dir>/bytes` (its own pty has the pane's size); the shell around
    /// it writes script's status (CMD's) to `<dir>/status`. The end is read there, not from
    /// tmux: under load, tmux's pipe-pane sometimes spun and a dead pane's status never came.
    fn start(tag: &str, cmd: &str) -> Tmux {
        let dir = TempDir::new(tag);
        let sock = dir.path().join("sock");
        let conf = dir.path().join("tmux.conf");
        std::fs::write(
            &conf,
            "set -g remain-on-exit on\nset -g history-limit 5000\n",
        )
        .expect("write tmux.conf");
        let t = Tmux { dir, sock };
        let (bytes, status) = (t.path("bytes"), t.path("status"));
        let wrapper = r#"script -q -f -e -c "$0" "$1"; echo $? > "$2.tmp"; mv "$2.tmp" "$2""#;
        t.ok(&[
            "-f",
            conf.to_str().expect("utf8 path"),
            "new-session",
            "-d",
            "-x",
            "80",
            "-y",
            "24",
            "sh",
            "-c",
            wrapper,
            cmd,
            bytes.to_str().expect("utf8 path"),
            status.to_str().expect("utf8 path"),
        ]);
        t
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-S")
            .arg(&self.sock)
            .args(args)
            .output()
            .expect("run tmux (cargo xtask test installs it)")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("tmux prints UTF-8")
    }

    /// The visible screen, one string per row.
    fn screen(&self) -> Vec<String> {
        self.ok(&["capture-pane", "-p"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The scrollback and the screen, wrapped rows joined.
    fn history(&self) -> Vec<String> {
        self.ok(&["capture-pane", "-p", "-J", "-S", "-"])
            .lines()
            .map(|l| l.trim_end().to_owned())
            .collect()
    }

    fn status(&self) -> Option<String> {
        let s = std::fs::read_to_string(self.path("status")).ok()?;
        Some(s.trim().to_owned())
    }

    /// Waits for the command's end and for tmux to have shown all it wrote: returns its
    /// exit status, the bytes it wrote, and the scrollback.
    fn wait_end(&self) -> (String, Vec<u8>, Vec<String>) {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.status() {
                break s;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "the pane's command did not end in {DEADLINE:?}; screen:\n{}",
                self.screen().join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let bytes = std::fs::read(self.path("bytes")).expect("script's record");
        let plain = strip_escapes(&String::from_utf8_lossy(&bytes));
        // script(1) frames its record with `Script started…` and `Script done…` lines.
        let last = plain
            .lines()
            .map(str::trim_end)
            .rfind(|l| !l.is_empty() && !l.starts_with("Script done"))
            .unwrap_or_default()
            .to_owned();
        loop {
            let history = self.history();
            // tmux may add a `Pane is dead` row of its own below.
            if history.contains(&last) {
                return (status, bytes, history);
            }
            assert!(
                start.elapsed() < DEADLINE,
                "tmux never showed the last line written, {last:?}:\n{}",
                history.join("\n")
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Text without escape sequences (CSI, and ESC plus one character) and carriage returns.
fn strip_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// `spacetime trace FLAGS -- sh -c LOOP` as a shell line, the line shown after 200 ms. With a
/// gate, CMD then waits until it opens: it is still running when the test has seen the line,
/// however slowly the test's polls came.
fn trace_line(flags: &str, gate: Option<&Gate>) -> String {
    let wait = gate.map_or(String::new(), |g| format!("; {}", g.wait()));
    format!(
        "env -u SUDO_UID -u SUDO_GID -u SUDO_USER SPACETIME_STATUS_AFTER_MS=200 {} trace {flags} -- sh -c '{LOOP}{wait}'",
        quote(&spacetime_bin())
    )
}

fn is_status(row: &str) -> bool {
    row.starts_with('⏱') && row.contains(" live · ") && row.contains(" RSS ")
}

/// Polls the screen until the line shows on the last row, while the command runs.
fn wait_for_line(t: &Tmux) -> Vec<String> {
    let start = Instant::now();
    while t.status().is_none() {
        let screen = t.screen();
        if screen.len() == ROWS && is_status(&screen[ROWS - 1]) {
            return screen;
        }
        assert!(start.elapsed() < DEADLINE, "no status line in {DEADLINE:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!(
        "the status line never showed on the last row; last screen:\n{}",
        t.screen().join("\n")
    )
}

#[test]
fn status_line_keeps_the_last_row_and_never_mixes_with_cmd_output() {
    let gate = Gate::new("status-tmux-gate");
    let t = Tmux::start("status-tmux", &trace_line("", Some(&gate)));
    // (a) Shown on the last row while CMD runs.
    let screen = wait_for_line(&t);
    gate.open();
    assert!(
        screen[..ROWS - 1].iter().all(|r| !r.contains(" live · ")),
        "the line is on the last row only:\n{}",
        screen.join("\n")
    );
    let (status, bytes, history) = t.wait_end();
    assert_eq!(status, "0", "spacetime exits with CMD's status");

    // (b) Every line CMD printed stands alone, in order, in the whole scrollback.
    let text = history.join("\n");
    // Rows holding `line N` (not the summary's `echo line $i`).
    let cmd_rows: Vec<&String> = history
        .iter()
        .filter(|r| {
            r.match_indices("line ")
                .any(|(i, _)| r[i + 5..].starts_with(|c: char| c.is_ascii_digit()))
        })
        .collect();
    let want: Vec<String> = (1..=40).map(|i| format!("line {i}")).collect();
    assert_eq!(
        cmd_rows,
        want.iter().collect::<Vec<_>>(),
        "CMD's lines, each alone and in order:\n{text}"
    );
    assert!(
        !history
            .iter()
            .any(|r| r.contains(" live · ") || r.contains('⏱')),
        "no status text left anywhere once the trace ended:\n{text}"
    );

    // (c) The summary follows CMD's last line.
    let last = history
        .iter()
        .position(|r| r == "line 40")
        .expect("line 40 is there");
    let after: Vec<&String> = history[last + 1..]
        .iter()
        .filter(|r| !r.is_empty())
        .collect();
    assert!(
        after.iter().take(3).any(|r| r.contains("exit 0")),
        "the summary comes right after CMD's output:\n{text}"
    );

    // The bytes: CMD's lines went through whole; the region was set for 23 rows and given
    // back at the end.
    let out = String::from_utf8_lossy(&bytes);
    for l in &want {
        assert!(out.contains(&format!("{l}\r\n")), "{l:?} whole in {out:?}");
    }
    assert!(out.contains("\x1b[1;23r\x1b[24;1H"), "{out:?}");
}

#[test]
fn status_line_quiet_and_non_terminal_stderr_get_no_escape_sequence() {
    // -q on a terminal (NO_COLOR: the summary's chart would colour itself otherwise).
    let t = Tmux::start(
        "status-quiet",
        &format!("env NO_COLOR=1 {}", trace_line("-q", None)),
    );
    let (status, bytes, history) = t.wait_end();
    assert_eq!(status, "0");
    assert!(
        !bytes.contains(&0x1b),
        "-q on a terminal: no escape sequence: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    let text = history.join("\n");
    assert!(
        text.contains("line 40") && !text.contains(" live · "),
        "{text}"
    );

    // stderr a pipe: no line, no colour.
    let out = Trace::new(["sh", "-c", LOOP])
        .env("SPACETIME_STATUS_AFTER_MS", "0")
        .tag("status-pipe")
        .run();
    assert_eq!(out.status.code(), Some(0), "{}", out.stderr);
    assert!(
        !out.stderr.contains('\x1b') && !out.stderr.contains(" live · "),
        "stderr not a terminal: no escape sequence: {:?}",
        out.stderr
    );
}

#[test]
fn status_line_is_taken_down_on_ctrl_c() {
    // A gate never opened: CMD runs until the ^C.
    let gate = Gate::new("status-ctrl-c-gate");
    let t = Tmux::start("status-ctrl-c", &trace_line("", Some(&gate)));
    wait_for_line(&t);
    // ^C through the terminal: SIGINT to CMD and spacetime, as a user's would.
    t.ok(&["send-keys", "C-c"]);
    let (status, bytes, history) = t.wait_end();
    let text = history.join("\n");
    assert_eq!(status, "130", "CMD died of SIGINT:\n{text}");
    let out = String::from_utf8_lossy(&bytes);
    let drawn = out.rfind("\x1b[1;23r").expect("the line was drawn");
    let released = out.rfind("\x1b7\x1b[r").expect("the screen was given back");
    assert!(
        released > drawn,
        "given back after the last redraw: {out:?}"
    );
    assert!(
        !history.iter().any(|r| r.contains(" live · ")),
        "no status text left:\n{text}"
    );
    assert!(text.contains("SIGINT"), "the summary follows:\n{text}");
}
