//! Reading /proc files of traced processes: through a descriptor of the process's /proc
//! directory, after checking that its start time is the one of the key, so a pid reused by
//! another process is never read under the old one's name; and what the files say
//! (`smaps_rollup`, `statm`, `stat`). A process that is gone (or a zombie) is not an error.

use std::{
    ffi::CStr,
    fs::File,
    io::{self, Read},
    os::fd::OwnedFd,
};

use crate::model::tree::Key;
use rustc_hash::FxHashMap;
use rustix::fs::{Mode, OFlags};

/// Reads /proc files of processes into reusable buffers.
#[derive(Debug)]
pub(crate) struct ProcReader {
    pub(crate) buf: Vec<u8>,
    stat: Vec<u8>,
    /// `stat` read again after the file ([`ProcReader::read_between_stats`]).
    stat_after: Vec<u8>,
    boot_offset_ns: u64,
    tick_ns: u64,
    verify_start: bool,
    /// Inside a PID namespace with its own /proc: kernel pid → the pid /proc names it by.
    proc_pids: Option<FxHashMap<u32, u32>>,
}

impl ProcReader {
    pub(crate) fn new(verify_start: bool) -> ProcReader {
        ProcReader {
            buf: Vec::with_capacity(4096),
            stat: Vec::with_capacity(1024),
            stat_after: Vec::with_capacity(1024),
            boot_offset_ns: crate::util::clock::boottime_offset_ns(),
            tick_ns: 1_000_000_000 / crate::util::clock::ticks_per_s(),
            verify_start,
            proc_pids: None,
        }
    }

    /// From now on, reads `/proc/<proc>` for the process the kernel numbers `kernel`; kernel
    /// pids without such a pairing are not read (that /proc would name a stranger).
    pub(crate) fn set_proc_pid(&mut self, kernel: u32, proc: u32) {
        self.proc_pids
            .get_or_insert_with(FxHashMap::default)
            .insert(kernel, proc);
    }

    /// Reads `/proc/<key.tgid>/<name>` into `self.buf`; `Ok(false)` when the process is gone
    /// or the pid now belongs to another process.
    pub(crate) fn read(&mut self, key: Key, name: &CStr) -> io::Result<bool> {
        self.read_after(key, Some(name), self.verify_start, false)
    }

    /// As [`ProcReader::read`], `stat` read first in any case: [`ProcReader::minor_faults`]
    /// then says how many the process had before `name` was read.
    pub(crate) fn read_after_stat(&mut self, key: Key, name: &CStr) -> io::Result<bool> {
        self.read_after(key, Some(name), true, false)
    }

    /// As [`ProcReader::read_after_stat`], and `stat` read once more when `name` is read,
    /// through the same directory (the same process): [`ProcReader::faults_after`] says its
    /// minor faults and threads then (None when that read failed: it ended meanwhile).
    pub(crate) fn read_between_stats(&mut self, key: Key, name: &CStr) -> io::Result<bool> {
        self.read_after(key, Some(name), true, true)
    }

    /// The minor faults and the threads as the last [`ProcReader::read_between_stats`]
    /// ended.
    pub(crate) fn faults_after(&self) -> Option<(u64, u64)> {
        Some((
            stat_field(&self.stat_after, 10)?,
            stat_field(&self.stat_after, 20)?,
        ))
    }

    /// Reads `stat` alone (its start time checked as for any read): then
    /// [`ProcReader::minor_faults`] says the process's faults now. `Ok(false)` when gone.
    pub(crate) fn read_stat(&mut self, key: Key) -> io::Result<bool> {
        self.read_after(key, None, true, false)
    }

    /// The process's minor faults (all its threads', `stat`'s field 10) as of the last read
    /// that read `stat`.
    pub(crate) fn minor_faults(&self) -> Option<u64> {
        stat_field(&self.stat, 10)
    }

