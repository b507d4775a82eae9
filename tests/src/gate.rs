//! A gate a test's command waits at, so that it is still running when the test acts on it
//! however slowly the test gets there: the command's shell polls for a file that the test
//! makes once it has done what it must do while the command runs (or on drop, so that no
//! command outlives its test).

use std::path::PathBuf;

use crate::TempDir;

pub struct Gate {
    _dir: TempDir,
    path: PathBuf,
}

impl Gate {
    pub fn new(tag: &str) -> Gate {
        let dir = TempDir::new(tag);
        let path = dir.path().join("open");
        Gate { _dir: dir, path }
    }

    /// A shell command that returns once the gate is open (double quotes: it may go inside
    /// single ones).
    pub fn wait(&self) -> String {
        format!(
            "until [ -e \"{}\" ]; do sleep 0.05; done",
            self.path.display()
        )
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
