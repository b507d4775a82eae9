//! `trace`'s everyday command lines, parsed without building clap's command.
//!
//! Building `trace`'s arguments alone is most of spacetime's start: about 0.25 ms of a traced
//! `/bin/true` through the agent, a quarter of all spacetime adds to it (every argument's
//! help copied, the builder moving each argument by value, the heap and the code paged in).
//! The flags a script or a user types every time (`-q`, `--no-chart`, `-f`, `-o`, `--json`,
//! ...) and the command are read here into the very `Cli` clap would give; any other word,
//! a flag given twice, a value that is empty or starts with `-` (`-` alone is a value), or
//! one its parser refuses leaves the whole line to clap, which parses it, or explains its
//! error, as ever. A value goes through the parser clap calls for it, the defaults are the
//! declaration's constants, and a test compares this parse with clap's on thousands of lines.

use std::{ffi::OsString, path::PathBuf};

use super::cli::{self, Cli, Command, Global, TraceArgs};

/// `args` (the program's name first) as clap would parse them, when they are `trace`
/// followed only by the flags read here and the command; `None` leaves them to clap.
pub fn trace(args: &[OsString]) -> Option<Cli> {
    if args.get(1)?.to_str()? != "trace" {
        return None;
    }
    let mut line = Line::default();
    let mut words = args[2..].iter();
    while let Some(word) = words.next() {
        if word == "--" {
            line.command.extend(words.by_ref().cloned());
            break;
        }
        if !word.as_encoded_bytes().starts_with(b"-") {
            // The command's first word: it and every word after it are the command's.
            line.command.push(word.clone());
            line.command.extend(words.by_ref().cloned());
            break;
        }
        let w = word.to_str()?;
        let (name, attached) = match w.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (w, None),
        };
        if line.flag(name, attached.is_some())? {
            continue;
        }
        let value = match attached {
            Some(v) => v,
            None => words.next()?.to_str()?,
        };
        // `-` alone is a value (standard output); any other word with a dash is a flag.
        if value.is_empty() || (value.starts_with('-') && value != "-") {
            return None;
        }
        line.option(name, value)?;
    }
    line.into_cli()
}

/// What the words said so far; `seen` holds each flag and option once.
#[derive(Default)]
struct Line {
    seen: Vec<&'static str>,
    verbose: u8,
    quiet: bool,
    no_chart: bool,
    wide: bool,
    agent: bool,
    no_agent: bool,
    append: bool,
    stop_on_root_exit: bool,
    format: Option<crate::report::format::Format>,
    output: Option<PathBuf>,
    json: Option<PathBuf>,
    html: Option<PathBuf>,
    svg: Option<PathBuf>,
    perfetto: Option<PathBuf>,
    command: Vec<OsString>,
}

impl Line {
    /// Marks `key` seen; `None` when it was already (clap refuses a flag given twice).
    fn once(&mut self, key: &'static str) -> Option<()> {
        if self.seen.contains(&key) {
            return None;
        }
        self.seen.push(key);
        Some(())
    }

    /// Takes `name` when it is a flag read here: `Some(true)`; `Some(false)` when it is not
    /// a flag (maybe an option); `None` to leave the line to clap.
    fn flag(&mut self, name: &str, has_value: bool) -> Option<bool> {
        let (key, field) = match name {
            "-v" | "--verbose" => {
                self.verbose += 1;
                return (!has_value).then_some(true);
            }
            "-vv" => {
                self.verbose += 2;
                return Some(true);
            }
            "-q" | "--quiet" => ("quiet", &mut self.quiet),
            "--no-chart" => ("no_chart", &mut self.no_chart),
            "-w" | "--wide" => ("wide", &mut self.wide),
            "--agent" => ("agent", &mut self.agent),
            "--no-agent" => ("no_agent", &mut self.no_agent),
            "-a" | "--append" => ("append", &mut self.append),
            "--stop-on-root-exit" => ("stop_on_root_exit", &mut self.stop_on_root_exit),
            _ => return Some(false),
        };
        if has_value {
            return None;
        }
        *field = true;
        self.once(key)?;
        Some(true)
    }

    /// Takes option `name` with its `value`; `None` for any other name, or a value its parser
    /// refuses.
    fn option(&mut self, name: &str, value: &str) -> Option<()> {
        let (key, slot) = match name {
            "-f" | "--format" => {
                self.once("format")?;
                self.format = Some(crate::report::format::parse(value).ok()?);
                return Some(());
            }
            "-o" | "--output" => ("output", &mut self.output),
            "--json" => ("json", &mut self.json),
            "--html" => ("html", &mut self.html),
            "--svg" => ("svg", &mut self.svg),
            "--perfetto" => ("perfetto", &mut self.perfetto),
            _ => return None,
        };
        *slot = Some(PathBuf::from(value));
        self.once(key)
    }