    /// `stat` before `name` (and its start time checked), and `stat_again` after it.
    fn read_after(
        &mut self,
        key: Key,
        name: Option<&CStr>,
        stat: bool,
        stat_again: bool,
    ) -> io::Result<bool> {
        self.stat.clear();
        self.stat_after.clear();
        let pid = match &self.proc_pids {
            None => key.tgid,
            Some(m) => match m.get(&key.tgid) {
                Some(&p) if p != 0 => p,
                _ => return Ok(false),
            },
        };
        let path = format!("/proc/{pid}");
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = match rustix::fs::open(path.as_str(), flags, Mode::empty()) {
            Ok(dir) => dir,
            Err(e) => return gone_or(e.into()),
        };
        if stat && !read_at(&dir, c"stat", &mut self.stat).or_else(gone_or)? {
            self.stat.clear();
            return Ok(false);
        }
        if self.verify_start {
            let Some(ticks) = stat_field(&self.stat, 22) else {
                return Ok(false);
            };
            let expected = (key.start_ns + self.boot_offset_ns) / self.tick_ns;
            if ticks.abs_diff(expected) > 1 {
                // Another process's: nothing of it is this one's.
                self.stat.clear();
                return Ok(false);
            }
        }
        // The directory descriptor stays bound to the process it was opened for: once that
        // process is gone, opening through it fails even if the pid was reused.
        let read = match name {
            Some(name) => read_at(&dir, name, &mut self.buf).or_else(gone_or)?,
            None => true,
        };
        if read && stat_again && read_at(&dir, c"stat", &mut self.stat_after).is_err() {
            // It ended meanwhile: its faults then are not known.
            self.stat_after.clear();
        }
        Ok(read)
    }
}

fn gone_or(e: io::Error) -> io::Result<bool> {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => Ok(false),
        _ => Err(e),
    }
}

fn read_at(dir: &OwnedFd, name: &CStr, buf: &mut Vec<u8>) -> io::Result<bool> {
    let fd = rustix::fs::openat(dir, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut f = File::from(fd);
    buf.clear();
    f.read_to_end(buf)?;
    Ok(true)
}

/// Field `n` (from 3 on) of /proc/PID/stat: 10 the minor faults, 22 the start time in clock
/// ticks since boot.
fn stat_field(stat: &[u8], n: usize) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields restart after the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let field = stat[close + 1..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .nth(n.checked_sub(3)?)?;
    parse_u64(field)
}

fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() {
        return None;
    }
    s.iter().try_fold(0u64, |v, &b| {
        b.is_ascii_digit()
            .then(|| v.checked_mul(10)?.checked_add((b - b'0') as u64))
            .flatten()
    })
}

/// What smaps_rollup says of a process, in bytes; None when `Rss:` or `Pss:` is missing (a
/// zombie or a kernel thread has an empty rollup).
pub fn parse_smaps_rollup(text: &[u8]) -> Option<Usage> {
    let mut fields: [Option<u64>; 4] = [None; 4];
    const NAMES: [&[u8]; 4] = [b"Rss:", b"Pss:", b"Anonymous:", b"Pss_Anon:"];
    for line in text.split(|&b| b == b'\n') {
        let Some(i) = NAMES.iter().position(|n| line.starts_with(n)) else {
            continue;
        };
        fields[i] = line[NAMES[i].len()..]
            .split(|b| b.is_ascii_whitespace())
            .find(|f| !f.is_empty())
            .and_then(parse_u64)
            .map(|kib| kib * 1024);
    }
    let [rss, pss, anon, pss_anon] = fields;
    Some(Usage {
        rss_bytes: rss?,
        pss_bytes: pss?,
        anon_bytes: anon.unwrap_or(0),
        pss_anon_bytes: pss_anon,
        faulted_bytes: None,
        read_faulted_bytes: None,
    })
}

/// One smaps_rollup reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    /// Anonymous pages mapped (`Anonymous:`).
    pub anon_bytes: u64,
    /// Their PSS (`Pss_Anon:`, Linux 5.9+).
    pub pss_anon_bytes: Option<u64>,
    /// The process's minor faults before the read, times the page size (`stat`, read first;
    /// in a round, before the round's first read): at most what it copied on write up to then.
    pub faulted_bytes: Option<u64>,
    /// Its minor faults' bytes as the read ended (`stat` read again after the page walk),
    /// and a page per thread for a fault in flight.
    pub read_faulted_bytes: Option<u64>,
}

