//! The human summary: totals, then the process tree with per-process peak RSS and runtime
//! (or, for a large tree, the heaviest processes and the programs that ran), then how complete
//! the figures are.

use std::{collections::HashMap, fmt::Write};

use super::{ImageReport, ProcessReport, Report};
use crate::{
    tree::ExitStatus,
    units::{bytes, duration_ns},
};

fn exit_text(e: Option<&super::Exit>) -> String {
    match e.map(|e| e.0) {
        None => "running".into(),
        Some(ExitStatus::Code(c)) => c.to_string(),
        Some(ExitStatus::Signal {
            signal,
            core_dumped,
        }) => {
            format!(
                "{}{}",
                signal_name(signal),
                if core_dumped { " (core)" } else { "" }
            )
        }
    }
}

fn signal_name(sig: i32) -> String {
    let name = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    name.into()
}

/// argv as a shell would show it, cut to `width` characters.
fn command_line(img: &ImageReport, width: usize) -> String {
    let mut s = if img.argv().is_empty() {
        img.exe().to_string()
    } else {
        img.argv().join(" ")
    };
    if s.chars().count() > width {
        s = s.chars().take(width.saturating_sub(1)).collect::<String>() + "…";
    }
    s
}

fn process_command(p: &ProcessReport, width: usize) -> String {
    // The inherited image repeats the parent; show what the process itself ran.
    let own: Vec<ImageReport> = p.images().filter(|i| !i.inherited()).collect();
    match own.as_slice() {
        [] => p
            .images()
            .next()
            .map(|i| format!("(fork) {}", command_line(&i, width)))
            .unwrap_or_default(),
        [one] => command_line(one, width),
        [.., last] => format!("[{} execs] {}", own.len(), command_line(last, width)),
    }
}

fn runtime(p: &ProcessReport, wall_ns: u64) -> u64 {
    p.end_ns().unwrap_or(wall_ns).saturating_sub(p.start_ns())
}

/// Renders the summary for a terminal `width` columns wide.
pub fn render(r: &Report, width: usize, top: usize, verbose: bool, chart: Option<&str>) -> String {
    let mut out = String::new();
    let width = width.max(60);
    let _ = writeln!(out, "spacetime: {}", r.command.join(" "));
    let status = r.exit.as_ref().map_or("still running".into(), |e| {
        format!("exit {}", exit_text(Some(e)))
    });
    let _ = writeln!(
        out,
        "{status} · wall {} · user {} · sys {} · {} processes, {} threads, {} execs",
        duration_ns(r.wall_ns),
        duration_ns(r.user_ns),
        duration_ns(r.sys_ns),
        r.totals.processes,
        r.totals.threads,
        r.totals.execs
    );
    if let (Some(peak), Some(at)) = (r.totals.tree_peak_rss_bytes, r.totals.tree_peak_at_ns) {
        let pss = match (r.totals.max_pss_bytes, r.totals.max_pss_estimated_bytes) {
            (Some(p), Some(e)) if e > p => format!(
                " · max PSS {} (sampled), {} (estimated from the exact RSS)",
                bytes(p),
                bytes(e)
            ),
            (Some(p), _) => format!(" · max PSS {} (sampled)", bytes(p)),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "tree-wide peak RSS {} at {}{pss}",
            bytes(peak),
            duration_ns(at)
        );
    }
    if let Some(pid) = r.totals.peak_rss_pid {
        let who = r
            .processes
            .iter()
            .find(|p| p.pid() == pid)
            .map(|p| process_command(p, 40))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "peak RSS {} (pid {pid}: {who})",
            bytes(r.totals.peak_rss_bytes)
        );
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
    let _ = writeln!(out, "{}", completeness(r));
    let _ = writeln!(out, "{}", coverage(r, verbose));
    if verbose {
        let _ = writeln!(out, "{}", r.spacetime.line());
    }
    out
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

const HEADER: &str = "    PID  PEAK RSS      TIME  EXIT      COMMAND";

fn row(p: &ProcessReport, r: &Report, indent: &str, width: usize) -> String {
    let fixed = 44 + indent.chars().count();
    format!(
        "{:>7}  {:>8}  {:>8}  {:<8}  {indent}{}",
        p.pid(),
        match p.peak_rss_unknown() {
            None => bytes(p.peak_rss_bytes()),
            Some(_) => "?".into(),
        },
        duration_ns(runtime(p, r.wall_ns)),
        exit_text(p.exit().as_ref()),
        process_command(p, width.saturating_sub(fixed).max(20))
    )
}

fn render_tree(out: &mut String, r: &Report, width: usize, verbose: bool) {
    let _ = writeln!(out, "{HEADER}");
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
                let _ = writeln!(
                    out,
                    "{:>7}  {:>8}  {:>8}  {:<8}  {child_prefix}  {line}",
                    "", "", "", ""
                );
            }
        }
        if verbose && p.images().len() > 1 {
            for img in p.images() {
                let peak = img.peak_rss_bytes().map_or("-".into(), bytes);
                let kind = if img.inherited() { "fork" } else { "exec" };
                let _ = writeln!(
                    out,
                    "{:>7}  {:>8}  {:>8}  {:<8}  {child_prefix}  {kind}: {}",
                    "",
                    peak,
                    "",
                    "",
                    command_line(&img, width.saturating_sub(60).max(20))
                );
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
    let _ = writeln!(
        out,
        "{} processes; the {top} with the highest peak RSS:",
        r.processes.len()
    );
    let _ = writeln!(out, "{HEADER}");
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
    let mut progs: HashMap<&str, Prog> = HashMap::new();
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
        let mut name = exe.to_string();
        if name.chars().count() > width.saturating_sub(30) {
            name = format!(
                "…{}",
                &name[name.len().saturating_sub(width.saturating_sub(31))..]
            );
        }
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
    let mut s = if r.lost_events == 0 {
        "complete: 0 events lost".to_string()
    } else {
        format!(
            "INCOMPLETE: {} events lost ({} ring buffer full, {} tracking map full); figures below cover what arrived",
            r.lost_events, c.ringbuf_lost, c.track_full
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
    if inexact > 0 {
        let _ = write!(s, ", {inexact} image peaks approximate");
    }
    if r.totals.still_running > 0 {
        let _ = write!(s, ", {} processes still running", r.totals.still_running);
    }
    s
}
