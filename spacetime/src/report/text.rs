//! The human summary: totals, then the process tree with per-process peak RSS and runtime
//! (or, for a large tree, the heaviest processes and the programs that ran), then how complete
//! the figures are.

use std::{collections::HashMap, fmt::Write};

use super::{ImageReport, ProcessReport, Report};
use crate::{
    model::tree::ExitStatus,
    util::{
        signals, term,
        units::{bytes, duration_ns},
    },
};

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

/// Renders the summary for a terminal `width` columns wide (None: the wide form, uncut).
/// Every line fits the width; text is made plain ASCII in a non-UTF-8 locale.
pub fn render(
    r: &Report,
    width: Option<usize>,
    top: usize,
    verbose: bool,
    chart: Option<&str>,
) -> String {
    let mut out = String::new();
    let width = width.unwrap_or(usize::MAX / 4).max(16);
    let command = term::join(r.command.iter());
    let _ = writeln!(
        out,
        "spacetime: {}",
        term::fit_command(&command, width - 11)
    );
    let status = r.exit.as_ref().map_or("still running".into(), |e| {
        format!("exit {}", exit_text(Some(e), super::State::Exited))
    });
    let t = &r.totals;
    let totals = [
        status,
        format!("wall {}", duration_ns(r.wall_ns)),
        format!("user {}", duration_ns(r.user_ns)),
        format!("sys {}", duration_ns(r.sys_ns)),
        format!(
            "{}, {}, {}",
            count(t.processes, "process", "processes"),
            count(t.threads, "thread", "threads"),
            count(t.execs, "exec", "execs")
        ),
    ];
    flow(&mut out, &totals, width);
    if let (Some(peak), Some(at)) = (t.tree_peak_rss_bytes, t.tree_peak_at_ns) {
        let mut parts = vec![format!(
            "tree-wide peak RSS {} at {}",
            bytes(peak),
            duration_ns(at)
        )];
        match (t.max_pss_bytes, t.max_pss_estimated_bytes) {
            (Some(p), Some(e)) if e > p => parts.push(format!(
                "max PSS {} (sampled), {} (estimated from the exact RSS)",
                bytes(p),
                bytes(e)
            )),
            (Some(p), _) => parts.push(format!("max PSS {} (sampled)", bytes(p))),
            _ => {}
        }
        flow(&mut out, &parts, width);
    }
    if let Some(c) = &r.cgroup_peak {
        prose(&mut out, &cgroup_peak_line(c), width);
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
        prose(&mut out, &format!("attached: {} predate the attach (exe and argv read from /proc then; peaks exact at exit, from the kernel's high-water mark; {over_time}); times count from the attach", count(predate, "process", "processes")), width);
    }
    if let Some(pid) = t.peak_rss_pid {
        let head = format!("peak RSS {} (pid {pid}: ", bytes(t.peak_rss_bytes));
        let room = width.saturating_sub(term::width(&head) + 1).max(8);
        let who = r
            .processes
            .iter()
            .find(|p| p.pid() == pid)
            .map(|p| process_command(p, room))
            .unwrap_or_default();
        let _ = writeln!(out, "{head}{who})");
    }
    out.push('\n');
    if top == 0 || r.processes.len() <= top {
        render_tree(&mut out, r, width, verbose);
    } else {
        render_heaviest(&mut out, r, width, top);
        render_programs(&mut out, r, width, top);
    }
    if let Some(c) = chart {
        out.push('\n');
        out.push_str(c);
        if !c.ends_with('\n') {
            out.push('\n');
        }
    }
    out.push('\n');
    prose(&mut out, &completeness(r), width);
    prose(&mut out, &coverage(r, verbose), width);
    if verbose {
        prose(&mut out, &r.spacetime.line(), width);
    }
    term::localize(&term::fit_lines(&out, width)).into_owned()
}

