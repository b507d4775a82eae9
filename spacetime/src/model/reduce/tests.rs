//! Unit tests of the store: both retentions build the same facts from the same records; the
//! live set stays within its bounds; pid reuse, duplicate exits, argv over several records,
//! vfork images.

use spacetime_common::{flags, kind, EventHeader, ExitEvent, ImageEndEvent, MemStats, ReapEvent};

use super::*;
use crate::{
    kernel::events::{records, Args, Comm, Exec},
    model::process::{ExitStatus, Names},
};

type P = (u32, u64);

/// A record's header (its kind set by the caller).
fn hdr(p: P, ts: u64) -> EventHeader {
    records::hdr(0, p, ts)
}

fn fork(parent: P, child: P, f: u32) -> Event {
    records::fork_record(parent, child, child.1, f)
}

fn thread(p: P, tid: u32, ts: u64) -> Event {
    Event::Fork(records::thread(p, tid, ts))
}

/// An exec whose record carries `first` of an area of `total` bytes.
fn exec(p: P, ts: u64, exe: &str, first: &[u8], total: usize) -> Event {
    Event::Exec(Exec {
        comm: Comm::new(exe.rsplit('/').next().unwrap_or(exe).as_bytes()),
        ..records::exec(p, ts, exe, first, total)
    })
}

fn args(p: P, ts: u64, offset: u32, data: &[u8]) -> Event {
    Event::Args(Args {
        hdr: EventHeader {
            kind: kind::ARGS,
            ..hdr(p, ts)
        },
        offset,
        data: data.to_vec(),
    })
}

fn mem(pages: u64) -> MemStats {
    MemStats {
        hiwater_rss_pages: pages,
        flags: flags::MEM_VALID | flags::MEM_EXACT,
        ..MemStats::default()
    }
}

fn image_end(p: P, ts: u64, pages: u64) -> Event {
    Event::ImageEnd(ImageEndEvent {
        hdr: EventHeader {
            kind: kind::IMAGE_END,
            ..hdr(p, ts)
        },
        mem: mem(pages),
    })
}

/// A thread's exit (`group`: the last one) with `runtime_ns` of CPU, all user time.
fn exit(p: P, ts: u64, code: u32, pages: u64, group: bool, runtime_ns: u64) -> Event {
    let mut h = EventHeader {
        kind: kind::EXIT,
        ..hdr(p, ts)
    };
    if group {
        h.flags = flags::EXIT_GROUP_DEAD;
    }
    Event::Exit(ExitEvent {
        hdr: h,
        mem: mem(pages),
        exit_code: code,
        runtime_ns,
        utime_ns: runtime_ns,
        ..ExitEvent::default()
    })
}

/// Runs `body` on both stores in turn (they are two types).
macro_rules! for_both {
    ($s:ident in [$a:ident, $b:ident] $body:block) => {{
        {
            let $s = &mut $a;
            $body
        }
        {
            let $s = &mut $b;
            $body
        }
    }};
}

fn live(max: usize) -> Store<LiveSet> {
    Store::with(LiveSet::new(LiveOptions {
        max_processes: max,
        ancestry: true,
        images: true,
    }))
}

/// An image's facts: exe, argv, argv complete, peak pages, on its parent's memory (vfork).
type ImageFacts = (Vec<u8>, Vec<Vec<u8>>, bool, Option<u64>, bool);

/// What both retentions must agree on for one process.
#[derive(Debug, PartialEq, Eq)]
struct Facts {
    ppid: u32,
    threads: u32,
    exit: Option<ExitStatus>,
    user_ns: u64,
    /// Oldest first.
    images: Vec<ImageFacts>,
}

fn facts(p: &Process) -> Facts {
    Facts {
        ppid: p.ppid,
        threads: p.threads,
        exit: p.exit.get(),
        user_ns: p.user_ns,
        images: p
            .images
            .iter()
            .map(|i| {
                (
                    i.exe().to_vec(),
                    i.argv().map(<[u8]>::to_vec).collect(),
                    i.argv_complete(),
                    i.peak_rss_pages(),
                    i.shared_mm,
                )
            })
            .collect(),
    }
}

