//! CPU over time from the kernel's run-time accounting: each traced thread's cumulative
//! `sum_exec_runtime`, sampled by a CPU clock tick (~100 Hz on every CPU) while it runs, with
//! its start (a fork: 0 ns) and its exit (the final figure) as end points. Between two points
//! of a thread its CPU is spread evenly; a process's CPU over time is the sum of its threads'.
//! What no point places (a thread seen first by a tick: the root's, one that ran before the
//! trace) is left to [`crate::model::cores`], which spreads it over the process's life.

use rustc_hash::FxHashMap;
use spacetime_common::flags;

use crate::{
    kernel::events::Event,
    model::{process::Key, series::Procs},
};

/// The CPU clock's frequency (per CPU) the kernel program is attached with.
pub use spacetime_common::CPU_TICK_HZ as TICK_HZ;

/// At most this many segments are kept (24 bytes each): past it a tick is dropped (counted)
/// and the thread's next kept point or its exit spans the gap, so no CPU is lost, only detail.
const MAX_SEGMENTS: usize = 1 << 20;

/// A thread's CPU between two of its points: `cpu_ns` spent over `[from_ns, to_ns]`
/// (CLOCK_MONOTONIC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub from_ns: u64,
    pub to_ns: u64,
    pub cpu_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Last {
    key: Key,
    ts_ns: u64,
    runtime_ns: u64,
    /// The thread's last segment, in its process's list.
    seg: Option<usize>,
}

/// The threads' points, folded into segments per process.
#[derive(Debug, Default)]
pub struct CpuTicks {
    /// The kernel program is attached: ticks come.
    pub enabled: bool,
    /// The CPUs online as the trace ran (the most CPU a moment can hold): unknown, no bound.
    pub online_cpus: Option<u32>,
    /// Each live thread's last point, by thread id.
    last: FxHashMap<u32, Last>,
    /// Segments kept, in all processes. Each process's are kept in its slot of the memory
    /// series ([`Procs::cpu`]), found by the same key: a list and an index of their own took
    /// 21 bytes a process more (the key again, the index's slot).
    kept: usize,
    /// Tick records received, and those dropped past [`MAX_SEGMENTS`].
    pub ticks: u64,
    pub dropped: u64,
}

impl CpuTicks {
    /// Takes a thread's start, tick or exit; a process's segments go to its slot in `procs`.
    pub fn observe(&mut self, ev: &Event, procs: &mut Procs) {
        match ev {
            Event::Fork(f) if f.hdr.flags & flags::FORK_UNTRACKED == 0 => {
                let key = if f.hdr.flags & flags::FORK_THREAD != 0 {
                    Key::of(&f.hdr)
                } else {
                    Key {
                        tgid: f.child_tgid,
                        start_ns: f.child_start_ns,
                    }
                };
                // A new task's run time starts at 0 (sched_fork).
                self.last.insert(
                    f.child_pid,
                    Last {
                        key,
                        ts_ns: f.child_start_ns,
                        runtime_ns: 0,
                        seg: None,
                    },
                );
            }
            Event::Tick(t) => {
                self.ticks += 1;
                if self.kept >= MAX_SEGMENTS && self.last.contains_key(&t.hdr.pid) {
                    self.dropped += 1;
                    return;
                }
                let at = (t.hdr.ts_ns, t.runtime_ns);
                self.point(procs, t.hdr.pid, Key::of(&t.hdr), at);
            }
            Event::Exit(x) if x.hdr.flags & flags::EXIT_FILTERED == 0 => {
                let at = (x.hdr.ts_ns, x.runtime_ns);
                self.point(procs, x.hdr.pid, Key::of(&x.hdr), at);
                self.last.remove(&x.hdr.pid);
            }
            _ => {}
        }
    }

