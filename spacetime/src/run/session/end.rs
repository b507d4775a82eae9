//! The end of a run: the figures read once its loop ended, in an order that keeps them
//! consistent with each other while processes still run, and the taskstats cross-check.

use std::os::fd::AsRawFd;

use rustc_hash::FxHashSet;

use super::{
    run_loop::{self, LoopOptions, Outcome, Sink},
    Baseline, Root, Run, RunError, Session,
};
use crate::{
    kernel::{
        source::{EndFigures, TaskstatsFeed},
        taskstats::{ListenerStats, Unavailable},
    },
    model::{
        crosscheck::{cross_check, Collector, PerProcess},
        memory::Memory,
        timeline::{Point, Timeline},
        tree::{Key, Tree},
    },
    report::{self, TaskstatsMeta},
    run::delayacct::delayacct_on,
};

/// How the run's loop ended, and what is left to read at the end.
pub(super) struct Ends {
    pub outcome: run_loop::Outcome,
    /// The run's memory cgroup, its peak read after the kernel's figures.
    pub cgroup: Option<crate::run::cgroup_peak::Run>,
    pub baseline: Baseline,
    /// What the kernel side read at the end ([`Session::read_end`]).
    pub figures: EndFigures,
}

impl Session {
    /// The kernel side's figures of the run's end, read once its loop ended, then the records
    /// the kernel had written by that read.
    pub(super) fn read_end(
        &mut self,
        opts: LoopOptions,
        sink: &mut Sink<'_>,
        outcome: &mut Outcome,
        root: &Root,
        baseline: &Baseline,
    ) -> EndFigures {
        if let Some(a) = &root.attached {
            sink.tree.settle_adopted();
            super::attached::peaks_so_far(a, sink.tree, self.page_size);
        }
        // With processes still running (--stop-on-root-exit, a stopped attach) the figures of
        // the end keep moving: read the mms, then the tree's sum, then the cgroup's peak, and
        // end the run after the last read. Each later figure then covers the earlier ones (the
        // tree's peak every process's, the cgroup's too), and nothing is dated after the end.
        let live = self.kernel.capabilities().rss_tracking && sink.tree.live() > 0;
        let figures = self.kernel.end_run(&baseline.counters, live);
        // A process that exited between the loop's last drain and the read of the mms is in
        // neither: its last records are in the ring, before the read's mark.
        if let Some(end) = figures.records_end {
            let io = self.kernel.io(self.sigfd.as_raw_fd());
            run_loop::take_written(opts, sink, io.ring, outcome, end);
        }
        figures
    }

    /// The run's figures once its loop ended.
    pub(super) fn finish(
        &mut self,
        mut tree: Tree,
        mut memory: Memory,
        collector: Collector,
        ends: Ends,
        root: Root,
        mut mechanisms: Vec<String>,
    ) -> Result<Run, RunError> {
        let Ends {
            outcome,
            cgroup,
            baseline,
            figures: end,
        } = ends;
        let rss_tracking = self.kernel.capabilities().rss_tracking;
        let agent_gone = self.kernel.gone();
        if let Some(why) = &agent_gone {
            mechanisms.push(format!(
                "the agent went away during the run ({why}): records after that are missing, kernel counters and the tree-wide peak unknown"
            ));
        }
        // Processes whose end the agent never sent: each lost at least its exit (the root's
        // too when not even its first record came).
        let unseen_ends = match agent_gone {
            Some(_) => tree.live() as u64 + u64::from(tree.root().is_none()),
            None => 0,
        };
        if rss_tracking && tree.live() > 0 {
            run_loop::live_memory(end.mms, &mut tree, &mut memory);
        }
        let page_size = self.page_size;
        let kernel_peak = match rss_tracking {
            true => end.tree_rss.filter(|t| t.peak_ts_ns != 0),
            false => None,
        };
        memory.finish(
            kernel_peak.map(|t| Point::new(t.peak_ts_ns, t.peak_pages.max(0) as u64 * page_size)),
        );
        let cgroup_peak = cgroup.map(crate::run::cgroup_peak::finish);
        let mut counters = end.counters;
        counters.agent_gone = unseen_ends;
        let end_ns = end_of(&tree, &memory.timeline, outcome.end_ns);
        // No record comes any more: what taking them needed goes before the cross-check and
        // the report.
        tree.settle();
        let (taskstats, per_process) = self.cross_check(&tree, collector, &baseline.taskstats);
        // Processes whose exit never arrived: still running (--stop-on-root-exit), or gone with
        // their exit record lost, which the report must not call running.
        let mut gone = gone_unseen(&tree);
        // Seen to exit, after the stop: running when the run stopped.
        gone.retain(|k| !outcome.exited_after.contains(k));
        // With nothing lost, every exit before the run's last records came with them: one
        // that did not came after (through an agent, the finish's answer ends the records),
        // so the process was running when the run stopped.
        if counters.lost() == 0 && counters.read_failures == 0 && outcome.decode_errors == 0 {
            gone.clear();
        }
        // Measured last, with the programs still attached: the figures cover the whole run.
        let own_cost = report::selfstats::OwnCost::of(&*self.kernel);
        let meta = report::Meta {
            command: report::lossless::Args::default(),
            root_exit: outcome.root_status,
            end_ns,
            counters,
            decode_errors: outcome.decode_errors,
            ring_buffer_bytes: self.kernel.capabilities().ring_buffer_bytes,
            mechanisms,
            attach_memory_followed: root.attached.as_ref().map(|a| a.memory_followed),
            taskstats,
            own_cost,
            agent_gone,
            cgroup_peak,
            programs: self.kernel.capabilities().provenance,
        };
        Ok(Run {
            meta,
            tree,
            memory,
            per_process,
            stop_signal: outcome.stop_signal,
            // An attached run's times start at the attach; a started one's when it was let
            // go to exec: its wall is the command's own, not the hold before it (the
            // tracking; through an agent a round trip: 16 ms, where hyperfine measures
            // /bin/true at 0.69 ms).
            t0_ns: root.release_ns,
            page_size,
            gone,
        })
    }

