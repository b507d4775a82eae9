//! Tests of PSS sampling: when rounds are due (replayed with given times and costs, no
//! clock), and rounds of real processes forked for the purpose.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::*;
use crate::model::{
    proc_read::process_key,
    pss_sum::MaxPssFigure,
    statm::{SamplerConfig, StatmSampler},
    timeline::{Point, RssSource},
};

const MIB: u64 = 1 << 20;

fn pipe() -> (OwnedFd, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: fds has room for two descriptors.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors we own.
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

// What the forked children run: raw system calls only (the test process has other threads,
// so nothing that may take a lock, like the allocator).

fn send(fd: i32, bytes: &[u8]) {
    // SAFETY: writes from a valid buffer.
    unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
}

/// Reads up to `buf.len()` bytes; 0 at end of file.
fn recv(fd: i32, buf: &mut [u8]) -> usize {
    // SAFETY: reads into a valid buffer.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    n.max(0) as usize
}

/// A fresh anonymous mapping, or null.
fn map(bytes: u64, shared: bool) -> *mut u8 {
    if bytes == 0 {
        return std::ptr::null_mut();
    }
    let kind = if shared {
        libc::MAP_SHARED
    } else {
        libc::MAP_PRIVATE
    };
    // SAFETY: a fresh anonymous mapping.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            kind | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    p.cast()
}

/// A forked child: it talks to the test over two pipes and exits when its input closes.
struct Child {
    pid: i32,
    to_child: Option<OwnedFd>,
    from_child: OwnedFd,
}

impl Child {
    /// Forks a child running `body(input_fd, output_fd)`, then `_exit(0)`.
    fn spawn(body: impl FnOnce(i32, i32)) -> Child {
        let (child_in, to_child) = pipe();
        let (from_child, child_out) = pipe();
        // SAFETY: the child only makes raw system calls, then exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // Keep only this child's two pipe ends: a write end left open here (its own, or
            // one of a test running alongside) would keep some child from seeing end of file.
            // SAFETY: descriptor calls on numbers this process owns.
            unsafe {
                libc::dup2(child_in.as_raw_fd(), 1000);
                libc::dup2(child_out.as_raw_fd(), 1001);
                // The system call itself: musl's libc has no wrapper.
                libc::syscall(libc::SYS_close_range, 3u32, 999u32, 0u32);
                libc::syscall(libc::SYS_close_range, 1002u32, u32::MAX, 0u32);
            }
            body(1000, 1001);
            // SAFETY: leaves the child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        Child {
            pid,
            to_child: Some(to_child),
            from_child,
        }
    }

    fn wait_ready(&self) -> [u8; 4] {
        let mut b = [0u8; 4];
        assert_eq!(recv(self.from_child.as_raw_fd(), &mut b), 4, "child ready");
        b
    }

    fn go(&self) {
        send(self.to_child.as_ref().expect("open").as_raw_fd(), b"g");
    }

    fn key(&self) -> Key {
        process_key(self.pid as u32).expect("key")
    }

    /// Lets the child exit and waits until it has (a zombie, its mm released), unreaped.
    fn exit_unreaped(&mut self) {
        self.to_child = None;
        use rustix::process::{waitid, Pid, WaitId, WaitIdOptions};
        let pid = Pid::from_raw(self.pid).expect("a child's pid");
        waitid(
            WaitId::Pid(pid),
            WaitIdOptions::EXITED | WaitIdOptions::NOWAIT,
        )
        .expect("waitid");
    }

    /// Lets the child exit and reaps it.
    fn finish(mut self) {
        self.to_child = None;
        let mut status = 0;
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}

fn touch_child(bytes: u64) -> Child {
    Child::spawn(move |input, output| {
        let mut b = [0u8; 1];
        // Run the code below once first: its pages are faulted in before the baseline.
        let warm = map(4096, false);
        if !warm.is_null() {
            // SAFETY: the mapping is one page long.
            unsafe { std::ptr::write_bytes(warm, 1, 4096) };
        }
        send(output, b"rdy0");
        recv(input, &mut b);
        let p = map(bytes, false);
        if !p.is_null() {
            // SAFETY: the mapping is `bytes` long.
            unsafe { std::ptr::write_bytes(p, 1, bytes as usize) };
        }
        send(output, b"rdy1");
        while recv(input, &mut b) > 0 {}
    })
}

fn sampler() -> PssSampler {
    PssSampler::new(PssConfig::default())
}

const MS: u64 = 1_000_000;

/// A policy past its first credit: the budget as it is earned.
fn policy(follow_rss: bool) -> Policy {
    let mut p = Policy::new(PssConfig {
        follow_rss,
        ..PssConfig::default()
    });
    p.credit_ns = 0.0;
    p
}

#[test]
fn a_run_may_read_at_once_what_its_first_credit_pays() {
    let mut p = Policy::new(PssConfig {
        follow_rss: true,
        ..PssConfig::default()
    });
    p.earn(0);
    // A new image's file pages unread, 20 MiB of 60: a 2 ms read is due at once, before the
    // budget has earned it (100 ms at 2 %), while the process grows.
    let new_image = tree(60 * MIB, 60 * MIB, 20 * MIB);
    p.earn(10 * MS);
    assert_eq!(p.due(2 * MS, new_image), Some(10 * MS));
    p.ran(10 * MS, 2 * MS, 60 * MIB);
    // 3.2 ms left (5, and 0.2 earned in 10 ms, less 2): a 4 ms read waits for the 0.8 ms
    // more that 40 ms at 2 % earn.
    assert_eq!(p.due(4 * MS, new_image), Some(50 * MS));
}

fn tree(rss: u64, estimate: u64, uncertain: u64) -> TreeNow {
    TreeNow {
        rss_bytes: rss,
        estimate_bytes: estimate,
        uncertain_bytes: uncertain,
    }
}

#[test]
fn the_clock_paces_rounds_by_their_cost() {
    let mut p = policy(true);
    p.earn(1_000 * MS);
    let quiet = tree(10 * MIB, 10 * MIB, 0);
    // A cheap round: every 50 ms from the start.
    assert_eq!(p.due(100_000, quiet), Some(1_050 * MS));
    p.ran(1_050 * MS, 100_000, 10 * MIB);
    assert_eq!(p.due(100_000, quiet), Some(1_100 * MS));
    // A 1 GiB tree: 7 ms a round at 2 % of a CPU is one round every 350 ms.
    assert_eq!(p.due(7 * MS, quiet), Some(1_400 * MS));
}

#[test]
fn growth_brings_a_round_forward_as_far_as_the_budget_pays() {
    let mut p = policy(true);
    p.earn(0);
    p.ran(0, 0, 100 * MIB);
    let cost = 700_000;
    // Grown by less than 1/8: the clock's round.
    p.earn(10 * MS);
    assert_eq!(p.due(cost, tree(110 * MIB, 110 * MIB, 0)), Some(50 * MS));
    // Grown by 1/8: due once 2 % of the time since pays 0.7 ms of reading (35 ms).
    assert_eq!(p.due(cost, tree(113 * MIB, 113 * MIB, 0)), Some(35 * MS));
    p.earn(35 * MS);
    assert_eq!(p.due(cost, tree(113 * MIB, 113 * MIB, 0)), Some(35 * MS));
    p.ran(35 * MS, cost, 113 * MIB);
    // The budget is spent: the next early round waits for it again.
    assert_eq!(p.due(cost, tree(200 * MIB, 200 * MIB, 0)), Some(70 * MS));
    // Without the kernel's RSS, growth is not known.
    let mut statm = policy(false);
    statm.earn(0);
    statm.ran(0, 0, 100 * MIB);
    statm.earn(40 * MS);
    assert_eq!(statm.due(cost, tree(500 * MIB, 0, 0)), Some(50 * MS));
}

#[test]
fn an_uncertain_estimate_brings_a_round_forward() {
    let mut p = policy(true);
    p.earn(0);
    p.ran(0, 0, 100 * MIB);
    p.earn(20 * MS);
    let cost = 100_000;
    // A fork: 10 MiB of the estimate's 100 MiB may be written unseen (over 1/40): due now,
    // 20 ms of budget pay for it.
    assert_eq!(
        p.due(cost, tree(110 * MIB, 100 * MIB, 10 * MIB)),
        Some(20 * MS)
    );
    // Under 1/40 (or 1 MiB): the clock's.
    assert_eq!(
        p.due(cost, tree(110 * MIB, 100 * MIB, 2 * MIB)),
        Some(50 * MS)
    );
    assert_eq!(p.due(cost, tree(2 * MIB, 2 * MIB, MIB)), Some(50 * MS));
}

#[test]
fn a_round_that_cost_more_than_priced_is_paid_back_before_the_next() {
    let mut p = policy(true);
    p.earn(0);
    // Priced 2 ms (a clock round every 100 ms), it took 30: the budget is 28 ms short, which
    // 1.4 s at 2 % pay back; no round, by the clock (100 ms) or early, comes before.
    p.ran(0, 30 * MS, 100 * MIB);
    p.earn(100 * MS);
    assert_eq!(
        p.due(2 * MS, tree(100 * MIB, 100 * MIB, 0)),
        Some(1_500 * MS)
    );
    assert_eq!(
        p.due(2 * MS, tree(200 * MIB, 100 * MIB, 50 * MIB)),
        Some(1_500 * MS)
    );
    // Paid back: the clock's round again, 100 ms after the last.
    p.earn(1_500 * MS);
    p.ran(1_500 * MS, 2 * MS, 100 * MIB);
    p.earn(1_550 * MS);
    assert_eq!(
        p.due(2 * MS, tree(100 * MIB, 100 * MIB, 0)),
        Some(1_600 * MS)
    );
}

#[test]
fn the_unspent_budget_is_kept_for_ten_seconds_at_most() {
    let mut p = policy(true);
    p.earn(0);
    p.ran(0, 0, MIB);
    p.earn(3_600_000 * MS);
    // 10 s at 2 %: 200 ms of reading, not an hour's 72 s.
    assert!(
        (p.credit_ns - 200.0 * MS as f64).abs() < 1.0,
        "{}",
        p.credit_ns
    );
    p.ran(3_600_000 * MS, 0, MIB);
    // A round of 300 ms, early: 100 ms more of budget is 5 s (the clock says 15 s).
    let due = p.due(300 * MS, tree(10 << 30, 0, 0)).expect("due");
    assert_eq!(due, 3_605_000 * MS);
}

#[test]
fn pss_and_rss_of_touched_memory() {
    let c = touch_child(0);
    c.wait_ready();
    let mut s = sampler();
    let before = s.read(c.key()).expect("read").expect("alive");
    c.finish();

    let n = 48 * MIB;
    let c = touch_child(n);
    c.wait_ready();
    let base = s.read(c.key()).expect("read").expect("alive");
    c.go();
    c.wait_ready();
    let after = s.read(c.key()).expect("read").expect("alive");
    c.finish();
    let slack = 64 * 1024;
    let d_rss = after.rss_bytes - base.rss_bytes;
    let d_pss = after.pss_bytes - base.pss_bytes;
    // Code and data pages the child runs through for the first time fault in too (16 at a
    // time, with fault-around): RSS may grow by a few of those.
    let code = 512 * 1024;
    assert!(d_rss + slack >= n && d_rss <= n + code, "rss grew {d_rss}");
    // Pages still shared with the test process become the child's alone when the test
    // writes to them (copy on write), or are shared further when the test forks another
    // child: PSS may move by up to that much besides.
    let shared = base.rss_bytes - base.pss_bytes;
    assert!(
        d_pss + shared + slack >= n && d_pss <= n + shared + code,
        "pss grew {d_pss} (shared at first {shared})"
    );
    // The forked child shares the test process's pages: its PSS is below its RSS.
    assert!(before.pss_bytes <= before.rss_bytes);
}

#[test]
fn shared_region_is_split_between_its_two_users() {
    let size = 64 * MIB;
    let a = Child::spawn(move |input, output| {
        let mut b = [0u8; 1];
        send(output, b"rdy0");
        recv(input, &mut b);
        let p = map(size, true);
        if p.is_null() {
            return;
        }
        // SAFETY: the mapping is `size` long.
        unsafe { std::ptr::write_bytes(p, 7, size as usize) };
        let mut fds = [0; 2];
        // SAFETY: room for two descriptors.
        unsafe { libc::pipe(fds.as_mut_ptr()) };
        // SAFETY: the grandchild makes raw system calls only.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Shared mappings are not copied at fork: fault every page in.
            for off in (0..size as usize).step_by(4096) {
                // SAFETY: within the mapping.
                unsafe { std::ptr::read_volatile(p.add(off)) };
            }
            send(fds[1], b"b");
            while recv(input, &mut b) > 0 {}
            // SAFETY: as above.
            unsafe { libc::_exit(0) };
        }
        recv(fds[0], &mut b);
        send(output, &(pid as u32).to_ne_bytes());
        while recv(input, &mut b) > 0 {}
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    });
    a.wait_ready();
    let mut s = sampler();
    let base = s.read(a.key()).expect("read").expect("alive");
    a.go();
    let b_pid = u32::from_ne_bytes(a.wait_ready());
    let b_key = process_key(b_pid).expect("b");
    let ua = s.read(a.key()).expect("read").expect("a alive");
    let ub = s.read(b_key).expect("read").expect("b alive");
    a.finish();
    let half = size / 2;
    let slack = 256 * 1024;
    for (who, u) in [("a", ua), ("b", ub)] {
        assert!(u.rss_bytes >= size, "{who}: rss {}", u.rss_bytes);
        assert!(u.pss_bytes + slack >= half, "{who}: pss {}", u.pss_bytes);
        assert!(
            u.pss_bytes <= half + base.rss_bytes + slack,
            "{who}: pss {} (base rss {})",
            u.pss_bytes,
            base.rss_bytes
        );
        assert!(u.rss_bytes - u.pss_bytes + slack >= half, "{who}: {u:?}");
    }
}

