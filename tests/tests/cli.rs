//! The command line as a user meets it: `--help` examples, shell completions and the manual
//! page, generated from the same definitions the parser uses. Runs the release binary.

use std::process::{Command, Output, Stdio};

use spacetime_tests::spacetime_bin;

/// Every subcommand and a few flags of each that a completion or the manual must know.
const SUBCOMMANDS: [&str; 5] = ["trace", "watch", "bench", "completions", "man"];
const FLAGS: [&str; 10] = [
    "--json",
    "--perfetto",
    "--html",
    "--svg",
    "--stop-on-root-exit",
    "--cgroup",
    "--metrics",
    "--summary-json",
    "--export-markdown",
    "--ignore-failure",
];

fn spacetime(args: &[&str]) -> Output {
    let out = Command::new(spacetime_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running spacetime {args:?}: {e}"));
    assert!(
        out.status.success(),
        "spacetime {args:?} failed with {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(args: &[&str]) -> String {
    String::from_utf8(spacetime(args).stdout).expect("UTF-8 output")
}

#[test]
fn help_of_each_subcommand_has_examples_that_parse() {
    for sub in ["trace", "watch", "bench"] {
        let help = stdout(&[sub, "--help"]);
        let examples = help
            .split_once("\nExamples:\n")
            .unwrap_or_else(|| panic!("`spacetime {sub} --help` has no Examples section:\n{help}"))
            .1;
        let commands: Vec<&str> = examples
            .lines()
            .filter_map(|l| l.strip_prefix("  sudo spacetime "))
            .collect();
        assert!(
            commands.len() >= 3,
            "`spacetime {sub} --help` shows {} examples:\n{examples}",
            commands.len()
        );
        for c in commands {
            assert!(
                c.starts_with(sub),
                "an example of {sub} runs another subcommand: {c}"
            );
        }
    }
}

#[test]
fn completions_cover_every_subcommand_and_flag() {
    for shell in ["bash", "zsh", "fish"] {
        let script = stdout(&["completions", shell]);
        assert!(
            script.len() > 1000,
            "{shell} completions are {} bytes",
            script.len()
        );
        for word in SUBCOMMANDS.iter().chain(FLAGS.iter()) {
            // fish names long options without their dashes (`-l json`).
            let fish_form = format!("-l {}", word.trim_start_matches("--"));
            assert!(
                script.contains(word) || (shell == "fish" && script.contains(&fish_form)),
                "{shell} completions do not mention {word}"
            );
        }
    }
    let bad = Command::new(spacetime_bin())
        .args(["completions", "tcsh"])
        .output()
        .expect("running spacetime completions tcsh");
    assert_eq!(
        bad.status.code(),
        Some(125),
        "an unknown shell is a usage error"
    );
}

#[test]
fn bash_completion_script_is_valid_bash() {
    let script = stdout(&["completions", "bash"]);
    let dir = spacetime_tests::TempDir::new("completion");
    let path = dir.path().join("spacetime.bash");
    std::fs::write(&path, script).expect("writing the script");
    // Sourcing defines the completion function; `complete -p` shows it is registered.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {} && complete -p spacetime",
            path.display()
        ))
        .output()
        .expect("running bash");
    assert!(
        out.status.success(),
        "bash rejects the script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("spacetime"),
        "the completion is not registered"
    );
}