/// A shell that runs a tool with a long argv (three records) and a vfork'd helper, both exit.
fn stream() -> Vec<Event> {
    let (sh, tool, spawn) = ((10, 100), (11, 200), (12, 300));
    vec![
        exec(sh, 101, "/bin/sh", b"sh\0-c\0x\0", 9),
        fork(sh, tool, 0),
        thread(tool, 13, 201),
        image_end(tool, 205, 300),
        exec(tool, 206, "/bin/tool", b"tool\0a", 14),
        args(tool, 207, 6, b"aa\0"),
        args(tool, 208, 9, b"bbbb\0"),
        fork(sh, spawn, flags::FORK_SHARED_MM),
        image_end(spawn, 305, 9000),
        exec(spawn, 306, "/bin/true", b"true\0", 5),
        exit(spawn, 310, 0, 40, true, 7),
        exit(tool, 400, 0, 50, false, 20),
        exit(tool, 401, 3 << 8, 60, true, 30),
    ]
}

#[test]
fn both_retentions_build_the_same_facts() {
    let mut all = Store::with(Kept::new(10, 1));
    let mut bounded = live(100);
    let mut ended = Vec::new();
    for ev in stream() {
        all.apply(ev.clone());
        ended.extend(bounded.apply(ev));
    }
    assert_eq!(ended.len(), 2, "two processes ended");
    assert_eq!(bounded.live(), 1, "the shell still runs");
    for t in &ended {
        let key = t.key.get().expect("keyed");
        let kept = all.get(&key).expect("kept by trace");
        assert!(t.known, "pid {} was in the live set", key.tgid);
        assert_eq!(facts(t), facts(kept), "pid {}", key.tgid);
    }
    let tool = ended.iter().find(|t| t.pid == 11).expect("tool");
    let f = facts(tool);
    assert_eq!(f.exit, Some(ExitStatus::Code(3)));
    assert_eq!((f.threads, f.user_ns, tool.runtime_ns), (2, 50, 50));
    assert_eq!(
        f.images[0].1,
        [b"sh".to_vec(), b"-c".to_vec(), b"x".to_vec()]
    );
    assert_eq!(f.images[0].3, Some(300));
    assert_eq!(
        (f.images[1].1.clone(), f.images[1].2),
        (
            vec![b"tool".to_vec(), b"aaa".to_vec(), b"bbbb".to_vec()],
            true
        )
    );
    assert_eq!(f.images[1].3, Some(60));
    assert_eq!(tool.left_peak_pages, 300);
    let spawn = facts(ended.iter().find(|t| t.pid == 12).expect("spawn"));
    // The vfork child's first image ran on the shell's memory: none of it is its own.
    assert_eq!(spawn.images[0].3, Some(0));
    assert!(spawn.images[0].4);
    assert_eq!((spawn.images[1].3, spawn.images[1].4), (Some(40), false));
    assert_eq!((all.stats.args_gaps, bounded.stats.args_gaps), (0, 0));
}

#[test]
fn the_live_set_evicts_and_stays_within_its_bounds() {
    let max = 64;
    let mut s = live(max);
    let init = (1, 1);
    s.apply(exec(init, 2, "/sbin/init", b"init\0", 5));
    // A chain of 200 processes, each exiting while its child runs: ghosts, bounded.
    let mut parent = init;
    for i in 0..200u32 {
        let child = (1000 + i, 1000 + u64::from(i));
        s.apply(fork(parent, child, 0));
        if parent != init {
            assert!(s.apply(exit(parent, child.1 + 1, 0, 1, true, 1)).is_some());
        }
        parent = child;
    }
    let ghost_cap = (max / 4).max(64);
    assert!(s.ghost_count() <= ghost_cap, "{} ghosts", s.ghost_count());
    assert!(s.stats.ghosts_evicted > 0);
    // A fork storm beyond the bound: counted, never held.
    for pid in 5000..6000u32 {
        s.apply(fork(init, (pid, u64::from(pid) * 10), 0));
        assert!(s.live() <= max, "{} live", s.live());
    }
    assert!(s.stats.full >= 1000 - max as u64, "{}", s.stats.full);
    // Every live process ends: the set and its ghosts empty out.
    let pids: Vec<P> = (5000..6000u32)
        .map(|p| (p, u64::from(p) * 10))
        .filter(|&(p, _)| s.live_get(p).is_some())
        .chain([parent, init])
        .collect();
    for p in pids {
        let t = s.apply(exit(p, 1 << 40, 0, 1, true, 1)).expect("ended");
        assert!(t.known, "pid {}", p.0);
    }
    assert_eq!((s.live(), s.ghost_count()), (0, 0));
}