#[test]
fn a_round_reads_every_live_process_together_and_drops_the_gone() {
    let a = touch_child(16 * MIB);
    let b = touch_child(8 * MIB);
    for c in [&a, &b] {
        c.wait_ready();
        c.go();
        c.wait_ready();
    }
    let (ka, kb) = (a.key(), b.key());
    let mut s = sampler();
    let mut t = Timeline::new(RssSource::Kernel);
    let t0 = 1_000 * MS;
    assert_eq!(
        s.sample_due(t0, [ka, kb], &mut t),
        0,
        "the first round is the clock's"
    );
    // When the clock's round falls depends on what reading costs: the children share the
    // test process's pages, as big as the tests running beside this one make it.
    let first = s.next_due(&t).expect("scheduled");
    assert!(first >= t0 + 50 * MS, "{first}");
    assert_eq!(
        s.sample_due(first, [ka, kb], &mut t),
        2,
        "both, in one round"
    );
    assert_eq!(
        s.sample_due(first + 10 * MS, [ka, kb], &mut t),
        0,
        "not due again yet"
    );
    let pss = |k: &Key| {
        t.process(k)
            .and_then(|p| p.pss().last())
            .expect("read")
            .bytes
    };
    let (pa, pb) = (pss(&ka), pss(&kb));
    assert!(pa >= 16 * MIB && pb >= 8 * MIB, "{pa} {pb}");
    // The tree-wide PSS is the round's sum.
    assert_eq!(t.tree_pss().last().map(|p| p.bytes), Some(pa + pb));
    // Its maximum too; trusted or not as they live: they share this process's pages (forked
    // from it) and may still write them, unseen.
    let m = match t.max_pss() {
        MaxPssFigure::Trusted(m) | MaxPssFigure::Uncertain(m) => m,
        MaxPssFigure::NotSampled => panic!("a round, and no maximum"),
    };
    assert_eq!(m.bytes, pa + pb, "{m:?}");

    // The same pid with another start time: not this process.
    let other = Key {
        tgid: ka.tgid,
        start_ns: ka.start_ns + 10_000_000_000,
    };
    assert_eq!(s.read(other).expect("read"), None);
    b.finish();
    // Gone: not an error, left out of the rounds while the caller still lists it.
    let second = s.next_due(&t).expect("scheduled");
    assert_eq!(s.sample_due(second, [ka, kb], &mut t), 1);
    assert_eq!(s.stats().vanished, 1);
    let third = s.next_due(&t).expect("scheduled");
    assert_eq!(s.sample_due(third, [ka, kb], &mut t), 1);
    assert_eq!((s.stats().vanished, s.stats().rounds), (1, 3));
    a.finish();
}

