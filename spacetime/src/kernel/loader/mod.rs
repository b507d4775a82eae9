//! Loading and attaching the kernel programs.
//!
//! Before anything is loaded the environment is checked, so each missing piece (root, BTF, a
//! kernel too old) is one clear sentence. Kernel field offsets come from the running kernel's
//! BTF and are written into the programs' read-only configuration.

use std::{path::Path, time::Instant};

use aya::{Ebpf, EbpfLoader};
use spacetime_common::{mode, Config};

use crate::kernel::{
    btf::Btf,
    offsets::{self, MemHook, Resolved},
};

/// The compiled kernel programs, embedded at build time by `cargo xtask build`.
#[cfg(spacetime_ebpf)]
static OBJECT: Option<&[u8]> = Some(aya::include_bytes_aligned!(env!("SPACETIME_EBPF_OBJ")));
#[cfg(not(spacetime_ebpf))]
static OBJECT: Option<&[u8]> = None;

const BTF_PATH: &str = "/sys/kernel/btf/vmlinux";
/// Exits in flight between exit_mm() and the exit tracepoint, on kernels that need the
/// `exit_mm_release` program (preallocated: about 100 KiB).
const EXIT_MEM_ENTRIES: u32 = 1024;

/// System mode: processes exited and not yet freed, for the one group exit of each
/// (allocated on use).
const EXITED_ENTRIES: u32 = 16384;
/// Tree mode: room in `TRACKED`, beside the processes running, for traced processes exited
/// whose final CPU figures have not gone yet (their entries marked ended). One lives from the
/// group exit to the last task's final switch, microseconds, or to the free (one RCU grace
/// period: at 5 500 exits/s and up to 260 ms on a busy machine, 1 430). A process whose
/// entry finds no room keeps its exit-time CPU figures (`cpu_final: false`, counted).
const ENDED_ROOM: u32 = 4096;

mod adopt;
mod atomics;
mod facade;
mod maps;
mod mechanisms;
mod own_pid;
mod plan;
mod rss;
mod runs;
mod sessions;
mod startup;
mod stats;
mod ticks;

pub use atomics::{Atomics, NO_FETCH_ATOMICS};
pub use mechanisms::{FentryHook, Refused};
pub use own_pid::{run_own_pid, LearnedPid};
pub use sessions::SessionId;
pub use stats::{parse_sysctl_flag, KernelProgramStats, ProgramStats};
pub use ticks::CpuClock;

