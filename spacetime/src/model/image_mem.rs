//! An image's memory figures, packed: 21 bytes where `Option<EndMem>` and the followed peak
//! took 56, so that a process's two images (a fork+exec has exactly two: the inherited one
//! and the exec'd one) fit in its entry with no heap block of their own.
//!
//! Each figure is a page count in 40 bits (5 bytes, little-endian). The kernel's figures are
//! counts of pages of one address space: at most 2^35 with 4-level page tables and 4 KiB
//! pages, 2^44 with 5-level ones; 40 bits hold up to 4 PiB of 4 KiB pages. A figure that
//! does not fit is kept as out of range: read back as unknown, never as another number, and
//! the setter says so for the caller to count.

use spacetime_common::flags;

use crate::model::process::EndMem;

/// No figure (yet).
const NONE: u64 = (1 << 40) - 1;
/// A figure came that did not fit.
const OUT_OF_RANGE: u64 = NONE - 1;
/// The largest page count kept.
pub const MAX_PAGES: u64 = OUT_OF_RANGE - 1;

/// The end figures came (the image ended with an mm to read).
const ENDED: u8 = 1 << 0;
/// The end figures' `MEM_EXACT`.
const EXACT: u8 = 1 << 1;

/// A page count in 40 bits, or none, or out of range.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Pages([u8; 5]);

impl Pages {
    const NONE: Pages = Pages::raw(NONE);

    const fn raw(v: u64) -> Pages {
        let b = v.to_le_bytes();
        Pages([b[0], b[1], b[2], b[3], b[4]])
    }

    fn get(self) -> u64 {
        let mut b = [0u8; 8];
        b[..5].copy_from_slice(&self.0);
        u64::from_le_bytes(b)
    }

    /// `pages`, and whether it fit.
    fn of(pages: u64) -> (Pages, bool) {
        match pages <= MAX_PAGES {
            true => (Pages::raw(pages), true),
            false => (Pages::raw(OUT_OF_RANGE), false),
        }
    }

    fn value(self) -> Option<u64> {
        Some(self.get()).filter(|&v| v <= MAX_PAGES)
    }

    fn out_of_range(self) -> bool {
        self.get() == OUT_OF_RANGE
    }
}

/// The memory figures of one image: those its end record gave (peak RSS, the kernel's own
/// peak RSS, peak virtual size, whether exact) and the maximum RSS the kernel followed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct ImageMem {
    peak_rss: Pages,
    kernel_peak_rss: Pages,
    peak_vm: Pages,
    followed_peak: Pages,
    bits: u8,
}

impl Default for ImageMem {
    fn default() -> ImageMem {
        ImageMem {
            peak_rss: Pages::NONE,
            kernel_peak_rss: Pages::NONE,
            peak_vm: Pages::NONE,
            followed_peak: Pages::NONE,
            bits: 0,
        }
    }
}

impl std::fmt::Debug for ImageMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImageMem")
            .field("end", &self.end())
            .field("followed_peak", &self.followed_peak())
            .finish()
    }
}

impl ImageMem {
    /// The end figures; false when one did not fit (it reads back as unknown).
    #[must_use]
    pub fn set_end(&mut self, m: EndMem) -> bool {
        let (peak_rss, a) = Pages::of(m.peak_rss_pages);
        let (kernel_peak_rss, b) = Pages::of(m.kernel_peak_rss_pages);
        let (peak_vm, c) = Pages::of(m.peak_vm_pages);
        self.peak_rss = peak_rss;
        self.kernel_peak_rss = kernel_peak_rss;
        self.peak_vm = peak_vm;
        self.bits = ENDED
            | if m.flags & flags::MEM_EXACT != 0 {
                EXACT
            } else {
                0
            };
        a && b && c
    }

