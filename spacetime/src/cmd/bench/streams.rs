//! Where the benchmarked commands' standard streams go, as hyperfine's `--input` and
//! `--output`: stdin from /dev/null or a file (read from its start by every run); stdout to
//! /dev/null, a pipe that is read and dropped, spacetime's own, or a file (holding what the
//! last command run wrote, as hyperfine's). Every file is opened before anything runs.

use std::{
    fs::{File, OpenOptions},
    io::{self, Read, Seek},
    os::fd::{AsRawFd, OwnedFd, RawFd},
    path::PathBuf,
    thread::JoinHandle,
};

use super::commands::PlanError;
use crate::run::launch::Stdio;

/// One command's stdout.
#[derive(Debug)]
enum Out {
    Null,
    Pipe,
    Inherit,
    File(File),
}

pub struct Streams {
    null: File,
    input: Option<File>,
    outs: Vec<Out>,
    /// The pipe's write end and the thread that drains it.
    pipe: Option<(OwnedFd, JoinHandle<()>)>,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot open {}: {source}", path.display())]
pub struct OpenError {
    pub path: PathBuf,
    pub source: io::Error,
}

/// What `--output` and `--input` asked for, checked; files not opened yet.
pub fn check(output: &[String], input: Option<&str>, benchmarks: usize) -> Result<(), PlanError> {
    if output.len() > 1 && output.len() != benchmarks {
        return Err(PlanError::Count {
            option: "--output",
            given: output.len(),
            benchmarks,
        });
    }
    for o in output {
        policy(o)?;
    }
    match input {
        Some(p) if p != "null" && !std::path::Path::new(p).exists() => {
            Err(PlanError::NoInput(crate::util::term::escape(p.as_bytes())))
        }
        _ => Ok(()),
    }
}

/// null, pipe, inherit, or a path with at least two components (hyperfine's rule, so that
/// a typo of a policy is not taken for a file name).
fn policy(o: &str) -> Result<Option<PathBuf>, PlanError> {
    match o {
        "null" | "pipe" | "inherit" => Ok(None),
        p if std::path::Path::new(p).components().count() > 1 => Ok(Some(p.into())),
        p => Err(PlanError::UnknownOutput(crate::util::term::escape(
            p.as_bytes(),
        ))),
    }
}

impl Streams {
    /// Opens every file: the input, the output files (created), /dev/null.
    pub fn open(
        output: &[String],
        show_output: bool,
        input: Option<&str>,
        benchmarks: usize,
    ) -> Result<Streams, OpenError> {
        let open_err = |path: &str| {
            let path = PathBuf::from(path);
            move |source| OpenError { path, source }
        };
        let null = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(open_err("/dev/null"))?;
        let input = match input {
            Some(p) if p != "null" => Some(File::open(p).map_err(open_err(p))?),
            _ => None,
        };
        let mut outs = Vec::with_capacity(benchmarks);
        for i in 0..benchmarks {
            let o = match (show_output, output.get(i).or(output.first())) {
                (true, _) => Out::Inherit,
                (false, None) => Out::Null,
                (false, Some(o)) => match o.as_str() {
                    "null" => Out::Null,
                    "pipe" => Out::Pipe,
                    "inherit" => Out::Inherit,
                    p => Out::File(File::create(p).map_err(open_err(p))?),
                },
            };
            outs.push(o);
        }
        let pipe = match outs.iter().any(|o| matches!(o, Out::Pipe)) {
            true => Some(drained_pipe().map_err(open_err("a pipe"))?),
            false => None,
        };
        Ok(Streams {
            null,
            input,
            outs,
            pipe,
        })
    }

    /// Every stream on /dev/null (the shell's calibration runs).
    pub fn null(&self) -> Stdio {
        let n = Some(self.null.as_raw_fd());
        Stdio {
            stdin: n,
            stdout: n,
            stderr: n,
        }
    }

    /// The streams of the next run (measured or not) of benchmark `i`: the input rewound, an
    /// output file emptied.
    pub fn for_run(&mut self, i: usize) -> io::Result<Stdio> {
        let null = self.null.as_raw_fd();
        let stdin = match &mut self.input {
            Some(f) => {
                f.rewind()?;
                f.as_raw_fd()
            }
            None => null,
        };
        let (stdout, stderr): (Option<RawFd>, Option<RawFd>) = match &self.outs[i] {
            Out::Null => (Some(null), Some(null)),
            Out::Inherit => (None, None),
            Out::Pipe => (self.pipe.as_ref().map(|(w, _)| w.as_raw_fd()), Some(null)),
            Out::File(f) => {
                // The command writes at the shared offset: back to the start of the emptied file.
                f.set_len(0)?;
                (&*f).rewind()?;
                (Some(f.as_raw_fd()), Some(null))
            }
        };
        Ok(Stdio {
            stdin: Some(stdin),
            stdout,
            stderr,
        })
    }
}

impl Drop for Streams {
    fn drop(&mut self) {
        if let Some((w, t)) = self.pipe.take() {
            // The reader ends once every write end is closed (commands that left a child
            // holding it keep it running: it is not waited for).
            drop(w);
            drop(t);
        }
    }
}

/// A pipe whose read end a thread drains and drops (a fixed buffer: it allocates nothing
/// while commands are forked).
fn drained_pipe() -> io::Result<(OwnedFd, JoinHandle<()>)> {
    let (r, w) = std::io::pipe()?;
    let t = std::thread::Builder::new()
        .name("bench-output".into())
        .spawn(move || {
            let mut r = r;
            let mut buf = [0u8; 16 << 10];
            while matches!(r.read(&mut buf), Ok(n) if n > 0) {}
        })?;
    Ok((w.into(), t))
}

/// A descriptor as a `std::process::Stdio` for the untraced runs (a copy of it).
pub fn std_stdio(fd: Option<RawFd>) -> io::Result<std::process::Stdio> {
    match fd {
        None => Ok(std::process::Stdio::inherit()),
        Some(fd) => {
            // SAFETY: the descriptor is one of ours, open for the duration of this call.
            let b = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
            Ok(b.try_clone_to_owned()?.into())
        }
    }
}
