//! The process tree's rows: pid, peak RSS, CPU, time, exit and the process's name, indented
//! by the tree.

use std::fmt::Write;

use super::{command_line, exit_text, name, runtime, ProcessReport, Report};
use crate::model::tree::ExitStatus;
use crate::util::{
    term,
    units::{bytes, duration_ns},
};

/// Which columns a row has: narrow terminals drop TIME, then CPU, then EXIT (then shown
/// before the command when not 0), so the command keeps room.
#[derive(Clone, Copy)]
pub(super) struct RowLayout {
    time: bool,
    cpu: bool,
    exit: bool,
}

/// What fills a row's columns: one process, a group of them, or nothing (a detail line).
pub(super) enum Figures<'r, 'a> {
    One(&'r ProcessReport<'a>),
    Group {
        count: usize,
        peak_rss_bytes: u64,
        cpu_ns: u64,
        failed: usize,
    },
    Blank,
}

impl RowLayout {
    pub(super) fn for_width(width: usize) -> RowLayout {
        RowLayout {
            time: width >= 76,
            cpu: width >= 64,
            exit: width >= 54,
        }
    }

    pub(super) fn header(self) -> String {
        let mut s = String::from("    PID  PEAK RSS  ");
        if self.cpu {
            s.push_str("     CPU  ");
        }
        if self.time {
            s.push_str("    TIME  ");
        }
        if self.exit {
            s.push_str("EXIT      ");
        }
        s + "COMMAND"
    }

    /// The figures' columns.
    pub(super) fn figures(self, f: &Figures, r: &Report) -> String {
        let (pid, peak, cpu, time, exit) = match *f {
            Figures::One(p) => (
                p.pid().to_string(),
                match p.peak_rss_unknown() {
                    None => bytes(p.peak_rss_bytes()),
                    Some(_) => "?".into(),
                },
                duration_ns(p.cpu_ns()),
                duration_ns(runtime(p, r.wall_ns)),
                exit_text(p.exit().as_ref(), p.state()),
            ),
            Figures::Group {
                count,
                peak_rss_bytes,
                cpu_ns,
                failed,
            } => (
                format!("×{count}"),
                bytes(peak_rss_bytes),
                duration_ns(cpu_ns),
                String::new(),
                match failed {
                    0 => String::new(),
                    n => format!("{n} fail"),
                },
            ),
            Figures::Blank => Default::default(),
        };
        let mut s = format!("{pid:>7}  {peak:>8}  ");
        if self.cpu {
            let _ = write!(s, "{cpu:>8}  ");
        }
        if self.time {
            let _ = write!(s, "{time:>8}  ");
        }
        if self.exit {
            let _ = write!(s, "{exit:<8}  ");
        }
        s
    }

    pub(super) fn has_exit(self) -> bool {
        self.exit
    }
}

/// A tree indent too deep for the room left keeps its innermost levels.
pub(super) fn clamp_indent(indent: &str, room: usize) -> String {
    let n = indent.chars().count();
    if n <= room / 2 {
        return indent.to_string();
    }
    indent.chars().skip(n - room / 2).collect()
}

/// A row: the figures, the tree's indent, and the process's name (its label, or with `-w`
/// its command line).
pub(super) fn row(p: &ProcessReport, r: &Report, indent: &str, width: usize, wide: bool) -> String {
    let lay = RowLayout::for_width(width);
    let mut s = lay.figures(&Figures::One(p), r);
    let room = width.saturating_sub(term::width(&s));
    s.push_str(&clamp_indent(indent, room));
    // Without an EXIT column, anything but a clean exit is said before the command.
    let clean = matches!(p.exit(), Some(super::super::Exit(ExitStatus::Code(0))));
    if !lay.exit && !clean {
        let _ = write!(s, "[{}] ", exit_text(p.exit().as_ref(), p.state()));
    }
    let left = width.saturating_sub(term::width(&s)).max(8);
    s + &name(r, p, left, wide)
}

