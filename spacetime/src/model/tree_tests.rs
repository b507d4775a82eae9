//! Unit tests of [`crate::model::tree`].

use super::*;
use crate::kernel::events::records::{self, fork_record as fork};
use spacetime_common::{kind, EventHeader, MemStats};

fn hdr(kind: u16, tgid: u32, pid: u32, start: u64, ts: u64) -> EventHeader {
    EventHeader {
        pid,
        ..records::hdr(kind, (tgid, start), ts)
    }
}

fn exec(p: (u32, u64), ts: u64, exe: &str, args: &[u8]) -> Event {
    Event::Exec(records::exec(p, ts, exe, args, args.len()))
}

/// argv as text, for comparisons.
fn argv(img: &Image) -> Vec<String> {
    img.argv()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

fn mem(rss: u64, hiwater: u64) -> MemStats {
    MemStats {
        hiwater_rss_pages: hiwater,
        rss_anon_pages: rss,
        flags: flags::MEM_VALID | flags::MEM_EXACT,
        ..MemStats::default()
    }
}

fn exit(p: (u32, u64), ts: u64, code: u32, m: MemStats) -> Event {
    let mut h = hdr(kind::EXIT, p.0, p.0, p.1, ts);
    h.flags = flags::EXIT_GROUP_DEAD;
    Event::Exit(ExitEvent {
        hdr: h,
        mem: m,
        exit_code: code,
        ..ExitEvent::default()
    })
}

fn image_end(p: (u32, u64), ts: u64, m: MemStats) -> Event {
    Event::ImageEnd(ImageEndEvent {
        hdr: hdr(kind::IMAGE_END, p.0, p.0, p.1, ts),
        mem: m,
    })
}

#[test]
fn exec_trap_keeps_one_entry_with_two_images() {
    let root = (100, 1);
    let mut t = Tree::new(100, 0);
    t.apply(exec(root, 2, "/bin/big", b"big\0"));
    t.apply(image_end(root, 10, mem(1000, 76800)));
    t.apply(exec(root, 11, "/bin/small", b"small\0-x\0"));
    t.apply(exit(root, 20, 0, mem(300, 100)));
    let p = t.root().expect("root");
    assert_eq!(t.processes().len(), 1);
    assert_eq!(p.images.len(), 2);
    assert_eq!(p.images[0].peak_rss_pages(), Some(76800));
    assert_eq!(p.images[1].peak_rss_pages(), Some(300));
    assert_eq!(argv(&p.images[1]), ["small", "-x"]);
    assert_eq!(p.peak_rss_pages(), 76800);
    assert_eq!(p.exit.get(), Some(ExitStatus::Code(0)));
}

#[test]
fn pid_reuse_never_merges_processes() {
    let mut t = Tree::new(1, 0);
    t.apply(exec((1, 0), 1, "/sh", b"sh\0"));
    t.apply(fork((1, 0), (50, 10), 10, 0));
    t.apply(exit((50, 10), 20, 0, mem(5, 5)));
    // pid 50 again, a different process.
    t.apply(fork((1, 0), (50, 30), 30, 0));
    t.apply(exec((50, 30), 31, "/bin/true", b"true\0"));
    t.apply(exit((50, 30), 40, 256, mem(7, 7)));
    let a = t
        .get(&Key {
            tgid: 50,
            start_ns: 10,
        })
        .expect("first 50");
    let b = t
        .get(&Key {
            tgid: 50,
            start_ns: 30,
        })
        .expect("second 50");
    assert_eq!(a.images.len(), 1);
    assert_eq!(b.images.len(), 2);
    assert_eq!(a.exit.get(), Some(ExitStatus::Code(0)));
    assert_eq!(b.exit.get(), Some(ExitStatus::Code(1)));
    assert_eq!(t.processes().len(), 3);
}

#[test]
fn reparented_orphan_keeps_its_fork_parent() {
    let mut t = Tree::new(1, 0);
    t.apply(exec((1, 0), 1, "/w", b"w\0"));
    t.apply(fork((1, 0), (2, 5), 5, 0));
    t.apply(fork((2, 5), (3, 6), 6, 0));
    t.apply(exit((2, 5), 7, 0, mem(1, 1)));
    t.apply(exit((1, 0), 8, 0, mem(1, 1)));
    // The kernel reparents 3; only its exit is seen afterwards.
    t.apply(exit((3, 6), 100, 0, mem(1, 1)));
    let orphan = t
        .get(&Key {
            tgid: 3,
            start_ns: 6,
        })
        .expect("orphan");
    assert_eq!(orphan.ppid, 2);
    assert_eq!(orphan.end_ns, Some(100));
    assert_eq!(argv(&orphan.images[0]), ["w"]);
}

#[test]
fn events_out_of_order_still_build_the_process() {
    let mut t = Tree::new(1, 0);
    t.apply(exec((1, 0), 1, "/sh", b"sh\0-c\0"));
    // The child's exec and exit arrive before its fork.
    t.apply(exec((9, 4), 6, "/bin/ls", b"ls\0"));
    t.apply(exit((9, 4), 8, 2 << 8, mem(10, 12)));
    t.apply(fork((1, 0), (9, 4), 4, 0));
    let c = t
        .get(&Key {
            tgid: 9,
            start_ns: 4,
        })
        .expect("child");
    assert_eq!(c.ppid, 1);
    assert_eq!(c.images.len(), 2);
    assert!(c.images[0].inherited);
    assert_eq!(argv(&c.images[0]), ["sh", "-c"]);
    assert_eq!(c.images[0].end_ns, Some(6));
    assert_eq!(c.images[1].exe(), b"/bin/ls");
    assert_eq!(c.images[1].peak_rss_pages(), Some(12));
    assert_eq!(c.exit.get(), Some(ExitStatus::Code(2)));
}

#[test]
fn threads_and_shared_mm() {
    let mut t = Tree::new(1, 0);
    t.apply(exec((1, 0), 1, "/w", b"w\0"));
    for i in 0..3 {
        t.apply(fork((1, 0), (1, 0), 2 + i, flags::FORK_THREAD));
    }
    t.apply(fork((1, 0), (7, 9), 9, flags::FORK_SHARED_MM));
    t.apply(image_end((7, 9), 10, mem(5000, 5000)));
    t.apply(exec((7, 9), 10, "/bin/true", b"true\0"));
    t.apply(exit((7, 9), 11, 0, mem(40, 50)));
    assert_eq!(t.root().expect("root").threads, 4);
    let c = t
        .get(&Key {
            tgid: 7,
            start_ns: 9,
        })
        .expect("spawned");
    assert_eq!(
        c.images[0].peak_rss_pages(),
        Some(0),
        "the parent's memory is not the child's"
    );
    assert_eq!(c.peak_rss_pages(), 50);
}

#[test]
fn argv_continuations_assemble_and_gaps_are_counted() {
    let mut t = Tree::new(1, 0);
    let mut e = exec((1, 0), 1, "/w", b"aaaa");
    if let Event::Exec(x) = &mut e {
        x.args_len = 10;
    }
    t.apply(e);
    let args = |off: u32, d: &[u8]| {
        Event::Args(Args {
            hdr: hdr(kind::ARGS, 1, 1, 0, 1),
            offset: off,
            data: d.to_vec(),
        })
    };
    t.apply(args(4, b"\0bbb"));
    assert!(!t.root().expect("root").images[0].argv_complete());
    t.apply(args(8, b"c\0"));
    let img = &t.root().expect("root").images[0];
    assert!(img.argv_complete());
    assert_eq!(argv(img), ["aaaa", "bbbc"]);
    t.apply(args(99, b"x"));
    assert_eq!(t.stats.args_gaps, 1);
}

fn mm_peak(p: (u32, u64), since: u64, pages: u64) -> Event {
    let mut h = hdr(kind::RSS, p.0, p.0, p.1, since);
    h.flags = flags::RSS_MM_PEAK;
    Event::Rss(RssEvent {
        hdr: h,
        rss_pages: pages,
        ..RssEvent::default()
    })
}

#[test]
fn followed_peaks_go_to_the_image_running_when_following_began() {
    let root = (100, 1);
    let mut t = Tree::new(100, 0);
    t.apply(exec(root, 10, "/bin/big", b"big\0"));
    t.apply(image_end(root, 50, mem(100, 90)));
    t.apply(exec(root, 51, "/bin/small", b"small\0"));
    // The old mm's end arrives after the new image started; it is dated by its start.
    t.apply(mm_peak(root, 11, 80_000));
    // The small image freed 5000 pages before exiting: hiwater lags, the followed peak not.
    t.apply(exit(root, 90, 0, mem(200, 150)));
    t.apply(mm_peak(root, 52, 5000));
    let p = t.root().expect("root");
    assert_eq!(p.images[0].peak_rss_pages(), Some(80_000));
    assert_eq!(p.images[1].peak_rss_pages(), Some(5000));
    assert!(p.images[1].exact());
}

#[test]
fn wait_status_decoding() {
    assert_eq!(ExitStatus::from_wait(3 << 8).shell_code(), 3);
    assert_eq!(ExitStatus::from_wait(9).shell_code(), 137);
    assert_eq!(
        ExitStatus::from_wait(0x80 | 11),
        ExitStatus::Signal {
            signal: 11,
            core_dumped: true
        }
    );
    assert_eq!(cputime::split_runtime(100, 3, 1), (75, 25));
    assert_eq!(cputime::split_runtime(100, 0, 0), (100, 0));
}

/// Inside a PID namespace: keyed by the kernel's pids, shown with the namespace's from the
/// fork records; a process whose fork was not seen shows 0, never a kernel pid.
#[test]
fn namespace_pids_are_shown_kernel_pids_are_keys() {
    let (root, child, lost) = ((5000, 1), (5001, 2), (5002, 3));
    let mut t = Tree::new(5000, 1).in_namespace(7);
    t.apply(exec(root, 1, "/bin/sh", b"sh\0"));
    let Event::Fork(mut f) = fork(root, child, 2, 0) else {
        unreachable!()
    };
    f.child_ns_tgid = 8;
    t.apply(Event::Fork(f));
    t.apply(exit(lost, 3, 0, mem(1, 1)));
    let r = t.root().expect("root");
    assert_eq!((r.pid, r.ppid), (7, 1));
    let c = t
        .get(&Key {
            tgid: 5001,
            start_ns: 2,
        })
        .expect("child");
    assert_eq!((c.pid, c.ppid), (8, 7));
    assert_eq!(
        c.parent(),
        Some(Key {
            tgid: 5000,
            start_ns: 1
        })
    );
    let l = t
        .get(&Key {
            tgid: 5002,
            start_ns: 3,
        })
        .expect("lost fork");
    assert_eq!(l.pid, 0);
    assert!(t.knows_tgid(5000) && t.knows_tgid(5001));
}

/// The taskstats filter asks for a tgid's latest process: the one started last, whatever the
/// order its records came in; an adopted tgid is known before it has a process.
#[test]
fn latest_with_tgid_is_the_last_started() {
    let root = (100, 1);
    let mut t = Tree::new(100, 0);
    t.apply(exec(root, 2, "/bin/sh", b"sh\0"));
    t.apply(fork(root, (7, 10), 10, 0));
    t.apply(exit((7, 10), 11, 0, mem(1, 1)));
    t.apply(fork(root, (7, 20), 20, 0));
    // An earlier holder of pid 7 named late (its fork lost): not the latest.
    t.apply(exit((7, 5), 6, 0, mem(1, 1)));
    let latest = t.latest_with_tgid(7).expect("pid 7 traced");
    assert_eq!((latest.start_ns, latest.end_ns.get()), (20, None));
    assert_eq!(t.latest_with_tgid(100).map(|p| p.start_ns), Some(1));
    assert!(t.latest_with_tgid(8).is_none() && !t.knows_tgid(8));
    t.adopt(Adopted {
        tgid: 9,
        ppid: 1,
        start_ns: 3,
        threads: 1,
        names: Names::default(),
        attach_ns: 4,
    });
    assert!(t.knows_tgid(9) && t.latest_with_tgid(9).is_none());
    t.settle();
    assert!(t.latest_with_tgid(7).is_none() && t.knows_tgid(7));
}