use own_pid::OwnPid;
use plan::{attach_raw, Plan};
use rss::RssFollowing;
use sessions::Sessions;
use stats::LoadTimes;
use ticks::CpuTicks;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("loading the eBPF programs needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN), which this user lacks: run it with sudo, or through a spacetime agent")]
    NotRoot,
    #[error(
        "without {0}: loading the eBPF programs needs CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN)"
    )]
    MissingCapability(String),
    #[error("this kernel has no BTF ({BTF_PATH} is missing); spacetime needs a kernel built with CONFIG_DEBUG_INFO_BTF=y")]
    NoBtf,
    #[error("this spacetime binary was built without its eBPF programs; build it with `cargo xtask build`")]
    NotBuilt,
    #[error("reading the kernel's BTF: {0}")]
    Btf(#[from] crate::kernel::btf::BtfError),
    #[error("this kernel lacks a field spacetime reads: {0}")]
    Offsets(#[from] offsets::OffsetsError),
    #[error("the kernel refused spacetime's eBPF programs (permission denied) although this process holds CAP_BPF and CAP_PERFMON: a security policy (lockdown, SELinux, a seccomp filter) forbids BPF")]
    Denied,
    #[error("loading the eBPF programs failed: {0}")]
    Load(#[source] aya::EbpfError),
    #[error("attaching to the {tracepoint} tracepoint failed: {source}")]
    Attach {
        tracepoint: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("attaching to kernel function {function} (fentry) failed: {source}")]
    AttachFentry {
        function: &'static str,
        #[source]
        source: aya::programs::ProgramError,
    },
    #[error("reading the kernel's BTF for fentry: {0}")]
    KernelBtf(#[source] aya::BtfError),
    #[error("a loading thread died: {0}")]
    ThreadPanicked(&'static str),
    #[error("eBPF program {0} is missing from the object")]
    MissingProgram(&'static str),
    #[error("eBPF map {0} is missing from the object")]
    MissingMap(&'static str),
    #[error(transparent)]
    Ring(#[from] crate::kernel::ring::RingError),
    #[error("eBPF map {name}: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("session {0} is out of range (sessions are 0 to {max})", max = spacetime_common::MAX_SESSIONS - 1)]
    BadSession(u16),
    #[error("process {tgid} is already traced in session {session}")]
    TrackedElsewhere { tgid: u32, session: u16 },
    #[error("RSS is not followed in the kernel here (no kmem:rss_stat, or not loaded for it)")]
    RssUnavailable,
    #[error("reading {path}: {source}")]
    Io {
        path: &'static str,
        #[source]
        source: std::io::Error,
    },
}

#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// [`mode::TREE`] or [`mode::SYSTEM`].
    pub mode: u32,
    /// Ring buffer size in bytes; rounded up to a power of two of at least a page.
    pub ring_buffer_bytes: u32,
    /// Largest number of processes tracked at once.
    pub max_tracked: u32,
    /// argv records per exec (4 KiB each).
    pub max_arg_chunks: u32,
    /// Follow every RSS change of the traced processes (kmem:rss_stat), when the kernel has it.
    pub track_rss: bool,
    /// Least time between two RSS points of one process.
    pub rss_interval_ns: u32,
    /// The kernel-side filter (`watch --uid`, `--cgroup`, `--pid-tree`); all zero: none.
    pub filter: spacetime_common::KernelFilter,
    /// Send each cgroup's path the first time a process execs in it (`watch`'s identity,
    /// read while the cgroup exists).
    pub cgroup_names: bool,
    /// Sample the traced threads' run time on a CPU clock tick (CPU over time): the
    /// program attached now, loaded only, or neither.
    pub cpu_clock: CpuClock,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            mode: mode::TREE,
            // A consumer stalled 5 s in an 8 000-exec storm lost 3 634 records with 4 MiB,
            // none with 16 MiB (as watch and the agent use).
            ring_buffer_bytes: 16 << 20,
            max_tracked: 65536,
            max_arg_chunks: 64,
            track_rss: false,
            rss_interval_ns: 5_000_000,
            filter: spacetime_common::KernelFilter::default(),
            cgroup_names: false,
            cpu_clock: CpuClock::Off,
        }
    }
}

pub use crate::kernel::counters::KernelCounters;

/// The loaded and attached programs. What it answers (facade.rs) is each part's: the
/// sessions' maps, RSS following, the CPU clock, the programs' costs, `own_pid`.
pub struct Probes {
    /// The programs, and the maps no part took.
    ebpf: Ebpf,
    logger: Option<KernelLogger>,
    /// Which kernel mechanisms are in use, for `-v`.
    pub mechanisms: Vec<String>,
    /// Those of `mechanisms` the kernel refused (an fentry program): each costs its figure.
    pub refused: Vec<Refused>,
    /// Which builds of the programs load here (see [`Atomics`]).
    pub atomics: Atomics,
    /// Time spent resolving offsets and loading, for `-v`.
    pub load_ms: f64,
    pub ring_buffer_bytes: u32,
    /// RSS changes can be followed in the kernel (the kmem:rss_stat programs are loaded);
    /// whether they are now is [`Probes::rss_following`].
    pub rss_tracking: bool,
    /// Release records come (sched_process_free attached, and sched_switch where the
    /// kernel allows): CPU figures as wait4's.
    pub cpu_at_release: bool,
    /// aya parsed the kernel's BTF for its loader (the thread that builds it could not hide
    /// it: see startup.rs); that costs ~10 ms of start-up and nothing else.
    pub aya_btf_parsed: bool,
    sessions: Sessions,
    rss: RssFollowing,
    /// The CPU clock program (CPU over time from the threads' run time).
    ticks: CpuTicks,
    load_times: LoadTimes,
    own_pid: OwnPid,
}

/// The kernel programs' own diagnostics (aya-log), forwarded to the `log` crate.
pub type KernelLogger = aya_log::EbpfLogger<&'static dyn log::Log>;

/// Number of possible CPUs: per-CPU areas exist for every index up to the highest. Read once:
/// the set is fixed at boot, and an agent asks at every run's start.
pub fn possible_cpus() -> Result<u32, LoadError> {
    static POSSIBLE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    if let Some(&n) = POSSIBLE.get() {
        return Ok(n);
    }
    const PATH: &str = "/sys/devices/system/cpu/possible";
    let text =
        std::fs::read_to_string(PATH).map_err(|source| LoadError::Io { path: PATH, source })?;
    let n = *POSSIBLE.get_or_init(|| parse_possible(&text));
    Ok(n)
}

fn parse_possible(text: &str) -> u32 {
    let max = text
        .trim()
        .split(',')
        .filter_map(|r| r.rsplit('-').next()?.trim().parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    max + 1
}

/// Number of online CPUs, as the kernel lists them (/sys/devices/system/cpu/online); None
/// when unreadable.
pub fn online_cpus() -> Option<u32> {
    aya::util::online_cpus()
        .ok()
        .and_then(|c| u32::try_from(c.len()).ok())
        .filter(|&n| n > 0)
}

/// The most processes that can live at once: each holds a pid below pid_max. Maps keyed by
/// process need no more room than that; preallocated, a hash map's creation costs about 30
/// ns per entry (MM_STATE and TRACKED at 65 536 entries took 3.7 ms of start-up, at 32 768,
/// the default pid_max of a machine with up to 32 CPUs, half that). A pid_max raised during
/// the run can fill them: what did not fit is counted (TRACK_FULL), not lost silently.
/// Unreadable: no bound.
fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse::<u32>().ok())
        .unwrap_or(u32::MAX)
}

fn check_capabilities() -> Result<(), LoadError> {
    let root = rustix::process::geteuid().is_root();
    let Some(caps) = crate::util::caps::CapSet::effective() else {
        return if root {
            Ok(())
        } else {
            Err(LoadError::NotRoot)
        };
    };
    let missing = caps.missing_for_load();
    match missing.len() {
        0 => Ok(()),
        // A plain user: neither capability.
        2 if !root => Err(LoadError::NotRoot),
        _ => Err(LoadError::MissingCapability(crate::util::caps::names(
            &missing,
        ))),
    }
}

fn bump_memlock() {
    // Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
    let r = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall with a valid pointer.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &r) } != 0 {
        log::debug!(
            "could not raise RLIMIT_MEMLOCK: {}",
            std::io::Error::last_os_error()
        );
    }
}

fn map_load_error(e: aya::EbpfError) -> LoadError {
    if denied(&e) {
        LoadError::Denied
    } else {
        LoadError::Load(e)
    }
}

/// The checks before anything is loaded: privileges, BTF, the embedded object. Returns the
/// object.
fn environment() -> Result<&'static [u8], LoadError> {
    check_capabilities()?;
    if !Path::new(BTF_PATH).exists() {
        return Err(LoadError::NoBtf);
    }
    let object = OBJECT.ok_or(LoadError::NotBuilt)?;
    bump_memlock();
    Ok(object)
}

