//! The memory high-water marks of an mm, as the kernel defines its peak:
//! `max(mm->hiwater_rss, file + anon + shmem pages)`.
//!
//! On 6.2+ the RSS counters are per-CPU counters: the shared `count` lags the truth by up to a
//! batch per CPU, so the per-CPU deltas are added in. Their addresses need each CPU's per-CPU
//! area offset, which the kernel does not export to BPF; it is learned from our own per-CPU
//! map: the address of a CPU's element minus the map's per-CPU base pointer.

use core::ffi::c_void;

use aya_ebpf::helpers::generated::bpf_map_lookup_percpu_elem;
use spacetime_common::{flags, rss_layout, stat, MemStats, MAX_EXACT_CPUS};

use crate::{
    conf, count,
    task::{read, read_or_zero, Kernel},
    zero::zero,
    ANCHOR, CPU_OFFSETS, MM_STASH,
};

/// An mm's exact RSS counters as `rss_stat` kept them, handed from `rss::forget` to the read
/// of the same mm's final figures right after it (an exec's old image, an exit's last one):
/// those reads then skip the per-CPU counters, a read per CPU (the whole read was 0.3-0.5 µs
/// of an exit record's 1.4-1.7 on 2 CPUs). Valid within one tracepoint's programs only:
/// `forget` empties it before anything else, the read takes it, and the programs that read
/// final figures empty it at their end.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct MmStash {
    /// 0: nothing stashed.
    pub mm: u64,
    /// File, anon and shmem pages, in `rss_slot` order.
    pub pages: [i64; 3],
    /// Room for the counters' heads, read at once (see `heads`): too large for the stack of
    /// the programs that inline it.
    pub heads: [i64; HEADS_WORDS],
}

/// Empties this CPU's stash.
#[inline(always)]
pub fn stash_clear() {
    if let Some(s) = MM_STASH.get_ptr_mut(0) {
        // SAFETY: this CPU's slot of our own per-CPU map, ours while the program runs.
        unsafe { (*s).mm = 0 };
    }
}

/// Stashes `mm`'s exact counters for the read of its final figures that follows.
#[inline(always)]
pub fn stash(mm: u64, pages: &[i64; 3]) {
    if let Some(s) = MM_STASH.get_ptr_mut(0) {
        // SAFETY: as above.
        unsafe {
            (*s).mm = mm;
            (*s).pages = *pages;
        }
    }
}

/// The counters stashed for `mm`, taken (the stash is emptied).
#[inline(always)]
fn stash_take(mm: u64) -> Option<[i64; 3]> {
    let s = MM_STASH.get_ptr_mut(0)?;
    // SAFETY: as above.
    unsafe {
        if (*s).mm != mm || mm == 0 {
            return None;
        }
        (*s).mm = 0;
        Some((*s).pages)
    }
}

/// Turns a value the verifier tracks as a pointer into a plain number by passing it through
/// memory. Allowed for privileged programs only, which spacetime's are.
#[inline(always)]
pub fn launder(v: u64) -> Option<u64> {
    let slot = ANCHOR.get_ptr_mut(1)?;
    // SAFETY: a per-CPU slot of our own map; volatile so the round trip is not optimized away.
    unsafe {
        core::ptr::write_volatile(slot, v);
        Some(core::ptr::read_volatile(slot))
    }
}

/// Offset of `cpu`'s per-CPU area: learned once from the anchor map (the address of our
/// element on that CPU minus the map's per-CPU base pointer), then cached; it never changes
/// after boot.
#[inline(always)]
pub fn cpu_offset(cpu: u32) -> Option<u64> {
    let slot = CPU_OFFSETS.get_ptr_mut(cpu)?;
    // SAFETY: an array slot of our own map; a racing writer writes the same value.
    let cached = unsafe { *slot };
    if cached != 0 {
        return Some(cached);
    }
    let anchor_map = launder(&ANCHOR as *const _ as u64)?;
    let anchor_base = read::<u64>(anchor_map, conf!(off.bpf_array_pptrs)).ok()?;
    let key: u32 = 0;
    // SAFETY: the helper returns our element's address on `cpu`, or null.
    let elem = unsafe {
        bpf_map_lookup_percpu_elem(
            &ANCHOR as *const _ as *mut c_void,
            &key as *const u32 as *const c_void,
            cpu,
        )
    };
    if elem.is_null() {
        return None;
    }
    let off = launder(elem as u64)?.wrapping_sub(anchor_base);
    // SAFETY: as above.
    unsafe { *slot = off };
    Some(off)
}

