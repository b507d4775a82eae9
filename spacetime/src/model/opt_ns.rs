//! A time that may be unknown in 8 bytes, where `Option<u64>` takes 16: a process and each of
//! its images keep one (their end), and a 100 000-process trace keeps 100 000 of each.

use std::fmt;

/// A time in ns (`CLOCK_MONOTONIC`, as the kernel stamps records), or none. `u64::MAX` stands
/// for none: a monotonic clock reaches it after 584 years, so no record's time is it, and
/// [`OptNs::some`] never makes it (a time there reads back one ns earlier, still known).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OptNs(u64);

impl OptNs {
    pub const NONE: OptNs = OptNs(u64::MAX);

    /// A known time.
    pub const fn some(ns: u64) -> OptNs {
        OptNs(if ns == u64::MAX { u64::MAX - 1 } else { ns })
    }

    pub const fn get(self) -> Option<u64> {
        match self.0 {
            u64::MAX => None,
            ns => Some(ns),
        }
    }

    pub const fn is_some(self) -> bool {
        self.0 != u64::MAX
    }

    pub const fn is_none(self) -> bool {
        self.0 == u64::MAX
    }
}

impl Default for OptNs {
    fn default() -> OptNs {
        OptNs::NONE
    }
}

impl From<Option<u64>> for OptNs {
    fn from(ns: Option<u64>) -> OptNs {
        ns.map_or(OptNs::NONE, OptNs::some)
    }
}

impl From<OptNs> for Option<u64> {
    fn from(ns: OptNs) -> Option<u64> {
        ns.get()
    }
}

impl PartialEq<Option<u64>> for OptNs {
    fn eq(&self, other: &Option<u64>) -> bool {
        self.get() == *other
    }
}

impl fmt::Debug for OptNs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

const _: () = assert!(size_of::<OptNs>() == 8);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_time_reads_back_known_and_none_stays_none() {
        for ns in [0, 1, 1 << 32, 1 << 63, u64::MAX - 2, u64::MAX - 1] {
            assert_eq!(OptNs::some(ns).get(), Some(ns), "{ns}");
            assert_eq!(OptNs::from(Some(ns)), Some(ns), "{ns}");
            assert!(OptNs::some(ns).is_some() && !OptNs::some(ns).is_none());
        }
        // The one value kept for none is never a known time's.
        assert_eq!(OptNs::some(u64::MAX).get(), Some(u64::MAX - 1));
        assert_eq!(OptNs::from(None).get(), None);
        assert_eq!(OptNs::default(), None);
        assert!(OptNs::NONE.is_none() && !OptNs::NONE.is_some());
        assert_eq!(format!("{:?}", OptNs::some(5)), "Some(5)");
    }
}
