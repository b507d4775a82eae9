//! The human summary, built for builds: the totals; every failed process, before anything
//! else; the process tree with each process's peak RSS, CPU, time and exit, named by its
//! label (or, for a tree over `--top`, the tree with a program's runs grouped, the top
//! processes by CPU and by memory, and the programs); the critical path; memory and CPU over
//! time; how complete the figures are; and a recap as the very last line, so it is what stays
//! on the screen.

mod charts;
mod groups;
mod rows;
mod sections;

use std::fmt::Write;

use super::{
    analysis::{label_text, Spelling},
    chart::Style,
    ImageReport, ProcessReport, Report,
};
use crate::{
    model::{pss_sum::MaxPssFigure, tree::ExitStatus},
    util::{
        signals, term,
        units::{bytes, duration_ns},
    },
};

/// How the summary is drawn.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// The terminal's width (None: the wide form, uncut, with full command lines).
    pub width: Option<usize>,
    /// Rows of the tree before it is grouped (0: every process).
    pub top: usize,
    pub verbose: bool,
    /// Memory and CPU over time, when they carry something.
    pub charts: bool,
    /// The charts' width in the wide form (they are as wide as the terminal).
    pub chart_width: Option<usize>,
    pub style: Style,
}

/// Red, for failures, on a colour terminal.
const RED: &str = "\x1b[31m";
const RESET: &str = "\x1b[0m";

/// `line` in red when colour is on (the line is cut to the width first: escapes do not
/// count).
fn red(line: &str, style: Style) -> String {
    if style.color {
        format!("{RED}{line}{RESET}")
    } else {
        line.to_string()
    }
}

fn exit_text(e: Option<&super::Exit>, state: super::State) -> String {
    match e.map(|e| e.0) {
        None if state == super::State::Unknown => "unknown".into(),
        None if state == super::State::Left => "left (other credentials)".into(),
        None => "running".into(),
        Some(ExitStatus::Code(c)) => c.to_string(),
        Some(ExitStatus::Signal {
            signal,
            core_dumped,
        }) => {
            format!(
                "{}{}",
                signals::name(signal),
                if core_dumped { " (core)" } else { "" }
            )
        }
    }
}

/// argv as a shell would show it, escaped for the terminal, cut to `width` columns (a long
/// program path is cut in the middle so its name stays).
fn command_line(img: &ImageReport, width: usize) -> String {
    let s = if img.argv().next().is_none() {
        term::escape(img.exe())
    } else {
        term::join(img.argv())
    };
    term::fit_command(&s, width)
}

fn process_command(p: &ProcessReport, width: usize) -> String {
    // The inherited image repeats the parent; show what the process itself ran. Prefixes
    // count in the width.
    let own: Vec<ImageReport> = p.images().filter(|i| !i.inherited()).collect();
    let with = |prefix: String, img: &ImageReport| {
        let left = width.saturating_sub(term::width(&prefix));
        prefix + &command_line(img, left)
    };
    match own.as_slice() {
        [] => p
            .images()
            .next()
            .map(|i| with("(fork) ".into(), &i))
            .unwrap_or_default(),
        [one] => command_line(one, width),
        [.., last] => with(format!("[{} execs] ", own.len()), last),
    }
}

fn runtime(p: &ProcessReport, wall_ns: u64) -> u64 {
    p.end_ns().unwrap_or(wall_ns).saturating_sub(p.start_ns())
}

/// `n` and the noun, singular for one.
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `parts` joined by ` · `, broken between parts into lines of at most `width` columns
/// (continuations indented by two).
fn flow(out: &mut String, parts: &[String], width: usize) {
    let mut line = String::new();
    for part in parts {
        if !line.is_empty() && term::width(&line) + 3 + term::width(part) > width {
            let _ = writeln!(out, "{line}");
            line = "  ".into();
        }
        if !line.trim_start().is_empty() {
            line.push_str(" · ");
        }
        line.push_str(part);
    }
    let _ = writeln!(out, "{}", term::fit(&line, width));
}

