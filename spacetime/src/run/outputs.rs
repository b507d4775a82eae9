//! The files a trace writes (`--json`, `--perfetto`, `--html`, `--svg`, `-o`), opened before CMD starts: a path
//! that cannot be written stops spacetime with one sentence before anything runs, instead of
//! losing a whole run at the end. A write that still fails at the end costs that file only:
//! the summary and CMD's status are kept. A file is written whole or not at all: into a
//! temporary file beside it, renamed over it once complete (a full disk leaves the old file,
//! or none, never a part); a device or a FIFO is written as it is, and `--append` in place.

use crate::report::Report;

use std::{
    ffi::OsString,
    fs::{File, OpenOptions},
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
};

/// Where one output goes.
#[derive(Debug)]
pub enum Dest {
    /// `-`: standard output.
    Stdout,
    /// Written in place: a device, a FIFO, or a file appended to.
    InPlace { file: File, path: PathBuf },
    /// A regular file, written whole into a temporary file beside `target` (the named path,
    /// or the file its symbolic link names) and renamed over it.
    Whole { path: PathBuf, target: PathBuf },
}

/// Which file two outputs would both write: an existing file's (device, inode), or a new
/// one's directory (device, inode) and name.
type FileId = (u64, u64, Option<OsString>);

impl Dest {
    /// Opens `path` for writing (created, truncated or appended to); `-` means stdout when
    /// `dash_is_stdout`. A regular file (or a new one) is only checked now (its directory,
    /// and the file if it exists, writable): it is written whole at the end.
    pub fn open(path: &Path, append: bool, dash_is_stdout: bool) -> Result<Dest, OpenError> {
        if dash_is_stdout && path.as_os_str() == "-" {
            return Ok(Dest::Stdout);
        }
        let err = |source| OpenError {
            path: path.to_path_buf(),
            source,
        };
        // A link is followed, as an open would: the file it names is the one replaced.
        let target = std::fs::canonicalize(path).ok();
        let meta = std::fs::metadata(path);
        let regular_or_new = match &meta {
            Ok(m) => m.is_file() && target.is_some(),
            Err(e) => e.kind() == io::ErrorKind::NotFound && !is_dangling_link(path),
        };
        if append || !regular_or_new {
            let file = OpenOptions::new()
                .write(true)
                .create(true)
                .append(append)
                .truncate(!append)
                .open(path)
                .map_err(err)?;
            return Ok(Dest::InPlace {
                file,
                path: path.to_path_buf(),
            });
        }
        let target = target.unwrap_or_else(|| path.to_path_buf());
        // As the effective ids would open it (access(2) alone asks for the real ones).
        let access = |p: &Path, how| {
            rustix::fs::accessat(rustix::fs::CWD, p, how, rustix::fs::AtFlags::EACCESS)
                .map_err(|e| err(e.into()))
        };
        access(
            dir_of(&target),
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
        )?;
        if meta.is_ok() {
            // A read-only file is refused, as an open for writing would refuse it.
            access(&target, rustix::fs::Access::WRITE_OK)?;
        }
        Ok(Dest::Whole {
            path: path.to_path_buf(),
            target,
        })
    }

    /// Which file it writes, when it is a regular file (a terminal or a pipe takes both
    /// outputs one after the other without harm).
    fn file_id(&self) -> Option<FileId> {
        use std::os::fd::AsFd;
        let regular = |st: &rustix::fs::Stat| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        };
        match self {
            Dest::Stdout => {
                let st = rustix::fs::fstat(io::stdout().as_fd()).ok()?;
                regular(&st).then_some((st.st_dev, st.st_ino, None))
            }
            Dest::InPlace { file, .. } => {
                let st = rustix::fs::fstat(file.as_fd()).ok()?;
                regular(&st).then_some((st.st_dev, st.st_ino, None))
            }
            Dest::Whole { target, .. } => match rustix::fs::stat(target) {
                Ok(st) => Some((st.st_dev, st.st_ino, None)),
                Err(_) => {
                    let st = rustix::fs::stat(dir_of(target)).ok()?;
                    Some((st.st_dev, st.st_ino, target.file_name().map(OsString::from)))
                }
            },
        }
    }

    /// How an error message names it (escaped when the line is written).
    pub fn name(&self) -> String {
        match self {
            Dest::Stdout => "standard output".into(),
            Dest::InPlace { path, .. } | Dest::Whole { path, .. } => path.display().to_string(),
        }
    }

    /// Writes what `f` produces, buffered, and flushes; a whole file goes into place only
    /// once all of it is written (on an error it is not there, or as it was: the error says so).
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
            Dest::InPlace { file, .. } => {
                let mut w = BufWriter::new(file);
                f(&mut w)?;
                w.flush()
            }
            Dest::Whole { target, .. } => write_whole(target, f).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("{e}; nothing was written there (a file already there is as it was)"),
                )
            }),
        }
    }
}

