//! Unit tests of [`crate::model::pss_sum`]: the sum of a round, the exact RSS between rounds,
//! forks, exits, and when the maximum is trusted.

use super::*;

fn key(pid: u32) -> Key {
    Key {
        tgid: pid,
        start_ns: pid as u64,
    }
}

/// A read: (rss, pss, anon, pss of the anon pages), of a process that has not faulted.
fn usage(rss: u64, pss: u64, anon: u64, pss_anon: u64) -> Usage {
    Usage {
        rss_bytes: rss,
        pss_bytes: pss,
        anon_bytes: anon,
        pss_anon_bytes: Some(pss_anon),
        faulted_bytes: Some(0),
        read_faulted_bytes: None,
    }
}

/// A parent and its forked child read in one round (at 10, done at 11), each mapping the same
/// `rss` bytes of anonymous pages, shared copy-on-write: each holds half of them in its PSS.
fn forked_pair(rss: u64) -> PssSum {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(rss, rss / 2, rss, rss / 2));
    s.read(key(2), 10, usage(rss, rss / 2, rss, rss / 2));
    s.round_done(11);
    s
}

fn trusted(s: &PssSum) -> MaxPss {
    match s.figure() {
        MaxPssFigure::Trusted(m) => m,
        other => panic!("not trusted: {other:?}"),
    }
}

#[test]
fn new_anonymous_pages_count_whole_between_rounds() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(120, 30, 20, 20));
    s.round_done(11);
    assert_eq!(s.now(), (30, 0));
    // 100 new anonymous pages: private.
    s.rss(key(1), 20, 220, 120);
    assert_eq!(s.now(), (130, 0));
    let m = trusted(&s);
    assert_eq!((m.bytes, m.unseen_bytes), (130, 0));
    assert_eq!(s.series().max().map(|p| p.bytes), Some(130));
}

#[test]
fn new_file_pages_count_at_the_ratio_of_the_read() {
    let mut s = PssSum::new(1 << 10);
    // 30 file pages, PSS 10 of them: a third.
    s.read(key(1), 10, usage(40, 20, 10, 10));
    s.round_done(11);
    s.rss(key(1), 20, 70, 10);
    assert_eq!(s.now().0, 30);
}

#[test]
fn a_point_older_than_the_read_is_ignored() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 100, usage(500, 500, 500, 500));
    s.round_done(101);
    // Dated before the read: the read already counts it.
    s.rss(key(1), 90, 300, 300);
    assert_eq!(s.now().0, 500);
}

#[test]
fn a_fork_adds_nothing_and_the_next_round_says_what_was_written() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    // The child begins with its parent's 100 anonymous pages, shared: the sum stays, what
    // it may write is unseen.
    s.rss(key(2), 20, 100, 100);
    assert_eq!(s.now(), (100, 100));
    // It wrote them all: the round finds two copies.
    s.read(key(1), 30, usage(100, 100, 100, 100));
    s.read(key(2), 30, usage(100, 100, 100, 100));
    s.round_done(31);
    assert_eq!(s.now(), (200, 0));
    let m = trusted(&s);
    assert_eq!((m.bytes, m.unseen_bytes), (200, 0));
}

#[test]
fn a_child_that_only_reads_is_trusted_once_a_round_saw_it() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    s.rss(key(2), 20, 100, 100);
    // Before a round, the child may have written its pages: up to 100 more, unseen.
    assert!(matches!(s.figure(), MaxPssFigure::Uncertain(m) if m.unseen_bytes == 100));
    s.read(key(1), 30, usage(100, 50, 100, 50));
    s.read(key(2), 30, usage(100, 50, 100, 50));
    s.round_done(31);
    // Nothing was freed in between: the tree held no more than the round found; but either
    // may write what they share from now on, unseen.
    assert!(
        matches!(s.figure(), MaxPssFigure::Uncertain(m) if m.unseen_bytes == 100),
        "{:?}",
        s.figure()
    );
    // Both exit without a fault since the round: they copied nothing. The kernel sends an
    // mm's end before the exit record that says the faults (the child), or after (the parent).
    s.ended(key(2), 40);
    assert!(matches!(s.figure(), MaxPssFigure::Uncertain(_)));
    s.exit_faults(key(2), 0);
    s.exited(key(2));
    s.exit_faults(key(1), 0);
    s.ended(key(1), 41);
    s.exited(key(1));
    let m = trusted(&s);
    assert_eq!((m.bytes, m.unseen_bytes), (100, 0));
}

