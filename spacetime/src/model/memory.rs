//! Memory over time during a trace: the kernel's RSS points (or statm sampling where the
//! kernel has no rss_stat tracepoint) and sampled PSS, gathered into a [`Timeline`].

use spacetime_common::{flags, EventHeader, MmState, RssEvent};

use rustc_hash::FxHashSet;

use crate::{
    kernel::events::Event,
    model::{
        pss::{PssConfig, PssSampler},
        statm::{SamplerConfig, StatmSampler},
        timeline::{Point, RssSource, Timeline},
        tree::{Key, Tree},
    },
};

pub struct Memory {
    pub timeline: Timeline,
    page_size: u64,
    pss: Option<PssSampler>,
    statm: Option<StatmSampler>,
    /// /proc names processes by the pids the tree shows, not the kernel's.
    proc_by_shown_pids: bool,
    /// Live processes that started a thread: an exit record's minor faults are its last
    /// thread's only.
    threaded: FxHashSet<Key>,
}

/// How memory is followed.
pub struct MemoryOptions {
    /// The kernel follows RSS (kmem:rss_stat); otherwise /proc/PID/statm is sampled, if
    /// something needs it (`over_time`, or PSS).
    pub kernel_rss: bool,
    /// Something shows memory over time.
    pub over_time: bool,
    /// Shortest PSS sampling interval per process, ns; 0 turns PSS off.
    pub pss_interval_ns: u64,
    /// Share of one CPU the PSS rounds may use; None: [`PssConfig`]'s default.
    pub pss_cpu_budget: Option<f64>,
    pub page_size: u64,
}

fn live_keys(tree: &Tree) -> impl Iterator<Item = Key> + '_ {
    tree.processes()
        .iter()
        .filter(|p| p.end_ns.is_none())
        .filter_map(|p| p.key.get())
}

impl Memory {
    pub fn new(o: MemoryOptions) -> Memory {
        let source = if o.kernel_rss {
            RssSource::Kernel
        } else {
            RssSource::Statm
        };
        let default = PssConfig::default();
        let pss = PssConfig {
            min_interval_ns: o.pss_interval_ns,
            follow_rss: o.kernel_rss,
            cpu_budget: o.pss_cpu_budget.map_or(default.cpu_budget, |b| b.min(1.0)),
            ..default
        };
        let statm = SamplerConfig {
            min_interval_ns: o.pss_interval_ns.max(10_000_000),
            ..SamplerConfig::default()
        };
        Memory {
            timeline: Timeline::new(source),
            page_size: o.page_size,
            pss: (o.pss_interval_ns > 0).then(|| PssSampler::new(pss)),
            statm: (!o.kernel_rss && (o.over_time || o.pss_interval_ns > 0))
                .then(|| StatmSampler::new(statm)),
            proc_by_shown_pids: false,
            threaded: FxHashSet::default(),
        }
    }

    /// /proc is mounted for spacetime's PID namespace: processes are read there by the pids
    /// the tree shows (their namespace pids), not by the kernel's.
    pub fn proc_by_shown_pids(&mut self) {
        self.proc_by_shown_pids = true;
    }

    /// Takes what concerns memory from a kernel record.
    pub fn observe(&mut self, ev: &Event) {
        if self.timeline.cpu.enabled {
            self.timeline.observe_cpu(ev);
        }
        match ev {
            // An mm's end: its exact peak is the tree's business; the tree's sum without it is
            // a point in time.
            Event::Rss(r) if r.hdr.flags & flags::RSS_MM_PEAK != 0 && r.end_ns != 0 => {
                let tree = r.tree_rss_pages * self.page_size;
                self.timeline.record_tree_rss(Point::new(r.end_ns, tree));
                let key = Key::of(&r.hdr);
                self.timeline.image_ended(key, r.end_ns);
            }
            Event::Rss(r) if r.hdr.flags & flags::RSS_MM_PEAK != 0 => {}
            Event::Rss(r) => {
                let key = Key::of(&r.hdr);
                let ts = r.hdr.ts_ns;
                let bytes = r.rss_pages * self.page_size;
                let anon = Some(r.anon_pages * self.page_size);
                self.timeline
                    .record_tree_rss(Point::new(ts, r.tree_rss_pages * self.page_size));
                self.timeline
                    .record_kernel_rss(key, Point::new(ts, bytes), anon);
            }
            Event::Fork(f) if f.hdr.flags & flags::FORK_THREAD != 0 && self.pss.is_some() => {
                self.threaded.insert(Key::of(&f.hdr));
            }
            Event::Exit(x) if x.hdr.flags & flags::EXIT_GROUP_DEAD != 0 => {
                let key = Key::of(&x.hdr);
                let faults = flags::EXIT_MIN_FLT | flags::EXIT_READ_FAILED;
                if !self.threaded.remove(&key) && x.hdr.flags & faults == flags::EXIT_MIN_FLT {
                    self.timeline
                        .exit_faults(key, x.min_flt.saturating_mul(self.page_size));
                }
                // The exact RSS as the image ended, read with the exit record: before 6.2 it
                // also counts the thread's RSS changes not folded into the mm yet, which no
                // rss_stat event reported.
                self.image_end_rss(key, x.hdr.ts_ns.saturating_sub(1), &x.mem);
                self.timeline.process_exited(key, x.hdr.ts_ns);
            }
            Event::ImageEnd(m) => {
                let key = Key::of(&m.hdr);
                self.image_end_rss(key, m.hdr.ts_ns, &m.mem);
            }
            _ => {}
        }
    }