    /// A point of thread `tid` at `at` (when, and its run time then): the CPU since its last
    /// one becomes a segment. A thread's first point without a start (no fork seen) only sets
    /// where counting begins.
    fn point(&mut self, procs: &mut Procs, tid: u32, key: Key, at: (u64, u64)) {
        let (ts_ns, runtime_ns) = at;
        let mut now = Last {
            key,
            ts_ns,
            runtime_ns,
            seg: None,
        };
        let Some(prev) = self.last.insert(tid, now) else {
            return;
        };
        // Another process's thread under a reused id: start over.
        if prev.key != key || runtime_ns <= prev.runtime_ns {
            return;
        }
        let from_ns = prev.ts_ns.min(ts_ns);
        let cpu_ns = runtime_ns - prev.runtime_ns;
        now.seg = Some(procs.update_cpu(key, |segments| {
            let mut cpu_ns = cpu_ns;
            // A thread runs on one CPU at a time. More run time than wall time since its last
            // point is run time the previous point had not been told of yet (a task's total is
            // brought up to date at the scheduler's next update, not at the tick): it belongs
            // to the thread's previous segment, as far as that one has room.
            if let Some(earlier) = prev.seg.and_then(|i| segments.get_mut(i)) {
                let excess = cpu_ns.saturating_sub(ts_ns - from_ns);
                let room = (earlier.to_ns - earlier.from_ns).saturating_sub(earlier.cpu_ns);
                let moved = excess.min(room);
                earlier.cpu_ns += moved;
                cpu_ns -= moved;
            }
            segments.push(Segment {
                from_ns,
                to_ns: ts_ns,
                cpu_ns,
            });
            segments.len() - 1
        }));
        self.kept += 1;
        self.last.insert(tid, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl CpuTicks {
        fn observe_in(&mut self, procs: &mut Procs, ev: &Event) {
            self.observe(ev, procs);
        }
    }
    use spacetime_common::{kind, EventHeader, ExitEvent, ForkEvent, TickEvent};

    fn hdr(k: u16, tgid: u32, pid: u32, ts: u64) -> EventHeader {
        EventHeader {
            kind: k,
            ts_ns: ts,
            tgid,
            pid,
            leader_start_ns: 5,
            ..EventHeader::default()
        }
    }

    #[test]
    fn a_threads_points_become_segments_from_its_start_to_its_exit() {
        let (mut c, mut procs) = (CpuTicks::default(), Procs::default());
        let mut f = ForkEvent {
            hdr: hdr(kind::FORK, 7, 7, 100),
            child_pid: 8,
            child_tgid: 7,
            child_start_ns: 100,
            ..ForkEvent::default()
        };
        f.hdr.flags = flags::FORK_THREAD;
        c.observe_in(&mut procs, &Event::Fork(f));
        for (ts, rt) in [(200, 50), (300, 150), (300, 150)] {
            c.observe_in(
                &mut procs,
                &Event::Tick(TickEvent {
                    hdr: hdr(kind::TICK, 7, 8, ts),
                    runtime_ns: rt,
                }),
            );
        }
        c.observe_in(
            &mut procs,
            &Event::Exit(ExitEvent {
                hdr: hdr(kind::EXIT, 7, 8, 400),
                runtime_ns: 160,
                ..ExitEvent::default()
            }),
        );
        // The leader, never seen starting: its first tick only sets the base.
        for (ts, rt) in [(250, 1000), (350, 1070)] {
            c.observe_in(
                &mut procs,
                &Event::Tick(TickEvent {
                    hdr: hdr(kind::TICK, 7, 7, ts),
                    runtime_ns: rt,
                }),
            );
        }
        let key = Key {
            tgid: 7,
            start_ns: 5,
        };
        let seg = |from_ns, to_ns, cpu_ns| Segment {
            from_ns,
            to_ns,
            cpu_ns,
        };
        assert_eq!(
            procs.cpu(&key).as_ref(),
            [
                seg(100, 200, 50),
                seg(200, 300, 100),
                seg(300, 400, 10),
                seg(250, 350, 70)
            ]
        );
        assert_eq!(c.ticks, 5);
        assert!(!c.last.contains_key(&8), "the exit forgets the thread");
    }

    #[test]
    fn run_time_a_tick_had_not_been_told_of_goes_back_to_the_threads_earlier_segment() {
        let (mut c, mut procs) = (CpuTicks::default(), Procs::default());
        let mut f = ForkEvent {
            hdr: hdr(kind::FORK, 7, 7, 0),
            child_pid: 9,
            child_tgid: 7,
            child_start_ns: 0,
            ..ForkEvent::default()
        };
        f.hdr.flags = flags::FORK_THREAD;
        c.observe_in(&mut procs, &Event::Fork(f));
        // Busy all along, but its total lagged at the tick: 60 of its first 100 ns told.
        c.observe_in(
            &mut procs,
            &Event::Tick(TickEvent {
                hdr: hdr(kind::TICK, 7, 9, 100),
                runtime_ns: 60,
            }),
        );
        c.observe_in(
            &mut procs,
            &Event::Exit(ExitEvent {
                hdr: hdr(kind::EXIT, 7, 9, 150),
                runtime_ns: 150,
                ..ExitEvent::default()
            }),
        );
        let seg = |from_ns, to_ns, cpu_ns| Segment {
            from_ns,
            to_ns,
            cpu_ns,
        };
        let key = Key {
            tgid: 7,
            start_ns: 5,
        };
        // Never more than one core for one thread, and nothing lost.
        assert_eq!(
            procs.cpu(&key).as_ref(),
            [seg(0, 100, 100), seg(100, 150, 50)]
        );
    }
}
