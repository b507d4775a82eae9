//! Workloads that read their own PSS (`/proc/self/smaps_rollup`, the kernel's figure) at
//! their peak: the truth of the tree-wide maximum PSS. Processes that peak together meet at
//! the peak (pipes, no timing), each reads its own, then they hold a while so sampling can see
//! it too.

use super::{exit, fork, map_anon, pipe_pair, recv_byte, send_byte, wait_ok, Recorder};

/// The `Pss:` of a smaps_rollup, in KiB (-1 when unreadable), read into the recorder's
/// buffer (touched at start-up: reading adds no memory).
fn pss_kib(rec: &mut Recorder, pid: &str) -> i64 {
    let path = format!("/proc/{pid}/smaps_rollup\0");
    let mut n = 0usize;
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    unsafe {
        let fd = libc::open(path.as_ptr().cast(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return -1;
        }
        while n < rec.status.len() {
            let r = libc::read(
                fd,
                rec.status.as_mut_ptr().add(n).cast(),
                rec.status.len() - n,
            );
            if r <= 0 {
                break;
            }
            n += r as usize;
        }
        libc::close(fd);
    }
    super::status_kib(&rec.status[..n], b"Pss:")
}

fn page() -> usize {
    // SAFETY: a system call without pointers into memory it could misuse.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// Writes one byte of every page of `len` bytes at `p`.
fn touch_pages(p: *mut u8, len: usize) {
    for off in (0..len).step_by(page()) {
        // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
    }
}

fn hold(ms: u64) {
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

/// Touches MIB MiB, reads its own PSS at the peak, holds MS ms. Records {mib, pss_kib}.
pub fn pss_touch(rec: &mut Recorder, mib: usize, ms: u64) -> ! {
    let len = mib << 20;
    touch_pages(map_anon(len), len);
    rec.warm_up();
    let pss = pss_kib(rec, "self");
    hold(ms);
    rec.begin("pss-touch")
        .int("mib", mib as i64)
        .int("pss_kib", pss)
        .finish();
    exit(0)
}

/// Writes every byte of MIB MiB (st's fill.c pace) and reads its PSS there, with `other`'s
/// (its parent, which waits for it) when given; then unmaps it.
fn fill_read(rec: &mut Recorder, mib: usize, other: Option<&str>) -> (i64, i64) {
    let len = mib << 20;
    let p = map_anon(len);
    for off in 0..len {
        // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(p.add(off), b'F') };
    }
    let own = pss_kib(rec, "self");
    let other = other.map_or(0, |pid| pss_kib(rec, pid));
    // SAFETY: unmaps the mapping made above, not used after.
    unsafe { libc::munmap(p.cast(), len) };
    (own, other)
}

/// st's fillfill, reading PSS at each peak: fill MIB MiB and free it, then a child fills 2×MIB
/// and reads its own PSS and its waiting parent's at its peak. Records parent {role, mib,
/// pss_kib (at its own peak)}, child {role, mib, pss_kib, parent_pss_kib}.
pub fn pss_fillfill(rec: &mut Recorder, mib: usize) -> ! {
    rec.warm_up();
    let (own, _) = fill_read(rec, mib, None);
    // SAFETY: a system call without pointers into memory it could misuse.
    let parent = unsafe { libc::getpid() }.to_string();
    let child = fork();
    if child == 0 {
        let (own, parent_pss) = fill_read(rec, 2 * mib, Some(&parent));
        rec.begin("pss-fillfill")
            .str("role", "child")
            .int("mib", 2 * mib as i64)
            .int("pss_kib", own)
            .int("parent_pss_kib", parent_pss)
            .finish();
        exit(0)
    }
    let ok = wait_ok(child);
    rec.begin("pss-fillfill")
        .str("role", "parent")
        .int("mib", mib as i64)
        .int("pss_kib", own)
        .int("failed", i64::from(!ok))
        .finish();
    exit(0)
}

/// Touches MIB MiB, forks a child that reads (`write`: writes) every page of them, so they
/// stay shared copy-on-write (or become two copies). At the peak the child reads its PSS,
/// then the parent its own; both hold MS ms. Records {role, mib, pss_kib}.
pub fn pss_cow(rec: &mut Recorder, mib: usize, write: bool, ms: u64) -> ! {
    let len = mib << 20;
    let p = map_anon(len);
    touch_pages(p, len);
    rec.warm_up();
    let (child_read, parent_read) = (pipe_pair(), pipe_pair());
    let child = fork();
    if child == 0 {
        let mut sum = 0u64;
        for off in (0..len).step_by(page()) {
            if write {
                // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
                unsafe { std::ptr::write_volatile(p.add(off), 2) };
            } else {
                // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
                sum += u64::from(unsafe { std::ptr::read_volatile(p.add(off)) });
            }
        }
        std::hint::black_box(sum);
        let pss = pss_kib(rec, "self");
        send_byte(child_read[1]);
        recv_byte(parent_read[0]);
        hold(ms);
        rec.begin("pss-cow")
            .str("role", "child")
            .int("mib", mib as i64)
            .int("pss_kib", pss)
            .finish();
        exit(0)
    }
    recv_byte(child_read[0]);
    let pss = pss_kib(rec, "self");
    send_byte(parent_read[1]);
    hold(ms);
    let ok = wait_ok(child);
    rec.begin("pss-cow")
        .str("role", "parent")
        .int("mib", mib as i64)
        .int("pss_kib", pss)
        .int("failed", i64::from(!ok))
        .finish();
    exit(0)
}
