//! `cargo xtask install`: into a prefix and into a staging DESTDIR, every file is where it
//! belongs and works (the binary runs, completions load, the manual renders, systemd accepts
//! the unit), and the unit's capability set is enough: `spacetime watch --metrics` run as an
//! unprivileged user holding exactly those capabilities loads, serves and cross-checks exits.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use spacetime_tests::{spacetime_bin, workspace_root, TempDir};

fn xtask_install(args: &[&str]) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(workspace_root())
        // The xtask binary builds in its own (debug) profile, not the one under test.
        .args(["run", "-q", "-p", "xtask", "--", "install"])
        .args(args)
        .arg("--bin")
        .arg(spacetime_bin())
        .output()
        .expect("running cargo xtask install");
    assert!(
        out.status.success(),
        "cargo xtask install {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Checks the installed tree under `root` (DESTDIR + prefix); `prefix` is what the unit names.
fn check_tree(root: &Path, prefix: &str) {
    let bin = root.join("bin/spacetime");
    let version = run_ok(Command::new(&bin).arg("--version"));
    assert_eq!(
        version.trim(),
        format!("spacetime {}", env!("CARGO_PKG_VERSION"))
    );
    let bash = root.join("share/bash-completion/completions/spacetime");
    run_ok(Command::new("bash").arg("-c").arg(format!(
        "source {} && complete -p spacetime",
        bash.display()
    )));
    // Debian's zsh reads packages' completions from vendor-completions, not site-functions.
    let zsh = if prefix == "/usr" {
        "share/zsh/vendor-completions/_spacetime"
    } else {
        "share/zsh/site-functions/_spacetime"
    };
    for f in [zsh, "share/fish/vendor_completions.d/spacetime.fish"] {
        let text = std::fs::read_to_string(root.join(f)).expect(f);
        assert!(text.contains("watch") && text.contains("trace"), "{f}");
    }
    check_manual(root, prefix);
    for f in ["LICENSE-MIT", "LICENSE-APACHE"] {
        assert!(root.join("share/doc/spacetime").join(f).is_file(), "{f}");
    }
    let unit = std::fs::read_to_string(root.join("lib/systemd/system/spacetime-watch.service"))
        .expect("the unit");
    assert!(
        unit.contains(&format!("ExecStart={prefix}/bin/spacetime watch --metrics")),
        "the unit runs another path: {unit}"
    );
    assert!(
        !unit.contains("@BINDIR@"),
        "an unfilled placeholder: {unit}"
    );
    let agent = std::fs::read_to_string(root.join("lib/systemd/system/spacetime-agent.service"))
        .expect("the agent's unit");
    assert!(
        agent.contains(&format!(
            "ExecStart={prefix}/bin/spacetime agent --socket /run/spacetime/agent.sock"
        )) && !agent.contains("@BINDIR@"),
        "the agent's unit runs another path: {agent}"
    );
}

/// Every page `man` finds by name under `root`: the sections of spacetime(1) render, and
/// every page any of them refers to (SUBCOMMANDS, SEE ALSO) is installed beside it, as is
/// every file its FILES section names under the prefix.
fn check_manual(root: &Path, prefix: &str) {
    let man_dir = root.join("share/man");
    let man = |page: &str| {
        // As a user types it, found through the manual's own search path (-M).
        run_ok(
            Command::new("man")
                .arg("-M")
                .arg(&man_dir)
                .arg(page)
                .env("MANWIDTH", "80")
                .env("LC_ALL", "C"),
        )
    };
    let main = man("spacetime");
    for heading in [
        "NAME",
        "SYNOPSIS",
        "SUBCOMMANDS",
        "SPACETIME WATCH",
        "ENVIRONMENT",
        "FILES",
        "EXIT STATUS",
        "SEE ALSO",
    ] {
        assert!(
            main.lines().any(|l| l == heading),
            "spacetime(1) has no {heading} section:\n{main}"
        );
    }
    for var in ["SPACETIME_SOCKET", "NO_COLOR", "COLUMNS"] {
        let section = main.split("\nENVIRONMENT\n").nth(1).expect("ENVIRONMENT");
        let section = section.split("\nFILES\n").next().expect("FILES");
        assert!(
            section.lines().any(|l| l.trim().starts_with(var)),
            "ENVIRONMENT does not describe {var}:\n{section}"
        );
    }
    let files = main.split("\nFILES\n").nth(1).expect("FILES");
    let files = files.split("\nEXIT STATUS\n").next().expect("EXIT STATUS");
    for path in files
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("/usr/"))
    {
        if prefix == "/usr" {
            let installed = root.join(path.trim_start_matches("/usr/"));
            assert!(installed.is_file(), "FILES names {path}, not installed");
        }
    }
    let mut pages = vec![("spacetime".to_string(), main)];
    let mut seen = std::collections::BTreeSet::new();
    while let Some((name, text)) = pages.pop() {
        seen.insert(name.clone());
        assert!(
            !text.contains("space\u{2010}\n"),
            "{name}: a hyphenated name"
        );
        for word in text.split(|c: char| c.is_whitespace() || c == ',') {
            let Some(page) = word.strip_suffix("(1)") else {
                continue;
            };
            if !page.starts_with("spacetime") || seen.contains(page) {
                continue;
            }
            assert!(
                man_dir.join(format!("man1/{page}.1")).is_file(),
                "{name}(1) refers to {page}(1), which is not installed"
            );
            let text = man(page);
            let words: Vec<&str> = text.split_whitespace().collect();
            assert!(
                words.windows(3).any(|w| w == ["NAME", page, "-"]) && text.contains("SEE ALSO"),
                "{page}(1):\n{text}"
            );
            seen.insert(page.to_string());
            pages.push((page.to_string(), text));
        }
    }
    // spacetime(1) and one page per subcommand but help, each reached from the others.
    assert_eq!(seen.len(), 10, "pages reached: {seen:?}");
}