/// Before 6.16 a process's exit record comes after its address space is torn down, long
/// after its mm's end in a starved guest: a round in between finds it gone, and its stat (a
/// process past its mm faults no more) says its faults.
#[test]
fn a_round_between_an_mm_end_and_its_exit_record_reads_the_faults() {
    let mut s = forked_pair(100);
    s.ended(key(2), 20);
    s.read(key(1), 30, usage(100, 100, 100, 100));
    s.read_gone(key(2), Some(0));
    s.round_done(31);
    s.exit_faults(key(2), 0);
    s.exited(key(2));
    s.exit_faults(key(1), 0);
    s.ended(key(1), 40);
    s.exited(key(1));
    let m = trusted(&s);
    assert_eq!((m.bytes, m.unseen_bytes), (100, 0));
}

/// A copy-on-write copy moves no RSS counter: a child that writes what it shares after the
/// last round and exits leaves a maximum no read saw. Its faults say it may have (the shape
/// of a starved guest where no round came while the child held its written pages).
#[test]
fn a_child_that_writes_what_it_shares_after_the_last_round_is_not_trusted() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    s.rss(key(2), 20, 100, 100);
    s.read(key(1), 30, usage(100, 50, 100, 50));
    s.read(key(2), 30, usage(100, 50, 100, 50));
    s.round_done(31);
    // The child copies 60 of the 100 pages (a fault each), then exits; its parent did not
    // fault. The tree held up to 160.
    s.exit_faults(key(2), 60);
    s.ended(key(2), 40);
    s.exit_faults(key(1), 0);
    s.ended(key(1), 41);
    match s.figure() {
        MaxPssFigure::Uncertain(m) => assert_eq!((m.bytes, m.unseen_bytes), (100, 60), "{m:?}"),
        other => panic!("a maximum 60 below what the tree may have held is trusted: {other:?}"),
    }
    // Without the faults (an exit record without them): as much as they shared.
    let mut s = forked_pair(100);
    s.ended(key(2), 40);
    s.ended(key(1), 41);
    assert!(
        matches!(s.figure(), MaxPssFigure::Uncertain(m) if m.unseen_bytes == 100),
        "{:?}",
        s.figure()
    );
}

#[test]
fn what_left_before_the_round_keeps_the_bound_open() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    s.rss(key(2), 20, 100, 100);
    // The child exits before the next round: it may have held 100 pages of its own.
    s.ended(key(2), 25);
    s.round_done(31);
    assert!(
        matches!(s.figure(), MaxPssFigure::Uncertain(m) if m.bytes == 100 && m.unseen_bytes == 100),
        "{:?}",
        s.figure()
    );
}

#[test]
fn an_exec_begins_a_new_image_from_its_first_point() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(50, 40, 30, 30));
    s.round_done(11);
    s.ended(key(1), 20);
    assert_eq!(s.now().0, 0);
    // The new image's pages at its start are next to nothing; it grows 64 anonymous pages.
    s.rss(key(1), 21, 4, 2);
    s.rss(key(1), 30, 68, 66);
    assert_eq!(s.now().0, 64);
}

#[test]
fn file_pages_of_images_never_read_are_unseen() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(1000, 1000, 1000, 1000));
    s.round_done(11);
    // A new image maps 200 file pages and is never read: none to all of them its own.
    s.rss(key(2), 20, 0, 0);
    s.rss(key(2), 30, 200, 0);
    assert_eq!(s.now(), (1000, 200));
    assert!(
        matches!(s.figure(), MaxPssFigure::Uncertain(m) if (m.bytes, m.unseen_bytes) == (1000, 200)),
        "{:?}",
        s.figure()
    );
}

/// A new image's file pages never read: its anonymous pages count whole, the file pages in
/// what may be held unseen, all of them.
#[test]
fn unread_file_pages_are_all_in_the_bound() {
    let mut s = PssSum::new(1 << 10);
    // 200 file pages at PSS 50.
    s.read(key(1), 10, usage(1000, 850, 800, 800));
    s.round_done(11);
    // A new image: 2000 private anonymous pages and 400 file pages, never read.
    s.rss(key(2), 20, 0, 0);
    s.rss(key(2), 30, 2400, 2000);
    // The truth lies in 2850..=3250.
    assert_eq!(s.now(), (2850, 400));
    match s.figure() {
        MaxPssFigure::Uncertain(m) => assert_eq!((m.bytes, m.unseen_bytes), (2850, 400), "{m:?}"),
        other => panic!("400 file pages of 2850 unread is no figure: {other:?}"),
    }
}