/// What bash offers for the last of `words` (the word being completed, maybe empty): the
/// generated script sourced (and bash-completion's own library first, with `library`), the
/// function `complete -p spacetime` names called as bash calls it, COMPREPLY printed.
fn bash_complete(script: &std::path::Path, library: bool, words: &[&str]) -> Vec<String> {
    const DRIVER: &str = r#"
script="$1"; library="$2"; shift 2
if [ "$library" = 1 ]; then source /usr/share/bash-completion/bash_completion; fi
source "$script"
COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}
spec=$(complete -p spacetime) || exit 3
fn=${spec#*-F }; fn=${fn%% *}
"$fn" spacetime "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}" 2>/dev/null
printf '%s\n' "${COMPREPLY[@]}"
"#;
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", DRIVER, "bash"])
        .arg(script)
        .arg(if library { "1" } else { "0" })
        .args(words)
        .output()
        .expect("running bash");
    assert!(
        out.status.success(),
        "bash: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

/// The command `trace` runs (after `--`, or where the options end) completes as commands, then
/// as that command's arguments (files; its own completion where bash-completion is loaded);
/// pids after `-p` and `--pid-tree`; `watch --events` its values, as a list; clap's own
/// completion everywhere else.
#[test]
fn bash_completes_commands_pids_and_events() {
    let dir = spacetime_tests::TempDir::new("completion-words");
    let script = dir.path().join("spacetime.bash");
    std::fs::write(&script, stdout(&["completions", "bash"])).expect("writing the script");
    std::fs::write(dir.path().join("input-file"), "x").expect("a file");
    let files = format!("{}/inp", dir.path().display());
    let want_file = format!("{}/input-file", dir.path().display());
    let me = std::process::id().to_string();
    let library = std::path::Path::new("/usr/share/bash-completion/bash_completion").is_file();
    for lib in [false, true].into_iter().filter(|&l| !l || library) {
        let complete = |words: &[&str]| bash_complete(&script, lib, words);
        for words in [
            &["spacetime", "trace", "--", "ls"][..],
            &["spacetime", "-v", "trace", "-q", "-o", "out.txt", "ls"][..],
        ] {
            let got = complete(words);
            assert!(
                got.iter().any(|w| w == "ls") && got.iter().all(|w| w.starts_with("ls")),
                "{words:?} (bash-completion: {lib}): {got:?}"
            );
        }
        let got = complete(&["spacetime", "trace", "--", "cat", &files]);
        assert_eq!(got, [want_file.as_str()], "the command's files ({lib})");
        // An option's value is not the command: -o takes a file.
        let got = complete(&["spacetime", "trace", "-o", &files]);
        assert_eq!(got, [want_file.as_str()], "-o's file ({lib})");
        for words in [
            &["spacetime", "trace", "-p", ""][..],
            &["spacetime", "watch", "--pid-tree", ""][..],
        ] {
            let got = complete(words);
            assert!(
                got.contains(&me) && got.iter().all(|p| p.parse::<u32>().is_ok()),
                "{words:?}: {got:?}"
            );
        }
        let got = complete(&["spacetime", "trace", "--pid", "1,"]);
        assert!(got.contains(&format!("1,{me}")), "a pid list: {got:?}");
        assert!(!got.contains(&"1,1".to_string()), "a pid twice: {got:?}");
        assert_eq!(
            complete(&["spacetime", "watch", "--events", ""]),
            ["exec", "exit"]
        );
        assert_eq!(
            complete(&["spacetime", "watch", "--events", "exit,"]),
            ["exit,exec"]
        );
        assert_eq!(
            complete(&["spacetime", "trace", "--stop-on"]),
            ["--stop-on-root-exit"]
        );
        assert_eq!(complete(&["spacetime", "wat"]), ["watch"]);
    }
    if library {
        // ls's own completion (bash-completion's, from `ls --help`) after the command.
        let got = bash_complete(
            &script,
            true,
            &["spacetime", "trace", "--", "ls", "--almost"],
        );
        assert_eq!(got, ["--almost-all"], "ls's own completion");
    }
}

#[test]
fn man_page_is_roff_with_every_subcommand() {
    let page = stdout(&["man"]);
    assert!(
        page.lines().any(|l| l.starts_with(".TH spacetime 1")),
        "no .TH line"
    );
    for sub in SUBCOMMANDS {
        let heading = format!(".SH \"SPACETIME {}\"", sub.to_uppercase());
        assert!(page.contains(&heading), "no section {heading}");
    }
    for flag in FLAGS {
        let roff = flag.replace('-', "\\-");
        assert!(page.contains(&roff), "the manual does not describe {flag}");
    }
    assert!(page.contains(".SS EXAMPLES"), "no EXAMPLES subsection");
    // groff (Debian's man-db depends on it) renders it; -ww warns about every dubious request.
    let dir = spacetime_tests::TempDir::new("man");
    let path = dir.path().join("spacetime.1");
    std::fs::write(&path, &page).expect("writing the page");
    let out = Command::new("groff")
        // Plain text: no overstrike for bold (the examples are bold).
        .args(["-man", "-Tutf8", "-ww", "-P-cbu"])
        .arg(&path)
        .output()
        .expect("groff is installed (man-db depends on it)");
    let warnings = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && warnings.trim().is_empty(),
        "groff: {warnings}"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("spacetime watch --failed --ancestry"),
        "the rendered page lacks the watch examples"
    );
}

/// `watch` says what it watches, filters included, before the table header, and warns about a
/// `--cgroup` that does not exist instead of silently matching nothing.
#[test]
fn watch_names_its_filters_before_the_header_and_warns_of_a_missing_cgroup() {
    let missing = format!("/spacetime-no-such-cgroup-{}", std::process::id());
    // One pipe for both streams: their order is the order a terminal shows.
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec \"$0\" watch --cgroup {missing} --comm make --duration 0.3 2>&1"
        ))
        .arg(spacetime_bin())
        .stdin(Stdio::null())
        .output()
        .expect("running spacetime watch");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "watch failed: {text}");
    let line_of = |needle: &str| {
        text.lines()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{text}"))
    };
    let warning = line_of(&format!("warning: --cgroup {missing}: no such cgroup"));
    let watching = line_of(&format!(
        "spacetime: watching process exits with comm make and cgroup {missing} (and below);"
    ));
    let header = line_of("PPID");
    assert!(
        warning < header && watching < header,
        "the warning and what is watched come after the header:\n{text}"
    );
    assert!(
        !text.contains("every exit on the system"),
        "a filtered watch claims to watch everything:\n{text}"
    );
}