    /// A process's exact RSS read as an image ended, as a point of its series (kernel source
    /// only; a process the kernel did not follow has no series to add to).
    fn image_end_rss(&mut self, key: Key, ts_ns: u64, mem: &spacetime_common::MemStats) {
        let followed = self
            .timeline
            .process(&key)
            .is_some_and(|s| !s.rss.is_empty());
        if self.timeline.rss_source == RssSource::Kernel
            && followed
            && mem.flags & flags::MEM_VALID != 0
        {
            // The image is ending: its PSS leaves the sum with it.
            let bytes = mem.rss_pages() * self.page_size;
            self.timeline
                .record_kernel_rss(key, Point::new(ts_ns, bytes), None);
        }
    }

    /// When the next sample is due (CLOCK_MONOTONIC ns), if any.
    pub fn next_due(&self) -> Option<u64> {
        let a = self.pss.as_ref().and_then(|s| s.next_due(&self.timeline));
        let b = self.statm.as_ref().and_then(StatmSampler::next_due);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether [`Memory::sample`] may run a PSS round now: one due, or the rounds'
    /// cost not known yet (their first round may come at any sample).
    pub fn may_read(&self, now_ns: u64) -> bool {
        match &self.pss {
            Some(s) => s.next_due(&self.timeline).is_none_or(|d| d <= now_ns),
            None => false,
        }
    }

    /// Samples the live processes that are due.
    pub fn sample(&mut self, now_ns: u64, tree: &Tree) {
        if self.proc_by_shown_pids {
            for p in tree.processes().iter().filter(|p| p.end_ns.is_none()) {
                let Some(key) = p.key.get() else { continue };
                if let Some(s) = self.pss.as_mut() {
                    s.set_proc_pid(key.tgid, p.pid);
                }
                if let Some(s) = self.statm.as_mut() {
                    s.set_proc_pid(key.tgid, p.pid);
                }
            }
        }
        if let Some(s) = self.pss.as_mut() {
            s.sample_due(now_ns, live_keys(tree), &mut self.timeline);
        }
        if let Some(s) = self.statm.as_mut() {
            s.sample_due(now_ns, live_keys(tree), &mut self.timeline);
        }
    }

    /// The trace is over: the kernel's exact peak is recorded.
    pub fn finish(&mut self, kernel_peak: Option<Point>) {
        if let Some(s) = &self.pss {
            let st = s.stats();
            log::debug!("PSS sampling: {st:?}");
            self.timeline.pss_sampling = Some(crate::model::timeline::PssSampling {
                samples: st.samples,
                rounds: st.rounds,
                early_rounds: st.early_rounds,
                read_ns: st.read_ns,
                max_round_read_ns: st.max_round_read_ns,
                cpu_budget: s.cpu_budget(),
            });
        }
        if let Some(s) = &self.statm {
            log::debug!("statm sampling: {:?}", s.stats());
        }
        if let Some(p) = kernel_peak {
            self.timeline.set_tree_peak(p);
        }
        self.timeline.settle();
    }
}

/// What the kernel still holds of the mms it follows when the trace ends (processes still
/// running), as the records it would send if they ended now: a point held back, the last
/// value, and the peak so far (an `RSS_MM_PEAK` record with no end). Applied like any other
/// record, they put each live process's peak into its series and its report.
pub fn live_mm_records(states: &[MmState]) -> Vec<RssEvent> {
    let mut out = Vec::with_capacity(states.len() * 3);
    for st in states {
        // (flags, when, (pages, anon pages), the tree's pages)
        let rec = |flags: u32, ts_ns: u64, (pages, anon): (i64, i64), tree: i64| RssEvent {
            hdr: EventHeader {
                kind: spacetime_common::kind::RSS,
                session: 0,
                flags,
                ts_ns,
                tgid: st.tgid,
                pid: st.tgid,
                leader_start_ns: st.leader_start_ns,
            },
            rss_pages: pages.max(0) as u64,
            tree_rss_pages: tree.max(0) as u64,
            end_ns: 0,
            anon_pages: anon.max(0) as u64,
        };
        if st.held_ns != 0 {
            let pages = (st.held_pages, st.held_anon_pages);
            out.push(rec(flags::RSS_HELD, st.held_ns, pages, st.held_tree_pages));
        }
        if st.total_pages != st.sent_pages || st.held_ns != 0 {
            let pages = (st.total_pages, st.rss_pages[1]);
            out.push(rec(flags::RSS_HELD, st.last_ns, pages, st.last_tree_pages));
        }
        out.push(rec(flags::RSS_MM_PEAK, st.since_ns, (st.peak_pages, 0), 0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(kernel_rss: bool, over_time: bool, pss_interval_ns: u64) -> Memory {
        Memory::new(MemoryOptions {
            kernel_rss,
            over_time,
            pss_interval_ns,
            pss_cpu_budget: None,
            page_size: 4096,
        })
    }

    #[test]
    fn proc_is_sampled_only_for_what_something_shows() {
        // A `time -f` format: nothing over time, no PSS: no /proc read at all.
        let m = memory(false, false, 0);
        assert!(m.statm.is_none() && m.pss.is_none());
        // Without rss_stat, memory over time (or PSS's bounds) comes from statm.
        assert!(memory(false, true, 0).statm.is_some());
        assert!(memory(false, false, 50_000_000).statm.is_some());
        // The kernel follows RSS: statm never.
        let m = memory(true, true, 50_000_000);
        assert!(m.statm.is_none() && m.pss.is_some());
    }
}