/// The shared `count` and the `counters` per-CPU pointer of the `percpu_counter` at `base`:
/// one read where `counters` follows `count` closely (24 bytes apart on 6.2+ x86-64), two
/// otherwise. Each kernel read is a helper call; the RSS paths make many.
#[inline(always)]
pub fn percpu_counter(base: u64) -> Result<(i64, u64), i32> {
    let c_count = conf!(off.pcpu_count);
    let c_counters = conf!(off.pcpu_counters);
    if c_counters > c_count && c_counters - c_count <= 24 && (c_counters - c_count) % 8 == 0 {
        let w = read::<[u64; 4]>(base, c_count)?;
        let counters = match c_counters - c_count {
            8 => w[1],
            16 => w[2],
            _ => w[3],
        };
        return Ok((w[0] as i64, counters));
    }
    Ok((read::<i64>(base, c_count)?, read::<u64>(base, c_counters)?))
}

/// RSS counters of a 6.2+ mm, per-CPU deltas included when the CPU count allows.
#[inline(always)]
fn percpu_rss<const FINAL: bool>(mm: u64, out: &mut MemStats) -> Result<(), i32> {
    let base = mm + conf!(off.mm_rss_stat) as u64;
    let stride = conf!(off.rss_stride) as u64;
    let nr_cpus = conf!(nr_cpus);
    let exact_cpus = nr_cpus > 0 && nr_cpus <= MAX_EXACT_CPUS;
    if let Some(pages) = FINAL
        .then(|| stash_take(mm))
        .flatten()
        .filter(|_| exact_cpus)
    {
        let (counts, _) = heads(base, stride)?;
        // What the per-CPU parts add is what rss_stat's exact counters hold beyond `count`.
        let delta = (pages[0] - counts[0]) + (pages[1] - counts[1]) + (pages[2] - counts[2]);
        out.percpu_delta_pages = delta as i32;
        out.flags |= flags::MEM_EXACT;
        out.rss_file_pages = pages[0].max(0) as u64;
        out.rss_anon_pages = pages[1].max(0) as u64;
        out.rss_shmem_pages = pages[2].max(0) as u64;
        return Ok(());
    }
    let (counts, pcpu) = heads(base, stride)?;
    let mut sums = counts;
    if exact_cpus {
        // 6.2+ allocates an mm's per-CPU counters as one block (percpu_counter_init_many):
        // then one read per CPU fetches every counter, instead of one read per counter.
        let idx = [
            conf!(off.rss_file_idx) as u64,
            conf!(off.rss_anon_idx) as u64,
            conf!(off.rss_shmem_idx) as u64,
        ];
        let first = pcpu[0].wrapping_sub(4 * idx[0]);
        // Read-only configuration, so the verifier walks one of the two loops below; a block
        // that is not one after all is a failed read (counted) rather than a wrong sum.
        let block = conf!(off.rss_pcpu_block) != 0;
        if block
            && !(idx.iter().all(|&i| i < 4)
                && pcpu
                    .iter()
                    .zip(idx)
                    .all(|(&p, i)| p == first.wrapping_add(4 * i)))
        {
            return Err(-1);
        }
        let mut delta: i64 = 0;
        for cpu in 0..MAX_EXACT_CPUS {
            if cpu >= nr_cpus {
                break;
            }
            let off = cpu_offset(cpu).ok_or(-1)?;
            if block {
                let w = read::<[i32; 4]>(first.wrapping_add(off), 0)?;
                for i in 0..3 {
                    // Constant indexes (configuration): no variable stack access to verify.
                    let d = match idx[i] {
                        0 => w[0],
                        1 => w[1],
                        2 => w[2],
                        _ => w[3],
                    } as i64;
                    sums[i] += d;
                    delta += d;
                }
                continue;
            }
            for i in 0..3 {
                let d = read::<i32>(pcpu[i].wrapping_add(off), 0)? as i64;
                sums[i] += d;
                delta += d;
            }
        }
        out.percpu_delta_pages = delta as i32;
        out.flags |= flags::MEM_EXACT;
    }
    out.rss_file_pages = sums[0].max(0) as u64;
    out.rss_anon_pages = sums[1].max(0) as u64;
    out.rss_shmem_pages = sums[2].max(0) as u64;
    Ok(())
}