/// Writes `target` through a temporary file beside it (removed unless renamed into place),
/// keeping a replaced file's owner and mode, as a truncation would have.
fn write_whole(target: &Path, f: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> io::Result<()> {
    let temp = temp_beside(target);
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)?;
    let written = (|| {
        if let Ok(m) = std::fs::metadata(target) {
            use std::os::unix::fs::MetadataExt;
            let _ = rustix::fs::fchown(
                &file,
                Some(rustix::fs::Uid::from_raw(m.uid())),
                Some(rustix::fs::Gid::from_raw(m.gid())),
            );
            file.set_permissions(m.permissions())?;
        }
        let mut w = BufWriter::new(&file);
        f(&mut w)?;
        w.flush()?;
        drop(w);
        file.sync_all()?;
        std::fs::rename(&temp, target)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

/// The directory a file is in (`.` for a bare name).
fn dir_of(p: &Path) -> &Path {
    p.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

fn is_dangling_link(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink())
}

/// `DIR/.NAME.spacetime-PID-N`: beside the file, so that the rename stays in one file system;
/// N tells this process's outputs apart.
fn temp_beside(path: &Path) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut name = OsString::from(".");
    name.push(path.file_name().unwrap_or(path.as_os_str()));
    name.push(format!(".spacetime-{}-{n}", std::process::id()));
    path.with_file_name(name)
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
    /// `--html FILE`: the report as a self-contained page.
    pub html: Option<Dest>,
    /// `--svg FILE`: the report as one static picture.
    pub svg: Option<Dest>,
    /// `-o FILE`: the human summary (or `--format`'s line) goes there instead of stderr.
    pub summary: Option<Dest>,
}

/// What the user asked for.
pub struct Requested<'a> {
    pub json: Option<&'a Path>,
    pub perfetto: Option<&'a Path>,
    pub html: Option<&'a Path>,
    pub svg: Option<&'a Path>,
    pub summary: Option<&'a Path>,
    pub append: bool,
}

impl Outputs {
    /// Writes the report's files, then the summary. A write that fails costs that output only
    /// (one line says so): the summary is kept, on stderr if its own file failed.
    pub fn write(&mut self, report: &Report, summary: &str) {
        if let Some(d) = self.json.as_mut() {
            let written = d.write_with(|w| {
                serde_json::to_writer(&mut *w, report)?;
                w.write_all(b"\n")
            });
            if let Err(e) = written {
                crate::errln!("spacetime: writing the JSON report to {}: {e}", d.name());
            }
        }
        if let Some(d) = self.html.as_mut() {
            let page = crate::report::html::trace(report);
            if let Err(e) = d.write_with(|w| w.write_all(page.as_bytes())) {
                crate::errln!("spacetime: writing the HTML report to {}: {e}", d.name());
            }
        }
        if let Some(d) = self.svg.as_mut() {
            let picture = crate::report::svg::trace(report);
            if let Err(e) = d.write_with(|w| w.write_all(picture.as_bytes())) {
                crate::errln!("spacetime: writing the SVG picture to {}: {e}", d.name());
            }
        }
        if let Some(d) = self.perfetto.as_mut() {
            let trace = |w: &mut dyn Write| crate::report::export::perfetto::write_to(w, report);
            if let Err(e) = d.write_with(trace) {
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

    /// Opens (creates) every requested output now, before CMD runs. Two outputs that are one
    /// regular file (the same path, two names of it, or `-` with stdout sent there) are
    /// refused: each would overwrite the other.
    pub fn open(r: &Requested) -> Result<Outputs, OpenError> {
        let o = Outputs {
            json: r.json.map(|p| Dest::open(p, false, true)).transpose()?,
            perfetto: r.perfetto.map(|p| Dest::open(p, false, true)).transpose()?,
            html: r.html.map(|p| Dest::open(p, false, true)).transpose()?,
            svg: r.svg.map(|p| Dest::open(p, false, true)).transpose()?,
            summary: r
                .summary
                .map(|p| Dest::open(p, r.append, true))
                .transpose()?,
        };
        let named = [
            ("--json", &o.json),
            ("--perfetto", &o.perfetto),
            ("--html", &o.html),
            ("--svg", &o.svg),
            ("-o", &o.summary),
        ];
        let ids: Vec<(&str, &Dest, FileId)> = named
            .iter()
            .filter_map(|(flag, d)| d.as_ref().map(|d| (*flag, d)))
            .filter_map(|(flag, d)| d.file_id().map(|id| (flag, d, id)))
            .collect();
        for (i, (a, d, id)) in ids.iter().enumerate() {
            if let Some((b, _, _)) = ids[i + 1..].iter().find(|(_, _, other)| other == id) {
                return Err(OpenError {
                    path: PathBuf::from(d.name()),
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("{a} and {b} name the same file: each would overwrite the other"),
                    ),
                });
            }
        }
        Ok(o)
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
            html: None,
            svg: None,
            summary: None,
            append: false,
        })
        .expect_err("a missing directory");
        let msg = e.to_string();
        assert!(msg.contains("/nonexistent-dir/x.json"), "{msg}");
        assert!(msg.contains("nothing was run"), "{msg}");
    }

    #[test]
    fn one_file_for_two_outputs_is_refused() {
        let dir = std::env::temp_dir().join(format!("spacetime-same-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = dir.join("r.json");
        let alias = dir.join("alias.json");
        std::fs::write(&f, "").expect("create");
        std::fs::hard_link(&f, &alias).expect("a second name");
        let e = Outputs::open(&Requested {
            json: Some(&f),
            perfetto: None,
            html: None,
            svg: None,
            summary: Some(&alias),
            append: false,
        })
        .expect_err("one file twice");
        assert!(
            e.to_string().contains("--json and -o name the same file"),
            "{e}"
        );
        let other = dir.join("other.txt");
        Outputs::open(&Requested {
            json: Some(&f),
            perfetto: None,
            html: None,
            svg: None,
            summary: Some(&other),
            append: false,
        })
        .expect("two files");
        std::fs::remove_dir_all(&dir).expect("rm");
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
            html: None,
            svg: None,
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

    /// Whole or nothing: a write that fails leaves the file as it was and nothing beside it;
    /// one that succeeds replaces it keeping its mode, through a link to it.
    #[test]
    fn a_file_is_replaced_whole_or_left_as_it_was() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("spacetime-whole-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let f = dir.join("report.json");
        std::fs::write(&f, "old\n").expect("write");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).expect("chmod");
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&f, &link).expect("symlink");
        let mut d = Dest::open(&link, false, true).expect("open");
        assert_eq!(
            std::fs::read_to_string(&f).expect("read"),
            "old\n",
            "not cut at open"
        );
        let failed = d.write_with(|w: &mut dyn Write| {
            w.write_all(b"half of it")?;
            Err(io::Error::other("the disk is full"))
        });
        let e = failed.expect_err("the write fails");
        assert!(e.to_string().contains("nothing was written there"), "{e}");
        assert_eq!(std::fs::read_to_string(&f).expect("read"), "old\n");
        d.write_with(|w: &mut dyn Write| w.write_all(b"new\n"))
            .expect("write");
        assert_eq!(std::fs::read_to_string(&f).expect("read"), "new\n");
        let mode = std::fs::metadata(&f).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o640, "the mode it had");
        assert!(
            std::fs::symlink_metadata(&link)
                .expect("the link")
                .file_type()
                .is_symlink(),
            "the link was replaced instead of the file it names"
        );
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("ls")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert_eq!(names.len(), 2, "a temporary file left: {names:?}");
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}