/// A process whose fork the watch did not see (here: the table is full, `--max-processes 1`)
/// has no known parent: its row says `?` and its JSON `ppid` is null, never 0.
#[test]
fn watch_never_prints_an_unknown_parent_as_pid_0() {
    use spacetime_tests::watch::{run, Watch};
    use std::time::Duration;
    for json in [true, false] {
        let mut w = Watch::new().flags(["--max-processes", "1"]);
        if json {
            w = w.flag("--json");
        }
        let w = w.start();
        let pid = run(&mut Command::new("/bin/true"));
        // The table's row by its PID column: the number may stand in another row's columns.
        let (needle, pid_s) = (format!("\"pid\":{pid},"), pid.to_string());
        let is_row = |l: &str| match json {
            true => l.contains(&needle),
            false => l.split_whitespace().nth(1) == Some(pid_s.as_str()),
        };
        w.wait_until("the exit's row", Duration::from_secs(30), |s| {
            s.lines().any(is_row)
        });
        let out = w.interrupt();
        let row = out
            .stdout
            .lines()
            .find(|l| is_row(l))
            .expect("the exit's row");
        if json {
            let v: serde_json::Value = serde_json::from_str(row).expect("a JSON line");
            assert!(v["ppid"].is_null(), "ppid of an unseen fork: {row}");
        } else {
            let cols: Vec<&str> = row.split_whitespace().collect();
            assert_eq!(cols[1], pid.to_string(), "PID column: {row}");
            assert_eq!(cols[2], "?", "PPID column of an unseen fork: {row}");
        }
    }
}

/// A usage error that names what was meant: a program where a subcommand goes gets the line
/// that traces it; `trace` with nothing names both ways to use it. Both are usage errors (125).
#[test]
fn a_program_as_subcommand_suggests_trace_and_bare_trace_names_both_forms() {
    let run = |args: &[&str]| {
        let out = Command::new(spacetime_bin())
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running spacetime");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run(&["sh", "-c", "echo 'a b'"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(
        err.contains("spacetime trace -- sh -c 'echo '\"'\"'a b'\"'\"''")
            || err.contains("spacetime trace -- sh -c \"echo 'a b'\""),
        "no copyable trace line:\n{err}"
    );
    // Not a program: clap's own suggestion stays.
    let (code, err) = run(&["mann"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(err.contains("'man'") && !err.contains("trace --"), "{err}");
    let (code, err) = run(&["trace"]);
    assert_eq!(code, Some(125), "{err}");
    assert!(
        err.contains("spacetime trace [OPTIONS] -- CMD") && err.contains("-p PID"),
        "{err}"
    );
}

/// `-` is standard output for every file a command writes: here watch's rows and its summary
/// object, one after the other on stdout, and no file named `-`.
#[test]
fn watch_dash_outputs_are_standard_output() {
    let dir = spacetime_tests::TempDir::new("watch-dash");
    let mut child = Command::new(spacetime_bin())
        .current_dir(dir.path())
        .args([
            "watch",
            "--json",
            "-o",
            "-",
            "--summary-json",
            "-",
            "--count",
            "1",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start watch");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() {
        assert!(std::time::Instant::now() < until, "watch did not stop");
        let _ = Command::new("true").status();
    }
    let out = child.wait_with_output().expect("wait");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "one exit, then the summary:\n{text}");
    assert_eq!(lines[0]["event"], "exit", "{text}");
    assert_eq!(lines[1]["stopped_by"], "count", "{text}");
    assert!(!dir.path().join("-").exists(), "a file named -");
}

/// The global `-v` comes after each subcommand's own options in its `--help` (only `-h`
/// after it), not second among them.
#[test]
fn help_lists_verbose_after_the_subcommands_own_options() {
    for sub in ["trace", "bench", "watch", "report"] {
        let help = stdout(&[sub, "--help"]);
        let options: Vec<&str> = help
            .lines()
            .map(|l| (l.len() - l.trim_start().len(), l.trim()))
            // An option's own line is indented 2 (short) or 6 (long only); its text 10.
            .filter(|(indent, l)| *indent <= 6 && l.starts_with('-'))
            .map(|(_, l)| l)
            .collect();
        let at = options
            .iter()
            .position(|l| l.starts_with("-v, --verbose"))
            .unwrap_or_else(|| panic!("{sub} --help has no -v:\n{help}"));
        assert!(
            options[at + 1..]
                .iter()
                .all(|l| l.starts_with("-h, --help")),
            "{sub} --help lists {:?} after -v",
            &options[at + 1..]
        );
        assert!(at > 3, "{sub} --help lists -v among the first: {options:?}");
    }
}

/// `watch --duration` reads durations as people write them (`1h30m`): the watch runs, here
/// until its first exit (`--count 1`), and exits 0; a duration it cannot read is a usage
/// error (125) naming the forms it can.
#[test]
fn watch_duration_reads_1h30m() {
    let mut child = Command::new(spacetime_bin())
        .args([
            "watch",
            "--duration",
            "1h30m",
            "--count",
            "1",
            "-o",
            "/dev/null",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start watch");
    let until = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() {
        assert!(std::time::Instant::now() < until, "watch did not stop");
        let _ = Command::new("true").status();
    }
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bad = Command::new(spacetime_bin())
        .args(["watch", "--duration", "1h30"])
        .stdin(Stdio::null())
        .output()
        .expect("running watch");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(125), "{err}");
    assert!(err.contains("1h30m"), "{err}");
}