/// The shared `count` and the `counters` per-CPU pointer of the file, anon and shmem
/// `percpu_counter`s at `base`: one read where the array is small enough (4 x 40 bytes on
/// 6.2+ x86-64: 152 bytes from the first count to the last pointer), else one per counter.
#[inline(always)]
fn heads(base: u64, stride: u64) -> Result<([i64; 3], [u64; 3]), i32> {
    let idx = [
        conf!(off.rss_file_idx) as u64,
        conf!(off.rss_anon_idx) as u64,
        conf!(off.rss_shmem_idx) as u64,
    ];
    let c_count = conf!(off.pcpu_count) as u64;
    let c_counters = conf!(off.pcpu_counters) as u64;
    let words = |i: u64| (stride * i / 8, (stride * i + c_counters - c_count) / 8);
    let fits = stride.is_multiple_of(8)
        && c_counters > c_count
        && (c_counters - c_count).is_multiple_of(8)
        && idx
            .iter()
            .all(|&i| i < 4 && words(i).1 < HEADS_WORDS as u64);
    if fits {
        let slot = MM_STASH.get_ptr_mut(0).ok_or(-1)?;
        // SAFETY: this CPU's slot of our own per-CPU map, ours while the program runs.
        let w = unsafe { &mut (*slot).heads };
        if read_or_zero(w, base, c_count as u32) != 0 {
            count(0, stat::READ_FAIL);
            return Err(-1);
        }
        // Indexes from read-only configuration: constants to the verifier.
        let at = |k: u64| w.get(k as usize).copied().ok_or(-1);
        let (f, a, s) = (words(idx[0]), words(idx[1]), words(idx[2]));
        return Ok((
            [at(f.0)?, at(a.0)?, at(s.0)?],
            [at(f.1)? as u64, at(a.1)? as u64, at(s.1)? as u64],
        ));
    }
    let (fc, fp) = percpu_counter(base + stride * idx[0])?;
    let (ac, ap) = percpu_counter(base + stride * idx[1])?;
    let (sc, sp) = percpu_counter(base + stride * idx[2])?;
    Ok(([fc, ac, sc], [fp, ap, sp]))
}

/// Room in [`MmStash::heads`]: the RSS counters' array from the first count on.
const HEADS_WORDS: usize = 20;

/// RSS counters of a pre-6.2 mm: atomics in the mm, plus the calling task's cached deltas
/// (SPLIT_RSS_COUNTING) that have not been folded in yet.
#[inline(always)]
fn atomic_rss(task: u64, mm: u64, out: &mut MemStats) -> Result<(), i32> {
    let base = mm + conf!(off.mm_rss_stat) as u64;
    let stride = conf!(off.rss_stride) as u64;
    let idx = [
        conf!(off.rss_file_idx),
        conf!(off.rss_anon_idx),
        conf!(off.rss_shmem_idx),
    ];
    let cache = conf!(off.task_rss_stat_count);
    let mut sums = [0i64; 3];
    for i in 0..3 {
        sums[i] = read::<i64>(base + stride * idx[i] as u64, 0)?;
        if cache != 0 {
            sums[i] += read::<i32>(task + cache as u64 + 4 * idx[i] as u64, 0)? as i64;
        }
    }
    out.rss_file_pages = sums[0].max(0) as u64;
    out.rss_anon_pages = sums[1].max(0) as u64;
    out.rss_shmem_pages = sums[2].max(0) as u64;
    out.flags |= flags::MEM_EXACT;
    Ok(())
}

/// Reads the figures of `mm` (owned by `task`) into `m`, in place (see zero.rs); on failure
/// `m` is left without `MEM_VALID`.
#[inline(always)]
pub fn read_mm(task: u64, mm: u64, m: &mut MemStats) -> Result<(), i32> {
    read_mm_as::<false, _>(task, mm, m)
}

/// [`read_mm`] for an mm's final figures, right after `rss::forget` stopped following it:
/// its exact counters come from what `forget` stashed, if it did. Apart from `read_mm` so
/// that the programs which never find a stash (a fork's, an exec's new mm) do not carry
/// that path for the verifier to walk.
#[inline(always)]
pub fn read_final_mm(task: u64, mm: impl Kernel, m: &mut MemStats) -> Result<(), i32> {
    read_mm_as::<true, _>(task, mm, m)
}

#[inline(always)]
fn read_mm_as<const FINAL: bool, K: Kernel>(task: u64, mm: K, m: &mut MemStats) -> Result<(), i32> {
    zero(m);
    let hiwater_rss = conf!(off.mm_hiwater_rss);
    // Adjacent in every mm_struct so far: then one read instead of three (where a read is
    // a helper's call; loads are cheaper one by one).
    let adjacent = !mm.loads()
        && conf!(off.mm_hiwater_vm) == hiwater_rss + 8
        && conf!(off.mm_total_vm) == hiwater_rss + 16;
    let (hiwater_rss_pages, hiwater_vm_pages, total_vm_pages) = if adjacent {
        let w = read::<[u64; 3]>(mm.addr(), hiwater_rss)?;
        (w[0], w[1], w[2])
    } else {
        (
            mm.get::<u64>(hiwater_rss)?,
            mm.get::<u64>(conf!(off.mm_hiwater_vm))?,
            mm.get::<u64>(conf!(off.mm_total_vm))?,
        )
    };
    let mm = mm.addr();
    m.hiwater_rss_pages = hiwater_rss_pages;
    m.hiwater_vm_pages = hiwater_vm_pages;
    m.total_vm_pages = total_vm_pages;
    if conf!(rss_layout) == rss_layout::ATOMIC_ARRAY {
        atomic_rss(task, mm, m)?;
    } else {
        percpu_rss::<FINAL>(mm, m)?;
    }
    m.flags |= flags::MEM_VALID;
    Ok(())
}