impl Usage {
    /// What sharing took off the anonymous pages (pages shared after a fork): how much more
    /// they may count once they are this process's alone (written copy-on-write by it or by
    /// the others, or the others gone). Before 5.9 (no `Pss_Anon:`) what sharing took off
    /// all its pages, as far as its anonymous pages go.
    pub fn anon_shared_bytes(&self) -> u64 {
        match self.pss_anon_bytes {
            Some(p) => self.anon_bytes.saturating_sub(p),
            None => (self.rss_bytes.saturating_sub(self.pss_bytes)).min(self.anon_bytes),
        }
    }

    /// The PSS of the file and shmem pages over their RSS (1: private), or None without any.
    pub fn file_ratio(&self) -> Option<f64> {
        let rss = self.rss_bytes.saturating_sub(self.anon_bytes);
        let pss = match self.pss_anon_bytes {
            Some(a) => self.pss_bytes.saturating_sub(a),
            // Before 5.9: the whole process's ratio.
            None => {
                return (self.rss_bytes > 0).then(|| self.pss_bytes as f64 / self.rss_bytes as f64)
            }
        };
        (rss > 0).then(|| (pss as f64 / rss as f64).min(1.0))
    }
}

/// `resident` of statm, in pages.
/// statm's first field: the mm's size in pages (0 once exit released the mm).
pub(crate) fn parse_statm_size(text: &[u8]) -> Option<u64> {
    text.split(|b| b.is_ascii_whitespace())
        .find(|f| !f.is_empty())
        .and_then(parse_u64)
}

pub(crate) fn parse_statm_resident(text: &[u8]) -> Option<u64> {
    let mut fields = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    fields.nth(1).and_then(parse_u64)
}

/// The key of a running process, from /proc (its start time to the clock tick): for
/// processes not learnt from events, and for tests.
#[cfg(test)]
pub fn process_key(pid: u32) -> io::Result<Key> {
    let mut buf = Vec::new();
    File::open(format!("/proc/{pid}/stat"))?.read_to_end(&mut buf)?;
    let ticks = stat_field(&buf, 22).ok_or_else(|| io::Error::other("unparsable stat"))?;
    let tick_ns = 1_000_000_000 / crate::util::clock::ticks_per_s();
    Ok(Key {
        tgid: pid,
        start_ns: (ticks * tick_ns + tick_ns / 2)
            .saturating_sub(crate::util::clock::boottime_offset_ns()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rollup_stat_and_statm() {
        let rollup = b"55d0c000-7ffc0000 ---p 00000000 00:00 0                          [rollup]\n\
            Rss:               12345 kB\n\
            Pss:                6789 kB\n\
            Pss_Dirty:          1000 kB\n\
            Pss_Anon:           5000 kB\n\
            Shared_Clean:        100 kB\n\
            Anonymous:          6000 kB\n";
        let u = parse_smaps_rollup(rollup).expect("parsed");
        assert_eq!(
            u,
            Usage {
                rss_bytes: 12345 * 1024,
                pss_bytes: 6789 * 1024,
                anon_bytes: 6000 * 1024,
                pss_anon_bytes: Some(5000 * 1024),
                faulted_bytes: None,
                read_faulted_bytes: None,
            }
        );
        assert_eq!(u.anon_shared_bytes(), 1000 * 1024);
        // File pages: 6345 kB of RSS, 1789 kB of PSS.
        let ratio = u.file_ratio().expect("file pages");
        assert!((ratio - 1789.0 / 6345.0).abs() < 1e-9, "{ratio}");
        assert_eq!(parse_smaps_rollup(b""), None, "a zombie's rollup is empty");
        let stat = b"42 (a) b (c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(stat_field(stat, 22), Some(987654));
        assert_eq!(stat_field(stat, 10), Some(100));
        assert_eq!(
            parse_statm_resident(b"2000 300 100 10 0 150 0\n"),
            Some(300)
        );
        assert_eq!(parse_statm_size(b"2000 300 100 10 0 150 0\n"), Some(2000));
        assert_eq!(parse_statm_size(b"0 0 0 0 0 0 0\n"), Some(0));
        assert_eq!(parse_u64(b"12x"), None);
    }
}
