//! `spacetime watch`: every process exit on the system, with its peak memory, argv and
//! ancestry, as a table or JSON lines, optionally served as OpenMetrics.
//!
//! The kernel programs run in [`mode::SYSTEM`] and report every fork, exec, image end and exit.
//! [`crate::model::table`] keeps the live processes (seeded from /proc by [`procfs`]) so that an
//! exit record, which carries the figures, can be printed with the exe and argv of the image
//! that ended ([`crate::model::exit_view`]), its parent chain and thread count. [`filter`]
//! selects, [`output`] writes, [`crate::report::metrics`] counts and renders for Prometheus,
//! [`crate::run::metrics_http`] answers the scrapes, [`crate::model::matcher`] matches every
//! exit against the kernel's taskstats records.
//!
//! Nothing is read from /proc per exit and nothing is allocated per exit beyond formatting: the
//! entry moves out of the table, the line is written from borrowed data.

pub(crate) mod args;
mod cgroup;
mod exec;
mod filter;
mod kernel;
mod output;
mod procfs;
mod reap;
mod summary;
mod watcher;

use std::{io, time::Instant};

use anyhow::Context;
use spacetime_common::mode;

pub use args::WatchArgs;

use crate::{
    kernel::{
        loader::{LoadOptions, Probes},
        source::{KernelSource, TaskstatsFeed},
        taskstats::Unavailable,
    },
    model::table::{Table, TableOptions},
    run::outputs::Dest,
    util::exit_code::EXIT_OWN_FAILURE,
};
use cgroup::Cgroups;
use filter::Filter;
use output::Output;
use watcher::{Io, Watch};

/// Receive buffer for taskstats records (the kernel doubles it): room for about 25 000
/// records, a few seconds of the fastest exit rate, while the event loop drains every 50 ms.
const TASKSTATS_RCVBUF: usize = 16 << 20;

/// Entry point of the subcommand: returns the process exit status.
/// Status when writing the output failed (full disk, I/O error): the summary is still
/// printed, but a script must not take the watch for complete (as `sysexits.h`'s EX_IOERR).
pub const EXIT_OUTPUT_FAILED: i32 = 74;

pub fn main(args: WatchArgs, verbose: u8) -> i32 {
    match run(args, verbose) {
        Ok(Stop::OutputFailed) => EXIT_OUTPUT_FAILED,
        Ok(Stop::AgentGone) => crate::util::exit_code::EXIT_AGENT_GONE,
        Ok(_) => 0,
        Err(e) => {
            crate::errln!("spacetime: {e:#}");
            EXIT_OWN_FAILURE
        }
    }
}

/// Why the watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Signal(i32),
    Duration,
    Count,
    /// The reader of the output went away (EPIPE).
    OutputClosed,
    /// Writing the output failed otherwise (ENOSPC, EIO…).
    OutputFailed,
    /// The agent whose programs the watch read went away: nothing more can come.
    AgentGone,
}

impl Stop {
    /// How `--summary-json` names it.
    fn name(self) -> String {
        match self {
            Stop::Signal(libc::SIGINT) => "SIGINT".into(),
            Stop::Signal(libc::SIGTERM) => "SIGTERM".into(),
            Stop::Signal(libc::SIGHUP) => "SIGHUP".into(),
            Stop::Signal(n) => format!("signal {n}"),
            Stop::Duration => "duration".into(),
            Stop::Count => "count".into(),
            Stop::OutputClosed => "output_closed".into(),
            Stop::OutputFailed => "output_failed".into(),
            Stop::AgentGone => "agent_gone".into(),
        }
    }
}

/// Writes the summary object and a newline to `dest`.
fn write_summary_json(dest: &mut Dest, summary: &summary::Json) -> io::Result<()> {
    let mut text = serde_json::to_vec(summary)?;
    text.push(b'\n');
    dest.write_with(|w| w.write_all(&text))
}

