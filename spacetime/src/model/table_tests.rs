//! Unit tests of the live process table: images and argv streaming, peaks, stale entries,
//! ghosts for ancestry, `--pid-tree` membership, bounds.

use spacetime_common::{flags, kind, EventHeader, ExitEvent, ImageEndEvent, MemStats};

use super::table::{Ancestor, Names, Table, TableOptions};
use crate::kernel::events::records::{self, hdr};
use crate::kernel::events::{Args, Exec};

fn opts(max: usize) -> TableOptions {
    TableOptions {
        max_processes: max,
        ancestry: true,
        images: true,
        threads: true,
    }
}

fn fork(t: &mut Table, parent: (u32, u64), child: (u32, u64)) {
    t.fork(&records::fork(parent, child, child.1, 0));
}

fn thread(t: &mut Table, p: (u32, u64), tid: u32) {
    t.fork(&records::thread(p, tid, p.1 + 1));
}

fn exec(t: &mut Table, p: (u32, u64), exe: &str, area: &[u8], total: usize) {
    t.exec(Exec {
        comm: exe.rsplit('/').next().unwrap_or(exe).into(),
        ..records::exec(p, p.1 + 10, exe, area, total)
    });
}

fn mem(pages: u64) -> MemStats {
    MemStats {
        hiwater_rss_pages: pages,
        flags: flags::MEM_VALID | flags::MEM_EXACT,
        ..MemStats::default()
    }
}

fn exit(t: &mut Table, p: (u32, u64), pages: u64, anc: &mut Vec<Ancestor>) -> super::table::Entry {
    try_exit(t, p, pages, anc).expect("not a duplicate")
}

fn try_exit(
    t: &mut Table,
    p: (u32, u64),
    pages: u64,
    anc: &mut Vec<Ancestor>,
) -> Option<super::table::Entry> {
    let mut h = hdr(kind::EXIT, p, p.1 + 100);
    h.flags = flags::EXIT_GROUP_DEAD;
    t.exit(
        &ExitEvent {
            hdr: h,
            mem: mem(pages),
            runtime_ns: 10,
            utime_ns: 1,
            stime_ns: 1,
            ..ExitEvent::default()
        },
        anc,
    )
}