#[test]
fn a_reused_pid_is_another_process() {
    let (old, new) = ((50, 10), (50, 30));
    let events = [
        exec(old, 11, "/bin/old", b"old\0", 4),
        // The old one's exit is lost; a new process gets pid 50.
        fork((1, 1), new, 0),
        exec(new, 31, "/bin/new", b"new\0", 4),
    ];
    let mut all = Store::with(Kept::new(1, 0));
    let mut bounded = live(100);
    for ev in events {
        all.apply(ev.clone());
        bounded.apply(ev);
    }
    // Trace keeps both; the live set replaces the stale one and counts it.
    let exe = |p: &Process| p.images.last().map(|i| i.exe().to_vec());
    assert_eq!(
        exe(all
            .get(&Key {
                tgid: 50,
                start_ns: 10
            })
            .expect("old")),
        Some(b"/bin/old".to_vec())
    );
    assert_eq!(
        exe(all
            .get(&Key {
                tgid: 50,
                start_ns: 30
            })
            .expect("new")),
        Some(b"/bin/new".to_vec())
    );
    assert_eq!(bounded.stats.stale, 1);
    let t = bounded.live_get(50).expect("new");
    assert_eq!(
        (t.start_ns, t.image().exe.as_ref()),
        (30, b"/bin/new".as_slice())
    );
    // A late record of the old process does not touch the new one.
    bounded.apply(image_end(old, 40, 7));
    assert_eq!(
        bounded.live_get(50).map(|t| t.start_ns),
        Some(30),
        "a late record of the older process left the newer one's entry"
    );
    assert_eq!(bounded.stats.stale, 1, "a late record is not a stale entry");
    // A record of a process newer than the one held: that one's exit was lost, it goes.
    bounded.apply(image_end((50, 60), 70, 7));
    assert_eq!(
        bounded.live_get(50).map(|t| t.start_ns),
        None,
        "stale entry dropped"
    );
    assert_eq!(bounded.stats.stale, 2);
}

#[test]
fn one_group_exit_per_process() {
    let p = (7, 70);
    let events = [
        exec(p, 71, "/bin/x", b"x\0", 2),
        thread(p, 8, 72),
        // Two threads both seen as the last one (kernels before 6.16).
        exit(p, 80, 1 << 8, 5, true, 100),
        exit(p, 81, 9, 6, true, 40),
    ];
    let mut all = Store::with(Kept::new(7, 1));
    let mut bounded = live(100);
    let mut ended = Vec::new();
    for ev in events {
        all.apply(ev.clone());
        ended.extend(bounded.apply(ev));
    }
    assert_eq!(
        (all.stats.duplicate_exits, bounded.stats.duplicate_exits),
        (1, 1)
    );
    assert_eq!(ended.len(), 1, "one end reported");
    let r = all.root().expect("root");
    // The first end stands; the second is a thread's: its CPU counts.
    assert_eq!(
        (r.end_ns.get(), r.exit.get()),
        (Some(80), Some(ExitStatus::Code(1)))
    );
    assert_eq!(r.images[0].peak_rss_pages(), Some(5));
    assert_eq!(r.user_ns, 140);
    assert_eq!(ended[0].exit.get(), Some(ExitStatus::Code(1)));
}

/// A release record.
fn reap(p: P, ts: u64, at_switch: bool, rtime_ns: u64) -> Event {
    Event::Reap(ReapEvent {
        hdr: EventHeader {
            kind: kind::REAP,
            flags: if at_switch { flags::REAP_AT_SWITCH } else { 0 },
            ..hdr(p, ts)
        },
        rtime_ns,
        utime_ns: rtime_ns,
        ..ReapEvent::default()
    })
}

/// A release record sent at the last switch moves the process's end (and its last image's)
/// from its exit to that switch: the teardown between is in its CPU time. One sent at the
/// free, or before the exit was seen, moves nothing.
#[test]
fn the_last_switch_ends_a_process_past_its_exit_teardown() {
    let p = (7, 70);
    let ends = |events: &[Event]| {
        let mut all = Store::with(Kept::new(7, 1));
        for ev in events {
            all.apply(ev.clone());
        }
        let r = all.root().expect("root").clone();
        (
            r.end_ns.get(),
            r.images[0].end_ns.get(),
            r.user_ns,
            r.cpu_final,
        )
    };
    let run = [exec(p, 71, "/bin/x", b"x\0", 2), exit(p, 80, 0, 5, true, 9)];
    let with = |r: Event| -> Vec<Event> { run.iter().cloned().chain([r]).collect() };
    assert_eq!(
        ends(&with(reap(p, 95, true, 12))),
        (Some(95), Some(95), 12, true)
    );
    // At the free, a grace period later: not when it stopped running.
    assert_eq!(
        ends(&with(reap(p, 5000, false, 12))),
        (Some(80), Some(80), 12, true)
    );
    // Before the exit (out of order): the exit's time stands.
    let early = [
        exec(p, 71, "/bin/x", b"x\0", 2),
        reap(p, 95, true, 12),
        exit(p, 80, 0, 5, true, 9),
    ];
    assert_eq!(ends(&early).0, Some(80));
}