/// A build: eight runs of one compiler start between two rounds and share their program's
/// pages. Counted at any ratio before their read, the eight copies would be a maximum the
/// tree never held; the round that reads them finds each holding an eighth of the pages.
#[test]
fn compilers_sharing_their_program_are_counted_once_read() {
    let mut s = PssSum::new(1 << 10);
    // make: 20 anonymous pages, 80 file pages at PSS 30.
    s.read(key(1), 10, usage(100, 50, 20, 20));
    s.round_done(11);
    for pid in 2..10 {
        s.rss(key(pid), 20, 0, 0);
        s.rss(key(pid), 30, 110, 10);
    }
    assert_eq!(s.now(), (50 + 8 * 10, 800));
    // Each: 10 anonymous pages and an eighth of the 100 file pages.
    s.read(key(1), 40, usage(100, 50, 20, 20));
    for pid in 2..10 {
        s.read(key(pid), 40, usage(110, 22, 10, 10));
    }
    s.round_done(41);
    let m = trusted(&s);
    assert_eq!((m.bytes, m.unseen_bytes), (50 + 8 * 22, 0), "{m:?}");
}

#[test]
fn no_round_no_figure_and_the_series_holds_the_maximum() {
    let mut s = PssSum::new(1 << 10);
    s.rss(key(1), 1, 10, 10);
    s.rss(key(1), 2, 500, 500);
    assert_eq!(s.figure(), MaxPssFigure::NotSampled);
    s.read(key(1), 3, usage(500, 480, 500, 480));
    s.round_done(3);
    // Two values at one instant: both stay in the series, so its maximum is the figure's.
    s.rss(key(1), 3, 900, 900);
    s.ended(key(1), 3);
    let m = trusted(&s);
    assert_eq!(m.bytes, 880);
    assert_eq!(s.series().max().map(|p| p.bytes), Some(880));
    assert!(s
        .series()
        .points()
        .windows(2)
        .all(|w| w[0].ts_ns < w[1].ts_ns));
}

#[test]
fn a_process_found_gone_leaves_the_sum() {
    let mut s = PssSum::new(1 << 10);
    // A parent and its fork's child share 160 pages copy-on-write: 80 each.
    s.read(key(1), 10, usage(160, 80, 160, 80));
    s.read(key(2), 10, usage(160, 80, 160, 80));
    s.round_done(11);
    // The child exits; the next round reads the parent, whole again, and finds the child
    // gone before its exit record comes.
    s.read(key(1), 30, usage(160, 160, 160, 160));
    s.read_gone(key(2), Some(0));
    s.round_done(32);
    assert_eq!(s.now(), (160, 0));
    // The exit record changes nothing (the kernel's last points after it never come here:
    // see the timeline's tests).
    s.ended(key(2), 25);
    assert_eq!(s.now(), (160, 0));
    let m = trusted(&s);
    assert_eq!((m.bytes, m.unseen_bytes), (160, 0));
}

#[test]
fn a_read_before_a_gone_ones_exit_may_gain_what_they_shared() {
    let mut s = forked_pair(160);
    // The round reads the parent while the child lives, then finds the child gone: the
    // parent holds the 160 alone now, seen at the next round.
    s.read(key(1), 30, usage(160, 80, 160, 80));
    s.read_gone(key(2), Some(0));
    s.round_done(32);
    assert_eq!(s.now(), (80, 80));
    s.read(key(1), 50, usage(160, 160, 160, 160));
    s.round_done(51);
    assert_eq!(s.now(), (160, 0));
    let m = trusted(&s);
    assert_eq!((m.bytes, m.unseen_bytes), (160, 0));
}

