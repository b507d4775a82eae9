//! Workloads that report the truth of a moment, not only of their end: when a peak was
//! reached and what was held then.

use super::{fold_rss_counters, map_anon, status_kib, Recorder};

/// CLOCK_REALTIME now, in ns since the epoch (the report's `origin.start_unix_ns` scale).
pub fn unix_ns() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec * 1_000_000_000 + ts.tv_nsec
}

/// The pages a program's exit faults in (its exit path's text, 64 KiB of fault-around at a
/// time): a few, well under 0.4 % of 40 MiB.
const EXIT_PAGES: usize = 16;

/// Touches MIB MiB, prints a line with stdio, sleeps MS ms, then touches `EXIT_PAGES` more
/// pages as its exit would: its peak is the exit's by those pages, yet it got there at the
/// touch. Records {touched_unix_ns (the touch done), held_kib (VmRSS after the print: what it
/// held through the sleep) and held_unix_ns (when read), woke_unix_ns, exit_pages}.
pub fn peak_sleep(rec: &mut Recorder, mib: usize, ms: u64) -> ! {
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let len = mib << 20;
    let p = map_anon(len + EXIT_PAGES * page);
    for off in (0..len).step_by(page) {
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
