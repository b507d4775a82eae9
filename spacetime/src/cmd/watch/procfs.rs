//! Seeding the process table from /proc: the processes already running when `watch` starts.
//! Done once, after the kernel programs are attached and before their first record is read,
//! so a process is either found here or seen forking (or both: the fork record then wins).

use std::{collections::HashMap, io};

use crate::model::table::{Names, Table};

/// What /proc/PID/stat says about a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat {
    pub comm: String,
    pub ppid: u32,
    pub num_threads: u32,
    /// Start time in clock ticks since boot (CLOCK_BOOTTIME).
    pub start_ticks: u64,
}

/// Parses /proc/PID/stat: `pid (comm) state ppid … num_threads(20) … starttime(22) …`. The
/// comm may hold spaces and parentheses: it ends at the last ')'.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state): field N is rest[N - 3].
    Some(Stat {
        comm,
        ppid: rest.get(1)?.parse().ok()?,
        num_threads: rest.get(17)?.parse().ok()?,
        start_ticks: rest.get(19)?.parse().ok()?,
    })
}

/// A /proc start time (clock ticks since boot) on the records' clock (CLOCK_MONOTONIC ns),
/// to the tick.
fn start_mono_ns(start_ticks: u64) -> u64 {
    let hz = crate::util::clock::ticks_per_s();
    // /proc start times count from boot including suspend; the records' from CLOCK_MONOTONIC.
    let suspended = crate::util::clock::boottime_offset_ns();
    let ns = (start_ticks as u128 * 1_000_000_000 / hz as u128) as u64;
    ns.saturating_sub(suspended)
}

/// The start time of the running process `pid` (CLOCK_MONOTONIC ns, to the tick), if any.
pub fn start_of(pid: u32) -> Option<u64> {
    let stat = crate::util::proc_text::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat).map(|s| start_mono_ns(s.start_ticks))
}

/// Adds every process in /proc to `table`; returns how many. `pid_tree` marks that process
/// and its descendants.
#[cfg(test)]
pub fn seed(table: &mut Table, pid_tree: Option<u32>, max: usize) -> io::Result<usize> {
    seed_with(table, pid_tree, max, &|_| true)
}

/// The real uid of a running process (/proc/PID/status `Uid:`, first field).
pub fn real_uid(pid: u32) -> Option<u32> {
    let status = crate::util::proc_text::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// [`seed`], reading the argv only of the processes `want_argv` accepts (the others' argv is
/// left out, incomplete, as the kernel-side filter leaves out theirs).
pub fn seed_with(
    table: &mut Table,
    pid_tree: Option<u32>,
    max: usize,
    want_argv: &dyn Fn(u32) -> bool,
) -> io::Result<usize> {
    let mut threads = HashMap::new();
    let mut n = 0;
    for dirent in std::fs::read_dir("/proc")? {
        let Ok(dirent) = dirent else { continue };
        let Some(pid) = dirent
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if n >= max {
            break;
        }
        // The process may exit meanwhile: whatever cannot be read is left out.
        let Ok(stat) = crate::util::proc_text::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(stat) = parse_stat(&stat) else {
            continue;
        };
        let wanted = want_argv(pid);
        let args = if wanted {
            crate::util::proc_text::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()
        } else {
            Vec::new()
        };
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str()).into())
            .unwrap_or_default();
        let area = args.strip_suffix(&[0]).unwrap_or(&args);
        let image = Names {
            exe,
            comm: crate::kernel::events::Comm::new(stat.comm.as_bytes()),
            args: area.into(),
            argv_complete: wanted,
        };
        let start_ns = start_mono_ns(stat.start_ticks);
        threads.insert(pid, stat.num_threads);
        let len = image.args.len();
        table.insert_seeded(Table::seeded_entry(pid, stat.ppid, start_ns, image));
        table.charge_argv(len);
        n += 1;
    }
    table.finish_seeding(pid_tree, &threads);
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_awkward_comm() {
        let line = "1234 (a) b (c) S 77 1234 1234 0 -1 4194304 100 0 0 0 5 6 0 0 20 0 3 0 98765 \
                    1000 200 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse_stat(line).expect("parses");
        assert_eq!(s.comm, "a) b (c");
        assert_eq!((s.ppid, s.num_threads, s.start_ticks), (77, 3, 98765));
        assert_eq!(parse_stat("12 (x) S"), None);
    }

    #[test]
    fn own_process_is_seeded() {
        let mut t = Table::new(crate::model::table::TableOptions {
            max_processes: 1 << 20,
            ancestry: true,
            images: false,
            threads: false,
        });
        let me = std::process::id();
        let n = seed(&mut t, Some(me), usize::MAX).expect("reads /proc");
        assert!(n >= 1 && t.len() == n);
        let e = t.get(me).expect("own pid seeded");
        assert!(e.in_tree && e.seeded);
        assert!(e.image.argv().count() >= 1, "own argv");
        assert!(e.threads >= 1);
        // Start time within a tick or so of the truth, on the monotonic clock.
        assert!(e.start_ns <= crate::util::clock::monotonic_ns());
    }
}