#[test]
fn statm_fallback_sums_rss() {
    let c = touch_child(32 * MIB);
    c.wait_ready();
    c.go();
    c.wait_ready();
    let key = c.key();
    let mut s = StatmSampler::new(SamplerConfig::default());
    let mut t = Timeline::new(RssSource::Statm);
    assert_eq!(s.sample_due(5, [key], &mut t), 1);
    c.finish();
    let rss = t.current_rss();
    assert!(rss >= 32 * MIB, "{rss}");
    assert_eq!(t.tree_rss().last().map(|p| p.bytes), Some(rss));
}

#[test]
fn a_process_a_round_finds_gone_leaves_the_sum_before_its_exit_record() {
    // A fork whose child exits while a round runs, its exit record not processed yet: the
    // round reads the parent after the exit (the pages they shared its own again, whole) and
    // finds the child gone. The child's part from the last round must leave the sum then,
    // not stay beside the parent's whole read until its exit record (160 + 80 MiB for
    // 160 under load).
    let a = touch_child(16 * MIB);
    a.wait_ready();
    a.go();
    a.wait_ready();
    let ka = a.key();
    // Gone: the same pid with another start time.
    let child = Key {
        tgid: ka.tgid,
        start_ns: ka.start_ns + 10_000_000_000,
    };
    let mut t = Timeline::new(RssSource::Kernel);
    // The last round: the child held 8 MiB shared with `a`, half of it its PSS.
    let shared = Usage {
        rss_bytes: 8 * MIB,
        pss_bytes: 4 * MIB,
        anon_bytes: 8 * MIB,
        pss_anon_bytes: Some(4 * MIB),
        faulted_bytes: None,
        read_faulted_bytes: None,
    };
    t.record_pss_read(child, (1, 1), shared);
    t.pss_round_done(2);
    let mut s = sampler();
    let t0 = 1_000 * MS;
    assert_eq!(s.sample_due(t0, [ka, child], &mut t), 0, "the clock's");
    let due = s.next_due(&t).expect("scheduled");
    assert_eq!(s.sample_due(due, [ka, child], &mut t), 1, "a alone");
    assert_eq!(s.stats().vanished, 1);
    let pa = t
        .process(&ka)
        .and_then(|p| p.pss().last())
        .expect("read")
        .bytes;
    assert_eq!(
        t.pss_tree_now().estimate_bytes,
        pa,
        "the child left the sum"
    );
    assert_eq!(t.tree_pss().max().map(|p| p.bytes), Some(pa));
    // Its exit record, then the kernel's last points for it: no image begins.
    t.process_exited(child, 3);
    t.record_kernel_rss(child, Point::new(4, 8 * MIB), Some(8 * MIB));
    // What `a` found shared, read before the child's exit perhaps, may be its own now: at
    // most the child's shared 4 MiB is unseen, none of the 8 MiB the late points name.
    let now = t.pss_tree_now();
    assert_eq!(now.estimate_bytes, pa);
    assert!(now.uncertain_bytes <= 4 * MIB, "{now:?}");
    a.finish();
}

