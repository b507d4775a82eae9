//! Where and when a report was made: the fields that let a report be read next to others
//! (a schema version, spacetime's version, the host, its kernel, the absolute start time).

use serde::Serialize;

/// The version of the report's layout (docs/trace-report.schema.json). Adding a field keeps
/// it; renaming, removing or changing the meaning of one raises it.
pub const SCHEMA_VERSION: u32 = 2;

#[derive(Debug, Serialize)]
pub struct Origin {
    pub schema_version: u32,
    pub spacetime_version: String,
    /// The host's name (uname's nodename, as seen in spacetime's UTS namespace).
    pub host: String,
    /// The running kernel's release (uname -r).
    pub kernel_release: String,
    /// When the command started (let go to exec it; an attach: the attach): nanoseconds since
    /// the Unix epoch, and the same instant as RFC 3339 in UTC. Every `_ns` time of the report
    /// counts from this instant.
    pub start_unix_ns: u64,
    pub start_rfc3339: String,
}

impl Origin {
    /// The origin of a trace whose root started at `t0_mono_ns` (CLOCK_MONOTONIC).
    pub fn now(t0_mono_ns: u64) -> Origin {
        let (host, kernel_release) = uname();
        let offset = crate::util::clock::realtime_offset_ns() as i128;
        let start_unix_ns = (t0_mono_ns as i128 + offset).max(0) as u64;
        Origin {
            schema_version: SCHEMA_VERSION,
            spacetime_version: env!("CARGO_PKG_VERSION").into(),
            host,
            kernel_release,
            start_unix_ns,
            start_rfc3339: rfc3339(start_unix_ns),
        }
    }
}

/// (nodename, release) from uname(2).
fn uname() -> (String, String) {
    let u = rustix::system::uname();
    let field = |f: &std::ffi::CStr| String::from_utf8_lossy(f.to_bytes()).into_owned();
    (field(u.nodename()), field(u.release()))
}

/// `2026-11-23T10:30:00.123456789Z` for nanoseconds since the epoch.
pub fn rfc3339(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        unix_ns % 1_000_000_000
    )
}

/// Gregorian (year, month, day) of a day count since 1970-01-01 (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_matches_date() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000000000Z");
        // date -u -d @951782400.5: the leap day of a century leap year.
        assert_eq!(
            rfc3339(951_782_400_500_000_000),
            "2000-02-29T00:00:00.500000000Z"
        );
        // date -u -d @1795430000: 2026-11-23T10:33:20Z
        assert_eq!(
            rfc3339(1_795_430_000_000_000_007),
            "2026-11-23T10:33:20.000000007Z"
        );
    }

    #[test]
    fn origin_is_this_machine() {
        let realtime = || crate::util::clock::now_ns(crate::util::clock::ClockId::Realtime) as u64;
        // The start is the wall-clock time of the monotonic time given, whatever pause comes
        // after: it lies between the wall clock read before and after that one, but for the
        // error of the clocks' offset (half its tightest bracket: microseconds; a second allowed).
        let before = realtime();
        let o = Origin::now(crate::util::clock::monotonic_ns());
        let after = realtime();
        let slack = 1_000_000_000;
        assert!(
            (before - slack..=after + slack).contains(&o.start_unix_ns),
            "{} not within [{before}, {after}]",
            o.start_unix_ns
        );
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
        assert_eq!(o.kernel_release, release.trim());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
        assert_eq!(o.host, host.trim());
    }
}
