//! A gate a test's command waits at, so that it is still running when the test acts on it
//! however slowly the test gets there: the command's shell polls for a file that the test
//! makes once it has done what it must do while the command runs (or on drop, so that no
//! command outlives its test).

use std::path::PathBuf;

use crate::TempDir;

pub struct Gate {
    dir: TempDir,
    path: PathBuf,
}

impl Gate {
    pub fn new(tag: &str) -> Gate {
        let dir = TempDir::new(tag);
        let path = dir.path().join("open");
        Gate { dir, path }
    }

    /// A shell command that returns once the gate is open, or its directory gone (a gate
    /// dropped, as on a panic, opens and is removed in one moment, which a poll would miss)
    /// (double quotes: it may go inside single ones).
    pub fn wait(&self) -> String {
        format!(
            "until [ -e \"{}\" ] || [ ! -d \"{}\" ]; do sleep 0.05; done",
            self.path.display(),
            self.dir.path().display()
        )
    }

    /// The file whose existence opens the gate, for a workload that waits on it itself (with
    /// [`is_open`]).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub fn open(&self) {
        std::fs::write(&self.path, "")
            .unwrap_or_else(|e| panic!("open the gate {}: {e}", self.path.display()));
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, "");
    }
}

/// Whether the gate whose file is `path` ([`Gate::path`]) is open: the file exists, or its
/// directory is gone (a dropped gate, as on a panic, opens and is removed in one moment) — the
/// rule [`Gate::wait`] tests in the shell.
pub fn is_open(path: &std::path::Path) -> bool {
    path.exists() || path.parent().is_some_and(|d| !d.exists())
}
