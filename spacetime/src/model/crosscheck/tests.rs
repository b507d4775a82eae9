//! The cross-check fed as `trace` feeds it: exits as drained, then records.

use super::*;
use crate::{
    kernel::events::{Event, Exec},
    model::tree::Key,
};
use spacetime_common::{flags, kind, EventHeader, ExitEvent, ForkEvent, MemStats};

const S: u64 = 1_000_000_000;

fn hdr(kind: u16, tgid: u32, start: u64, ts: u64) -> EventHeader {
    crate::kernel::events::records::hdr(kind, (tgid, start), ts)
}

/// A tree and the exit records applied to it, in order.
struct Fixture {
    tree: Tree,
    exits: Vec<ExitEvent>,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture {
            tree: Tree::new(1, 0),
            exits: Vec::new(),
        }
    }

    fn apply(&mut self, ev: Event) {
        if let Event::Exit(x) = &ev {
            self.exits.push(*x);
        }
        self.tree.apply(ev);
    }

    /// The exits go to the matcher as they were drained, then the records arrive.
    fn check(&self, recs: &[TaskstatsRecord], clock: Clock) -> (Coverage, PerProcess) {
        let mut c = Collector::new(clock);
        for x in &self.exits {
            c.exit(x, &self.tree);
        }
        c.keep(&self.tree, &mut recs.to_vec());
        cross_check(&self.tree, c, 4096)
    }
}

fn tree_with_reused_pid() -> Fixture {
    let mut t = Fixture::new();
    t.apply(Event::Exec(Exec {
        hdr: hdr(kind::EXEC, 1, 0, 1),
        old_pid: 1,
        uid: 0,
        cgroup_id: 0,
        comm: "sh".into(),
        filename: "/bin/sh".into(),
        args_len: 3,
        args: b"sh\0".to_vec(),
    }));
    for (start, end) in [(10 * S, 10 * S + 5_000_000), (20 * S, 20 * S + 9_000_000)] {
        t.apply(Event::Fork(ForkEvent {
            hdr: hdr(kind::FORK, 1, 0, start),
            child_pid: 7,
            child_tgid: 7,
            child_start_ns: start,
            ..ForkEvent::default()
        }));
        let mut h = hdr(kind::EXIT, 7, start, end);
        h.flags = flags::EXIT_GROUP_DEAD;
        let mem = MemStats {
            rss_anon_pages: 100,
            percpu_delta_pages: 3,
            flags: flags::MEM_VALID | flags::MEM_EXACT,
            ..MemStats::default()
        };
        t.apply(Event::Exit(ExitEvent {
            hdr: h,
            mem,
            ..ExitEvent::default()
        }));
    }
    t
}

fn record(pid: u32, btime_s: u64, etime_us: u64, group: bool, hiwater_kib: u64) -> TaskstatsRecord {
    TaskstatsRecord {
        kind: RecordKind::Pid,
        id: pid,
        ac_pid: pid,
        ac_tgid: Some(pid),
        ac_btime64: Some(btime_s),
        ac_etime_us: etime_us,
        ac_flag: if group { ac_flags::AGROUP } else { 0 },
        hiwater_rss_kib: hiwater_kib,
        ac_minflt: 10,
        version: 16,
        ..TaskstatsRecord::default()
    }
}

#[test]
fn merged_sums_equal_added_records() {
    let mut a = record(7, 1010, 5_000, true, 400);
    a.ac_utime_us = 3;
    a.nvcsw = Some(2);
    a.cpu_delay_total = 9;
    let mut b = record(8, 1010, 1_000, false, 500);
    b.ac_utime_us = 4;
    b.write_bytes = Some(4096);
    a.coremem = 6;
    b.coremem = 7;
    let mut merged = ProcessTaskstats::of(&a);
    merged.merge(&ProcessTaskstats::of(&b));
    // Counts add; the peaks (400 and 500 KiB) keep the larger.
    assert_eq!(
        (
            merged.utime_us,
            merged.nvcsw,
            merged.write_bytes,
            merged.minflt
        ),
        (7, 2, 4096, 20)
    );
    assert_eq!((merged.hiwater_rss_kib, merged.records), (500, 2));
    assert_eq!((merged.coremem_mib_us, merged.delays.cpu_ns), (Some(13), 9));
}

