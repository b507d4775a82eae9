//! Records zeroed and copied without the compiler's `memset` and `memmove` calls. The BPF
//! target lowers those to byte loops in a subprogram: the verifier walks one iteration per
//! byte on every path that reaches a call (`*ev = ExitEvent::default()` was 14 900 of the exit
//! program's 27 858 verified instructions), and the CPU runs the loop on every event.
//! Volatile 8-byte stores can neither be merged back into a call nor dropped.

use core::mem::{size_of, MaybeUninit};

use aya_ebpf::helpers::generated::bpf_get_current_comm;
use spacetime_common::TASK_COMM_LEN;

/// Zeroes the `size_of::<T>()` bytes at `p`, a multiple of 8, with 8-byte stores.
///
/// # Safety
/// `p` must be valid for writes of a `T` and 8-byte aligned.
#[inline(always)]
unsafe fn zero_raw<T: Copy>(p: *mut T) {
    const { assert!(size_of::<T>().is_multiple_of(8)) };
    let words = p.cast::<u64>();
    let mut i = 0;
    while i < size_of::<T>() / 8 {
        // SAFETY: within the `T` at `p` (the caller's contract).
        unsafe { words.add(i).write_volatile(0) };
        i += 1;
    }
}

/// Zeroes a record in place.
#[inline(always)]
pub fn zero<T: Copy>(v: &mut T) {
    const { assert!(core::mem::align_of::<T>() >= 8) };
    // SAFETY: a valid, aligned `T`; every field of these records is plain data.
    unsafe { zero_raw(v) }
}

/// Zeroes the record in `slot` and returns it, built in place: a record returned by value
/// is copied, and the compiler turns that copy into a `memset` call again.
#[inline(always)]
pub fn zeroed<T: Copy>(slot: &mut MaybeUninit<T>) -> &mut T {
    const { assert!(core::mem::align_of::<T>() >= 8) };
    // SAFETY: the storage is a `T`'s, aligned; all zeroes is a valid value of these
    // plain-data records.
    unsafe {
        zero_raw(slot.as_mut_ptr());
        slot.assume_init_mut()
    }
}

/// Copies a record with 8-byte loads and stores (`src` and `dst` never overlap here).
#[inline(always)]
pub fn copy<T: Copy>(dst: &mut T, src: &T) {
    const { assert!(size_of::<T>().is_multiple_of(8) && core::mem::align_of::<T>() >= 8) };
    let (d, s) = (
        (dst as *mut T).cast::<u64>(),
        (src as *const T).cast::<u64>(),
    );
    let mut i = 0;
    while i < size_of::<T>() / 8 {
        // SAFETY: within both records, aligned.
        unsafe { d.add(i).write_volatile(s.add(i).read_volatile()) };
        i += 1;
    }
}

/// The current task's comm into `dst`; the helper zeroes it if it fails.
#[inline(always)]
pub fn current_comm(dst: &mut [u8; TASK_COMM_LEN]) {
    // SAFETY: the helper writes at most TASK_COMM_LEN bytes into `dst`.
    unsafe { bpf_get_current_comm(dst.as_mut_ptr().cast(), TASK_COMM_LEN as u32) };
}