#[test]
fn argv_over_records_shows_partial_in_trace_whole_in_watch() {
    let p = (5, 50);
    let mut all = Store::with(Kept::new(5, 1));
    let mut bounded = live(100);
    for_both!(s in [all, bounded] {
        s.apply(exec(p, 51, "/bin/cc", b"cc\0-o", 12));
        s.apply(args(p, 52, 5, b"\0a.out"));
    });
    let argv = |i: &Image| i.argv().map(<[u8]>::to_vec).collect::<Vec<_>>();
    // Trace shows what arrived; watch waits for every byte.
    assert_eq!(
        argv(&all.root().expect("root").images[0]),
        [b"cc".to_vec(), b"-o".to_vec(), b"a.out".to_vec()]
    );
    assert_eq!(argv(&bounded.live_get(5).expect("cc").images[0]).len(), 2);
    assert!(bounded.live_get(5).expect("cc").argv_pending());
    // A record out of place is a gap, in both.
    for_both!(s in [all, bounded] {
        s.apply(args(p, 53, 99, b"x"));
        assert_eq!(s.stats.args_gaps, 1);
        s.apply(args(p, 54, 11, b"\0"));
    });
    let whole = [b"cc".to_vec(), b"-o".to_vec(), b"a.out".to_vec()];
    assert_eq!(argv(&all.root().expect("root").images[0]), whole);
    let t = bounded.live_get(5).expect("cc");
    assert_eq!(argv(&t.images[0]), whole);
    assert!(t.images[0].argv_complete() && !t.argv_pending());
    // A process that ends mid-stream keeps what came.
    let q = (6, 60);
    bounded.apply(exec(q, 61, "/bin/y", b"y\0", 20));
    bounded.apply(args(q, 62, 2, b"zz"));
    let t = bounded.apply(exit(q, 63, 0, 1, true, 1)).expect("ended");
    assert_eq!(argv(&t.images[0]), [b"y".to_vec(), b"zz".to_vec()]);
    assert!(!t.images[0].argv_complete());
}

#[test]
fn a_seeded_process_takes_the_exact_start_and_its_records_say_the_rest() {
    let mut s = live(100);
    let cron = || Names {
        exe: b"/usr/sbin/cron".as_slice().into(),
        args: b"cron\0-f".as_slice().into(),
        argv_complete: true,
        ..Names::default()
    };
    s.apply(exec((1, 1), 2, "/sbin/init", b"init\0", 5));
    s.insert_seeded(Tracked::seeded(40, 1, 1_000_000_000, Arc::new(cron())));
    s.insert_seeded(Tracked::seeded(41, 1, 1_000_000_000, Arc::new(cron())));
    // 7 ms off (a /proc clock tick): the same process.
    s.apply(image_end((41, 1_007_000_000), 5, 1));
    let t = s.live_get(41).expect("seeded");
    assert_eq!((t.start_ns, t.seeded), (1_007_000_000, true));
    assert_eq!(t.image().exe.as_ref(), b"/usr/sbin/cron");
    assert_eq!(t.exec_ns(), 0, "no exec seen");
    // Its fork was seen: it started after the attach, and its exec record is still to come.
    s.apply(fork((1, 1), (40, 1_007_000_000), 0));
    let t = s.live_get(40).expect("forked");
    assert_eq!((t.start_ns, t.seeded, t.ppid), (1_007_000_000, false, 1));
    assert_eq!(t.image().exe.as_ref(), b"/sbin/init");
    s.apply(exec(
        (40, 1_007_000_000),
        1_008_000_000,
        "/usr/sbin/cron",
        b"cron\0-f\0",
        8,
    ));
    let t = s.live_get(40).expect("exec'd");
    assert_eq!(t.images.len(), 2);
    assert!(t.images[0].inherited && !t.images[0].read_at_attach);
    assert_eq!(
        t.image().as_ref(),
        &Names {
            comm: t.image().comm,
            ..cron()
        }
    );
    assert_eq!(s.stats.stale, 0);
    // A record a second off is another process.
    s.apply(image_end((41, 2_007_000_000), 5, 1));
    assert_eq!(s.stats.stale, 1);
}