#[test]
fn reused_pid_matches_by_start_time() {
    let t = tree_with_reused_pid();
    let clock = Clock {
        realtime_offset_ns: 1000 * S as i128,
    };
    // The second process's record arrives first; each must match its own process.
    let recs = vec![
        record(7, 1020, 9_000, true, 388),
        record(7, 1010, 5_000, true, 388),
    ];
    let (cov, stats) = t.check(&recs, clock);
    assert_eq!((cov.matched, cov.bpf_only, cov.taskstats_only), (2, 0, 0));
    assert_eq!(stats.len(), 2);
    // Kernel-style peak: 100 - 3 pages = 388 KiB, exactly taskstats; the exact one is 12 KiB more.
    assert_eq!((cov.max_peak_diff_kib, cov.max_exact_diff_kib), (0, 12));
}

#[test]
fn unmatched_sides_are_counted() {
    let mut t = tree_with_reused_pid();
    let clock = Clock {
        realtime_offset_ns: 1000 * S as i128,
    };
    // A third traced process (pid 9) whose exit BPF never saw.
    t.apply(Event::Fork(ForkEvent {
        hdr: hdr(kind::FORK, 1, 0, 30 * S),
        child_pid: 9,
        child_tgid: 9,
        child_start_ns: 30 * S,
        ..ForkEvent::default()
    }));
    // Only the first pid-7 process has a record; a group record of pid 7 from much later
    // is another process that reused the pid, not a traced exit; pid 9's record is.
    let recs = vec![
        record(7, 1010, 5_000, true, 400),
        record(7, 1500, 1, true, 1),
        record(9, 1030, 1, true, 1),
    ];
    let (cov, _) = t.check(&recs, clock);
    assert_eq!((cov.matched, cov.bpf_only, cov.taskstats_only), (1, 1, 1));
}

#[test]
fn a_pid_reused_within_a_second_keeps_its_own_record() {
    let mut t = Fixture::new();
    let clock = Clock {
        realtime_offset_ns: 1000 * S as i128,
    };
    // pid 7 lives from 10 s to 16.8 s; the pid is reused at 17.2 s for 50 ms.
    for (start, end) in [(10 * S, 16_800_000_000), (17_200_000_000, 17_250_000_000)] {
        t.apply(Event::Fork(ForkEvent {
            hdr: hdr(kind::FORK, 1, 0, start),
            child_pid: 7,
            child_tgid: 7,
            child_start_ns: start,
            ..ForkEvent::default()
        }));
        let mut h = hdr(kind::EXIT, 7, start, end);
        h.flags = flags::EXIT_GROUP_DEAD;
        t.apply(Event::Exit(ExitEvent {
            hdr: h,
            ..ExitEvent::default()
        }));
    }
    let recs = vec![
        record(7, 1010, 6_800_000, true, 1),
        record(7, 1017, 50_000, true, 2),
    ];
    let (cov, stats) = t.check(&recs, clock);
    assert_eq!((cov.matched, cov.bpf_only), (2, 0));
    for (start, kib) in [(10 * S, 1), (17_200_000_000, 2)] {
        let i = t
            .tree
            .index_of(&Key {
                tgid: 7,
                start_ns: start,
            })
            .expect("process");
        let s = stats.get(i).expect("its sums");
        assert_eq!((s.records, s.hiwater_rss_kib), (1, kib));
    }
}

/// The first process with pid 7 of [`tree_with_reused_pid`].
fn first_seven(t: &Fixture) -> usize {
    t.tree
        .index_of(&Key {
            tgid: 7,
            start_ns: 10 * S,
        })
        .expect("first 7")
}

#[test]
fn thread_records_are_summed() {
    let t = tree_with_reused_pid();
    let clock = Clock {
        realtime_offset_ns: 1000 * S as i128,
    };
    let mut thread = record(8, 1010, 1_000, false, 0);
    thread.ac_tgid = Some(7);
    let recs = vec![thread, record(7, 1010, 5_000, true, 400)];
    let (cov, stats) = t.check(&recs, clock);
    assert_eq!(cov.matched, 1);
    let first = first_seven(&t);
    let s = stats.get(first).expect("its sums");
    assert_eq!((s.records, s.minflt, s.hiwater_rss_kib), (2, 20, 400));
}

