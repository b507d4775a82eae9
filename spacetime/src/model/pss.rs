//! Sampling memory from /proc: PSS from `/proc/PID/smaps_rollup` ([`PssSampler`]), and RSS
//! from `/proc/PID/statm` where the kernel's rss_stat tracepoint is missing
//! ([`StatmSampler`]).
//!
//! RSS counts a shared page in every process that maps it; PSS divides it among them, so the
//! tree-wide sum of PSS is the memory the tree really uses. The kernel computes PSS only by
//! walking the page tables under the target's mmap lock: reading smaps_rollup costs about
//! 7 ms per GiB of 4 KiB pages (statm: a few µs). Each process therefore gets its own
//! interval: the budget of sampling CPU (2 % by default) is shared among the live processes,
//! small ones are read at the minimum interval (50 ms) and the big ones slow down so the
//! total stays within the budget. One call does a bounded amount of work (`max_call_ns`) so
//! it never stalls an event loop for long; what is left stays due for the next call.
//!
//! A process is read through a descriptor of its /proc directory, after checking that its
//! start time is the one of the key: a pid reused by another process is never sampled under
//! the old one's name. A process that is gone (or a zombie) is not an error: it is dropped
//! from the schedule until it leaves the live set.

use std::{
    collections::{HashMap, HashSet},
    ffi::CStr,
    fs::File,
    io::{self, Read},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    time::Instant,
};

use crate::model::{
    timeline::{Point, Timeline},
    tree::Key,
};
use rustc_hash::FxHashMap;

/// The measured cost of reading smaps_rollup: nanoseconds per KiB of RSS (≈ 7 ms per GiB).
pub const SMAPS_NS_PER_KIB: u64 = 7;
/// The measured cost of reading statm.
pub const STATM_NS: u64 = 4_000;
/// RSS growth since a process's last read that makes it due before its clock: this fraction
/// of its RSS then (1/8), and at least [`GROWTH_MIN_BYTES`].
pub const GROWTH_SHIFT: u32 = 3;
pub const GROWTH_MIN_BYTES: u64 = 4 << 20;
/// Reads of processes at least this big price the others' per-KiB cost (below, opening the
/// files dominates).
const PER_KIB_FROM_BYTES: u64 = 16 << 20;
/// Unspent budget kept for growth reads, at most this much time's worth.
const CREDIT_WINDOW_NS: f64 = 10e9;

#[derive(Clone, Copy, Debug)]
pub struct SamplerConfig {
    /// The shortest interval between two samples of one process.
    pub min_interval_ns: u64,
    /// Fraction of one CPU that sampling may use, over all processes.
    pub cpu_budget: f64,
    /// Work done by one `sample_due` call before it returns, leaving the rest due.
    pub max_call_ns: u64,
    /// Check each process's start time before trusting what its pid's files say.
    pub verify_start: bool,
    /// The exact RSS of each process is known ([`PssSampler::note_rss`]): reads also follow
    /// growth, paid from the budget the clock leaves unspent.
    pub follow_growth: bool,
}