fn argv(i: &Names) -> Vec<String> {
    i.argv()
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

#[test]
fn fork_exec_streamed_argv_and_peaks() {
    let mut t = Table::new(opts(100));
    let (a, b) = ((10, 1000), (11, 2000));
    exec(&mut t, a, "/bin/sh", b"sh\0-c\0x\0", 9);
    fork(&mut t, a, b);
    thread(&mut t, b, 12);
    assert_eq!(argv(&t.get(11).expect("child").image), ["sh", "-c", "x"]);
    t.image_end(&ImageEndEvent {
        hdr: hdr(kind::IMAGE_END, b, 2005),
        mem: mem(300),
    });
    // argv arrives in two records.
    exec(&mut t, b, "/bin/tool", b"tool\0aa", 11);
    assert!(!t.get(11).expect("b").image.argv_complete);
    t.args(Args {
        hdr: hdr(kind::ARGS, b, 2011),
        offset: 7,
        data: b"\0bb\0".to_vec(),
    });
    let mut anc = Vec::new();
    let e = exit(&mut t, b, 5, &mut anc);
    assert!(e.known && e.image.argv_complete);
    assert_eq!(argv(&e.image), ["tool", "aa", "bb"]);
    assert_eq!(&*e.image.exe, b"/bin/tool");
    assert_eq!(e.ppid, 10);
    assert_eq!(e.threads, 2);
    assert_eq!(e.left_peak_pages, 300);
    assert_eq!(e.images.len(), 1);
    assert_eq!(argv(&e.images[0].image), ["sh", "-c", "x"]);
    assert_eq!(e.images[0].peak_rss_pages, Some(300));
    assert_eq!((e.user_ns + e.sys_ns, e.runtime_ns), (10, 10));
    assert_eq!(anc.len(), 1);
    assert_eq!(anc[0].pid, 10);
    assert!(t.get(11).is_none(), "evicted on exit");
    // A second end record for the same process (two threads exiting at once, old kernels).
    assert!(try_exit(&mut t, b, 5, &mut anc).is_none());
    assert_eq!(t.stats.duplicate_exits, 1);
}

#[test]
fn pid_reuse_is_not_confused() {
    let mut t = Table::new(opts(100));
    exec(&mut t, (20, 100), "/bin/old", b"old\0", 4);
    // pid 20's exit was lost; a new process 20 exits: not the old entry.
    let mut anc = Vec::new();
    let e = exit(&mut t, (20, 900), 1, &mut anc);
    assert!(!e.known);
    assert_eq!(t.stats.stale, 1);
    assert_eq!(t.stats.unknown_exits, 1);
    assert!(t.get(20).is_none());
}

#[test]
fn ghosts_keep_the_chain_while_descendants_live() {
    let mut t = Table::new(opts(100));
    let (a, b, c, d) = ((1, 10), (2, 20), (3, 30), (4, 40));
    exec(&mut t, a, "/sbin/init", b"init\0", 5);
    fork(&mut t, a, b);
    fork(&mut t, b, c);
    fork(&mut t, c, d);
    let mut anc = Vec::new();
    // c and b exit while d runs: both stay as ghosts.
    exit(&mut t, c, 1, &mut anc);
    exit(&mut t, b, 1, &mut anc);
    assert_eq!(t.ghost_count(), 2);
    exit(&mut t, d, 1, &mut anc);
    let chain: Vec<(u32, bool)> = anc.iter().map(|x| (x.pid, x.exited)).collect();
    assert_eq!(chain, [(3, true), (2, true), (1, false)]);
    // d was the last one holding them.
    assert_eq!(t.ghost_count(), 0);
    assert_eq!(t.len(), 1);
}

#[test]
fn seeded_entries_adopt_the_exact_start() {
    let mut t = Table::new(opts(100));
    let img = Names {
        exe: b"/usr/sbin/cron".as_slice().into(),
        comm: "cron".into(),
        args: b"cron\0-f".as_slice().into(),
        argv_complete: true,
    };
    t.insert_seeded(Table::seeded_entry(50, 1, 1_000_000_000, img));
    t.finish_seeding(Some(50), &[(50, 3)].into_iter().collect());
    assert_eq!(t.get(50).expect("seeded").threads, 3);
    // A record 7 ms off (the /proc clock tick): the same process.
    fork(&mut t, (50, 1_007_000_000), (51, 2_000_000_000));
    let child = t.get(51).expect("child");
    assert!(child.in_tree, "descendant of --pid-tree");
    assert_eq!(argv(&child.image), ["cron", "-f"]);
    assert_eq!(t.get(50).expect("parent").start_ns, 1_007_000_000);
    // Not in the tree: forked by another process.
    fork(&mut t, (51, 2_000_000_000), (52, 3_000_000_000));
    assert!(t.get(52).expect("grandchild").in_tree);
    fork(&mut t, (1, 5), (53, 4_000_000_000));
    assert!(!t.get(53).expect("other").in_tree);
}

#[test]
fn the_table_is_bounded() {
    let mut t = Table::new(opts(3));
    for pid in 100..110 {
        fork(&mut t, (1, 1), (pid, u64::from(pid)));
    }
    assert_eq!(t.len(), 3);
    assert!(t.stats.full >= 7);
    let mut anc = Vec::new();
    let e = exit(&mut t, (109, 109), 1, &mut anc);
    assert!(!e.known);
}

#[test]
fn processes_started_while_attaching_are_checked_once() {
    let mut t = Table::new(opts(100));
    t.set_attached(1_000);
    // Forked before the exit program was attached (its exit may be missing), and after.
    fork(&mut t, (1, 1), (60, 500));
    fork(&mut t, (1, 1), (61, 600));
    fork(&mut t, (1, 1), (62, 2_000));
    // 60 is gone, 61 still runs.
    t.verify_early(|pid| (pid == 61).then_some(600));
    assert!(t.get(60).is_none());
    assert!(t.get(61).is_some() && t.get(62).is_some());
    assert_eq!(t.stats.missed_at_start, 1);
}

#[test]
fn a_fork_seen_after_seeding_is_the_same_process() {
    let mut t = Table::new(opts(100));
    let img = Names::default();
    t.insert_seeded(Table::seeded_entry(70, 1, 5_000_000_000, img));
    t.finish_seeding(None, &Default::default());
    fork(&mut t, (1, 1), (70, 5_004_000_000));
    assert_eq!(t.stats.stale, 0);
    assert_eq!(t.get(70).expect("kept").start_ns, 5_004_000_000);
}

#[test]
fn a_cut_argv_streams_up_to_the_cap_and_an_exit_ends_a_stream() {
    let mut t = Table::new(opts(100));
    let (a, b) = ((10, 1000), (11, 2000));
    // Cut by the kernel at 8 bytes: the continuation still counts, the argv stays incomplete.
    t.exec(Exec {
        hdr: EventHeader {
            flags: flags::EXEC_ARGS_TRUNCATED,
            ..hdr(kind::EXEC, a, 1010)
        },
        old_pid: 10,
        uid: 0,
        cgroup_id: 0,
        comm: "tool".into(),
        filename: b"/bin/tool".to_vec(),
        args_len: 8,
        args: b"tool\0".to_vec(),
    });
    assert!(t.argv_pending(10));
    t.args(Args {
        hdr: hdr(kind::ARGS, a, 1011),
        offset: 5,
        data: b"aaa".to_vec(),
    });
    assert!(!t.argv_pending(10));
    let img = &t.get(10).expect("a").image;
    assert_eq!(
        (argv(img), img.argv_complete),
        (vec!["tool".into(), "aaa".into()], false)
    );
    assert_eq!(t.stats.args_gaps, 0);
    // An exit ends a stream whose rest never came: what arrived is kept.
    exec(&mut t, b, "/bin/x", b"x\0", 10);
    t.args(Args {
        hdr: hdr(kind::ARGS, b, 2011),
        offset: 2,
        data: b"y".to_vec(),
    });
    assert_eq!(
        argv(&t.get(11).expect("b").image),
        ["x"],
        "shown once complete"
    );
    let e = exit(&mut t, b, 1, &mut Vec::new());
    assert_eq!(
        (argv(&e.image), e.image.argv_complete),
        (vec!["x".into(), "y".into()], false)
    );
}

/// The argv budget (`--argv-budget`).
mod budget {
    use spacetime_common::{kind, EventHeader, ForkEvent};

    use super::super::table::{Table, TableOptions, KEEP_BYTES};
    use crate::kernel::events::Exec;

    /// A record's header (its kind set by the caller).
    fn hdr(pid: u32, ts: u64) -> EventHeader {
        EventHeader {
            ts_ns: ts,
            tgid: pid,
            pid,
            leader_start_ns: pid as u64,
            ..EventHeader::default()
        }
    }

    fn exec(t: &mut Table, pid: u32, area: Vec<u8>) {
        t.exec(Exec {
            hdr: EventHeader {
                kind: kind::EXEC,
                ..hdr(pid, pid as u64 + 10)
            },
            old_pid: pid,
            uid: 0,
            cgroup_id: 0,
            comm: "x".into(),
            filename: b"/bin/x".to_vec(),
            args_len: area.len() as u32,
            args: area,
        });
    }

    #[test]
    fn largest_argv_are_cut_to_stay_within_budget() {
        let mut t = Table::new(TableOptions {
            max_processes: 1000,
            ancestry: false,
            images: false,
            threads: false,
        });
        t.set_argv_budget(64 << 10);
        // 20 small argv, then big ones until the budget is checked and enforced.
        for pid in 1..=20 {
            exec(&mut t, pid, format!("small\0{pid}").into_bytes());
        }
        for pid in 100..110 {
            exec(&mut t, pid, vec![b'b'; 16 << 10]);
        }
        assert!(t.stats.argv_evicted > 0, "nothing evicted");
        // Checked every 64 KiB announced: at most that much over between checks.
        assert!(t.argv_bytes() <= 128 << 10, "{} bytes held", t.argv_bytes());
        t.enforce_argv_budget();
        assert!(
            t.argv_bytes() <= 64 << 10,
            "{} bytes held over a 64 KiB budget",
            t.argv_bytes()
        );
        // The small ones are untouched; a cut one keeps its first 256 bytes.
        for pid in 1..=20 {
            let e = t.get(pid).expect("small entry");
            assert!(e.image.argv_complete, "pid {pid} was cut");
        }
        let cut: Vec<_> = (100..110)
            .filter_map(|p| t.get(p))
            .filter(|e| !e.image.argv_complete)
            .collect();
        assert_eq!(cut.len() as u64, t.stats.argv_evicted);
        assert!(cut.iter().all(|e| e.image.args.len() == KEEP_BYTES));
    }

    #[test]
    fn a_shared_image_is_counted_and_cut_once() {
        let mut t = Table::new(TableOptions {
            max_processes: 1000,
            ancestry: false,
            images: false,
            threads: false,
        });
        t.set_argv_budget(64 << 10);
        exec(&mut t, 1, vec![b'p'; 40 << 10]);
        for child in 2..50 {
            t.fork(&ForkEvent {
                hdr: EventHeader {
                    kind: kind::FORK,
                    ..hdr(1, child as u64)
                },
                child_pid: child,
                child_tgid: child,
                child_start_ns: child as u64,
                ..ForkEvent::default()
            });
        }
        // 49 entries share one 40 KiB image: 40 KiB held, under the budget.
        assert_eq!(t.argv_bytes(), 40 << 10);
        t.enforce_argv_budget();
        assert_eq!(t.stats.argv_evicted, 0);
        exec(&mut t, 60, vec![b'q'; 40 << 10]);
        t.enforce_argv_budget();
        // Over: the parent's image goes (or the new one), cut once for every holder.
        assert_eq!(t.stats.argv_evicted, 1);
        assert!(t.argv_bytes() <= 48 << 10, "{}", t.argv_bytes());
    }
}

/// A thread's exit record that comes after its process's (before Linux 6.16 the process can
/// exit first): the thread still has its row's process, also once a newer process holds the
/// pid, which the late record leaves alone.
#[test]
fn a_thread_exit_after_its_process_still_has_its_owner() {
    let mut t = Table::new(opts(100));
    let (p, newer) = ((30, 300), (30, 5000));
    // An argv beyond what an ended process keeps: its late thread's row shows it cut.
    let long = [b"app\0".as_slice(), &[b'x'; 400]].concat();
    exec(&mut t, p, "/bin/app", &long, long.len());
    thread(&mut t, p, 31);
    let late = ExitEvent {
        hdr: EventHeader {
            pid: 31,
            ..hdr(kind::EXIT, p, p.1 + 90)
        },
        runtime_ns: 10,
        ..ExitEvent::default()
    };
    let mut anc = Vec::new();
    let e = exit(&mut t, p, 3, &mut anc);
    assert_eq!(e.threads, 2);
    assert!(t.get(30).is_none(), "the process left the table");
    exec(&mut t, newer, "/bin/newer", b"newer\0", 6);
    assert_eq!(t.thread_exit(&late), Some(p.1 + 1), "the thread's start");
    let owner = t
        .thread_owner(&late)
        .expect("the ended process owns the late thread exit");
    assert_eq!((owner.pid, owner.start_ns), p);
    assert_eq!(&*owner.image.exe, b"/bin/app");
    assert_eq!(owner.image.args.len(), super::table::KEEP_BYTES, "argv cut");
    assert!(!owner.image.argv_complete, "shown as incomplete");
    let held = t.get(30).expect("the newer process is still in the table");
    assert_eq!(held.start_ns, newer.1, "left alone by the older record");
    assert_eq!((t.stats.stale, t.stats.unowned_thread_exits), (0, 0));
    // A thread of a process never seen: no owner, counted.
    let stray = ExitEvent {
        hdr: EventHeader {
            pid: 41,
            ..hdr(kind::EXIT, (40, 400), 490)
        },
        ..ExitEvent::default()
    };
    assert!(t.thread_owner(&stray).is_none());
    assert_eq!(t.stats.unowned_thread_exits, 1);
}