#[test]
fn a_process_read_then_gone_in_the_round_leaves_it() {
    // `b` is read first in a round and exits before it ends; `a`, read after, may then
    // count the pages they shared as its own: `b`'s share must not stay beside it.
    let a = touch_child(16 * MIB);
    a.wait_ready();
    a.go();
    a.wait_ready();
    let mut b = touch_child(8 * MIB);
    b.wait_ready();
    b.go();
    b.wait_ready();
    let (ka, kb) = (a.key(), b.key());
    let usage = |rss, pss| Usage {
        rss_bytes: rss,
        pss_bytes: pss,
        anon_bytes: rss,
        pss_anon_bytes: Some(pss),
        faulted_bytes: None,
        read_faulted_bytes: None,
    };
    let mut t = Timeline::new(RssSource::Kernel);
    let mut s = sampler();
    t.record_pss_read(kb, (1, 1), usage(8 * MIB, 4 * MIB));
    t.record_pss_read(ka, (2, 2), usage(16 * MIB, 16 * MIB));
    // Alive at the round's end: both stay.
    s.recheck(&[kb, ka], &mut t);
    assert_eq!(t.pss_tree_now().estimate_bytes, 20 * MIB);
    b.exit_unreaped();
    s.recheck(&[kb, ka], &mut t);
    assert_eq!(s.stats().left_in_round, 1, "{:?}", s.stats());
    t.pss_round_done(3);
    let now = t.pss_tree_now();
    assert_eq!(now.estimate_bytes, 16 * MIB, "b left the sum");
    b.finish();
    a.finish();
}