impl Default for SamplerConfig {
    fn default() -> SamplerConfig {
        SamplerConfig {
            min_interval_ns: 50_000_000,
            cpu_budget: 0.02,
            max_call_ns: 10_000_000,
            verify_start: true,
            follow_growth: false,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerStats {
    /// Successful reads.
    pub samples: u64,
    /// Time spent reading, over all samples.
    pub read_ns: u64,
    /// The longest single read.
    pub max_read_ns: u64,
    /// Processes found gone (exited, zombie, or pid reused) when read.
    pub vanished: u64,
    /// Reads made because a process's RSS grew, before its clock.
    pub growth_samples: u64,
}

/// Per-process schedule.
#[derive(Debug)]
struct Tracked {
    /// Estimated cost of one read.
    cost_ns: u64,
    measured: bool,
    last_ns: Option<u64>,
    interval_ns: u64,
    generation: u64,
    /// Exact RSS now and at the last read (bytes; 0: unknown), from the kernel's points.
    rss_now: u64,
    rss_read: u64,
    /// What a read cost per KiB of RSS, measured on reads big enough for the page walk to
    /// dominate (0: not yet); at least [`SMAPS_NS_PER_KIB`] is assumed.
    ns_per_kib: u64,
}

impl Tracked {
    fn due_ns(&self) -> u64 {
        self.last_ns
            .map_or(0, |l| l.saturating_add(self.interval_ns))
    }

    /// What a read costs now: what reads of it cost, and no less than the page walk of its
    /// exact RSS now (it may have grown a lot since it was last read).
    fn cost_now(&self) -> u64 {
        let per_kib = self.ns_per_kib.max(SMAPS_NS_PER_KIB);
        self.cost_ns.max(self.rss_now / 1024 * per_kib)
    }

    /// RSS grew enough since the last read to read again before the clock says so.
    fn grown(&self) -> bool {
        self.last_ns.is_some()
            && self.rss_read > 0
            && self.rss_now >= self.rss_read + (self.rss_read >> GROWTH_SHIFT).max(GROWTH_MIN_BYTES)
    }
}

/// Shares a CPU budget among processes: each gets `max(min, cost / share)`, where the share
/// is the budget left over by the cheaper processes (water-filling), so small processes run
/// at the minimum interval and only the expensive ones slow down.
pub fn intervals(costs_ns: &[u64], min_interval_ns: u64, budget: f64) -> Vec<u64> {
    let mut order: Vec<usize> = (0..costs_ns.len()).collect();
    order.sort_by_key(|&i| costs_ns[i]);
    let mut out = vec![min_interval_ns; costs_ns.len()];
    let mut left = budget.max(1e-6);
    let mut n = costs_ns.len();
    for i in order {
        let share = left / n as f64;
        let cost = costs_ns[i] as f64;
        let t = (cost / share).ceil().max(min_interval_ns as f64);
        out[i] = t.min(u64::MAX as f64 / 2.0) as u64;
        left = (left - cost / t).max(0.0);
        n -= 1;
    }
    out
}

/// The schedule both samplers share.
#[derive(Debug)]
struct Scheduler {
    cfg: SamplerConfig,
    procs: HashMap<Key, Tracked>,
    /// Found gone, still in the caller's live set.
    gone: HashSet<Key>,
    generation: u64,
    stats: SamplerStats,
    /// Budget not spent yet (ns of reading), as of `credit_at`: every read is paid from it.
    credit_ns: f64,
    credit_at: Option<u64>,
}

impl Scheduler {
    fn new(cfg: SamplerConfig) -> Scheduler {
        Scheduler {
            cfg,
            procs: HashMap::new(),
            gone: HashSet::new(),
            generation: 0,
            stats: SamplerStats::default(),
            credit_ns: 0.0,
            credit_at: None,
        }
    }

    /// The budget earned since the last call, kept up to [`CREDIT_WINDOW_NS`]'s worth.
    fn earn(&mut self, now_ns: u64) {
        let budget = self.cfg.cpu_budget;
        if let Some(at) = self.credit_at {
            let earned = now_ns.saturating_sub(at) as f64 * budget;
            self.credit_ns = (self.credit_ns + earned).min(CREDIT_WINDOW_NS * budget);
        }
        self.credit_at = Some(now_ns);
    }

    /// Brings the schedule in line with the live set; `estimate` gives a new process's cost.
    fn sync(&mut self, live: impl IntoIterator<Item = Key>, mut estimate: impl FnMut(Key) -> u64) {
        self.generation += 1;
        let g = self.generation;
        let mut still_gone = HashSet::new();
        for key in live {
            if self.gone.contains(&key) {
                still_gone.insert(key);
                continue;
            }
            self.procs
                .entry(key)
                .or_insert_with(|| Tracked {
                    cost_ns: estimate(key),
                    measured: false,
                    last_ns: None,
                    interval_ns: 0,
                    generation: g,
                    rss_now: 0,
                    rss_read: 0,
                    ns_per_kib: 0,
                })
                .generation = g;
        }
        self.gone = still_gone;
        self.procs.retain(|_, t| t.generation == g);
    }

    fn reschedule(&mut self) {
        let keys: Vec<Key> = self.procs.keys().copied().collect();
        // Priced at the exact RSS where it is known: a process that grew since its last read
        // costs more now, and pricing it at its old size overspent the budget (3.4 % seen on a
        // 1 GiB fill).
        let costs: Vec<u64> = keys.iter().map(|k| self.procs[k].cost_now()).collect();
        let iv = intervals(&costs, self.cfg.min_interval_ns, self.cfg.cpu_budget);
        for (k, i) in keys.iter().zip(iv) {
            if let Some(t) = self.procs.get_mut(k) {
                t.interval_ns = i;
            }
        }
    }

    /// The processes to read now: those the clock says, then those that grew, as far as the
    /// unspent budget pays for them.
    fn due(&self, now_ns: u64) -> Vec<(Key, bool)> {
        let mut due: Vec<(u64, Key)> = self
            .procs
            .iter()
            .filter(|(_, t)| t.due_ns() <= now_ns)
            .map(|(k, t)| (t.due_ns(), *k))
            .collect();
        due.sort_unstable();
        let mut out: Vec<(Key, bool)> = due.into_iter().map(|(_, k)| (k, false)).collect();
        let mut grown: Vec<(u64, Key)> = self
            .procs
            .iter()
            .filter(|(_, t)| self.cfg.follow_growth && t.due_ns() > now_ns && t.grown())
            .map(|(k, t)| (t.cost_now(), *k))
            .collect();
        grown.sort_unstable();
        let mut credit = self.credit_ns;
        for (cost, key) in grown {
            if (cost as f64) > credit {
                break;
            }
            credit -= cost as f64;
            out.push((key, true));
        }
        out
    }

    /// Samples what is due with `read`, within the per-call work limit.
    fn run(&mut self, now_ns: u64, mut read: impl FnMut(Key) -> io::Result<Option<u64>>) -> usize {
        self.earn(now_ns);
        self.reschedule();
        let started = Instant::now();
        let mut n = 0;
        for (key, growth) in self.due(now_ns) {
            if started.elapsed().as_nanos() as u64 >= self.cfg.max_call_ns {
                break;
            }
            let t0 = Instant::now();
            let got = read(key);
            let took = t0.elapsed().as_nanos() as u64;
            self.credit_ns -= took as f64;
            match got {
                Ok(Some(_)) => {
                    self.stats.samples += 1;
                    self.stats.growth_samples += growth as u64;
                    self.stats.read_ns += took;
                    self.stats.max_read_ns = self.stats.max_read_ns.max(took);
                    if let Some(t) = self.procs.get_mut(&key) {
                        t.cost_ns = if t.measured {
                            (3 * t.cost_ns + took) / 4
                        } else {
                            took
                        };
                        t.measured = true;
                        t.last_ns = Some(now_ns);
                        t.rss_read = t.rss_now;
                        if t.rss_now >= PER_KIB_FROM_BYTES {
                            t.ns_per_kib = took / (t.rss_now / 1024);
                        }
                    }
                    n += 1;
                }
                Ok(None) | Err(_) => {
                    self.stats.vanished += 1;
                    self.procs.remove(&key);
                    self.gone.insert(key);
                }
            }
        }
        self.reschedule();
        n
    }

    /// When the next read is due: by the clock, or once the budget pays for a grown process.
    fn next_due(&self) -> Option<u64> {
        let clock = self.procs.values().map(Tracked::due_ns).min();
        let budget = self.cfg.cpu_budget.max(1e-6);
        let growth = self
            .procs
            .values()
            .filter(|t| t.grown())
            .map(|t| {
                let short = (t.cost_now() as f64 - self.credit_ns).max(0.0);
                let at = self.credit_at.unwrap_or(0);
                at.saturating_add((short / budget).ceil().min(u64::MAX as f64 / 4.0) as u64)
            })
            .min();
        match (clock, growth) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn note_rss(&mut self, key: Key, bytes: u64) {
        if let Some(t) = self.procs.get_mut(&key) {
            t.rss_now = bytes;
            if t.rss_read == 0 && t.last_ns.is_some() {
                // Read before its RSS was known: growth counts from now.
                t.rss_read = bytes;
            }
        }
    }
}

/// Reads /proc files of processes into reusable buffers.
#[derive(Debug)]
struct ProcReader {
    buf: Vec<u8>,
    stat: Vec<u8>,
    boot_offset_ns: u64,
    tick_ns: u64,
    verify_start: bool,
    /// Inside a PID namespace with its own /proc: kernel pid → the pid /proc names it by.
    proc_pids: Option<FxHashMap<u32, u32>>,
}

impl ProcReader {
    fn new(verify_start: bool) -> ProcReader {
        ProcReader {
            buf: Vec::with_capacity(4096),
            stat: Vec::with_capacity(1024),
            boot_offset_ns: crate::util::clock::boottime_offset_ns(),
            tick_ns: 1_000_000_000 / crate::util::clock::ticks_per_s(),
            verify_start,
            proc_pids: None,
        }
    }

    /// From now on, reads `/proc/<proc>` for the process the kernel numbers `kernel`; kernel
    /// pids without such a pairing are not read (that /proc would name a stranger).
    fn set_proc_pid(&mut self, kernel: u32, proc: u32) {
        self.proc_pids
            .get_or_insert_with(FxHashMap::default)
            .insert(kernel, proc);
    }

    /// Reads `/proc/<key.tgid>/<name>` into `self.buf`; `Ok(false)` when the process is gone
    /// or the pid now belongs to another process.
    fn read(&mut self, key: Key, name: &CStr) -> io::Result<bool> {
        let pid = match &self.proc_pids {
            None => key.tgid,
            Some(m) => match m.get(&key.tgid) {
                Some(&p) if p != 0 => p,
                _ => return Ok(false),
            },
        };
        let path = format!("/proc/{pid}\0");
        // SAFETY: NUL-terminated path; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                path.as_ptr().cast(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return gone_or(io::Error::last_os_error());
        }
        // SAFETY: a fresh descriptor we own.
        let dir = unsafe { OwnedFd::from_raw_fd(fd) };
        if self.verify_start {
            if !read_at(&dir, c"stat", &mut self.stat).or_else(gone_or)? {
                return Ok(false);
            }
            let Some(ticks) = stat_start_ticks(&self.stat) else {
                return Ok(false);
            };
            let expected = (key.start_ns + self.boot_offset_ns) / self.tick_ns;
            if ticks.abs_diff(expected) > 1 {
                return Ok(false);
            }
        }
        // The directory descriptor stays bound to the process it was opened for: once that
        // process is gone, opening through it fails even if the pid was reused.
        read_at(&dir, name, &mut self.buf).or_else(gone_or)
    }
}

fn gone_or(e: io::Error) -> io::Result<bool> {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => Ok(false),
        _ => Err(e),
    }
}

fn read_at(dir: &OwnedFd, name: &CStr, buf: &mut Vec<u8>) -> io::Result<bool> {
    // SAFETY: NUL-terminated name relative to an open directory.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own.
    let mut f = unsafe { File::from_raw_fd(fd) };
    buf.clear();
    f.read_to_end(buf)?;
    Ok(true)
}

/// Field 22 of /proc/PID/stat: start time in clock ticks since boot.
fn stat_start_ticks(stat: &[u8]) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields restart after the last ')'.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let field = stat[close + 1..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .nth(22 - 3)?;
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

/// `Rss:` and `Pss:` of smaps_rollup, in bytes; None when neither is there (a zombie or a
/// kernel thread has an empty rollup).
pub fn parse_smaps_rollup(text: &[u8]) -> Option<Usage> {
    let mut rss = None;
    let mut pss = None;
    for line in text.split(|&b| b == b'\n') {
        let slot = if line.starts_with(b"Rss:") {
            &mut rss
        } else if line.starts_with(b"Pss:") {
            &mut pss
        } else {
            continue;
        };
        let value = line[4..]
            .split(|b| b.is_ascii_whitespace())
            .find(|f| !f.is_empty())
            .and_then(parse_u64);
        *slot = value.map(|kib| kib * 1024);
        if rss.is_some() && pss.is_some() {
            break;
        }
    }
    Some(Usage {
        rss_bytes: rss?,
        pss_bytes: pss?,
    })
}

/// One smaps_rollup reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Usage {
    pub rss_bytes: u64,
    pub pss_bytes: u64,
}

/// `resident` of statm, in pages.
fn parse_statm_resident(text: &[u8]) -> Option<u64> {
    let mut fields = text
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    fields.nth(1).and_then(parse_u64)
}

/// Samples PSS of live processes at adaptive intervals.
#[derive(Debug)]
pub struct PssSampler {
    sched: Scheduler,
    reader: ProcReader,
    page: u64,
}

impl PssSampler {
    pub fn new(cfg: SamplerConfig) -> PssSampler {
        PssSampler {
            sched: Scheduler::new(cfg),
            reader: ProcReader::new(cfg.verify_start),
            page: crate::util::clock::page_size(),
        }
    }

    /// Reads the process the kernel numbers `kernel` as `/proc/<proc>` (see
    /// [`crate::model::memory::Memory::proc_by_shown_pids`]).
    pub fn set_proc_pid(&mut self, kernel: u32, proc: u32) {
        self.reader.set_proc_pid(kernel, proc);
    }

    #[cfg(test)]
    /// Reads one process now: None when it is gone.
    pub fn read(&mut self, key: Key) -> io::Result<Option<Usage>> {
        if !self.reader.read(key, c"smaps_rollup")? {
            return Ok(None);
        }
        Ok(parse_smaps_rollup(&self.reader.buf))
    }

    /// Samples the processes of `live` that are due at `now_ns` (CLOCK_MONOTONIC) into `out`
    /// (their PSS, and the tree-wide sum); returns how many were read.
    pub fn sample_due(
        &mut self,
        now_ns: u64,
        live: impl IntoIterator<Item = Key>,
        out: &mut Timeline,
    ) -> usize {
        let (reader, page) = (&mut self.reader, self.page);
        // A new process's first read is priced from statm (a few µs) by the cost model.
        self.sched.sync(live, |key| {
            let resident = reader
                .read(key, c"statm")
                .ok()
                .filter(|&ok| ok)
                .and_then(|_| parse_statm_resident(&reader.buf))
                .unwrap_or(0);
            resident * page / 1024 * SMAPS_NS_PER_KIB
        });
        let mut read = |key: Key| -> io::Result<Option<u64>> {
            if !reader.read(key, c"smaps_rollup")? {
                return Ok(None);
            }
            let Some(u) = parse_smaps_rollup(&reader.buf) else {
                return Ok(None);
            };
            out.record_pss(key, Point::new(now_ns, u.pss_bytes));
            out.record_sharing(key, u.rss_bytes.saturating_sub(u.pss_bytes));
            Ok(Some(u.pss_bytes))
        };
        self.sched.run(now_ns, &mut read)
    }

    /// When the next process is due (CLOCK_MONOTONIC), if any is tracked.
    pub fn next_due(&self) -> Option<u64> {
        self.sched.next_due()
    }

    /// The exact RSS of a process now (from the kernel's points): a process whose RSS grew
    /// since its last read is read again before its clock, within the budget.
    pub fn note_rss(&mut self, key: Key, bytes: u64) {
        self.sched.note_rss(key, bytes);
    }

    #[cfg(test)]
    /// The current interval of a process.
    pub fn interval_ns(&self, key: &Key) -> Option<u64> {
        self.sched.procs.get(key).map(|t| t.interval_ns)
    }

    pub fn stats(&self) -> SamplerStats {
        self.sched.stats
    }

    pub fn cpu_budget(&self) -> f64 {
        self.sched.cfg.cpu_budget
    }
}

/// Samples RSS from statm (the fallback when kmem:rss_stat is missing): cheap, so every
/// process runs at the minimum interval unless there are very many of them.
#[derive(Debug)]
pub struct StatmSampler {
    sched: Scheduler,
    reader: ProcReader,
    page: u64,
}

impl StatmSampler {
    pub fn new(cfg: SamplerConfig) -> StatmSampler {
        StatmSampler {
            sched: Scheduler::new(cfg),
            reader: ProcReader::new(cfg.verify_start),
            page: crate::util::clock::page_size(),
        }
    }

    /// Reads the process the kernel numbers `kernel` as `/proc/<proc>` (see
    /// [`crate::model::memory::Memory::proc_by_shown_pids`]).
    pub fn set_proc_pid(&mut self, kernel: u32, proc: u32) {
        self.reader.set_proc_pid(kernel, proc);
    }

    /// Samples the due processes' RSS into `out` (which sums them when its source is statm).
    pub fn sample_due(
        &mut self,
        now_ns: u64,
        live: impl IntoIterator<Item = Key>,
        out: &mut Timeline,
    ) -> usize {
        self.sched.sync(live, |_| STATM_NS);
        let (reader, page) = (&mut self.reader, self.page);
        let mut read = |key: Key| -> io::Result<Option<u64>> {
            if !reader.read(key, c"statm")? {
                return Ok(None);
            }
            let Some(pages) = parse_statm_resident(&reader.buf) else {
                return Ok(None);
            };
            out.record_rss(key, Point::new(now_ns, pages * page));
            Ok(Some(pages * page))
        };
        self.sched.run(now_ns, &mut read)
    }

    pub fn next_due(&self) -> Option<u64> {
        self.sched.next_due()
    }

    pub fn stats(&self) -> SamplerStats {
        self.sched.stats
    }
}

#[cfg(test)]
/// The key of a running process, from /proc (its start time to the clock tick): for
/// processes not learnt from events, and for tests.
pub fn process_key(pid: u32) -> io::Result<Key> {
    let mut buf = Vec::new();
    File::open(format!("/proc/{pid}/stat"))?.read_to_end(&mut buf)?;
    let ticks = stat_start_ticks(&buf).ok_or_else(|| io::Error::other("unparsable stat"))?;
    let tick_ns = 1_000_000_000 / crate::util::clock::ticks_per_s();
    Ok(Key {
        tgid: pid,
        start_ns: (ticks * tick_ns + tick_ns / 2)
            .saturating_sub(crate::util::clock::boottime_offset_ns()),
    })
}

#[cfg(test)]
#[path = "pss_tests.rs"]
mod tests;
