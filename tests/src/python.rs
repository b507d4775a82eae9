//! Python checkers run by the tests: the JSON Schema validator and Perfetto's own protos come
//! from pip (`jsonschema`, `perfetto`, `protobuf`), installed once when missing.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

/// Serialises the install: test threads of one binary would otherwise race pip.
static INSTALL: Mutex<()> = Mutex::new(());

fn importable(modules: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A `python3` command that can import `modules` (comma-separated, as `import` takes them),
/// after installing `packages` with pip if it could not.
pub fn python_with(modules: &str, packages: &[&str]) -> Command {
    let _guard = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    if !importable(modules) {
        eprintln!("tests: installing {} with pip", packages.join(" "));
        let out = Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(packages)
            .output()
            .expect("running python3 -m pip");
        assert!(
            out.status.success() && importable(modules),
            "cannot import {modules} after `pip install {}`: {}",
            packages.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Command::new("python3")
}

/// A checker script under tests/py/.
pub fn script(name: &str) -> PathBuf {
    crate::workspace_root().join("tests/py").join(name)
}

/// Validates trace reports against docs/trace-report.schema.json (tests/py/check_report.py,
/// with Python's jsonschema): its output, successful when every report matches.
pub fn check_reports<P: AsRef<std::path::Path>>(reports: &[P]) -> std::process::Output {
    python_with("jsonschema", &["jsonschema"])
        .arg(script("check_report.py"))
        .arg(crate::workspace_root().join("docs/trace-report.schema.json"))
        .args(reports.iter().map(|p| p.as_ref()))
        .output()
        .expect("running check_report.py")
}

/// Validates JSON outputs against one of docs/*.schema.json (`schema`: its file name);
/// `lines`: each line of each file is a document (watch --json). Its output, successful when
/// every document matches and the schema describes every key.
pub fn check_json<P: AsRef<std::path::Path>>(
    schema: &str,
    lines: bool,
    files: &[P],
) -> std::process::Output {
    let mut c = python_with("jsonschema", &["jsonschema"]);
    c.arg(script("check_report.py"))
        .arg(crate::workspace_root().join("docs").join(schema));
    if lines {
        c.arg("--lines");
    }
    c.args(files.iter().map(|p| p.as_ref()))
        .output()
        .expect("running check_report.py")
}