/// Prose wrapped between words to `width`, continuations indented by two.
fn prose(out: &mut String, s: &str, width: usize) {
    for l in term::wrap(s, width, 2) {
        let _ = writeln!(out, "{l}");
    }
}

/// Renders the summary. Every line fits the width; text is made plain ASCII in a non-UTF-8
/// locale; colour (red for failures) only when `style` says so.
pub fn render(r: &Report, o: &Options) -> String {
    let mut out = String::new();
    let wide = o.width.is_none();
    let width = o.width.unwrap_or(usize::MAX / 4).max(16);
    header(&mut out, r, width, wide);
    out.push('\n');
    sections::failed(&mut out, r, width, o);
    if o.top == 0 || r.processes.len() <= o.top {
        rows::tree(&mut out, r, width, wide, o.verbose);
    } else {
        groups::grouped(&mut out, r, width, wide, o);
        sections::tops(&mut out, r, width, wide);
        sections::programs(&mut out, r, width, o.top);
    }
    sections::critical_path(&mut out, r, width, wide);
    if o.charts {
        let w = o.width.or(o.chart_width).unwrap_or(120).max(16);
        charts::both(&mut out, r, w, o.style);
    }
    out.push('\n');
    prose(&mut out, &completeness(r), width);
    prose(&mut out, &coverage(r, o.verbose), width);
    if o.verbose {
        prose(&mut out, &r.spacetime.line(), width);
    }
    out.push_str(&recap(r, width, o.style));
    out.push('\n');
    term::localize(&term::fit_lines(&out, width)).into_owned()
}

/// The command, the totals, the peaks, the largest process.
fn header(out: &mut String, r: &Report, width: usize, wide: bool) {
    let command = term::join(r.command.iter());
    let _ = writeln!(
        out,
        "spacetime: {}",
        term::fit_command(&command, width - 11)
    );
    let t = &r.totals;
    let mut totals = vec![
        status(r),
        format!("wall {}", duration_ns(r.wall_ns)),
        format!("user {}", duration_ns(r.user_ns)),
        format!("sys {}", duration_ns(r.sys_ns)),
    ];
    if let Some(cores) = r.analysis.parallelism(r.wall_ns) {
        totals.push(format!("{cores:.2} cores on average"));
    }
    totals.push(format!(
        "{}, {}, {}",
        count(t.processes, "process", "processes"),
        count(t.threads, "thread", "threads"),
        count(t.execs, "exec", "execs")
    ));
    flow(out, &totals, width);
    if let (Some(peak), Some(at)) = (t.tree_peak_rss_bytes, t.tree_peak_at_ns) {
        // Read and stored apart where the kernel lacks fetch atomics: said with the figure.
        let approximate = r
            .kernel
            .mechanisms
            .iter()
            .any(|m| m.starts_with(crate::kernel::loader::NO_FETCH_ATOMICS));
        let mut parts = vec![format!(
            "tree-wide peak RSS {}{} at {}",
            bytes(peak),
            if approximate { " (approximate)" } else { "" },
            duration_ns(at)
        )];
        match t.max_pss {
            MaxPssFigure::Trusted(m) => parts.push(format!("max PSS {}", bytes(m.bytes))),
            MaxPssFigure::Uncertain(m) => parts.push(crate::report::max_pss_withheld_short(&m)),
            MaxPssFigure::NotSampled => {}
        }
        flow(out, &parts, width);
    }
    if let Some(c) = &r.cgroup_peak {
        prose(out, &cgroup_peak_line(c), width);
    }
    let predate = r
        .processes
        .iter()
        .filter(|p| p.images().any(|i| i.read_at_attach()))
        .count() as u64;
    if predate > 0 {
        let over_time = if r.kernel.attach_memory_followed == Some(true) {
            "their RSS followed from the attach on"
        } else {
            "their memory over time not followed"
        };
        prose(out, &format!("attached: {} predate the attach (exe and argv read from /proc then; peaks exact at exit, from the kernel's high-water mark; {over_time}); times count from the attach", count(predate, "process", "processes")), width);
    }
    if let Some(p) = largest(r) {
        let head = format!("peak RSS {} (pid {}: ", bytes(t.peak_rss_bytes), p.pid());
        let room = width.saturating_sub(term::width(&head) + 1).max(8);
        let who = name(r, p, room, wide);
        let _ = writeln!(out, "{head}{who})");
    }
}