    /// The figures a report showed, read back: the peak RSS and virtual size as the end
    /// figures (a report has no kernel's own peak: the peak stands for it), exact as they were,
    /// and a peak RSS that was out of range kept so.
    pub fn restored(
        peak_rss: Option<u64>,
        peak_vm: Option<u64>,
        exact: bool,
        rss_out_of_range: bool,
    ) -> ImageMem {
        let pages = |v: Option<u64>| v.map_or(Pages::NONE, |v| Pages::of(v).0);
        let ended = peak_rss.is_some() || peak_vm.is_some() || rss_out_of_range;
        let peak_rss = match rss_out_of_range {
            true => Pages::raw(OUT_OF_RANGE),
            false => pages(peak_rss),
        };
        ImageMem {
            peak_rss,
            kernel_peak_rss: peak_rss,
            peak_vm: pages(peak_vm),
            followed_peak: Pages::NONE,
            bits: (if ended { ENDED } else { 0 }) | (if exact { EXACT } else { 0 }),
        }
    }

    /// The end figures as given, when they came and every one fit.
    pub fn end(&self) -> Option<EndMem> {
        if self.bits & ENDED == 0 {
            return None;
        }
        Some(EndMem {
            peak_rss_pages: self.peak_rss.value()?,
            kernel_peak_rss_pages: self.kernel_peak_rss.value()?,
            peak_vm_pages: self.peak_vm.value()?,
            flags: flags::MEM_VALID
                | if self.end_exact() {
                    flags::MEM_EXACT
                } else {
                    0
                },
        })
    }

    /// The end record's peak RSS, when it came and fit.
    pub fn end_peak_rss(&self) -> Option<u64> {
        self.peak_rss.value()
    }

    pub fn peak_vm(&self) -> Option<u64> {
        self.peak_vm.value()
    }

    /// The end figures came and the kernel summed them exactly (`MEM_EXACT`).
    pub fn end_exact(&self) -> bool {
        self.bits & EXACT != 0
    }

    /// The kernel followed every change of the image's RSS up to `pages`: the maximum so far
    /// rises to it. False when it did not fit: the maximum is out of range from then on (and
    /// later calls return true: one figure out of range is counted once).
    #[must_use]
    pub fn follow(&mut self, pages: u64) -> bool {
        if self.followed_peak.out_of_range() {
            return true;
        }
        let (max, fit) = Pages::of(self.followed_peak.value().unwrap_or(0).max(pages));
        self.followed_peak = max;
        fit
    }

    /// The exact maximum RSS the kernel followed, when it did and it fit.
    pub fn followed_peak(&self) -> Option<u64> {
        self.followed_peak.value()
    }