#[test]
fn a_failed_read_is_not_summed_with_fresher_ones() {
    let mut s = PssSum::new(1 << 10);
    // Parent and child share 100 pages: 50 each.
    s.read(key(1), 10, usage(100, 50, 100, 50));
    s.read(key(2), 10, usage(100, 50, 100, 50));
    s.round_done(11);
    assert_eq!(s.now(), (100, 0));
    // The next round reads the parent alone with the pages (the child is leaving); the
    // child's read fails: its 50 of the last round no longer back anything.
    s.read(key(1), 20, usage(100, 100, 100, 100));
    s.read_failed(key(2), 21);
    s.round_done(22);
    assert_eq!(s.now(), (100, 50), "the stale 50 is uncertain, not summed");
    assert_eq!(s.series().max().map(|p| p.bytes), Some(100));
    // It grows 30 private pages: they count; a read backs it again.
    s.rss(key(2), 30, 130, 130);
    assert_eq!(s.now(), (130, 50));
    s.read(key(2), 40, usage(130, 80, 130, 80));
    s.round_done(41);
    assert_eq!(s.now(), (180, 0));
}

#[test]
fn no_point_stays_above_the_trees_peak_rss_up_to_then() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(150, 150, 150, 150));
    s.read(key(2), 10, usage(150, 150, 150, 150));
    s.round_done(11);
    // Process 1 freed 100 before its own point came; process 2 grew 50 meanwhile: the
    // estimate says 350 where the tree never held more than 310.
    s.rss(key(2), 20, 200, 200);
    s.rss(key(1), 30, 50, 50);
    let mut tree = Series::default();
    for (t, b) in [(10, 300), (20, 310), (30, 250)] {
        tree.insert(Point::new(t, b), 1 << 10);
    }
    s.settle(&tree);
    let pts: Vec<(u64, u64)> = s
        .series()
        .points()
        .iter()
        .map(|p| (p.ts_ns, p.bytes))
        .collect();
    assert!(
        pts.contains(&(20, 310)) && pts.contains(&(30, 250)),
        "{pts:?}"
    );
    let m = s.figure();
    let MaxPssFigure::Uncertain(m) = m else {
        panic!("a maximum built 40 MiB above the tree's peak is trusted: {m:?}")
    };
    assert_eq!((m.bytes, m.over_rss_bytes), (310, 40));
    assert_eq!(m.withheld(), Some(Withheld::OverRss));
}

#[test]
fn growth_the_kernel_has_not_sent_yet_is_not_cut() {
    // A read sees what the tree's rate-limited points have not said yet: the peak's point
    // comes later, dated when it happened, and the read stands.
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 50, usage(400, 390, 400, 390));
    s.round_done(51);
    let mut tree = Series::default();
    for (t, b) in [(10, 100), (45, 400)] {
        tree.insert(Point::new(t, b), 1 << 10);
    }
    s.settle(&tree);
    let m = trusted(&s);
    assert_eq!((m.bytes, m.over_rss_bytes), (390, 0));
}

/// A process's faults count as copies only up to what it could copy: every fault before its
/// read in the round, and after it one copy of each page it shared then (at most twice what
/// sharing took off). A Python parent tearing down its objects once its workers are gone
/// faults 38 MB on pages of its own.
#[test]
fn faults_beyond_what_a_process_shared_copy_nothing() {
    let read = Usage {
        faulted_bytes: Some(10),
        read_faulted_bytes: Some(30),
        ..usage(100, 50, 100, 50)
    };
    // 20 faults between the round's start and the read, and 50 taken off: 100 pages shared.
    assert_eq!(copy_cap(&read), Some(120));
    let mut w = Window::default();
    w.close(50, (Some(10), Some(1010)), copy_cap(&read));
    assert_eq!(w.faulted, Some(120));
    // Not known (no stat at the read): every fault may be a copy.
    let unknown = Usage {
        read_faulted_bytes: None,
        ..read
    };
    assert_eq!(copy_cap(&unknown), None);
    let mut w = Window::default();
    w.close(50, (Some(10), Some(1010)), copy_cap(&unknown));
    assert_eq!(w.faulted, Some(1000));
}