/// Loads the kernel programs with the kernel's part of the filter: `--uid` and `--cgroup` as
/// read-only globals, `--pid-tree` as the tree mode, its root tracked before /proc is read
/// (a child forked from now on is followed by the kernel, one forked earlier is in /proc).
fn load_probes(args: &WatchArgs, filter: &Filter) -> anyhow::Result<Probes> {
    let mut notes = Vec::new();
    let mut kernel_filter = filter.kernel(&mut notes);
    let tree = filter.pid_tree().is_some();
    if tree {
        kernel_filter.flags |= spacetime_common::filter_flags::COUNT_UNTRACKED;
    }
    let mut probes = Probes::load(&LoadOptions {
        mode: if tree { mode::TREE } else { mode::SYSTEM },
        ring_buffer_bytes: args.ring_buffer,
        max_tracked: args.max_processes.clamp(1, 65536) as u32,
        filter: kernel_filter,
        cgroup_names: true,
        ..LoadOptions::default()
    })?;
    if let Some(root) = filter.pid_tree() {
        probes.track(root).context("--pid-tree")?;
    }
    for note in &notes {
        crate::errln!("spacetime: {note}");
    }
    Ok(probes)
}

fn run(args: WatchArgs, verbose: u8) -> anyhow::Result<Stop> {
    let filter = Filter::from_args(&args)?;
    let (mut out, metrics_listener, summary_file) = open_ends(&args)?;
    let sigfd = crate::util::signals::signal_fd(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
        .context("setting up signal handling")?;
    let mut kernel = kernel::open(&args, &filter)?;
    // Every program is attached from here on (each was attached in turn while loading).
    let attached_ns = crate::util::clock::monotonic_ns();
    // Through the agent, its listener's records come with the rest.
    let taskstats_unavailable = match kernel.capabilities().taskstats.clone() {
        TaskstatsFeed::Agent if args.no_taskstats => Some(Unavailable::Disabled),
        TaskstatsFeed::Listener | TaskstatsFeed::Agent => None,
        TaskstatsFeed::Unavailable(why) => {
            if matches!(why, Unavailable::Open(_) | Unavailable::OtherNetNamespace) {
                crate::errln!("spacetime: no taskstats cross-check: {why}");
            }
            Some(why)
        }
    };
    let taskstats_on = taskstats_unavailable.is_none();
    // Exits before the listener was registered have no taskstats record to match.
    let taskstats_since_ns = crate::util::clock::monotonic_ns();
    if verbose > 0 {
        kernel.capabilities().tell();
    }
    let (table, seeded) = seeded_table(&args, &filter, &mut *kernel, attached_ns)?;
    out.ancestry = args.ancestry;
    let cgroups = Cgroups::open();
    if verbose > 0 && !cgroups.available() {
        crate::errln!("spacetime: no cgroup2 mount: cgroups are shown as ids");
    }
    out.set_wall_offset(crate::util::clock::realtime_offset_ns());
    out.set_identity(
        crate::report::origin::Origin::now(0).host,
        crate::model::identity::boot_id(),
    );
    // What is watched goes before the table, so the header is the last line before the rows.
    let watching = format!(
        "spacetime: watching {}; {seeded} processes running; Ctrl-C to stop",
        watched(&filter, &*kernel, args.threads)
    );
    crate::errln!("{watching}");
    // An output already closed stops the watch at its first exit, cleanly, with the summary
    // saying so: not an error before it starts.
    let _ = out.header().and_then(|()| out.flush());

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let metrics_listener = serve_metrics(&rt, metrics_listener)?;
    // Every later exit is seen and the metrics are served: ready, for a service manager that
    // asked (systemd's Type=notify).
    if let Err(e) = crate::util::notify::ready(&watching) {
        crate::errln!("spacetime: telling the service manager it is ready: {e}");
    }
    let mut w = Watch::new(
        &args,
        table,
        filter,
        out,
        cgroups,
        taskstats_on,
        taskstats_since_ns,
        kernel.capabilities().cpu_at_release,
    );
    let started = Instant::now();
    let io = Io {
        sigfd,
        metrics: metrics_listener,
        duration: args.duration,
    };
    let stop = rt.block_on(w.consume(io, &mut *kernel))?;
    let elapsed = started.elapsed();
    finish(
        &mut w,
        stop,
        elapsed,
        &*kernel,
        taskstats_unavailable,
        summary_file,
        &args,
        verbose,
    )?;
    Ok(stop)
}

/// What is watched, in words: the filter's, narrowed to the user's own uid when the agent
/// shows this user nothing else.
fn watched(filter: &Filter, kernel: &dyn KernelSource, threads: bool) -> String {
    const WHY: &str = "through the agent, a user who is not root sees only their own processes";
    match kernel.capabilities().sees_only_uid {
        None => filter.describe(threads),
        Some(u) if filter.is_empty() => {
            let threads = if threads { ", threads included" } else { "" };
            format!("every exit of uid {u}{threads} ({WHY})")
        }
        Some(u) => format!("{}, of uid {u} only ({WHY})", filter.describe(threads)),
    }
}

/// The live process table, seeded from /proc; and how many processes it found running.
fn seeded_table(
    args: &WatchArgs,
    filter: &Filter,
    kernel: &mut dyn KernelSource,
    attached_ns: u64,
) -> anyhow::Result<(Table, usize)> {
    let mut table = Table::new(TableOptions {
        max_processes: args.max_processes.max(1),
        ancestry: args.ancestry,
        images: args.images,
        threads: args.threads,
    });
    table.set_attached(attached_ns);
    table.set_argv_budget(args.argv_budget);
    // Inside a PID namespace with its own /proc, its pids are not the kernel's: seeding from
    // it would name strangers.
    // Through the agent, the client shares its PID namespace (the agent refuses others).
    let kernel_pids = kernel.capabilities().proc_has_kernel_pids;
    let seeded = if kernel_pids {
        // Another user's argv is not read here either when the kernel filters by uid.
        let want_argv = |pid| {
            !filter.kernel_uids()
                || procfs::real_uid(pid).is_none_or(|u| !filter.uid_filtered_out(u))
        };
        procfs::seed_with(
            &mut table,
            filter.pid_tree(),
            args.max_processes,
            &want_argv,
        )
        .context("reading /proc")?
    } else if let Some(pid) = filter.pid_tree() {
        anyhow::bail!("--pid-tree {pid}: spacetime watch runs inside a PID namespace whose /proc numbers processes otherwise than the kernel does, so it cannot tell which process that is");
    } else {
        log::debug!("/proc numbers this PID namespace's pids: running processes are not seeded");
        0
    };
    if filter.pid_tree().is_some() {
        // The kernel will send nothing about the others (--pid-tree loads its own programs).
        for pid in table.keep_tree_only() {
            // A process already gone is not an error: its exit was before the watch.
            let _ = kernel.track(pid);
        }
    }
    // The argv /proc gave was charged while seeding; what remains over is cut now.
    table.enforce_argv_budget();
    Ok((table, seeded))
}

/// The metrics endpoint, served from the runtime `rt`.
fn serve_metrics(
    rt: &tokio::runtime::Runtime,
    listener: Option<std::net::TcpListener>,
) -> anyhow::Result<Option<watcher::MetricsListener>> {
    let Some(l) = listener else {
        return Ok(None);
    };
    let _guard = rt.enter();
    let l = tokio::net::TcpListener::from_std(l)?;
    crate::errln!("spacetime: metrics on http://{}/metrics", l.local_addr()?);
    Ok(Some(watcher::MetricsListener::new(l)))
}

/// What the summary says of the taskstats cross-check, when not just its figures.
fn coverage_note(w: &Watch, unavailable: Option<&Unavailable>) -> Option<String> {
    match &w.coverage {
        None => Some(match unavailable {
            Some(why) => format!("not checked ({why})"),
            None => "not checked".to_string(),
        }),
        // Registered, yet not one record while processes exited: they go elsewhere.
        Some(c) if c.version == 0 && w.metrics.seen_processes > 0 => {
            Some(format!("not checked ({})", Unavailable::NoRecords))
        }
        Some(c) if c.version > 0 && c.version < 12 => Some(format!(
            "{} matched (taskstats version {} cannot mark process ends: unmatched records \
             not counted)",
            w.metrics.matched, c.version
        )),
        Some(_) => None,
    }
}

/// The summary on stderr and in `--summary-json`, once the watch stopped.
#[allow(clippy::too_many_arguments)]
fn finish(
    w: &mut Watch,
    stop: Stop,
    elapsed: std::time::Duration,
    kernel: &dyn KernelSource,
    taskstats_unavailable: Option<Unavailable>,
    summary_file: Option<Dest>,
    args: &WatchArgs,
    verbose: u8,
) -> anyhow::Result<()> {
    if let Some(e) = w
        .out
        .flush()
        .err()
        .filter(|e| e.kind() != io::ErrorKind::BrokenPipe)
    {
        crate::errln!("spacetime: writing the output: {e}");
    }
    let coverage_note = coverage_note(w, taskstats_unavailable.as_ref());
    if stop == Stop::OutputClosed {
        crate::errln!("spacetime: stopped: the output was closed");
    } else if stop == Stop::AgentGone {
        crate::errln!(
            "spacetime: stopped: the agent went away ({}); exits after that were not seen (exit status {})",
            kernel.gone().unwrap_or_default(),
            crate::util::exit_code::EXIT_AGENT_GONE
        );
    } else if stop == Stop::OutputFailed {
        crate::errln!(
            "spacetime: stopped: writing the output failed (exit status {EXIT_OUTPUT_FAILED})"
        );
    } else if verbose > 0 {
        crate::errln!("spacetime: stopped: {stop:?}");
    }
    // Measured with the programs still attached: the figures cover the whole watch.
    let own_cost = crate::report::selfstats::OwnCost::of(kernel);
    let fin = summary::Final {
        elapsed,
        metrics: &w.metrics,
        peaks: &w.peaks,
        table: w.table.stats,
        filtered: !w.filter.is_empty(),
        taskstats_unavailable: taskstats_unavailable.map(|u| u.to_string()),
        coverage_note,
        agent_gone: kernel.gone(),
    };
    crate::util::term::err_raw(&summary::render(&fin));
    if verbose > 0 {
        crate::errln!("  {}", own_cost.line());
    }
    if let (Some(mut file), Some(path)) = (summary_file, &args.summary_json) {
        write_summary_json(&mut file, &summary::json(&fin, &stop.name(), &own_cost))
            .with_context(|| format!("--summary-json: writing {}", path.display()))?;
    }
    Ok(())
}

/// What the watch writes to and serves from, opened before anything is loaded so that a
/// path or address that cannot be used fails the watch before it starts.
fn open_ends(
    args: &WatchArgs,
) -> anyhow::Result<(Output, Option<std::net::TcpListener>, Option<Dest>)> {
    // `-`: standard output, as without -o.
    let path = args.output.as_deref().filter(|p| p.as_os_str() != "-");
    let out = Output::open(path, args.json, args.wide).with_context(|| {
        format!(
            "opening {}",
            args.output
                .as_ref()
                .map_or("stdout".into(), |p| p.display().to_string())
        )
    })?;
    let metrics_listener = match args.metrics {
        Some(addr) => {
            let l = std::net::TcpListener::bind(addr)
                .with_context(|| format!("--metrics: listening on {addr}"))?;
            l.set_nonblocking(true)?;
            Some(l)
        }
        None => None,
    };
    // Created now, so a path that cannot be written fails the watch before it starts.
    let summary_file = args
        .summary_json
        .as_deref()
        .map(|p| Dest::open(p, false, true))
        .transpose()
        .context("--summary-json")?;
    Ok((out, metrics_listener, summary_file))
}