    /// The image's peak RSS: the larger of the end figure and the followed maximum (the end
    /// figure may miss a peak freed before: hiwater_rss is raised lazily, from approximate
    /// counts); unknown when neither came or one did not fit.
    pub fn peak_rss(&self) -> Option<u64> {
        if self.rss_out_of_range() {
            return None;
        }
        match (self.peak_rss.value(), self.followed_peak.value()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// The end record's peak RSS or the followed maximum did not fit: [`ImageMem::peak_rss`]
    /// is unknown, and so is a maximum over the process's images.
    pub fn rss_out_of_range(&self) -> bool {
        self.peak_rss.out_of_range() || self.followed_peak.out_of_range()
    }

    /// The peak is exact: followed by the kernel, or summed exactly at the end.
    pub fn exact(&self) -> bool {
        self.followed_peak.value().is_some() || self.end_exact()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(rss: u64, kernel: u64, vm: u64, exact: bool) -> EndMem {
        EndMem {
            peak_rss_pages: rss,
            kernel_peak_rss_pages: kernel,
            peak_vm_pages: vm,
            flags: flags::MEM_VALID | if exact { flags::MEM_EXACT } else { 0 },
        }
    }

    /// Every page count an address space can hold with 4-level page tables (2^35 pages of
    /// 4 KiB) and beyond, up to the last kept: each bit pattern's edges.
    fn counts() -> impl Iterator<Item = u64> {
        (0..40)
            .flat_map(|b| [(1u64 << b) - 1, 1 << b, (1 << b) + 1])
            .chain([1 << 35, 1 << 39, MAX_PAGES - 1, MAX_PAGES])
    }

    #[test]
    fn packs_into_21_bytes_and_two_images_fit_in_a_process() {
        assert_eq!(std::mem::size_of::<ImageMem>(), 21, "ImageMem grew");
        assert_eq!(
            std::mem::size_of::<crate::model::reduce::Image>(),
            48,
            "Image grew: two no longer fit inline in 96 bytes"
        );
        // 248 with times, its key and exit as `Option`s (a fork+exec has three times); 208
        // with the argv still arriving in each image; 200 with ru_maxrss in 8 bytes and a
        // bool for each of fork seen, untracked, left and root.
        assert_eq!(
            std::mem::size_of::<crate::model::reduce::Process>(),
            192,
            "Process grew"
        );
    }

    #[test]
    fn end_figures_read_back_exactly() {
        for v in counts() {
            for exact in [false, true] {
                let m = end(v, v ^ 1, MAX_PAGES - v, exact);
                let mut im = ImageMem::default();
                assert!(im.set_end(m), "{v} did not fit");
                assert_eq!(im.end(), Some(m), "{v}");
                assert_eq!(im.end_peak_rss(), Some(v));
                assert_eq!(im.peak_vm(), Some(MAX_PAGES - v));
                assert_eq!(im.end_exact(), exact);
                assert_eq!((im.peak_rss(), im.exact()), (Some(v), exact));
            }
        }
    }

    #[test]
    fn followed_peak_is_the_maximum_so_far() {
        for v in counts() {
            let mut im = ImageMem::default();
            assert_eq!(
                (im.followed_peak(), im.peak_rss(), im.exact()),
                (None, None, false)
            );
            assert!(im.follow(v) && im.follow(v / 2), "{v}");
            assert_eq!(im.followed_peak(), Some(v));
            assert!(im.exact());
            assert!(im.set_end(end(v / 3, v, v, false)));
            assert_eq!(im.peak_rss(), Some(v), "the followed maximum is higher");
            assert!(im.set_end(end(v.saturating_add(1).min(MAX_PAGES), v, v, false)));
            assert_eq!(im.peak_rss(), Some(v.saturating_add(1).min(MAX_PAGES)));
        }
    }

    #[test]
    fn no_figures_read_as_unknown() {
        let im = ImageMem::default();
        assert_eq!(im.end(), None);
        assert_eq!(
            (im.end_peak_rss(), im.peak_vm(), im.peak_rss()),
            (None, None, None)
        );
        assert!(!im.exact() && !im.end_exact());
    }

    #[test]
    fn out_of_range_figures_read_as_unknown_never_as_another_number() {
        for big in [MAX_PAGES + 1, NONE, 1 << 40, 1 << 44, u64::MAX] {
            let mut im = ImageMem::default();
            assert!(!im.set_end(end(5, 5, big, true)), "{big} fit");
            assert_eq!(im.end(), None, "a partial end reads as none");
            assert_eq!((im.peak_vm(), im.end_peak_rss()), (None, Some(5)));
            assert_eq!(im.peak_rss(), Some(5), "the RSS figures did fit");

            let mut im = ImageMem::default();
            assert!(!im.rss_out_of_range());
            assert!(!im.set_end(end(big, 5, 5, true)));
            assert!(im.follow(7));
            assert_eq!(im.peak_rss(), None, "the end's RSS is out of range");
            assert!(im.rss_out_of_range());

            let mut im = ImageMem::default();
            assert!(im.follow(7) && !im.follow(big));
            assert!(im.follow(1), "counted once");
            assert!(im.rss_out_of_range(), "out of range stays so");
            assert_eq!((im.followed_peak(), im.peak_rss()), (None, None));
            assert!(im.set_end(end(9, 9, 9, false)));
            assert_eq!(im.peak_rss(), None, "the followed maximum is out of range");
        }
    }
}