/// CMD's status: `exit 0`, `exit SIGKILL`, `still running`.
fn status(r: &Report) -> String {
    r.exit.as_ref().map_or("still running".into(), |e| {
        format!("exit {}", exit_text(Some(e), super::State::Exited))
    })
}

/// The process with the largest peak RSS.
fn largest<'r, 'a>(r: &'r Report<'a>) -> Option<&'r ProcessReport<'a>> {
    let pid = r.totals.peak_rss_pid?;
    r.processes
        .iter()
        .find(|p| p.pid() == pid && p.peak_rss_bytes() == r.totals.peak_rss_bytes)
        .or_else(|| r.processes.iter().find(|p| p.pid() == pid))
}

/// How a row names a process in `width` columns: its label, or with `-w` its whole command
/// line.
fn name(r: &Report, p: &ProcessReport, width: usize, wide: bool) -> String {
    if wide {
        process_command(p, width)
    } else {
        let label = label_text(p, &r.analysis.labels[p.pos()], Spelling::Terminal);
        term::fit(&label, width)
    }
}

/// The last line: status, wall, CPU, tree peak, the largest process, failures. The largest
/// process's name takes what room is left; on a narrow terminal the figures go from the
/// right of the middle first.
fn recap(r: &Report, width: usize, style: Style) -> String {
    let failed = r.analysis.failures.len() as u64;
    let failures = format!("{failed} failed");
    let mut parts: Vec<String> = vec![
        status(r),
        format!("wall {}", duration_ns(r.wall_ns)),
        format!("CPU {}", duration_ns(r.user_ns + r.sys_ns)),
    ];
    if let Some(t) = r.totals.tree_peak_rss_bytes {
        parts.push(format!("tree {}", bytes(t)));
    }
    let fixed = |parts: &[String]| {
        parts.iter().map(|p| term::width(p)).sum::<usize>()
            + 3 * parts.len()
            + term::width(&failures)
    };
    if let Some(p) = largest(r) {
        let size = bytes(r.totals.peak_rss_bytes);
        let prog = p
            .naming_image()
            .map(|i| term::escape(crate::model::labels::basename(i.program())))
            .unwrap_or_default();
        let room = width.saturating_sub(fixed(&parts) + term::width(&size) + 4);
        parts.push(match room {
            r if r >= 3 && !prog.is_empty() => format!("{} {size}", term::fit(&prog, r)),
            _ => format!("largest {size}"),
        });
    }
    while parts.len() > 1 && fixed(&parts) > width {
        parts.remove(parts.len() - 1);
    }
    let line = format!("{} · {failures}", parts.join(" · "));
    let line = term::fit(&line, width);
    if failed > 0 {
        red(&line, style)
    } else {
        line
    }
}

/// `--cgroup-peak`: the figure and what it counts, against what the tree-wide peak counts.
fn cgroup_peak_line(c: &super::CgroupPeakReport) -> String {
    let mut s = match (c.peak_bytes, c.cgroup_version, c.source.as_deref()) {
        (Some(b), Some(v), Some(file)) => format!(
            "cgroup peak {} (cgroup v{v} {file}: every page once, page cache and kernel memory included); the tree-wide peak RSS sums each process's resident pages, so a page shared after fork counts once per process and unmapped page cache not at all",
            bytes(b)
        ),
        _ => format!(
            "cgroup peak: none ({})",
            c.unavailable_reason.as_deref().unwrap_or("unavailable")
        ),
    };
    if c.moved_out > 0 {
        s.push_str(&format!(
            "; {} still running moved back to spacetime's own cgroup when the run's cgroup was removed",
            count(c.moved_out, "process", "processes")
        ));
    }
    s
}

