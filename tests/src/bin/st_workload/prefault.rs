//! What a process maps before it records, so that recording changes nothing it records:
//! its stack, its text, and (before 6.2) its pending RSS counts.

use super::{die, sys_die};

/// Stack pre-faulted at startup so the recording path doesn't grow the stack.
const STACK_PREFAULT: usize = 128 * 1024;
/// Pages read (never written) by `fold_rss_counters`: more than the 64 faults after which a
/// pre-6.2 kernel folds a thread's pending RSS counts into the mm.
const FOLD_PAGES: usize = 128;

/// Touches `STACK_PREFAULT` bytes of stack below the current frame.
#[inline(never)]
pub(super) fn prefault_stack() {
    let mut buf = [0u8; STACK_PREFAULT];
    for i in (0..STACK_PREFAULT).step_by(1024) {
        // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), 1) };
    }
    std::hint::black_box(&buf);
}

/// Makes this thread's RSS counts visible in /proc/self/status. Before 6.2 (SPLIT_RSS_COUNTING)
/// each thread keeps its RSS counter updates to itself and folds them into the mm every 64 page
/// faults (and when it exits or execs), so VmHWM/VmRSS lag by up to 64 faults' worth of pages
/// (more with file fault-around) while the kernel's own exit figures (ru_maxrss, taskstats)
/// count them. Reading one byte of each of `FOLD_PAGES` fresh anonymous pages takes that many
/// faults, each mapping the shared zero page, which is not counted in RSS: the pending counts
/// are folded and nothing new is pending. A no-op on later kernels (no per-thread counts).
pub(super) fn fold_rss_counters(region: usize) {
    let page = 4096;
    // SAFETY: advice on, and reads of, a region this process mapped and keeps.
    unsafe {
        // Drops the zero-page mappings of an earlier fold (not counted either), so the reads
        // below fault again.
        libc::madvise(
            region as *mut libc::c_void,
            FOLD_PAGES * page,
            libc::MADV_DONTNEED,
        );
        for i in 0..FOLD_PAGES {
            std::ptr::read_volatile((region + i * page) as *const u8);
        }
    }
}

/// Reserves the never-written region `fold_rss_counters` reads; returns its address.
pub(super) fn fold_region() -> usize {
    // SAFETY: a new anonymous mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            FOLD_PAGES * 4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        sys_die("mmap fold region");
    }
    p as usize
}

/// The read-only file mappings of this process (its text and constants, and a dynamic
/// build's libraries), from /proc/self/maps: `(start, end)`.
pub(super) fn file_text_ranges() -> Vec<(usize, usize)> {
    let maps = std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_else(|e| die(&format!("reading /proc/self/maps: {e}")));
    let mut out = Vec::new();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(range), Some(perms), Some(path)) = (f.first(), f.get(1), f.get(5)) else {
            continue;
        };
        if !path.starts_with('/') || perms.contains('w') || !perms.starts_with('r') {
            continue;
        }
        let mut ends = range.split('-').map(|h| usize::from_str_radix(h, 16));
        if let (Some(Ok(start)), Some(Ok(end))) = (ends.next(), ends.next()) {
            out.push((start, end));
        }
    }
    out
}

/// Maps every page of this process's read-only file mappings by reading a byte of each, so
/// that nothing after the measurement faults in text: code that runs after the record (a
/// pipe write, a wait, `_exit`) would otherwise map its page and its fault-around window,
/// raising VmHWM after it was read. Which pages an earlier fault-around mapped depends on
/// the load address (the window is aligned in the address space), and with several
/// processes faulting at once fault-around skips folios it cannot trylock: prefaulting only
/// the functions called after the record left 8 pages to chance in one run of five. A
/// forked child has no page-table entries for its parent's text, so this runs per process.
pub(super) fn prefault_text(ranges: &[(usize, usize)]) {
    for &(start, end) in ranges {
        for page in (start..end).step_by(4096) {
            // SAFETY: a readable mapping of this process, listed in /proc/self/maps at start;
            // the workload never unmaps its own text.
            unsafe { std::ptr::read_volatile(page as *const u8) };
        }
    }
}
