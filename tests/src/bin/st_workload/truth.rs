//! Workloads that report the truth of a moment, not only of their end: when a peak was
//! reached and what was held then.

use super::{fold_rss_counters, map_anon, status_kib, Recorder};

use spacetime_tests::clock::{clock_ns, unix_ns, ClockId};

/// The pages a program's exit faults in (its exit path's text, 64 KiB of fault-around at a
/// time): a few, well under 0.4 % of 40 MiB.
const EXIT_PAGES: usize = 16;

/// Touches MIB MiB, prints a line with stdio, sleeps MS ms, then touches `EXIT_PAGES` more
/// pages as its exit would: its peak is the exit's by those pages, yet it got there at the
/// touch. Records {touched_unix_ns (the touch done), held_kib (VmRSS after the print: what it
/// held through the sleep) and held_unix_ns (when read), woke_unix_ns, exit_pages}.
pub fn peak_sleep(rec: &mut Recorder, mib: usize, ms: u64) -> ! {
    // SAFETY: a system call without pointers into memory it could misuse.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let len = mib << 20;
    let p = map_anon(len + EXIT_PAGES * page);
    for off in (0..len).step_by(page) {
        // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
    }
    let touched = unix_ns();
    println!("touched {mib} MiB");
    rec.warm_up();
    fold_rss_counters(rec.fold);
    let n = rec.read_status();
    let held = status_kib(&rec.status[..n], b"VmRSS:");
    let held_at = unix_ns();
    std::thread::sleep(std::time::Duration::from_millis(ms));
    let woke = unix_ns();
    for i in 0..EXIT_PAGES {
        // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(p.add(len + i * page), 1) };
    }
    rec.begin("peak-sleep")
        .int("mib", mib as i64)
        .int("touched_unix_ns", touched)
        .int("held_kib", held)
        .int("held_unix_ns", held_at)
        .int("woke_unix_ns", woke)
        .int("exit_pages", EXIT_PAGES as i64)
        .finish();
    super::exit(0)
}

/// The state letter of /proc/PID/stat ('Z' for a zombie), or 0 when it cannot be read.
fn proc_state(pid: libc::pid_t) -> u8 {
    let Ok(stat) = std::fs::read(format!("/proc/{pid}/stat")) else {
        return 0;
    };
    let close = stat.iter().rposition(|&b| b == b')').unwrap_or(0);
    stat.get(close + 2).copied().unwrap_or(0)
}