/// Whether a syscall under `e` (its `source()` chain: aya keeps each syscall's io::Error
/// there) was refused for want of permission.
fn denied(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES))
                || io.kind() == std::io::ErrorKind::PermissionDenied
            {
                return true;
            }
        }
        next = err.source();
    }
    false
}

/// The programs' read-only configuration.
fn config(opts: &LoadOptions, resolved: &Resolved, nr_cpus: u32, ring: u32, rss: bool) -> Config {
    Config {
        mode: opts.mode,
        rss_layout: resolved.rss_layout,
        nr_cpus,
        max_arg_chunks: opts.max_arg_chunks,
        wakeup_bytes: ring / 8,
        _pad: 0,
        off: resolved.off,
        rss_interval_ns: opts.rss_interval_ns,
        track_rss: rss as u32,
    }
}

/// Creates the maps (sized for this load) and relocates the programs: what aya's `load`
/// does before any verification.
fn create<'a>(
    mut loader: EbpfLoader<'a>,
    config: &'a Config,
    opts: &'a LoadOptions,
    resolved: &Resolved,
    ring: u32,
) -> Result<Ebpf, LoadError> {
    // System mode reads neither the tracking map nor the followed mms: one entry each
    // instead of preallocating room for `max_tracked` processes. Tree mode: `TRACKED` holds
    // the ended ones too; never more than pid_max, as its keys are pids.
    let (per_process, tracked, exited) = if opts.mode == mode::TREE {
        let pids = pid_max().max(1);
        let running = opts.max_tracked.min(pids).max(1);
        let with_ended = running.saturating_add(running.min(ENDED_ROOM));
        (running, with_ended.min(pids), 1)
    } else {
        (1, 1, EXITED_ENTRIES)
    };
    let exit_mem = match (resolved.exit_mem, resolved.group_dead_hook) {
        (MemHook::Fentry(_), _) | (_, Some(_)) => EXIT_MEM_ENTRIES,
        _ => 1,
    };
    // The programs use no CO-RE relocations (offsets come from our own BTF reading).
    loader
        .btf(None)
        .override_global("CONFIG", config, true)
        .override_global("FILTER", &opts.filter, true)
        .map_max_entries("EVENTS", ring)
        .map_max_entries("TRACKED", tracked)
        .map_max_entries("EXIT_MEM", exit_mem)
        .map_max_entries("MM_STATE", per_process)
        .map_max_entries("EXITED", exited)
        .load(OBJECT.ok_or(LoadError::NotBuilt)?)
        .map_err(map_load_error)
}