/// `--cgroup-peak`: the figure and what it counts, against what the tree-wide peak counts.
fn cgroup_peak_line(c: &super::CgroupPeakReport) -> String {
    let mut s = match (c.peak_bytes, c.cgroup_version, c.source) {
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
            t.unavailable_reason
                .as_ref()
                .map_or_else(|| "unknown reason".to_string(), |u| u.to_string())
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

/// A process's taskstats figures on one line (-v).
fn taskstats_line(p: &ProcessReport, delays: bool) -> Option<String> {
    let t = p.taskstats()?;
    let mut s = format!(
        "user {} sys {} · faults {} minor {} major · switches {} voluntary {} involuntary · read {} write {} ({} / {} syscalls)",
        duration_ns(t.utime_us * 1000),
        duration_ns(t.stime_us * 1000),
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

/// Which columns a row has: narrow terminals drop TIME, then EXIT (then shown before the
/// command when not 0), so the command keeps room.
#[derive(Clone, Copy)]
struct Layout {
    time: bool,
    exit: bool,
}

impl Layout {
    fn for_width(width: usize) -> Layout {
        Layout {
            time: width >= 70,
            exit: width >= 54,
        }
    }

    fn header(self) -> String {
        let mut s = String::from("    PID  PEAK RSS  ");
        if self.time {
            s.push_str("    TIME  ");
        }
        if self.exit {
            s.push_str("EXIT      ");
        }
        s + "COMMAND"
    }

    /// The figures' columns (or blanks, for a detail line under a row).
    fn figures(self, p: Option<(&ProcessReport, &Report)>) -> String {
        let f = |g: &dyn Fn(&ProcessReport, &Report) -> String| {
            p.map_or(String::new(), |(p, r)| g(p, r))
        };
        let mut s = format!(
            "{:>7}  {:>8}  ",
            f(&|p, _| p.pid().to_string()),
            f(&|p, _| match p.peak_rss_unknown() {
                None => bytes(p.peak_rss_bytes()),
                Some(_) => "?".into(),
            })
        );
        if self.time {
            let t = f(&|p, r| duration_ns(runtime(p, r.wall_ns)));
            let _ = write!(s, "{t:>8}  ");
        }
        if self.exit {
            let e = f(&|p, _| exit_text(p.exit().as_ref(), p.state()));
            let _ = write!(s, "{e:<8}  ");
        }
        s
    }
}

/// A tree indent too deep for the room left keeps its innermost levels.
fn clamp_indent(indent: &str, room: usize) -> String {
    let n = indent.chars().count();
    if n <= room / 2 {
        return indent.to_string();
    }
    indent.chars().skip(n - room / 2).collect()
}

fn row(p: &ProcessReport, r: &Report, indent: &str, width: usize) -> String {
    let lay = Layout::for_width(width);
    let mut s = lay.figures(Some((p, r)));
    let room = width.saturating_sub(term::width(&s));
    s.push_str(&clamp_indent(indent, room));
    if !lay.exit {
        let e = exit_text(p.exit().as_ref(), p.state());
        if e != "0" {
            let _ = write!(s, "[{e}] ");
        }
    }
    let left = width.saturating_sub(term::width(&s)).max(8);
    s + &process_command(p, left)
}

/// The head of a detail line under a row: blank figures, the tree's indent, two spaces.
fn detail_head(indent: &str, width: usize) -> String {
    let lay = Layout::for_width(width);
    let mut head = lay.figures(None);
    let room = width.saturating_sub(term::width(&head));
    head.push_str(&clamp_indent(indent, room));
    head.push_str("  ");
    head
}

/// A detail line under a row: its head, then `text` wrapped to what is left.
fn detail(out: &mut String, indent: &str, text: &str, width: usize) {
    let head = detail_head(indent, width);
    let left = width.saturating_sub(term::width(&head)).max(8);
    for l in term::wrap(text, left, 2) {
        let _ = writeln!(out, "{head}{l}");
    }
}

fn render_tree(out: &mut String, r: &Report, width: usize, verbose: bool) {
    let _ = writeln!(out, "{}", Layout::for_width(width).header());
    let pids: HashMap<u32, usize> = r
        .processes
        .iter()
        .enumerate()
        .map(|(i, p)| (p.pid(), i))
        .collect();
    let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut roots = Vec::new();
    for (i, p) in r.processes.iter().enumerate() {
        // Pids may be reused: a parent must have started before its child.
        match pids
            .get(&p.ppid())
            .filter(|&&pi| pi != i && r.processes[pi].start_ns() <= p.start_ns())
        {
            Some(&pi) => children.entry(pi).or_default().push(i),
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
        let _ = writeln!(out, "{}", row(p, r, &branch, width));
        let child_prefix = if top {
            String::new()
        } else {
            format!("{prefix}{}", if last { "   " } else { "│  " })
        };
        if verbose {
            if let Some(line) = taskstats_line(p, r.taskstats.delayacct) {
                detail(out, &child_prefix, &line, width);
            }
        }
        if verbose && p.images().len() > 1 {
            for img in p.images() {
                let peak = img.peak_rss_bytes().map_or("-".into(), bytes);
                let kind = if img.inherited() { "fork" } else { "exec" };
                let mut line = detail_head(&child_prefix, width);
                let _ = write!(line, "{kind} (peak {peak}): ");
                let room = width.saturating_sub(term::width(&line)).max(12);
                let _ = writeln!(out, "{line}{}", command_line(&img, room));
            }
        }
        if let Some(kids) = children.get(&i) {
            for (n, &k) in kids.iter().enumerate().rev() {
                stack.push((k, child_prefix.clone(), n + 1 == kids.len(), false));
            }
        }
    }
}

fn render_heaviest(out: &mut String, r: &Report, width: usize, top: usize) {
    let mut order: Vec<(u64, &ProcessReport)> = r
        .processes
        .iter()
        .map(|p| (p.peak_rss_bytes(), p))
        .collect();
    order.sort_by(|(a_peak, a), (b_peak, b)| {
        b_peak.cmp(a_peak).then(a.start_ns().cmp(&b.start_ns()))
    });
    let head = format!(
        "{}; the {top} with the highest peak RSS:",
        count(r.processes.len() as u64, "process", "processes")
    );
    prose(out, &head, width);
    let _ = writeln!(out, "{}", Layout::for_width(width).header());
    for (_, p) in order.into_iter().take(top) {
        let _ = writeln!(out, "{}", row(p, r, "", width));
    }
}

fn render_programs(out: &mut String, r: &Report, width: usize, top: usize) {
    struct Prog {
        runs: u64,
        peak: u64,
        cpu_ns: u64,
    }
    let mut progs: HashMap<&[u8], Prog> = HashMap::new();
    for p in &r.processes {
        let own: Vec<ImageReport> = p.images().filter(|i| !i.inherited()).collect();
        for img in &own {
            let e = progs.entry(img.exe()).or_insert(Prog {
                runs: 0,
                peak: 0,
                cpu_ns: 0,
            });
            e.runs += 1;
            e.peak = e.peak.max(img.peak_rss_bytes().unwrap_or(0));
        }
        if let Some(last) = own.last() {
            if let Some(e) = progs.get_mut(last.exe()) {
                e.cpu_ns += p.user_ns() + p.sys_ns();
            }
        }
    }
    let mut list: Vec<_> = progs.into_iter().collect();
    list.sort_by(|a, b| b.1.peak.cmp(&a.1.peak).then(b.1.runs.cmp(&a.1.runs)));
    let _ = writeln!(out, "\nprograms run ({}), by peak RSS:", list.len());
    let _ = writeln!(out, "   RUNS  PEAK RSS       CPU  PROGRAM");
    for (exe, p) in list.into_iter().take(top) {
        let name = term::fit_path(&term::escape(exe), width.saturating_sub(30).max(8));
        let _ = writeln!(
            out,
            "{:>7}  {:>8}  {:>8}  {name}",
            p.runs,
            bytes(p.peak),
            duration_ns(p.cpu_ns)
        );
    }
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
                n => format!("{} (the ends of {n} processes and all after)", count(r.lost_events, "event", "events")),
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
#[path = "text_tests.rs"]
mod tests;
