//! `st-workload`: the truth side of spacetime's integration tests.
//!
//! Every process that matters appends ONE JSON line to the file named by `$ST_TRUTH`
//! (O_APPEND|O_CREAT, a single write(2) per line so concurrent writers never interleave).
//! The line is built and written as the very last thing before the process exits (or execs),
//! after reading the process's own `/proc/self/status`; every buffer used from that point on was
//! allocated *and touched* at startup, so recording does not change the peak it records.
//!
//! Common fields of every line: `mode`, `pid`, `tid`, `ppid` (getppid() at record time),
//! `vmhwm_kib`, `vmrss_kib` (VmHWM / VmRSS from /proc/self/status). Mode-specific fields
//! are listed in `USAGE`.

use std::ffi::{CString, OsString};
use std::io::Write as _;
use std::os::unix::ffi::OsStrExt as _;
use std::time::Duration;

#[path = "st_workload/accounting.rs"]
mod accounting;
#[path = "st_workload/memory.rs"]
mod memory;
#[path = "st_workload/prefault.rs"]
mod prefault;
#[path = "st_workload/processes.rs"]
mod processes;
#[path = "st_workload/pss.rs"]
mod pss;
#[path = "st_workload/sharing.rs"]
mod sharing;
#[path = "st_workload/truth.rs"]
mod truth;

use prefault::{file_text_ranges, fold_region, fold_rss_counters, prefault_stack, prefault_text};
use sharing::{
    attach_grow, attach_tree, cow_fork, fill_and_unmap, fillfill, leave_child, page_cache,
    pipe_pair, recv_byte, send_byte,
};