impl Probes {
    /// Checks the environment, resolves kernel offsets, loads and attaches the programs.
    pub fn load(opts: &LoadOptions) -> Result<Probes, LoadError> {
        let started = Instant::now();
        environment()?;
        // aya's loader, built on another core (without aya's BTF parse, see startup.rs)
        // while this one resolves the offsets.
        let aya_loader = startup::spawn();
        let btf = Btf::from_sys_fs()?;
        let resolved = offsets::resolve(&btf)?;
        let offsets_at = started.elapsed();
        for note in &resolved.notes {
            log::debug!("kernel BTF: {note}");
        }
        let nr_cpus = possible_cpus()?;
        let ring = opts.ring_buffer_bytes.max(4096).next_power_of_two();
        let plan = Plan::new(
            &resolved,
            opts.track_rss && btf.has_typedef("btf_trace_rss_stat"),
            opts.cgroup_names && resolved.off.cgroup_kn != 0,
        );
        let config = config(opts, &resolved, nr_cpus, ring, plan.rss);
        let built = aya_loader
            .join()
            .map_err(|_| LoadError::ThreadPanicked("aya's loader"))?;
        let aya_btf_at = started.elapsed();
        match &built.fallback {
            None if built.btf_hidden => {}
            None => log::debug!("aya's loader parsed the kernel's BTF: it was visible"),
            Some(why) => log::debug!("aya's loader parsed the kernel's BTF ({why})"),
        }
        let mut ebpf = create(built.loader, &config, opts, &resolved, ring)?;
        let verify_started = Instant::now();
        let load_us = startup::verify_all(&mut ebpf, &plan.to_verify())?;
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        log::debug!(
            "start-up: offsets resolved at {:.1} ms, aya's loader ready at {:.1} ms ({:.1} ms on \
             its thread), maps created at {:.1} ms; {:.1} ms verifying {} programs",
            ms(offsets_at),
            ms(aya_btf_at),
            built.elapsed_us as f64 / 1e3,
            ms(verify_started - started),
            ms(verify_started.elapsed()),
            load_us.len()
        );
        own_pid::load_own_pid(&mut ebpf);
        let attach_started = started.elapsed();
        let rss_link = plan.attach(&mut ebpf)?;
        log::debug!(
            "start-up: raw tracepoints attached in {:.1} ms",
            ms(started.elapsed() - attach_started)
        );
        let at = started.elapsed();
        let ticks = CpuTicks::start(&mut ebpf, opts.cpu_clock);
        if opts.cpu_clock != CpuClock::Off {
            log::debug!(
                "start-up: CPU clock program {} in {:.1} ms",
                match (ticks.loaded(), ticks.ticking()) {
                    (Some(Err(_)), _) => "failed",
                    (_, 0) => "loaded",
                    _ => "attached",
                },
                ms(started.elapsed() - at)
            );
        }
        let mechanisms::Described {
            lines: mut mechanisms,
            refused,
        } = mechanisms::attach_fentries_and_describe(
            &mut ebpf,
            &resolved,
            &plan,
            nr_cpus,
            opts.track_rss,
        );
        mechanisms.extend(ticks.mechanism());
        let logger = aya_log::EbpfLogger::init(&mut ebpf)
            .inspect_err(|e| log::debug!("kernel-side logging unavailable: {e}"))
            .ok();
        let mut sessions = Sessions::take(&mut ebpf)?;
        if opts.mode == mode::TREE {
            // `TRACKED` has room for ended processes beside `max_tracked` running ones: the
            // running are held to it by session 0's limit (an agent sets each session's).
            sessions.set_session_limit(0, opts.max_tracked)?;
        }
        let rss = RssFollowing::take(&mut ebpf, rss_link, plan.atomics.program("rss_stat"))?;
        let own_pid = OwnPid::take(&mut ebpf)?;
        log::debug!("start-up: done at {:.1} ms", ms(started.elapsed()));
        Ok(Probes {
            ebpf,
            logger,
            mechanisms,
            refused,
            atomics: plan.atomics,
            load_ms: started.elapsed().as_secs_f64() * 1e3,
            ring_buffer_bytes: ring,
            rss_tracking: plan.rss,
            cpu_at_release: plan.cpu_at_release,
            aya_btf_parsed: !built.btf_hidden,
            sessions,
            rss,
            ticks,
            load_times: LoadTimes(load_us),
            own_pid,
        })
    }