/// The head of a detail line under a row: blank figures, the tree's indent, two spaces.
fn detail_head(indent: &str, r: &Report, width: usize) -> String {
    let lay = RowLayout::for_width(width);
    let mut head = lay.figures(&Figures::Blank, r);
    let room = width.saturating_sub(term::width(&head));
    head.push_str(&clamp_indent(indent, room));
    head.push_str("  ");
    head
}

/// A detail line under a row: its head, then `text` wrapped to what is left.
fn detail(out: &mut String, indent: &str, text: &str, r: &Report, width: usize) {
    let head = detail_head(indent, r, width);
    let left = width.saturating_sub(term::width(&head)).max(8);
    for l in term::wrap(text, left, 2) {
        let _ = writeln!(out, "{head}{l}");
    }
}

/// A process's taskstats figures on one line (-v). Its user and system time are the row's CPU
/// split as wait4 splits it, not taskstats' own: those are tick samples (both 0 for a process
/// that ran less than a tick, under a CPU column that says 1.2 ms); the JSON keeps them.
fn taskstats_line(p: &ProcessReport, delays: bool) -> Option<String> {
    let t = p.taskstats()?;
    let mut s = format!(
        "user {} sys {} · faults {} minor {} major · switches {} voluntary {} involuntary · read {} write {} ({} / {} syscalls)",
        duration_ns(p.user_ns()),
        duration_ns(p.sys_ns()),
        t.minflt,
        t.majflt,
        t.nvcsw,
        t.nivcsw,
        bytes(t.read_char),
        bytes(t.write_char),
        t.read_syscalls,
        t.write_syscalls
    );
    if delays {
        let d = &t.delays;
        let _ = write!(
            s,
            " · delays cpu {} blkio {} swapin {} reclaim {} thrashing {} compact {} wpcopy {} irq {}",
            duration_ns(d.cpu_ns),
            duration_ns(d.blkio_ns),
            duration_ns(d.swapin_ns),
            duration_ns(d.reclaim_ns),
            duration_ns(d.thrashing_ns),
            duration_ns(d.compact_ns),
            duration_ns(d.wpcopy_ns),
            duration_ns(d.irq_ns)
        );
    }
    Some(s)
}

/// The whole tree, a row per process.
pub(super) fn tree(out: &mut String, r: &Report, width: usize, wide: bool, verbose: bool) {
    let _ = writeln!(out, "{}", RowLayout::for_width(width).header());
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); r.processes.len()];
    let mut roots = Vec::new();
    for (i, parent) in r.analysis.parents.iter().enumerate() {
        match parent {
            Some(pi) => children[*pi].push(i),
            None => roots.push(i),
        }
    }
    let mut stack: Vec<(usize, String, bool, bool)> = roots
        .iter()
        .rev()
        .map(|&i| (i, String::new(), true, true))
        .collect();
    while let Some((i, prefix, last, top)) = stack.pop() {
        let p = &r.processes[i];
        let branch = if top {
            String::new()
        } else {
            format!("{prefix}{}", if last { "└─ " } else { "├─ " })
        };
        let _ = writeln!(out, "{}", row(p, r, &branch, width, wide));
        let child_prefix = if top {
            String::new()
        } else {
            format!("{prefix}{}", if last { "   " } else { "│  " })
        };
        if verbose {
            if let Some(line) = taskstats_line(p, r.taskstats.delayacct) {
                detail(out, &child_prefix, &line, r, width);
            }
        }
        if verbose && p.images().len() > 1 {
            for img in p.images() {
                let peak = img.peak_rss_bytes().map_or("-".into(), bytes);
                let kind = if img.inherited() { "fork" } else { "exec" };
                let mut line = detail_head(&child_prefix, r, width);
                let _ = write!(line, "{kind} (peak {peak}): ");
                let room = width.saturating_sub(term::width(&line)).max(12);
                let _ = writeln!(out, "{line}{}", command_line(&img, room));
            }
        }
        let kids = &children[i];
        for (n, &k) in kids.iter().enumerate().rev() {
            stack.push((k, child_prefix.clone(), n + 1 == kids.len(), false));
        }
    }
}