/// The taskstats cross-check in one line.
fn coverage(r: &Report, verbose: bool) -> String {
    let t = &r.taskstats;
    if !t.available {
        return format!(
            "coverage: taskstats unavailable ({}); exits not cross-checked",
            t.unavailable_reason.as_deref().unwrap_or("unknown reason")
        );
    }
    let c = &t.coverage;
    let exited = r.processes.iter().filter(|p| p.end_ns().is_some()).count();
    let mut s = format!(
        "coverage: {}/{exited} exits confirmed by taskstats, {} lost",
        c.matched, r.lost_events
    );
    if c.bpf_only > 0 {
        let _ = write!(s, ", {} seen only by BPF", c.bpf_only);
    }
    if c.taskstats_only > 0 {
        let _ = write!(s, ", {} seen only by taskstats", c.taskstats_only);
    }
    if c.enobufs > 0 {
        let _ = write!(
            s,
            ", taskstats dropped records {} times (ENOBUFS: raise --taskstats-buffer)",
            c.enobufs
        );
    }
    if verbose && c.matched > 0 {
        let _ = write!(
            s,
            "; peaks agree with taskstats to {} KiB (the exact ones differ by up to {} KiB: the kernel's count lags its per-CPU deltas)",
            c.max_peak_diff_kib, c.max_exact_diff_kib
        );
    }
    s
}

fn completeness(r: &Report) -> String {
    let c = &r.kernel.counters;
    let inexact = r
        .processes
        .iter()
        .flat_map(|p| p.images())
        .filter(|i| i.peak_rss_bytes().is_some() && !i.exact())
        .count();
    let mut s = if let Some(why) = &r.kernel.agent_gone {
        format!(
            "INCOMPLETE: the agent went away ({}): {} lost with it; figures below cover what arrived",
            crate::util::term::escape(why.as_bytes()),
            match c.agent_gone {
                0 => "its end figures".to_string(),
                n => format!(
                    "{} (the ends of {n} processes and all after)",
                    count(r.lost_events, "event", "events")
                ),
            }
        )
    } else if r.lost_events == 0 {
        "complete: 0 events lost".to_string()
    } else {
        let mut limit = match c.session_limit {
            0 => String::new(),
            n => format!(", {n} over the session's process limit"),
        };
        if c.agent_queue_full > 0 {
            let _ = write!(
                limit,
                ", {} dropped by the agent's queue for this client (it read too slowly)",
                c.agent_queue_full
            );
        }
        format!(
            "INCOMPLETE: {} lost ({} ring buffer full, {} tracking map full{limit}); figures below cover what arrived",
            count(r.lost_events, "event", "events"),
            c.ringbuf_lost,
            c.track_full
        )
    };
    if r.kernel.decode_errors > 0 || r.kernel.args_gaps > 0 {
        let _ = write!(
            s,
            ", {} undecodable records, {} argv gaps",
            r.kernel.decode_errors, r.kernel.args_gaps
        );
    }
    if r.kernel.figures_out_of_range > 0 {
        let n = r.kernel.figures_out_of_range;
        let _ = write!(s, ", {n} memory figures too large to keep (shown unknown)");
    }
    if c.read_failures > 0 {
        let _ = write!(s, ", {} kernel reads failed", c.read_failures);
    }
    if c.recursion_misses > 0 {
        let _ = write!(s, ", {} kernel program runs skipped", c.recursion_misses);
    }
    if inexact > 0 {
        let _ = write!(s, ", {inexact} image peaks approximate");
    }
    if r.totals.still_running > 0 {
        let n = r.totals.still_running;
        let _ = write!(s, ", {} still running", count(n, "process", "processes"));
    }
    if r.totals.unknown > 0 {
        let n = count(r.totals.unknown, "process", "processes");
        let _ = write!(s, ", {n} ended unseen (exit records lost: status unknown)");
    }
    s
}

#[cfg(test)]
mod tests;