#[test]
fn an_untracked_child_is_not_waited_for() {
    let root = (7, 70);
    let mut all = Store::with(Kept::new(7, 1));
    all.apply(exec(root, 71, "/bin/sh", b"sh\0", 3));
    all.apply(fork(root, (8, 80), 0));
    all.apply(fork(root, (9, 90), flags::FORK_UNTRACKED));
    assert_eq!(
        all.live(),
        2,
        "root and the tracked child; not the untracked one"
    );
    all.apply(exit(root, 100, 0, 5, true, 10));
    all.apply(exit((8, 80), 101, 0, 5, true, 10));
    assert_eq!(all.live(), 0, "nothing left to wait for");
    let untracked = all
        .processes()
        .iter()
        .find(|p| p.pid == 9)
        .expect("the untracked child is in the tree");
    assert!(untracked.untracked() && untracked.end_ns.is_none());
}

#[test]
fn execs_with_the_same_names_share_them_and_streaming_argv_stays_its_own() {
    let mut all = Store::with(Kept::new(5, 1));
    all.apply(exec((5, 50), 51, "/bin/make", b"make\0", 5));
    for (i, tgid) in (10..13u32).enumerate() {
        let ts = 100 + i as u64 * 10;
        all.apply(fork((5, 50), (tgid, ts), 0));
        all.apply(exec((tgid, ts), ts + 1, "/bin/true", b"/bin/true\0", 10));
    }
    // One still streaming: its own names, completed in place.
    all.apply(fork((5, 50), (20, 200), 0));
    all.apply(exec((20, 200), 201, "/bin/true", b"/bin/true\0", 12));
    all.apply(args((20, 200), 202, 10, b"x\0"));
    let names = |tgid: u32| {
        let p = all.get(&Key {
            tgid,
            start_ns: if tgid == 20 {
                200
            } else {
                100 + (tgid as u64 - 10) * 10
            },
        });
        Arc::clone(&p.expect("traced").images[1].names)
    };
    assert!(Arc::ptr_eq(&names(10), &names(11)) && Arc::ptr_eq(&names(11), &names(12)));
    assert_eq!(names(10).argv().collect::<Vec<_>>(), [b"/bin/true"]);
    assert!(!Arc::ptr_eq(&names(10), &names(20)));
    assert_eq!(
        names(20).argv().collect::<Vec<_>>(),
        [&b"/bin/true"[..], b"x"]
    );
    assert_eq!(
        names(10).argv().count(),
        1,
        "the shared names were not changed"
    );
}

/// A memory figure above what an image keeps (`image_mem::MAX_PAGES`: 2^40 pages, beyond any
/// 4-level address space) reads as unknown and is counted; the figures that fit stay exact.
#[test]
fn figures_out_of_range_are_unknown_and_counted() {
    use crate::model::image_mem::MAX_PAGES;
    let (sh, big) = ((10, 100), (11, 200));
    let vm = |p: P, ts: u64, vm: u64| {
        let mut m = mem(7);
        m.hiwater_vm_pages = vm;
        Event::ImageEnd(ImageEndEvent {
            hdr: EventHeader {
                kind: kind::IMAGE_END,
                ..hdr(p, ts)
            },
            mem: m,
        })
    };
    let mut all = Store::with(Kept::new(10, 1));
    let mut bounded = live(100);
    for_both!(s in [all, bounded] {
        for ev in [
            exec(sh, 101, "/bin/sh", b"sh\0", 3),
            fork(sh, big, 0),
            vm(big, 205, MAX_PAGES),
            exec(big, 206, "/bin/big", b"big\0", 4),
            vm(big, 300, MAX_PAGES + 1),
        ] {
            s.apply(ev);
        }
        assert_eq!(s.stats.figures_out_of_range, 1, "one figure did not fit");
    });
    let p = all
        .get(&Key {
            tgid: big.0,
            start_ns: big.1,
        })
        .expect("kept");
    let (first, second) = (&p.images[0], &p.images[1]);
    assert_eq!(
        (first.peak_vm_pages(), first.peak_rss_pages()),
        (Some(MAX_PAGES), Some(7))
    );
    assert_eq!(
        second.peak_vm_pages(),
        None,
        "out of range reads as unknown"
    );
    assert_eq!(second.peak_rss_pages(), Some(7), "the RSS figures did fit");
    assert!(!p.images.spilled(), "a fork+exec's two images are inline");
}