    /// The run's exits against the taskstats records it kept.
    fn cross_check(
        &self,
        tree: &Tree,
        collector: Collector,
        at_start: &ListenerStats,
    ) -> (TaskstatsMeta, PerProcess) {
        let exited = tree
            .processes()
            .iter()
            .filter(|p| p.end_ns.is_some())
            .count();
        if let TaskstatsFeed::Unavailable(why) = &self.kernel.capabilities().taskstats {
            return (
                TaskstatsMeta::Unavailable(why.clone()),
                PerProcess::default(),
            );
        }
        let st = self.kernel.taskstats_stats();
        // Registered, yet not one record for any exit on the system: they go elsewhere.
        if exited > 0 && st.records == at_start.records {
            return (
                TaskstatsMeta::Unavailable(Unavailable::NoRecords),
                PerProcess::default(),
            );
        }
        let (mut coverage, sums) = cross_check(tree, collector, self.page_size);
        coverage.enobufs = st.enobufs - at_start.enobufs;
        coverage.parse_errors = st.parse_errors - at_start.parse_errors;
        let meta = TaskstatsMeta::Available {
            coverage,
            delayacct: delayacct_on(),
            rcvbuf_bytes: st.rcvbuf_bytes as u64,
        };
        (meta, sums)
    }
}

/// When the run ended: its last exit; stopped with processes running (`stop_ns`), the stop,
/// or the latest instant a figure read at the end is dated if later (each is dated when it
/// happened): nothing is dated after the end, and the survivors' life after it is not the
/// run's.
fn end_of(tree: &Tree, timeline: &Timeline, stop_ns: u64) -> u64 {
    match tree.live() {
        0 => tree
            .processes()
            .iter()
            .filter_map(|p| p.end_ns.get())
            .max()
            .unwrap_or(stop_ns),
        _ => latest_dated(tree, timeline).max(stop_ns),
    }
}

/// The latest instant any figure of the run is dated: a start, an exit, an exec, a point of a
/// memory series.
fn latest_dated(tree: &Tree, timeline: &Timeline) -> u64 {
    let processes = tree.processes().iter().flat_map(|p| {
        let images = p
            .images
            .iter()
            .flat_map(|i| [Some(i.start_ns), i.end_ns.get()]);
        [Some(p.start_ns), p.end_ns.get()].into_iter().chain(images)
    });
    let series = [timeline.tree_rss().last(), timeline.tree_pss().last()]
        .into_iter()
        .chain(
            timeline
                .processes()
                .flat_map(|(k, s)| [s.rss.last(k.start_ns), s.pss().last()]),
        )
        .map(|p| p.map(|p| p.ts_ns));
    processes.chain(series).flatten().max().unwrap_or(0)
}

/// The processes of `tree` whose exit was never seen and that are gone (not proven alive):
/// their exit records were lost, so how they ended is unknown.
fn gone_unseen(tree: &Tree) -> FxHashSet<Key> {
    tree.processes()
        .iter()
        .filter(|p| p.end_ns.is_none())
        .filter_map(|p| p.key.get())
        .filter(|k| !crate::kernel::pidfd::alive(k.tgid, k.start_ns))
        .collect()
}