#[test]
fn install_into_a_prefix_and_a_destdir() {
    let dir = TempDir::new("install");
    let prefix = dir.path().join("prefix");
    let prefix_s = prefix.to_str().expect("UTF-8 temp path");
    xtask_install(&["--prefix", prefix_s]);
    check_tree(&prefix, prefix_s);
    // The unit, with its ExecStart really there: systemd's own static check.
    for name in [
        "spacetime-watch.service",
        "spacetime-agent.service",
        "spacetime-agent.socket",
    ] {
        run_ok(
            Command::new("systemd-analyze")
                .args(["verify", "--man=no"])
                .arg(prefix.join("lib/systemd/system").join(name)),
        );
    }

    let stage = dir.path().join("stage");
    xtask_install(&[
        "--prefix",
        "/usr",
        "--destdir",
        stage.to_str().expect("UTF-8"),
    ]);
    check_tree(&stage.join("usr"), "/usr");
}

/// The `CAP_…` names of the unit's CapabilityBoundingSet.
fn unit_capabilities() -> Vec<String> {
    let unit = std::fs::read_to_string(workspace_root().join("dist/spacetime-watch.service"))
        .expect("dist/spacetime-watch.service");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("a CapabilityBoundingSet line");
    let ambient = unit
        .lines()
        .find_map(|l| l.strip_prefix("AmbientCapabilities="))
        .expect("an AmbientCapabilities line");
    assert_eq!(line, ambient, "bounding and ambient sets differ");
    line.split_whitespace().map(String::from).collect()
}

/// The watch, stopped with SIGINT when the test ends, passed or not.
struct Stopper(std::process::Child);

impl Stopper {
    fn stop(&mut self) -> std::process::ExitStatus {
        // SAFETY: kill(2) on our own child, not waited for yet, so the pid is still its.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        self.0.wait().expect("waiting for spacetime")
    }
}

impl Drop for Stopper {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            self.stop();
        }
    }
}