    /// The `Cli` clap gives for these words, every other argument at its default; `None`
    /// where clap would refuse them (it then says why).
    fn into_cli(self) -> Option<Cli> {
        let refused = self.command.is_empty()
            || (self.agent && self.no_agent)
            || (self.append && self.output.is_none());
        if refused {
            return None;
        }
        let args = TraceArgs {
            json: self.json,
            output: self.output,
            append: self.append,
            format: self.format,
            stop_on_root_exit: self.stop_on_root_exit,
            cgroup_peak: false,
            keep_root: false,
            ring_buffer: cli::parse_size(cli::RING_BUFFER_DEFAULT).ok()?,
            max_processes: cli::MAX_PROCESSES_DEFAULT,
            taskstats_buffer: cli::parse_size(cli::TASKSTATS_BUFFER_DEFAULT).ok()?,
            delayacct: false,
            wide: self.wide,
            no_chart: self.no_chart,
            perfetto: self.perfetto,
            html: self.html,
            svg: self.svg,
            quiet: self.quiet,
            rss_interval: cli::RSS_INTERVAL_DEFAULT,
            pss_interval: cli::PSS_INTERVAL_DEFAULT,
            pss_budget: cli::PSS_BUDGET_DEFAULT,
            top: cli::TOP_DEFAULT,
            no_agent: self.no_agent,
            agent: self.agent,
            pid: None,
            command: self.command,
        };
        Some(Cli {
            global: Global {
                verbose: self.verbose,
            },
            command: Command::Trace(args),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::cli::tests::argv;
    use super::*;
    use clap::Parser;

    /// This parse against clap's for `words`: when this one takes them, clap must give the
    /// same `Cli`. Returns whether this one took them.
    fn same_as_clap(words: &[OsString]) -> bool {
        let Some(quick) = trace(words) else {
            return false;
        };
        let clap = Cli::try_parse_from(words)
            .unwrap_or_else(|e| panic!("{words:?}: read here, refused by clap: {e}"));
        assert_eq!(
            format!("{quick:?}"),
            format!("{clap:?}"),
            "{words:?} read differently"
        );
        true
    }

    /// The lines users and scripts type every time are read here, as clap reads them.
    #[test]
    fn everyday_lines_are_read_as_clap_reads_them() {
        let everyday = [
            &["trace", "--", "make", "-j8"][..],
            &["trace", "ls", "-l", "--color"],
            &["trace", "-q", "--no-chart", "--", "/bin/true"],
            &["trace", "--agent", "-f", "%e %M", "--", "/bin/true"],
            &[
                "trace", "-v", "-vv", "--json", "r.json", "-q", "--", "sh", "-c", "exit 3",
            ],
            &[
                "trace",
                "--format=%e %U %S",
                "-o",
                "t.txt",
                "-a",
                "--",
                "true",
            ],
            &[
                "trace",
                "--html",
                "b.html",
                "--svg",
                "b.svg",
                "--perfetto",
                "b.pf",
                "make",
            ],
            &[
                "trace",
                "-w",
                "--no-agent",
                "--stop-on-root-exit",
                "--",
                "--",
                "x",
            ],
            &[
                "trace",
                "--verbose",
                "--wide",
                "--quiet",
                "--append",
                "-o",
                "o",
                "true",
            ],
        ];
        for words in everyday {
            assert!(
                same_as_clap(&argv(words)),
                "{words:?} left to clap: this start is the slow one"
            );
        }
    }

    /// What clap refuses or reads in ways this does not know is left to clap.
    #[test]
    fn anything_else_is_left_to_clap() {
        let left = [
            &["trace"][..],
            &["trace", "--"],
            &["trace", "-q", "-q", "--", "true"],
            &["trace", "--agent", "--no-agent", "true"],
            &["trace", "-a", "true"],
            &["trace", "-f", "%e", "-f", "%M", "true"],
            &["trace", "-f", "%Ü", "true"],
            &["trace", "--json=", "true"],
            &["trace", "--json", "--", "true"],
            &["trace", "-o"],
            &["trace", "-qw", "true"],
            &["trace", "-vvv", "true"],
            &["trace", "--quiet=yes", "true"],
            &["trace", "--ring-buffer", "4M", "true"],
            &["trace", "-p", "1"],
            &["trace", "--help"],
            &["trace", "-", "true"],
            &["-v", "trace", "true"],
            &["bench", "true"],
            &[],
        ];
        for words in left {
            assert!(trace(&argv(words)).is_none(), "{words:?} read here");
        }
        let not_utf8 = std::os::unix::ffi::OsStringExt::from_vec(b"-\xff".to_vec());
        let mut words = argv(&["trace"]);
        words.extend([not_utf8, "true".into()]);
        assert!(
            trace(&words).is_none(),
            "a flag that is not UTF-8 read here"
        );
    }

    /// Thousands of lines drawn from flags, values and mistakes: whatever this parse takes,
    /// clap takes and reads the same.
    #[test]
    fn drawn_lines_read_here_are_read_so_by_clap() {
        let pieces = [
            "-q",
            "--quiet",
            "--no-chart",
            "--agent",
            "--no-agent",
            "-w",
            "--wide",
            "-v",
            "-vv",
            "--verbose",
            "-a",
            "--append",
            "--stop-on-root-exit",
            "-f",
            "%e %M",
            "%C",
            "--format=%e",
            "--format",
            "-o",
            "out.txt",
            "--output=o",
            "--json",
            "r.json",
            "--json=j",
            "--html",
            "h",
            "--svg",
            "s",
            "--perfetto",
            "p",
            "--",
            "ls",
            "-l",
            "-",
            "",
            "--ring-buffer",
            "4M",
            "-x",
            "--bogus",
            "-qw",
            "--top",
            "3",
            "=",
            "--=x",
        ];
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move |n: usize| {
            // xorshift64*: a fixed sequence, the same lines every run.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            (state.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
        };
        let (mut read_here, drawn) = (0, 4000);
        for _ in 0..drawn {
            let len = next(9);
            let mut words = vec!["trace"];
            words.extend((0..len).map(|_| pieces[next(pieces.len())]));
            if next(2) == 0 {
                words.extend(["--", "true"]);
            }
            read_here += usize::from(same_as_clap(&argv(&words)));
        }
        // The draw reaches both sides: lines read here and lines left to clap.
        assert!(
            read_here > drawn / 10 && read_here < drawn * 9 / 10,
            "{read_here} of {drawn} drawn lines read here"
        );
    }
}
