//! `spacetime bench`'s options, and the commands they describe.

use std::{
    ffi::OsString,
    os::unix::ffi::{OsStrExt, OsStringExt},
    path::PathBuf,
};

use clap::Args;

use super::model::BenchCommand;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Runs of each command
    #[arg(short = 'r', long, value_name = "N", default_value_t = 10,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub runs: u32,
    /// Untraced runs of each command before the measured ones (to warm caches)
    #[arg(short = 'w', long, value_name = "N", default_value_t = 0)]
    pub warmup: u32,
    /// Run CMD before every run (warm-up and measured) of a command, untraced, through
    /// `sh -c`; given once, for every command; given once per command, in order
    #[arg(short = 'p', long, value_name = "CMD")]
    pub prepare: Vec<OsString>,
    /// Do not run the commands through `sh -c`: split each like a shell does (quotes,
    /// backslashes) and exec it directly, so the shell's start-up is not measured
    #[arg(short = 'N', long)]
    pub no_shell: bool,
    /// Load the kernel programs here (root) even when a `spacetime agent` answers
    #[arg(long)]
    pub no_agent: bool,
    /// Keep benchmarking when a command exits non-zero (its exit codes are still reported)
    #[arg(short = 'i', long)]
    pub ignore_failure: bool,
    /// Let the commands write to spacetime's stdout and stderr (by default they go to
    /// /dev/null)
    #[arg(long)]
    pub show_output: bool,
    /// Write every command's statistics and per-run values as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the comparison as a Markdown table to FILE
    #[arg(long, value_name = "FILE")]
    pub export_markdown: Option<PathBuf>,
    /// Write one CSV row per command to FILE
    #[arg(long, value_name = "FILE")]
    pub export_csv: Option<PathBuf>,
    /// No progress bar and no notices (the summary and errors are still shown)
    #[arg(short, long)]
    pub quiet: bool,
    /// Run every measured run in a memory cgroup of its own and report the tree's
    /// distinct-page peak (pages shared after fork counted once, page cache included) beside
    /// the summed-RSS tree peak
    #[arg(long)]
    pub cgroup_peak: bool,
    /// Under sudo, run the commands as root instead of the invoking user
    #[arg(long)]
    pub keep_root: bool,
    /// The commands to compare, each one argument (quote it)
    #[arg(required = true, value_name = "CMD")]
    pub commands: Vec<OsString>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    #[error("{0}: unterminated quote or trailing backslash (with --no-shell a command is split like a shell does)")]
    Unsplittable(String),
    #[error("{0}: empty command")]
    Empty(String),
    #[error("{prepare} --prepare commands for {commands} commands: give one for all, or one per command")]
    PrepareCount { prepare: usize, commands: usize },
}

impl BenchArgs {
    /// The commands to run, in order.
    pub fn commands(&self) -> Result<Vec<BenchCommand>, ArgsError> {
        self.commands
            .iter()
            .map(|c| command(c.as_bytes(), self.no_shell))
            .collect()
    }

    /// The prepare command of each command (as `sh -c` argv), if any.
    pub fn prepares(&self) -> Result<Vec<Option<Vec<OsString>>>, ArgsError> {
        let n = self.commands.len();
        let each = |p: &OsString| vec!["sh".into(), "-c".into(), p.clone()];
        match self.prepare.len() {
            0 => Ok(vec![None; n]),
            1 => Ok(vec![Some(each(&self.prepare[0])); n]),
            k if k == n => Ok(self.prepare.iter().map(|p| Some(each(p))).collect()),
            k => Err(ArgsError::PrepareCount {
                prepare: k,
                commands: n,
            }),
        }
    }
}

/// One command: `sh -c TEXT`, or TEXT split into words like a POSIX shell (shlex's rules:
/// single and double quotes, backslash escapes; no expansion).
pub fn command(text: &[u8], no_shell: bool) -> Result<BenchCommand, ArgsError> {
    let shown = || crate::util::term::escape(text);
    if text.iter().all(u8::is_ascii_whitespace) {
        return Err(ArgsError::Empty(shown()));
    }
    let argv = if no_shell {
        shlex::bytes::split(text)
            .ok_or_else(|| ArgsError::Unsplittable(shown()))?
            .into_iter()
            .map(OsString::from_vec)
            .collect()
    } else {
        vec!["sh".into(), "-c".into(), OsString::from_vec(text.to_vec())]
    };
    Ok(BenchCommand {
        text: text.to_vec(),
        argv,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn shell_and_no_shell() {
        let c = command(b"echo 'a b' | wc -c", false).expect("sh");
        assert_eq!(c.argv, os(&["sh", "-c", "echo 'a b' | wc -c"]));
        let c = command(br#"printf '%s\n' "a b" c\ d"#, true).expect("split");
        assert_eq!(c.argv, os(&["printf", "%s\\n", "a b", "c d"]));
        assert_eq!(c.text, br#"printf '%s\n' "a b" c\ d"#);
        assert!(matches!(
            command(b"echo 'open", true),
            Err(ArgsError::Unsplittable(_))
        ));
        assert!(matches!(command(b"  ", false), Err(ArgsError::Empty(_))));
        // Bytes that are not UTF-8 stay exact in the argv, and are escaped when shown.
        let c = command(b"true \xff\x1b[2J", true).expect("bytes");
        assert_eq!(c.argv[1].as_bytes(), b"\xff\x1b[2J");
        assert!(!c.shown().contains('\x1b'), "{}", c.shown());
    }

    #[derive(clap::Parser)]
    struct Cmd {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        use clap::Parser;
        Cmd::try_parse_from(args).map(|c| c.bench)
    }

    #[test]
    fn options() {
        let b = parse(&["bench", "sleep 0.1", "sleep 0.2"]).expect("parse");
        assert_eq!((b.runs, b.warmup, b.no_shell), (10, 0, false));
        assert_eq!(b.commands().expect("commands").len(), 2);
        assert_eq!(b.prepares().expect("none"), vec![None, None]);
        let b = parse(&[
            "bench",
            "-N",
            "-r",
            "3",
            "-w",
            "1",
            "-p",
            "sync",
            "--json",
            "r.json",
            "--export-csv",
            "r.csv",
            "--export-markdown",
            "r.md",
            "-i",
            "true",
            "false",
        ])
        .expect("parse");
        assert_eq!((b.runs, b.warmup), (3, 1));
        assert!(b.no_shell && b.ignore_failure);
        assert_eq!(
            b.prepares().expect("one for all")[1],
            Some(os(&["sh", "-c", "sync"]))
        );
        assert!(parse(&["bench", "-r", "0", "true"]).is_err());
        assert!(parse(&["bench"]).is_err());
        let b = parse(&["bench", "-p", "a", "-p", "b", "-p", "c", "x", "y"]).expect("parse");
        assert_eq!(
            b.prepares(),
            Err(ArgsError::PrepareCount {
                prepare: 3,
                commands: 2
            })
        );
    }
}
