//! The atomic read-modify-writes on map values, in two builds of each program that uses
//! them: `FETCH` true uses the instructions that return the old value (fetch-and-add,
//! exchange, compare-and-exchange: Linux 5.12+); false, only the plain atomic add (`XADD`,
//! no result), which is all older kernels have. Their verifier refuses a fetching atomic
//! anywhere in a program, reachable or not, so the choice cannot be read-only configuration:
//! userspace probes the kernel and loads one build or the other.

use core::intrinsics::{
    atomic_cxchg, atomic_xadd, atomic_xchg,
    AtomicOrdering::{Relaxed, SeqCst},
};

/// Adds `delta` to `*p`; no value returned. Relaxed: LLVM's BPF backend emits the plain
/// `XADD`, which every kernel has.
///
/// # Safety
/// `p` is an aligned pointer into a map value.
#[inline(always)]
pub unsafe fn add(p: *mut i64, delta: i64) {
    atomic_xadd::<i64, i64, { Relaxed }>(p, delta);
}

/// Adds `delta` to `*p` and returns the sum. With `FETCH` it is the sum this add made;
/// without, a read after the add, which may include other CPUs' adds made meanwhile.
///
/// # Safety
/// As [`add`].
#[inline(always)]
pub unsafe fn add_and_read<const FETCH: bool>(p: *mut i64, delta: i64) -> i64 {
    if FETCH {
        // SeqCst, not Relaxed: for a relaxed add the backend emits the plain XADD, which
        // returns nothing, even when the old value is used.
        atomic_xadd::<i64, i64, { SeqCst }>(p, delta) + delta
    } else {
        add(p, delta);
        core::ptr::read_volatile(p)
    }
}

/// `*p = new` if it was `current`: whether it was. Fetch builds only.
///
/// # Safety
/// As [`add`].
#[inline(always)]
pub unsafe fn compare_exchange(p: *mut i64, current: i64, new: i64) -> Result<(), i64> {
    match atomic_cxchg::<i64, { Relaxed }, { Relaxed }>(p, current, new) {
        (_, true) => Ok(()),
        (seen, false) => Err(seen),
    }
}

/// `*p = new` if it was 0: whether it was. Fetch builds only.
///
/// # Safety
/// `p` is an aligned pointer into a map value.
#[inline(always)]
pub unsafe fn claim_u64(p: *mut u64, new: u64) -> bool {
    atomic_cxchg::<u64, { Relaxed }, { Relaxed }>(p, 0, new).1
}

/// Swaps `new` into `*p`, returning the old value. Fetch builds only.
///
/// # Safety
/// As [`claim_u64`].
#[inline(always)]
pub unsafe fn swap_u64(p: *mut u64, new: u64) -> u64 {
    atomic_xchg::<u64, { Relaxed }>(p, new)
}

/// Swaps `new` into `*p`, returning the old value. Fetch builds only.
///
/// # Safety
/// As [`add`].
#[inline(always)]
pub unsafe fn swap(p: *mut i64, new: i64) -> i64 {
    atomic_xchg::<i64, { Relaxed }>(p, new)
}
