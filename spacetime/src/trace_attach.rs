//! `spacetime trace -p PID[,PID…]`: the trace's second way to start, attaching to running
//! processes instead of starting CMD. From the attach on everything is as for a started
//! command (the same loop, tree and report); what differs is how processes join (see
//! [`crate::attach`]), when the trace ends (every process ended, or Ctrl-C, which stops the
//! trace and not the processes), and where times start (the attach).

use std::io;

use super::{
    conclude, consume, open_and_load, open_taskstats, terminal_width, DelayAcct, Ending, Failure,
    LoopOptions, Sink, Sources, FORWARDED,
};
use crate::{
    attach::{self, AttachError, Attached, Target},
    cli::TraceArgs,
    crosscheck::Collector,
    memory::{Memory, MemoryOptions},
    tree::Tree,
};

pub(super) fn run(args: TraceArgs, verbose: u8) -> Result<i32, Failure> {
    let pids = args.pid.clone().map(|p| p.0).unwrap_or_default();
    // Refused before anything loads: a pid that is gone, or another user's.
    let caller = attach::caller_uid();
    for &pid in &pids {
        Target::hold(pid, caller)?;
    }
    let (outputs, mut probes) = open_and_load(&args, verbose)?;
    let taskstats = open_taskstats(&args);
    let _delayacct = DelayAcct::configure(args.delayacct, verbose > 0 && !args.quiet);
    let mut handled = vec![libc::SIGCHLD];
    handled.extend(FORWARDED);
    let sigfd = crate::signals::signal_fd(&handled)?;
    let attached = attach::attach(&mut probes, &pids)?;
    say_skipped(&attached, args.quiet);
    if !args.quiet {
        crate::errln!(
            "spacetime: attached to pid {} and {} more; tracing until all have ended (Ctrl-C stops the trace, not them)",
            pids[0],
            attached.targets.len() - 1
        );
    }
    let ring = probes.take_events()?;
    let root = &attached.targets[0];
    let mut tree = Tree::new(root.pid, root.ppid);
    for t in &attached.targets {
        tree.adopt(t.adopted(attached.attach_ns));
    }
    probes.mechanisms.push(format!(
        "attached to {} running process(es) by pidfd: exe and argv of images older than the attach read from /proc then; their peaks exact at exit (the kernel's high-water mark covers their whole life), their memory over time not followed; processes forked since followed as for a started command",
        attached.targets.len()
    ));
    let page_size = crate::clock::page_size();
    let width = terminal_width(&io::stderr());
    let mut memory = Memory::new(MemoryOptions {
        kernel_rss: probes.rss_tracking,
        pss_interval_ns: args.pss_interval.saturating_mul(1_000_000),
        page_size,
        quiet: args.quiet,
        started_ns: attached.attach_ns,
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut logger = probes.take_logger();
    let loop_opts = LoopOptions {
        root_pid: root.pid,
        stop_on_root_exit: args.stop_on_root_exit,
        attached: true,
        await_release: probes.cpu_at_release,
    };
    let (mut listener, taskstats_error) = match taskstats {
        Ok(l) => (Some(l), None),
        Err(e) => (None, Some(e)),
    };
    let mut collector = Collector::default();
    let sources = Sources {
        logger: logger.as_mut(),
        taskstats: listener.as_mut(),
        collector: &mut collector,
    };
    let mut sink = Sink {
        tree: &mut tree,
        memory: &mut memory,
        decode_errors: 0,
    };
    let outcome = rt.block_on(consume(ring, sigfd, loop_opts, &mut sink, sources))?;
    let decode_errors = sink.decode_errors;
    tree.settle_adopted();
    peaks_so_far(&mut tree, &attached, page_size);
    let command =
        crate::report::lossless::Args(root.names.argv().map(<[u8]>::to_vec).collect::<Vec<_>>());
    conclude(Ending {
        args: &args,
        verbose,
        probes: &probes,
        tree: &mut tree,
        memory: &mut memory,
        listener,
        taskstats_error,
        collector,
        outcome,
        decode_errors,
        t0_ns: attached.attach_ns,
        outputs,
        width,
        command,
        cgroup_peak: None,
    })
}

/// Descendants left out because they belong to another user (one that ended meanwhile is
/// simply not there to trace).
fn say_skipped(attached: &Attached, quiet: bool) {
    for (pid, e) in &attached.skipped {
        match e {
            AttachError::Gone(_) => log::debug!("pid {pid} ended before it was attached"),
            _ if !quiet => crate::errln!("spacetime: not traced: {e}"),
            _ => {}
        }
    }
}

/// Processes still running that predate the attach and never exec'd since: the kernel did not
/// follow their mm, so their peak so far is their VmHWM now (the kernel's own figure, whole
/// life), read through their pidfd.
fn peaks_so_far(tree: &mut Tree, attached: &Attached, page_size: u64) {
    for t in &attached.targets {
        let key = tree
            .processes()
            .iter()
            .filter(|p| p.end_ns.is_none())
            .filter(|p| p.images.last().is_some_and(|i| i.read_at_attach))
            .find_map(|p| p.key.filter(|k| k.tgid == t.pid));
        if let (Some(key), Some(pages)) = (key, attach::vmhwm_pages(t, page_size)) {
            tree.set_peak_so_far(key, pages);
        }
    }
}