/// A double fork: the root forks a child that forks a grandchild and exits at once (the
/// grandchild is adopted by the nearest subreaper: spacetime). MS = 0: the grandchild exits
/// at once, and the root exits once it has exited (a zombie, or reaped already: its reap is
/// its new parent's business). MS > 0: the grandchild waits for the root's exit (the end of a pipe
/// only the root holds open), sleeps MS ms, and exits. Records: child {role, grandchild};
/// grandchild {role, ms, exit_unix_ns}; root {role, child, grandchild, grandchild_exited,
/// exit_unix_ns}.
pub fn double_fork(rec: &mut Recorder, ms: u64) -> ! {
    let [r, w] = super::pipe_pair();
    let [root_gone, root_holds] = super::pipe_pair();
    let child = super::fork();
    if child == 0 {
        // SAFETY: closes a descriptor this process owns and does not use after.
        unsafe { libc::close(root_holds) };
        let grandchild = super::fork();
        if grandchild == 0 {
            if ms > 0 {
                // End of file once the root, the last holder of the write end, has exited.
                let mut b = [0u8; 1];
                // SAFETY: reads into a buffer valid for the length given.
                while unsafe { libc::read(root_gone, b.as_mut_ptr().cast(), 1) } > 0 {}
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
            rec.begin("double-fork")
                .str("role", "grandchild")
                .int("ms", ms as i64)
                .int("exit_unix_ns", unix_ns())
                .finish();
            super::exit(0)
        }
        // SAFETY: closes a descriptor this process owns and does not use after.
        unsafe { libc::close(root_gone) };
        let bytes = grandchild.to_ne_bytes();
        // SAFETY: writes from a buffer valid for the length given.
        if unsafe { libc::write(w, bytes.as_ptr().cast(), bytes.len()) } != bytes.len() as isize {
            super::sys_die("write pipe");
        }
        rec.begin("double-fork")
            .str("role", "child")
            .int("grandchild", i64::from(grandchild))
            .finish();
        super::exit(0)
    }
    // SAFETY: closes a descriptor this process owns and does not use after.
    unsafe { libc::close(root_gone) };
    let mut bytes = [0u8; 4];
    // SAFETY: reads into a buffer valid for the length given.
    if unsafe { libc::read(r, bytes.as_mut_ptr().cast(), 4) } != 4 {
        super::sys_die("read pipe");
    }
    let grandchild = libc::pid_t::from_ne_bytes(bytes);
    let ok = super::wait_ok(child);
    // Exited: a zombie, or already reaped by its new parent.
    let mut exited = false;
    if ms == 0 {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !exited && std::time::Instant::now() < until {
            exited = matches!(proc_state(grandchild), b'Z' | 0);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    rec.begin("double-fork")
        .str("role", "root")
        .int("child", i64::from(child))
        .int("failed", i64::from(!ok))
        .int("grandchild", i64::from(grandchild))
        .int("grandchild_exited", i64::from(exited))
        .int("exit_unix_ns", unix_ns())
        .finish();
    super::exit(0)
}

/// N daemons' double forks whose middle processes end in a row from the root's exit on: the
/// root forks N middles; each touches MIB MiB, records, forks a grandchild and says it is
/// ready (a byte on a pipe); the root exits once all are, waiting for none. Middle i exits at
/// the end of file of a relay pipe whose write end only the root (i < K) or middle i - K
/// holds: K chains of exits, each exit at the one before, across the end of a trace that
/// stops at the root's exit, whatever the speed. Each grandchild waits for its middle's exit
/// the same way, sleeps MS ms and exits. Records: middle {role, mib, grandchild}; root
/// {role, middles}.
pub fn daemon_race(rec: &mut Recorder, [n, k]: [usize; 2], mib: usize, ms: u64) -> ! {
    let [ready_r, ready_w] = super::pipe_pair();
    let relay: Vec<[libc::c_int; 2]> = (0..n).map(|_| super::pipe_pair()).collect();
    let mut middles = Vec::with_capacity(n);
    for i in 0..n {
        let middle = super::fork();
        if middle == 0 {
            // Keeps its relay's read end and the next one's write end.
            let hold = relay.get(i + k).map(|p| p[1]);
            for (j, p) in relay.iter().enumerate() {
                if j != i {
                    close(&[p[0]]);
                }
                if Some(p[1]) != hold {
                    close(&[p[1]]);
                }
            }
            close(&[ready_r]);
            daemon_middle(rec, [relay[i][0], ready_w], hold, mib, ms);
        }
        middles.push(i64::from(middle));
    }
    // Keeps the first K relays' write ends: their middles' end of file is the root's exit.
    for (j, p) in relay.iter().enumerate() {
        close(&[p[0]]);
        if j >= k {
            close(&[p[1]]);
        }
    }
    close(&[ready_w]);
    for _ in 0..n {
        super::recv_byte(ready_r);
    }
    rec.begin("daemon-race")
        .str("role", "root")
        .ints("middles", &middles)
        .finish();
    super::exit(0)
}

/// A middle of [`daemon_race`]: exits at the end of file of `wait`, holding `hold` until then.
fn daemon_middle(
    rec: &mut Recorder,
    [wait, ready]: [libc::c_int; 2],
    hold: Option<libc::c_int>,
    mib: usize,
    ms: u64,
) -> ! {
    let [middle_gone, middle_holds] = super::pipe_pair();
    let grandchild = super::fork();
    if grandchild == 0 {
        close(&[middle_holds, wait, ready]);
        close(hold.as_slice());
        wait_eof(middle_gone);
        std::thread::sleep(std::time::Duration::from_millis(ms));
        super::exit(0)
    }
    close(&[middle_gone]);
    // SAFETY: a system call without pointers into memory it could misuse.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let p = map_anon(mib << 20);
    for off in (0..mib << 20).step_by(page) {
        // SAFETY: within the mapping made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
    }
    // Its peak is reached: recorded now, so that its exit follows the one before at once.
    rec.begin("daemon-race")
        .str("role", "middle")
        .int("mib", mib as i64)
        .int("grandchild", i64::from(grandchild))
        .finish();
    super::send_byte(ready);
    wait_eof(wait);
    super::exit(0)
}

/// Closes descriptors this process owns and does not use after.
pub(super) fn close(fds: &[libc::c_int]) {
    for &fd in fds {
        // SAFETY: closes a descriptor this process owns and does not use after.
        unsafe { libc::close(fd) };
    }
}

/// Returns at the end of file: once every other holder of the write end has exited.
pub(super) fn wait_eof(fd: libc::c_int) {
    let mut b = [0u8; 1];
    // SAFETY: reads into a buffer valid for the length given.
    while unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) } > 0 {}
}

/// The root forks a grower and exits once it holds START MiB; the grower keeps touching a new
/// MiB every millisecond up to CAP MiB, then holds them until the root's parent (the tracer)
/// has exited: it is still running, at any speed, when a trace that stops at the root's exit
/// reads its figures, and growing unless the root was slow to go. Records: grower {role:
/// started, mib, rss_file_kib} when the root may go, {role: done, mib} at its end; root
/// {role, grower}.
pub fn grow_at_stop(rec: &mut Recorder, start: usize, cap: usize) -> ! {
    let [r, w] = super::pipe_pair();
    // SAFETY: a system call without pointers into memory it could misuse.
    let tracer = spacetime_tests::raw::pidfd_open(unsafe { libc::getppid() }, 0)
        .unwrap_or_else(|_| super::sys_die("pidfd_open of the parent"));
    let grower = super::fork();
    if grower == 0 {
        // SAFETY: a system call without pointers into memory it could misuse.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let p = map_anon(cap << 20);
        let touch_mib = |i: usize| {
            for off in (0..1 << 20).step_by(page) {
                // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
                unsafe { std::ptr::write_volatile(p.add((i << 20) + off), 1) };
            }
        };
        for i in 0..start {
            touch_mib(i);
        }
        // Its file pages (text, libraries) may be charged to another cgroup (whoever read
        // them first): a memory cgroup of its own need not count them.
        let n = rec.read_status();
        let status = &rec.status[..n];
        let file_kib = status_kib(status, b"RssFile:") + status_kib(status, b"RssShmem:").max(0);
        rec.begin("grow-at-stop")
            .str("role", "started")
            .int("mib", start as i64)
            .int("rss_file_kib", file_kib)
            .finish();
        super::send_byte(w);
        for i in start..cap {
            touch_mib(i);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // A pidfd is readable once its process has exited; bounded, should the tracer linger.
        let mut gone = libc::pollfd {
            fd: std::os::fd::AsRawFd::as_raw_fd(&tracer),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, valid for the call.
        unsafe { libc::poll(&mut gone, 1, 120_000) };
        let n = rec.read_status();
        let status = &rec.status[..n];
        let file_kib = status_kib(status, b"RssFile:") + status_kib(status, b"RssShmem:").max(0);
        rec.begin("grow-at-stop")
            .str("role", "done")
            .int("mib", cap as i64)
            .int("rss_file_kib", file_kib)
            .finish();
        super::exit(0)
    }
    super::recv_byte(r);
    rec.begin("grow-at-stop")
        .str("role", "root")
        .int("grower", i64::from(grower))
        .finish();
    super::exit(0)
}

/// The process's CPU so far (all its threads, the running slices included), ns.
fn process_cpu_ns() -> i64 {
    clock_ns(ClockId::ProcessCPUTime)
}

/// Touches MIB MiB and holds them while it burns MS ms of CPU. Records {held_kib (VmRSS once
/// touched), end_kib (VmRSS after the burn), cpu_ns (the process's CPU over the burn)}: the
/// RSS it held while it ran, read by itself.
pub fn hold_burn(rec: &mut Recorder, mib: usize, ms: u64) -> ! {
    // SAFETY: a system call without pointers into memory it could misuse.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let len = mib << 20;
    let p = map_anon(len);
    for off in (0..len).step_by(page) {
        // SAFETY: within the mapping made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
    }
    rec.warm_up();
    let n = rec.read_status();
    let held = status_kib(&rec.status[..n], b"VmRSS:");
    let c0 = process_cpu_ns();
    super::burn_cpu_us(ms * 1000);
    let cpu = process_cpu_ns() - c0;
    let n = rec.read_status();
    let end = status_kib(&rec.status[..n], b"VmRSS:");
    rec.begin("hold-burn")
        .int("held_kib", held)
        .int("end_kib", end)
        .int("cpu_ns", cpu)
        .finish();
    super::exit(0)
}

/// Two phases of different parallelism: one thread burns MS ms of CPU, then two threads burn
/// MS ms each at once. Records each phase's bounds (CLOCK_REALTIME) and the process's CPU over
/// it: {p1_start_unix_ns, p1_end_unix_ns, p1_cpu_ns, p2_…}. The cores a phase used are its CPU
/// over its wall, whatever else the machine runs.
pub fn cpu_phases(rec: &mut Recorder, ms: u64) -> ! {
    let (s1, c1) = (unix_ns(), process_cpu_ns());
    super::burn_cpu_us(ms * 1000);
    let (e1, d1) = (unix_ns(), process_cpu_ns());
    let (s2, c2) = (unix_ns(), process_cpu_ns());
    let other = std::thread::spawn(move || super::burn_cpu_us(ms * 1000));
    super::burn_cpu_us(ms * 1000);
    if other.join().is_err() {
        super::die("burning thread panicked");
    }
    let (e2, d2) = (unix_ns(), process_cpu_ns());
    rec.begin("cpu-phases")
        .int("p1_start_unix_ns", s1)
        .int("p1_end_unix_ns", e1)
        .int("p1_cpu_ns", d1 - c1)
        .int("p2_start_unix_ns", s2)
        .int("p2_end_unix_ns", e2)
        .int("p2_cpu_ns", d2 - c2)
        .finish();
    super::exit(0)
}
