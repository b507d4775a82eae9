//! spacetime's own `process_*` figures, read when a scrape is answered (once per scrape, not
//! per event): /proc/self/stat, the descriptor table and RLIMIT_NOFILE.

pub struct OwnProcess {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub start_time_seconds: f64,
    pub open_fds: u64,
    pub max_fds: u64,
}

impl OwnProcess {
    pub fn read() -> Option<OwnProcess> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let boot_s = boot_time_s()?;
        let (tck, page) = (
            crate::util::clock::ticks_per_s(),
            crate::util::clock::page_size(),
        );
        let f = StatFields::parse(&stat)?;
        let open_fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
        let max_fds = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        let tck = tck.max(1) as f64;
        Some(OwnProcess {
            cpu_seconds: (f.utime + f.stime) as f64 / tck,
            resident_bytes: f.rss_pages.saturating_mul(page),
            virtual_bytes: f.vsize,
            start_time_seconds: boot_s as f64 + f.starttime as f64 / tck,
            open_fds,
            max_fds,
        })
    }
}

struct StatFields {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
    rss_pages: u64,
}

impl StatFields {
    /// Fields of /proc/PID/stat after the comm, which may hold spaces and parentheses: the
    /// fields start after the last ')'.
    fn parse(stat: &str) -> Option<StatFields> {
        let rest = &stat[stat.rfind(')')? + 1..];
        // `rest` starts at field 3 (state); field N is index N - 3.
        let f: Vec<&str> = rest.split_whitespace().collect();
        let num = |n: usize| f.get(n - 3)?.parse::<u64>().ok();
        Some(StatFields {
            utime: num(14)?,
            stime: num(15)?,
            starttime: num(22)?,
            vsize: num(23)?,
            rss_pages: num(24)?,
        })
    }
}

/// `btime` from /proc/stat: boot time, seconds since the epoch.
fn boot_time_s() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_after_a_hostile_comm() {
        let line = "42 (a) b) (c) S 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 1 0 \
                    5000 1048576 25 18446744073709551615";
        let f = StatFields::parse(line).expect("parses");
        assert_eq!((f.utime, f.stime), (7, 3));
        assert_eq!((f.starttime, f.vsize, f.rss_pages), (5000, 1048576, 25));
    }

    #[test]
    fn reads_this_process() {
        let own = OwnProcess::read().expect("/proc/self is readable");
        assert!(own.resident_bytes > 0 && own.virtual_bytes >= own.resident_bytes);
        assert!(own.open_fds > 0 && own.max_fds >= own.open_fds);
        assert!(own.start_time_seconds > 1.0e9, "{}", own.start_time_seconds);
    }
}