/// Before 5.19 (records before version 12) a record names no thread group: a thread's record
/// goes to the process its thread started in (its BPF fork), not to the pid it carries.
#[test]
fn old_records_go_to_the_process_their_thread_started_in() {
    let t = tree_with_reused_pid();
    let clock = Clock {
        realtime_offset_ns: 1000 * S as i128,
    };
    let old = |mut r: TaskstatsRecord| {
        r.ac_tgid = None;
        r.ac_flag = 0;
        r.version = 10;
        r
    };
    let recs = vec![
        old(record(8, 1010, 1_000, false, 0)),
        old(record(7, 1010, 5_000, true, 400)),
    ];
    let sums = |started: bool| {
        let mut c = Collector::new(clock);
        if started {
            c.thread_started(8, 7);
        }
        for x in &t.exits {
            c.exit(x, &t.tree);
        }
        c.keep(&t.tree, &mut recs.clone());
        let (cov, stats) = cross_check(&t.tree, c, 4096);
        assert_eq!(cov.matched, 1);
        let first = first_seven(&t);
        let s = stats.get(first).expect("its sums");
        (s.records, s.minflt)
    };
    assert_eq!(sums(true), (2, 20), "the thread's record summed in");
    assert_eq!(
        sums(false),
        (1, 10),
        "without its start, pid 8 is no traced process"
    );
}

/// Once pids wrap, every pid is a tgid the trace has seen: the records of other processes on
/// the machine that reused a traced pid are set aside as they come (counted), not kept to the
/// end; a traced process's own records, and those of a task that started within the window
/// the matcher and the sums look at, are kept, and the figures are those of keeping them all.
#[test]
fn other_processes_records_are_set_aside() {
    let t = tree_with_reused_pid();
    let clock = Clock {
        realtime_offset_ns: 1000 * S as i128,
    };
    // pid 7's latest traced process ran from 1020 s to 1020.009 s.
    let mut thread = record(8, 1020, 1_000, false, 0);
    thread.ac_tgid = Some(7);
    let own = [
        record(7, 1010, 5_000, true, 400),
        thread,
        record(7, 1020, 9_000, true, 388),
    ];
    // Started 3 s after that end: still kept (it could pair with an end 2.5 s away).
    let near = record(7, 1023, 1, true, 1);
    // Other processes that reused pid 7 later (one with a thread), set aside; a pid never
    // traced is not kept either, as before.
    let mut other_thread = record(12, 1030, 1, false, 1);
    other_thread.ac_tgid = Some(7);
    let others = [
        record(7, 1024, 1, true, 1),
        record(7, 1030, 2_000_000, true, 1),
        other_thread,
        record(99, 1015, 1, true, 1),
    ];
    let all: Vec<TaskstatsRecord> = own.iter().chain([&near]).chain(&others).cloned().collect();
    let mut c = Collector::new(clock);
    for x in &t.exits {
        c.exit(x, &t.tree);
    }
    c.keep(&t.tree, &mut all.clone());
    assert_eq!(
        (c.records().len(), c.other_exits()),
        (own.len() + 1, others.len() as u64 - 1),
        "records kept and set aside"
    );
    let (cov, stats) = cross_check(&t.tree, c, 4096);
    let kept: Vec<TaskstatsRecord> = own.iter().chain([&near]).cloned().collect();
    let (cov_kept, stats_kept) = t.check(&kept, clock);
    assert_eq!(
        cov, cov_kept,
        "coverage with and without the others' records"
    );
    assert_eq!((cov.matched, cov.bpf_only, cov.taskstats_only), (2, 0, 0));
    for i in 0..t.tree.processes().len() {
        assert_eq!(stats.get(i), stats_kept.get(i), "process {i}'s sums");
    }
    let second = t
        .tree
        .index_of(&Key {
            tgid: 7,
            start_ns: 20 * S,
        })
        .expect("second 7");
    let s = stats.get(second).expect("its sums");
    assert_eq!((s.records, s.hiwater_rss_kib), (2, 388));
}