/// A round that finds a process gone before its last records come (they wait in the ring,
/// or at the agent): the kernel's last point, come after, says what it held as it ended.
/// Seen once in an emulated guest: a bound 62 KiB below the truth.
#[test]
fn a_gone_ones_last_point_after_the_round_raises_that_windows_bound() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    // A fork's child writes the 100 pages it shares and grows 20 of its own, then exits;
    // the round reads the parent, whole again, and finds the child gone.
    s.rss(key(2), 20, 100, 100);
    s.read(key(1), 30, usage(100, 100, 100, 100));
    s.read_gone(key(2), Some(0));
    s.round_done(32);
    // The child's last point, held back by the kernel's rate: it ended with 120.
    s.late_rss(key(2), 28, 120);
    match s.figure() {
        MaxPssFigure::Uncertain(m) => {
            assert!(m.bytes + m.unseen_bytes >= 220, "the tree held 220: {m:?}")
        }
        other => panic!("not withheld: {other:?}"),
    }
    // A figure older than what the sum counted it from adds nothing; one after its exit
    // record is no longer asked for.
    let before = s.figure();
    s.late_rss(key(2), 5, 500);
    s.exited(key(2));
    s.late_rss(key(2), 40, 500);
    assert_eq!(s.figure(), before);
}

/// Before 6.2 a thread's RSS changes wait in its own counts until 64 faults fold them into
/// the mm's: the exit record's exact RSS, read with them, may be more than the last point.
#[test]
fn an_exit_records_exact_rss_counts_in_its_window() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    s.rss(key(2), 20, 100, 100);
    s.rss(key(2), 25, 110, 110);
    s.ended(key(2), 30);
    s.late_rss(key(2), 29, 116);
    s.read(key(1), 40, usage(100, 100, 100, 100));
    s.round_done(41);
    match s.figure() {
        MaxPssFigure::Uncertain(m) => {
            assert!(m.bytes + m.unseen_bytes >= 216, "the tree held 216: {m:?}")
        }
        other => panic!("not withheld: {other:?}"),
    }
    // From 6.16 the exit record comes before the mm's end: the process leaves the sum
    // with the larger of the two.
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    s.rss(key(2), 20, 100, 100);
    s.late_rss(key(2), 29, 116);
    s.ended(key(2), 30);
    s.read(key(1), 40, usage(100, 100, 100, 100));
    s.round_done(41);
    let m = match s.figure() {
        MaxPssFigure::Uncertain(m) => m,
        other => panic!("not withheld: {other:?}"),
    };
    assert!(m.bytes + m.unseen_bytes >= 216, "the tree held 216: {m:?}");
}

/// A process that exec'd: its first image's last figures come before its next image begins;
/// the exit record of the last image (before the mm's end from 6.16) is the last image's,
/// never measured against the first's.
#[test]
fn an_exit_after_an_exec_is_the_last_images() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    // A small shell image ends at its exec; a compiler image grows to 1000 pages.
    s.rss(key(2), 20, 10, 10);
    s.ended(key(2), 30);
    s.late_rss(key(2), 29, 12);
    s.rss(key(2), 31, 2, 2);
    s.rss(key(2), 40, 1000, 1000);
    s.read(key(1), 50, usage(100, 100, 100, 100));
    s.read(key(2), 50, usage(1000, 1000, 1000, 1000));
    s.round_done(51);
    // Its exit record says 1000: nothing more than the round read.
    s.late_rss(key(2), 60, 1000);
    s.ended(key(2), 61);
    s.exited(key(2));
    let m = trusted(&s);
    assert_eq!((m.bytes, m.unseen_bytes), (1100, 0), "{m:?}");
}

/// A late figure for a window older than the ones kept still holds the bound: it is added to
/// it whole (more than that window needed, never less).
#[test]
fn a_late_figure_older_than_the_windows_kept_widens_the_bound_whole() {
    let mut s = PssSum::new(1 << 10);
    s.read(key(1), 10, usage(100, 100, 100, 100));
    s.round_done(11);
    s.rss(key(2), 20, 100, 100);
    s.read(key(1), 30, usage(100, 100, 100, 100));
    s.read_gone(key(2), Some(0));
    s.round_done(31);
    for r in 0..CLOSED_KEPT as u64 {
        let ts = 40 + 10 * r;
        s.read(key(1), ts, usage(100, 100, 100, 100));
        s.round_done(ts + 1);
    }
    let before = match s.figure() {
        MaxPssFigure::Uncertain(m) => m.bytes + m.unseen_bytes,
        other => panic!("not withheld: {other:?}"),
    };
    s.late_rss(key(2), 28, 130);
    match s.figure() {
        MaxPssFigure::Uncertain(m) => assert_eq!(m.bytes + m.unseen_bytes, before + 30, "{m:?}"),
        other => panic!("not withheld: {other:?}"),
    }
}
