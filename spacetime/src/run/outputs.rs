//! The files a trace writes (`--json`, `--perfetto`, `-o`), opened before CMD starts: a path
//! that cannot be written stops spacetime with one sentence before anything runs, instead of
//! losing a whole run at the end. A write that still fails at the end costs that file only:
//! the summary and CMD's status are kept.

use crate::report::Report;

use std::{
    fs::{File, OpenOptions},
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

/// Where one output goes.
#[derive(Debug)]
pub enum Dest {
    /// `-`: standard output.
    Stdout,
    File {
        file: File,
        path: PathBuf,
    },
}

impl Dest {
    /// Opens `path` for writing (created, truncated or appended to); `-` means stdout when
    /// `dash_is_stdout`.
    pub fn open(path: &Path, append: bool, dash_is_stdout: bool) -> Result<Dest, OpenError> {
        if dash_is_stdout && path.as_os_str() == "-" {
            return Ok(Dest::Stdout);
        }
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|source| OpenError {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Dest::File {
            file,
            path: path.to_path_buf(),
        })
    }

    /// How an error message names it (escaped when the line is written).
    pub fn name(&self) -> String {
        match self {
            Dest::Stdout => "standard output".into(),
            Dest::File { path, .. } => path.display().to_string(),
        }
    }

    /// Writes what `f` produces, buffered, and flushes.
    pub fn write_with(
        &mut self,
        f: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> io::Result<()> {
        match self {
            Dest::Stdout => {
                let mut w = BufWriter::new(io::stdout().lock());
                f(&mut w)?;
                w.flush()
            }
            Dest::File { file, .. } => {
                let mut w = BufWriter::new(file);
                f(&mut w)?;
                w.flush()
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot write to {}: {source}; nothing was run", path.display())]
pub struct OpenError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// Every output a trace writes besides the summary on stderr.
#[derive(Debug, Default)]
pub struct Outputs {
    pub json: Option<Dest>,
    pub perfetto: Option<Dest>,
    /// `-o FILE`: the human summary (or `--format`'s line) goes there instead of stderr.
    pub summary: Option<Dest>,
}

/// What the user asked for.
pub struct Requested<'a> {
    pub json: Option<&'a Path>,
    pub perfetto: Option<&'a Path>,
    pub summary: Option<&'a Path>,
    pub append: bool,
}

impl Outputs {
    /// Writes the report's files, then the summary. A write that fails costs that output only
    /// (one line says so): the summary is kept, on stderr if its own file failed.
    pub fn write(
        &mut self,
        report: &Report,
        summary: &str,
        perfetto: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) {
        if let Some(d) = self.json.as_mut() {
            let written = d.write_with(|w| {
                serde_json::to_writer(&mut *w, report)?;
                w.write_all(b"\n")
            });
            if let Err(e) = written {
                crate::errln!("spacetime: writing the JSON report to {}: {e}", d.name());
            }
        }
        if let Some(d) = self.perfetto.as_mut() {
            if let Err(e) = d.write_with(perfetto) {
                crate::errln!("spacetime: writing the Perfetto trace to {}: {e}", d.name());
            }
        }
        match self.summary.as_mut() {
            Some(d) => {
                if let Err(e) = d.write_with(|w| w.write_all(summary.as_bytes())) {
                    crate::errln!(
                        "spacetime: writing the summary to {}: {e}; here it is",
                        d.name()
                    );
                    crate::util::term::err_raw(summary);
                }
            }
            None => crate::util::term::err_raw(summary),
        }
    }

    /// Opens (creates) every requested output now, before CMD runs.
    pub fn open(r: &Requested) -> Result<Outputs, OpenError> {
        Ok(Outputs {
            json: r.json.map(|p| Dest::open(p, false, true)).transpose()?,
            perfetto: r.perfetto.map(|p| Dest::open(p, false, true)).transpose()?,
            summary: r
                .summary
                .map(|p| Dest::open(p, r.append, true))
                .transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_directory_fails_before_anything_runs() {
        let e = Outputs::open(&Requested {
            json: Some(Path::new("/nonexistent-dir/x.json")),
            perfetto: None,
            summary: None,
            append: false,
        })
        .expect_err("a missing directory");
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent-dir/x.json"), "{msg}");
        assert!(msg.contains("nothing was run"), "{msg}");
    }

    #[test]
    fn dash_is_stdout_and_append_keeps_content() {
        let dir = std::env::temp_dir().join(format!("spacetime-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = dir.join("summary.txt");
        std::fs::write(&f, "before\n").expect("write");
        let mut o = Outputs::open(&Requested {
            json: Some(Path::new("-")),
            perfetto: None,
            summary: Some(&f),
            append: true,
        })
        .expect("open");
        assert!(matches!(o.json, Some(Dest::Stdout)));
        o.summary
            .as_mut()
            .expect("summary")
            .write_with(|w: &mut dyn Write| w.write_all(b"after\n"))
            .expect("write");
        assert_eq!(
            std::fs::read_to_string(&f).expect("read"),
            "before\nafter\n"
        );
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}
