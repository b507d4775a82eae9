//! Tests of the /proc samplers, against real processes forked for the purpose.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::*;
use crate::model::timeline::RssSource;

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
                libc::close_range(3, 999, 0);
                libc::close_range(1002, u32::MAX, 0);
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
    PssSampler::new(SamplerConfig::default())
}

#[test]
fn parses_rollup_stat_and_statm() {
    let rollup = b"55d0c000-7ffc0000 ---p 00000000 00:00 0                          [rollup]\n\
        Rss:               12345 kB\n\
        Pss:                6789 kB\n\
        Pss_Dirty:          1000 kB\n\
        Pss_Anon:           5000 kB\n\
        Shared_Clean:        100 kB\n";
    assert_eq!(
        parse_smaps_rollup(rollup),
        Some(Usage {
            rss_bytes: 12345 * 1024,
            pss_bytes: 6789 * 1024
        })
    );
    assert_eq!(parse_smaps_rollup(b""), None, "a zombie's rollup is empty");
    let stat = b"42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
    assert_eq!(stat_start_ticks(stat), Some(987654));
    assert_eq!(
        parse_statm_resident(b"2000 300 100 10 0 150 0\n"),
        Some(300)
    );
    assert_eq!(parse_u64(b"12x"), None);
}

#[test]
fn budget_is_shared_and_small_processes_stay_fast() {
    let min = 50_000_000;
    // 10 small processes (10 MiB: 70 µs) and one of 4 GiB (28 ms).
    let mut costs = vec![70_000u64; 10];
    costs.push(28_000_000);
    let iv = intervals(&costs, min, 0.02);
    let used = |costs: &[u64], iv: &[u64]| -> f64 {
        costs
            .iter()
            .zip(iv)
            .map(|(&c, &t)| c as f64 / t as f64)
            .sum()
    };
    assert!(used(&costs, &iv) <= 0.0201, "{}", used(&costs, &iv));
    assert!(
        iv[..10].iter().all(|&t| t == min),
        "small ones at the minimum"
    );
    // The big one gets what the small ones leave: 2 % − 10 × 70 µs / 50 ms = 0.6 %.
    assert!(
        (4_600_000_000..4_700_000_000).contains(&iv[10]),
        "{}",
        iv[10]
    );
    // 1000 small ones alone would need 140 %: they slow down evenly to fit.
    let many = vec![70_000u64; 1000];
    let iv = intervals(&many, min, 0.02);
    assert!(
        iv.iter().all(|&t| t.abs_diff(3_500_000_000) <= 1),
        "{:?}",
        &iv[..3]
    );
    assert!(used(&many, &iv) <= 0.0201);
    // One 1 GiB process alone: 7 ms at 2 % is one read every 350 ms.
    assert_eq!(intervals(&[7_000_000], min, 0.02), [350_000_000]);
    assert_eq!(intervals(&[], min, 0.02), Vec::<u64>::new());
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
fn schedule_timeline_and_vanished_processes() {
    let c = touch_child(16 * MIB);
    c.wait_ready();
    c.go();
    c.wait_ready();
    let key = c.key();
    let mut s = sampler();
    let mut t = Timeline::new(RssSource::Kernel);
    assert_eq!(s.sample_due(1_000, [key], &mut t), 1);
    assert_eq!(s.sample_due(2_000, [key], &mut t), 0, "not due again yet");
    let next = s.next_due().expect("scheduled");
    assert!(next >= 1_000 + 50_000_000, "{next}");
    assert_eq!(s.sample_due(next, [key], &mut t), 1);
    let pss = t
        .process(&key)
        .expect("series")
        .pss()
        .last()
        .expect("point");
    assert!(pss.bytes >= 16 * MIB, "{pss:?}");
    assert_eq!(t.tree_pss().last().map(|p| p.bytes), Some(pss.bytes));

    // The same pid with another start time: not this process.
    let other = Key {
        tgid: key.tgid,
        start_ns: key.start_ns + 10_000_000_000,
    };
    assert_eq!(s.read(other).expect("read"), None);
    c.finish();
    // Gone: dropped from the schedule, not an error, and not sampled again.
    assert_eq!(s.sample_due(next + 100_000_000, [key], &mut t), 0);
    assert_eq!(s.stats().vanished, 1);
    assert_eq!(s.next_due(), None);
    assert_eq!(s.sample_due(next + 200_000_000, [key], &mut t), 0);
    assert_eq!(s.stats().vanished, 1);
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

/// `cargo test -p spacetime pss_cost -- --ignored --nocapture`: what one sample costs.
#[test]
#[ignore]
fn pss_cost() {
    for size in [64 * MIB, 1024 * MIB] {
        let c = touch_child(size);
        c.wait_ready();
        c.go();
        c.wait_ready();
        let key = c.key();
        let mut s = sampler();
        let mut statm = StatmSampler::new(SamplerConfig::default());
        let mut t = Timeline::new(RssSource::Statm);
        let rounds = 20;
        for i in 0..rounds {
            let now = (i + 1) * 10_000_000_000;
            s.sample_due(now, [key], &mut t);
            statm.sample_due(now, [key], &mut t);
        }
        let (st, sm) = (s.stats(), statm.stats());
        println!(
            "{} MiB: smaps_rollup {:.0} µs/sample (max {:.0} µs), statm {:.1} µs/sample; interval {} ms",
            size / MIB,
            st.read_ns as f64 / st.samples as f64 / 1e3,
            st.max_read_ns as f64 / 1e3,
            sm.read_ns as f64 / sm.samples as f64 / 1e3,
            s.interval_ns(&key).unwrap_or(0) / 1_000_000
        );
        c.finish();
    }
}

#[test]
fn growth_reads_before_the_clock_within_the_budget() {
    let c = touch_child(MIB);
    c.wait_ready();
    c.go();
    c.wait_ready();
    let key = c.key();
    let mut s = PssSampler::new(SamplerConfig {
        follow_growth: true,
        ..SamplerConfig::default()
    });
    let mut t = Timeline::new(RssSource::Kernel);
    let t0 = 1_000_000_000;
    assert_eq!(s.sample_due(t0, [key], &mut t), 1, "the first read");
    s.note_rss(key, MIB);
    let soon = t0 + 45_000_000;
    assert!(s.next_due().is_some_and(|d| d > soon), "no growth, no read");
    assert_eq!(s.sample_due(soon, [key], &mut t), 0, "nothing grew");
    // Grown eightfold: due now, before its 50 ms clock, paid by 45 ms of 2 % budget.
    s.note_rss(key, 8 * MIB);
    assert!(
        s.next_due().is_some_and(|d| d <= soon),
        "{:?}",
        s.next_due()
    );
    assert_eq!(s.sample_due(soon, [key], &mut t), 1, "a growth read");
    assert_eq!(s.stats().growth_samples, 1);
    // The budget is spent: the next growth waits for the budget to pay for it.
    s.note_rss(key, 1 << 30);
    assert_eq!(
        s.sample_due(soon + 1_000, [key], &mut t),
        0,
        "a 1 GiB read is not paid"
    );
    assert!(s.next_due().is_some_and(|d| d > soon + 1_000));
    c.finish();
}