#[test]
fn the_units_capabilities_are_enough_for_watch_metrics() {
    let caps: Vec<String> = unit_capabilities()
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let set = format!("-all,{}", caps.join(","));
    let dir = TempDir::new("caps");
    let summary = dir.path().join("summary.json");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    // As nobody, with nothing but the unit's capabilities (inheritable, ambient, bounding).
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps={set}"))
        .arg(format!("--ambient-caps={set}"))
        .arg(format!("--bounding-set={set}"))
        .arg("--")
        .arg(spacetime_bin())
        .args(["watch", "-o", "/dev/null", "--metrics"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--summary-json")
        .arg(&summary)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("setpriv (util-linux) runs spacetime");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr"));
    let mut child = Stopper(child);
    let mut said = String::new();
    while !said.contains("spacetime: watching ") {
        let mut line = String::new();
        if stderr.read_line(&mut line).expect("reading stderr") == 0 {
            panic!("spacetime stopped before watching, with {set}: {said}");
        }
        said.push_str(&line);
    }
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    run_ok(&mut Command::new("/bin/true"));
    // Served, and counting exits (ours, or any other on the machine).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (code, _, body) = spacetime_tests::watch::http_get(addr, "/metrics");
        assert_eq!(code, 200, "GET /metrics: {body}");
        let seen = body
            .lines()
            .find_map(|l| l.strip_prefix("spacetime_watch_seen_exits_total{kind=\"process\"} "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no spacetime_watch_seen_exits_total in {body}"));
        if seen >= 1.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no exit counted in 30 s: {body}"
        );
    }
    let status = child.stop();
    let mut rest = String::new();
    let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
    assert!(status.success(), "watch with {set} failed: {said}{rest}");
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).expect("summary")).expect("JSON");
    assert_eq!(
        s["taskstats"]["available"], true,
        "taskstats cross-check unavailable with {set}: {s}"
    );
    assert!(s["process_exits"].as_u64() >= Some(1), "{s}");
}

/// spacetime's build script (which builds the kernel programs for `cargo build`,
/// `cargo install --path spacetime` and `cargo xtask build` alike) stops with one sentence
/// naming the command to run when the eBPF toolchain is missing. Every kernel test covers
/// the other path: the binary under test embeds the object this script built.
#[test]
fn build_script_without_the_ebpf_toolchain_says_what_to_run() {
    let build = spacetime_tests::spacetime_bin()
        .parent()
        .expect("the binary's directory")
        .join("build");
    let script = std::fs::read_dir(&build)
        .unwrap_or_else(|e| panic!("reading {}: {e}", build.display()))
        .filter_map(|d| d.ok())
        .filter(|d| d.file_name().to_string_lossy().starts_with("spacetime-"))
        .map(|d| d.path().join("build-script-build"))
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .expect("spacetime's compiled build script");
    let dir = TempDir::new("buildscript");
    // A PATH without bpf-linker (it lives in ~/.cargo/bin) and without cargo.
    let out = Command::new(&script)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("OUT_DIR", dir.path())
        .output()
        .expect("running the build script");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "the build script succeeded without bpf-linker"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "more than one line: {stderr}");
    assert!(
        lines[0].starts_with("error: ") && lines[0].contains("run `cargo xtask setup`"),
        "{stderr}"
    );
}

/// Run by a user who may not write the prefix, without a terminal for sudo's password,
/// install builds nothing as root and prints the one command that copies as root: the same
/// xtask binary under sudo, given the binary already built.
#[test]
fn install_as_a_user_prints_the_sudo_line() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let built = Command::new(&cargo)
        .current_dir(workspace_root())
        .args(["build", "-q", "-p", "xtask", "--message-format=json"])
        .output()
        .expect("cargo build -p xtask");
    assert!(built.status.success(), "building xtask failed");
    let xtask = String::from_utf8_lossy(&built.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find_map(|m| {
            (m["target"]["name"] == "xtask")
                .then(|| m["executable"].as_str().map(String::from))
                .flatten()
        })
        .expect("the xtask binary");
    spacetime_tests::assert_world_executable(Path::new(&xtask));
    let prefix = "/usr/local/spacetime-install-test";
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&xtask)
        .args(["install", "--prefix", prefix, "--bin"])
        .arg(spacetime_bin())
        .stdin(Stdio::null())
        .output()
        .expect("setpriv runs xtask");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "nobody installed into {prefix}: {err}"
    );
    let want = format!(
        "sudo {xtask} install --prefix {prefix} --bin {}",
        spacetime_bin().display()
    );
    assert!(err.contains(&want), "no `{want}` in: {err}");
    assert!(!Path::new(prefix).exists(), "{prefix} was created");
}