const USAGE: &str = "\
usage: st-workload MODE [ARGS...]      (truth lines go to the file named by $ST_TRUTH)
  noop [ANY...]                exit 0, record nothing
  touch MIB                    touch MIB MiB of anonymous memory, record {mib}
  grow-exec MIB PROG [ARGS...] touch MIB MiB, record {mib}, then execv(PROG, [PROG, ARGS...])
  tree DEPTH WIDTH             every node forks WIDTH children down to DEPTH levels, waits,
                               records {depth, children, failed}
  threads N                    start N threads, join them, record {threads: N, tids}
  orphan MS                    fork a child that forks a grandchild and exits at once; the
                               grandchild sleeps MS ms once both have exited. Records: root {role, child},
                               child {role, grandchild}, grandchild {role, parent_at_fork, ms}
  storm N PROG [ARGS...]       N sequential fork+execv(PROG) + waitpid, record {children, failed, pids}
  thread-exec PROG [ARGS...]   a non-main thread records then execv(PROG, [PROG, ARGS...])
  spawn N PROG [ARGS...]       N children via posix_spawn, wait, record {children, failed, pids}
  exit CODE                    record {code}, _exit(CODE)
  kill SIG                     record {sig}, raise SIG with default disposition
  sleep MS                     sleep MS ms, record {ms}, exit 0
  undumpable MS                make itself not dumpable (prctl PR_SET_DUMPABLE 0), sleep MS
                               ms, record {ms}, exit 0
  whoami                       record {uid, euid, gid, egid, groups}
  quiet-exit CODE [ANY...]     exit CODE at once, record nothing
  burst N TAG                  N sequential children, child i execs
                               `st-workload quiet-exit (i % 256) TAG-i`; record {children, failed, pids}
  forkloop MS                  fork children that _exit(0) at once, one at a time, for MS ms;
                               print and record {forks}
  hold-together N DIR MIB MS   touch MIB MiB, create DIR/PID, keep them until DIR holds N
                               entries (N holders all at their peak at once) and MS ms more,
                               record {mib}
  exit-together N [TOKEN]      N threads (main included) leave with exit(2), not exit_group, at
                               the same moment; the last one ends the process; record {threads}
  rusage US... [TOKEN]         one child per US: it burns US µs of CPU (0: exits at once), the
                               parent reaps each with wait4; record {pids, user_us, sys_us,
                               reaped_ns (CLOCK_MONOTONIC when each wait4 returned)}
  rusage-threads US [TOKEN]    one child per shape of threaded exit, 3 threads burning US µs
                               each: `group` (the main thread calls exit_group while they burn),
                               `leader-first` (the main thread leaves with exit(2) at once, the
                               last thread ends the process), `joined` (threads joined, then
                               exit), in that order; the parent reaps each with wait4; record
                               {pids, user_us, sys_us, reaped_ns}
  rusage-of PROG [ARGS...]     fork+execv(PROG), reap it with wait4 (as time(1) does); record
                               {child, user_us, sys_us, reaped_ns}: the child's CPU and its
                               reaped children's
  fill MIB                     write every byte of MIB MiB of fresh anonymous memory, unmap it,
                               record {mib} (st's fill.c)
  fillfill MIB                 fill MIB MiB and unmap it, then fork a child that fills and unmaps
                               2×MIB while the parent waits; record {role, mib} (st's fillfill.c)
  leave-child MIB MS [GATE]    fork a child that touches MIB MiB, records {role: child, mib},
                               then holds it for MS ms, or until the file GATE exists or its
                               directory is gone; the root exits once the child recorded,
                               recording {role: root, child}
  cow-fork MIB                 touch MIB MiB, fork a child that only reads them (shared,
                               copy-on-write); both record {role, mib} while both hold them
  attach-tree N M K            touch N MiB, fork a child that touches N/2 MiB and waits; once
                               it has, print \"ready PID\" on stdout and wait for a byte on stdin; then fork K
                               children touching M MiB each (exit 10+i, {role: post}), end the
                               first child (exit 5, {role: pre}), exit 7 ({role: parent})
  attach-grow N M              touch N MiB, record {role: ready, mib}, print \"ready\" and wait
                               for a byte on stdin; then touch M MiB more, record {role: end,
                               mib} and exit 0 (M = 0: a holder idle from the attach to its end)
  page-cache FILE              drop FILE from the page cache, read it, record {file_bytes,
                               cached_before_bytes, cached_after_bytes} (mincore)
  cpu-phases MS                one thread burns MS ms of CPU, then two threads MS ms each at once
  hold-burn MIB MS             touches MIB MiB and holds them while it burns MS ms of CPU
  peak-sleep MIB MS            touch MIB MiB, print a line, sleep MS ms, touch 16 pages more (an
                               exit's text); record {touched_unix_ns, held_kib, woke_unix_ns}
  double-fork MS               fork a child that forks a grandchild and exits; MS = 0: the
                               grandchild exits at once and the root exits once it is a zombie;
                               else the grandchild exits MS ms after the root. Records {role,
                               ..., exit_unix_ns}
  daemon-race N K MIB MS       N double forks whose middles touch MIB MiB and exit in K rows
                               from the root's exit on (none waited for); each grandchild MS ms
                               after its middle. Records {role, ...}
  grow-at-stop START CAP       fork a grower that touches START MiB, lets the root exit, then
                               touches a MiB per ms up to CAP MiB; records {role, mib}
  pss-touch MIB MS             touch MIB MiB, read its own PSS there, hold MS ms; record
                               {mib, pss_kib}
  pss-fillfill MIB             fillfill reading PSS at each peak (the child reads its waiting
                               parent's too); record {role, mib, pss_kib, parent_pss_kib}
  pss-cow MIB read|write MS    touch MIB MiB, fork a child that reads (writes) them all; at the
                               peak each reads its PSS, both hold MS ms; record {role, pss_kib}
";

/// Bytes reserved (and touched) for reading /proc/self/status.
const STATUS_BUF: usize = 16 * 1024;
/// Bytes reserved (and touched) for the JSON line.
const LINE_BUF: usize = 64 * 1024;

extern "C" {
    static environ: *const *mut libc::c_char;
}

fn die(msg: &str) -> ! {
    eprintln!("st-workload: {msg}");
    eprint!("{USAGE}");
    // SAFETY: _exit(2) ends the process here; nothing needs dropping.
    unsafe { libc::_exit(2) }
}

fn sys_die(what: &str) -> ! {
    let err = std::io::Error::last_os_error();
    eprintln!("st-workload[{}]: {what}: {err}", std::process::id());
    // SAFETY: _exit(2) ends the process here; nothing needs dropping.
    unsafe { libc::_exit(120) }
}

fn gettid() -> i64 {
    // SAFETY: a system call without pointers into memory it could misuse.
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// Allocates a Vec with `cap` bytes of capacity, every page written once, length 0.
fn touched_vec(cap: usize) -> Vec<u8> {
    let mut v = vec![0xa5u8; cap];
    std::hint::black_box(&mut v);
    v.clear();
    v
}

struct Recorder {
    truth: Option<CString>,
    status: Vec<u8>,
    line: Vec<u8>,
    /// The region `fold_rss_counters` reads.
    fold: usize,
    /// What `prefault_text` maps before each record.
    text: Vec<(usize, usize)>,
}

impl Recorder {
    fn new() -> Self {
        let truth = std::env::var_os("ST_TRUTH")
            .filter(|p| !p.is_empty())
            .map(|p| CString::new(p.as_bytes()).unwrap_or_else(|_| die("ST_TRUTH contains NUL")));
        let mut status = touched_vec(STATUS_BUF);
        status.resize(STATUS_BUF, 0);
        let line = touched_vec(LINE_BUF);
        prefault_stack();
        Recorder {
            truth,
            status,
            line,
            fold: fold_region(),
            text: file_text_ranges(),
        }
    }

    /// Starts a line: `{"mode":M,"pid":P,"tid":T`. Add fields with `int`/`str`/`ints`, then
    /// call `finish` as the last thing before exit/exec.
    fn begin(&mut self, mode: &str) -> &mut Self {
        self.line.clear();
        // SAFETY: a system call without pointers into memory it could misuse.
        let pid = unsafe { libc::getpid() };
        let _ = write!(
            self.line,
            "{{\"mode\":\"{mode}\",\"pid\":{pid},\"tid\":{}",
            gettid()
        );
        self
    }

    fn int(&mut self, key: &str, v: i64) -> &mut Self {
        let _ = write!(self.line, ",\"{key}\":{v}");
        self
    }

    fn str(&mut self, key: &str, v: &str) -> &mut Self {
        // Only used with fixed ASCII identifiers; no escaping needed.
        let _ = write!(self.line, ",\"{key}\":\"{v}\"");
        self
    }

    fn ints(&mut self, key: &str, vs: &[i64]) -> &mut Self {
        let _ = write!(self.line, ",\"{key}\":[");
        for (i, v) in vs.iter().enumerate() {
            if i > 0 {
                self.line.push(b',');
            }
            let _ = write!(self.line, "{v}");
        }
        self.line.push(b']');
        self
    }

    /// Runs the recording path once without writing anything, so recording later faults in
    /// nothing new (its text, its buffers).
    fn warm_up(&mut self) {
        let truth = self.truth.take();
        self.begin("warm-up").finish();
        self.truth = truth;
    }

    /// Reads /proc/self/status, appends ppid/vmhwm_kib/vmrss_kib, writes the line.
    ///
    /// The whole path runs twice: the first pass only warms up. A forked child shares its
    /// parent's file-backed text but has no page-table entries for it, so the first execution
    /// of the formatting/libc code here faults in text pages (fault-around: up to 16 pages),
    /// which would raise VmHWM after we read it. The second pass touches nothing new.
    fn finish(&mut self) {
        let prefix = self.line.len();
        prefault_text(&self.text);
        for pass in 0..2 {
            self.line.truncate(prefix);
            // SAFETY: a system call without pointers into memory it could misuse.
            let ppid = unsafe { libc::getppid() };
            fold_rss_counters(self.fold);
            let n = self.read_status();
            let status = &self.status[..n];
            let hwm = status_kib(status, b"VmHWM:");
            let rss = status_kib(status, b"VmRSS:");
            let _ = writeln!(
                self.line,
                ",\"ppid\":{ppid},\"vmhwm_kib\":{hwm},\"vmrss_kib\":{rss}}}"
            );
            if pass == 0 {
                // Fault in write(2)'s wrapper without writing anything (EBADF).
                // SAFETY: writes from a buffer valid for the length given.
                unsafe { libc::write(-1, self.line.as_ptr().cast(), 0) };
            }
        }
        let Some(path) = &self.truth else { return };
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        unsafe {
            let fd = libc::open(
                path.as_ptr(),
                libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_CLOEXEC,
                0o666 as libc::c_uint,
            );
            if fd < 0 {
                sys_die("open $ST_TRUTH");
            }
            let w = libc::write(fd, self.line.as_ptr().cast(), self.line.len());
            if w != self.line.len() as isize {
                sys_die("write $ST_TRUTH");
            }
            libc::close(fd);
        }
    }

    fn read_status(&mut self) -> usize {
        let mut n = 0usize;
        // SAFETY: a NUL-terminated path; the descriptor is closed below.
        unsafe {
            let fd = libc::open(
                c"/proc/self/status".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 {
                sys_die("open /proc/self/status");
            }
            while n < self.status.len() {
                let r = libc::read(
                    fd,
                    self.status.as_mut_ptr().add(n).cast(),
                    self.status.len() - n,
                );
                if r < 0 {
                    sys_die("read /proc/self/status");
                }
                if r == 0 {
                    break;
                }
                n += r as usize;
            }
            libc::close(fd);
        }
        n
    }
}

/// Value in kB of the `/proc/self/status` line starting with `key`, or -1 if absent.
fn status_kib(status: &[u8], key: &[u8]) -> i64 {
    for line in status.split(|&b| b == b'\n') {
        if let Some(rest) = line.strip_prefix(key) {
            let mut v: i64 = 0;
            let mut seen = false;
            for &b in rest {
                if b.is_ascii_digit() {
                    v = v * 10 + i64::from(b - b'0');
                    seen = true;
                } else if seen {
                    break;
                }
            }
            return if seen { v } else { -1 };
        }
    }
    -1
}

fn exit(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process here; nothing needs dropping.
    unsafe { libc::_exit(code) }
}

fn parse<T: std::str::FromStr>(args: &[OsString], i: usize, what: &str) -> T {
    let Some(a) = args.get(i) else {
        die(&format!("missing {what}"))
    };
    a.to_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| die(&format!("bad {what}: {a:?}")))
}

/// argv for execv: [PROG, ARGS...] from args[i..]; must be non-empty.
fn exec_argv(args: &[OsString], i: usize) -> Vec<CString> {
    if args.len() <= i {
        die("missing PROG");
    }
    args[i..]
        .iter()
        .map(|a| CString::new(a.as_bytes()).unwrap_or_else(|_| die("argument contains NUL")))
        .collect()
}

fn ptrs(v: &[CString]) -> Vec<*const libc::c_char> {
    v.iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// A fresh private anonymous read-write mapping of `len` bytes (dies on failure).
fn map_anon(len: usize) -> *mut u8 {
    // SAFETY: a new anonymous mapping; the kernel picks the address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        sys_die("mmap");
    }
    p.cast()
}

/// mmaps `mib` MiB of private anonymous memory and writes one byte in every page. Never unmapped.
fn touch(mib: usize) {
    if mib == 0 {
        return;
    }
    let len = mib << 20;
    // SAFETY: a system call without pointers into memory it could misuse.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let p = map_anon(len);
    // SAFETY: within the mapping (or buffer) made above: every offset is below its length.
    unsafe {
        for off in (0..len).step_by(page) {
            std::ptr::write_volatile(p.add(off), 1);
        }
    }
}

fn fork() -> libc::pid_t {
    // SAFETY: fork(2) takes no pointers; the child runs on in its own copy of this process.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        sys_die("fork");
    }
    pid
}

/// A child of `rusage-threads`: three threads burn `us` µs each, and the process ends the way
/// `shape` says. Never returns.
fn threaded_exit(shape: &str, us: u64) -> ! {
    let threads: Vec<_> = (0..3)
        .map(|_| {
            std::thread::Builder::new()
                .spawn(move || burn_cpu_us(us))
                .unwrap_or_else(|e| die(&format!("spawn thread: {e}")))
        })
        .collect();
    match shape {
        "group" => {
            burn_cpu_us(us / 2);
            exit(0)
        }
        "leader-first" => {
            // The main thread alone leaves; the process ends with its last thread.
            // SAFETY: exit(2) ends this thread only; nothing it owns is used after.
            unsafe { libc::syscall(libc::SYS_exit, 0) };
            die("exit(2) returned")
        }
        _ => {
            for t in threads {
                let _ = t.join();
            }
            exit(0)
        }
    }
}

/// Burns `us` µs of this thread's CPU time (nothing for 0).
fn burn_cpu_us(us: u64) {
    if us == 0 {
        return;
    }
    let cpu_ns =
        || spacetime_tests::clock::clock_ns(spacetime_tests::clock::ClockId::ThreadCPUTime) as u64;
    let until = cpu_ns() + us * 1000;
    while cpu_ns() < until {
        std::hint::spin_loop();
    }
}

/// wait4(pid): the child's rusage (dies unless it exited with status 0).
fn wait4_rusage(pid: libc::pid_t) -> libc::rusage {
    let mut st = 0;
    // SAFETY: a plain C struct of integers: all-zero is a value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: valid status and rusage to fill, for a child of this process.
        let r = unsafe { libc::wait4(pid, &mut st, 0, &mut ru) };
        if r == pid {
            if !(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0) {
                die("child failed");
            }
            return ru;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            sys_die("wait4");
        }
    }
}

fn timeval_us(tv: libc::timeval) -> i64 {
    tv.tv_sec * 1_000_000 + tv.tv_usec
}

/// waitpid(pid); true iff it exited with status 0.
fn wait_ok(pid: libc::pid_t) -> bool {
    let mut st = 0;
    loop {
        // SAFETY: a valid status to fill (or null), for a child of this process.
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r == pid {
            return libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            sys_die("waitpid");
        }
    }
}

fn execv(argv: &[CString], argv_ptrs: &[*const libc::c_char]) -> ! {
    // SAFETY: a NUL-terminated path and a null-terminated array of such strings, alive for the call.
    unsafe { libc::execv(argv[0].as_ptr(), argv_ptrs.as_ptr()) };
    sys_die(&format!("execv {:?}", argv[0]))
}

fn tree_node(rec: &mut Recorder, depth: i64, max_depth: i64, width: i64) -> ! {
    let mut children = Vec::with_capacity(width.max(0) as usize);
    if depth < max_depth {
        for _ in 0..width {
            let pid = fork();
            if pid == 0 {
                tree_node(rec, depth + 1, max_depth, width);
            }
            children.push(pid);
        }
    }
    let failed = children.iter().filter(|&&p| !wait_ok(p)).count() as i64;
    let pids: Vec<i64> = children.iter().map(|&p| i64::from(p)).collect();
    rec.begin("tree")
        .int("depth", depth)
        .ints("children", &pids)
        .int("failed", failed)
        .finish();
    exit(0)
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    let Some(mode) = args.get(1).and_then(|m| m.to_str()) else {
        die("missing MODE")
    };
    if mode == "noop" {
        exit(0);
    }
    if mode == "quiet-exit" {
        exit(parse(&args, 2, "CODE"));
    }
    if mode == "rename" {
        // rename NAME [ARGS…]: sets its comm to NAME's bytes (prctl PR_SET_NAME, controls
        // included), starts a thread that inherits the name and exits, then exits 0.
        let name = args.get(2).unwrap_or_else(|| die("missing NAME"));
        let mut bytes = name.as_bytes().to_vec();
        bytes.truncate(15);
        bytes.push(0);
        // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes.
        unsafe { libc::prctl(libc::PR_SET_NAME, bytes.as_ptr()) };
        let _ = std::thread::spawn(|| ()).join();
        exit(0);
    }
    let mode = mode.to_owned();
    let mut rec = Recorder::new();
    match mode.as_str() {
        "touch" => memory::touch_mode(&args, &mut rec),
        "peak-free" => memory::peak_free(&args, &mut rec),
        "exit-together" => processes::exit_together(&args, &mut rec),
        "hold-together" => memory::hold_together(&args, &mut rec),
        "hold" => memory::hold(&args, &mut rec),
        "grow-exec" => memory::grow_exec(&args, &mut rec),
        "tree" => {
            let depth: i64 = parse(&args, 2, "DEPTH");
            let width: i64 = parse(&args, 3, "WIDTH");
            tree_node(&mut rec, 0, depth, width)
        }
        "threads" => processes::threads(&args, &mut rec),
        "orphan" => processes::orphan(&args, &mut rec),
        "rusage" => accounting::rusage(&args, &mut rec),
        "rusage-threads" => accounting::rusage_threads(&args, &mut rec),
        "rusage-of" => accounting::rusage_of(&args, &mut rec),
        "storm" | "spawn" => processes::storm(&args, &mut rec),
        "burst" => processes::burst(&args, &mut rec),
        "forkloop" => processes::forkloop(&args, &mut rec),
        "thread-exec" => processes::thread_exec(&args, rec),
        "exit" => {
            let code: i32 = parse(&args, 2, "CODE");
            rec.begin("exit").int("code", i64::from(code)).finish();
            exit(code)
        }
        "kill" => processes::kill(&args, &mut rec),
        "undumpable" => processes::undumpable(&args, &mut rec),
        "sleep" => processes::sleep(&args, &mut rec),
        "whoami" => accounting::whoami(&mut rec),
        "fill" => memory::fill_mode(&args, &mut rec),
        "fillfill" => fillfill(&mut rec, parse(&args, 2, "MIB")),
        "leave-child" => leave_child(
            &mut rec,
            parse(&args, 2, "MIB"),
            parse(&args, 3, "MS"),
            args.get(4).map(std::path::PathBuf::from),
        ),
        "cow-fork" => cow_fork(&mut rec, parse(&args, 2, "MIB")),
        "attach-tree" => attach_tree(
            &mut rec,
            parse(&args, 2, "N"),
            parse(&args, 3, "M"),
            parse(&args, 4, "K"),
        ),
        "attach-grow" => attach_grow(&mut rec, parse(&args, 2, "N"), parse(&args, 3, "M")),
        "double-fork" => truth::double_fork(&mut rec, parse(&args, 2, "MS")),
        "daemon-race" => truth::daemon_race(
            &mut rec,
            [parse(&args, 2, "N"), parse(&args, 3, "K")],
            parse(&args, 4, "MIB"),
            parse(&args, 5, "MS"),
        ),
        "grow-at-stop" => {
            truth::grow_at_stop(&mut rec, parse(&args, 2, "START"), parse(&args, 3, "CAP"))
        }
        "pss-touch" => pss::pss_touch(&mut rec, parse(&args, 2, "MIB"), parse(&args, 3, "MS")),
        "pss-fillfill" => pss::pss_fillfill(&mut rec, parse(&args, 2, "MIB")),
        "pss-cow" => {
            let write = match args.get(3).and_then(|a| a.to_str()) {
                Some("read") => false,
                Some("write") => true,
                _ => die("read or write"),
            };
            pss::pss_cow(
                &mut rec,
                parse(&args, 2, "MIB"),
                write,
                parse(&args, 4, "MS"),
            )
        }
        "cpu-phases" => truth::cpu_phases(&mut rec, parse(&args, 2, "MS")),
        "hold-burn" => truth::hold_burn(&mut rec, parse(&args, 2, "MIB"), parse(&args, 3, "MS")),
        "peak-sleep" => truth::peak_sleep(&mut rec, parse(&args, 2, "MIB"), parse(&args, 3, "MS")),
        "page-cache" => page_cache(&mut rec, args.get(2).unwrap_or_else(|| die("missing FILE"))),
        other => die(&format!("unknown mode {other:?}")),
    }
}