    /// The kernel programs' log records, to be flushed now and then (can be taken once).
    pub fn take_logger(&mut self) -> Option<KernelLogger> {
        self.logger.take()
    }

    /// The ring buffer the programs write to (can be taken once).
    pub fn take_events(&mut self) -> Result<crate::kernel::ring::Ring, LoadError> {
        const NAME: &str = "EVENTS";
        let map = self
            .ebpf
            .take_map(NAME)
            .ok_or(LoadError::MissingMap(NAME))?;
        let aya::maps::Map::RingBuf(data) = map else {
            return Err(LoadError::MissingMap(NAME));
        };
        Ok(crate::kernel::ring::Ring::new(data)?)
    }
}

#[cfg(test)]
mod denied_tests {
    #[test]
    fn a_refused_syscall_is_found_under_aya_errors() {
        let refused = aya::maps::MapError::CreateError {
            name: "EVENTS".into(),
            io_error: std::io::Error::from_raw_os_error(libc::EPERM),
        };
        assert!(super::denied(&aya::EbpfError::MapError(refused)));
        let other = aya::maps::MapError::CreateError {
            name: "EVENTS".into(),
            io_error: std::io::Error::from_raw_os_error(libc::EINVAL),
        };
        assert!(!super::denied(&aya::EbpfError::MapError(other)));
    }
}
