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

#[path = "st_workload/pss.rs"]
mod pss;
#[path = "st_workload/truth.rs"]
mod truth;

const USAGE: &str = "\
usage: st-workload MODE [ARGS...]      (truth lines go to the file named by $ST_TRUTH)
  noop [ANY...]                exit 0, record nothing
  touch MIB                    touch MIB MiB of anonymous memory, record {mib}
  grow-exec MIB PROG [ARGS...] touch MIB MiB, record {mib}, then execv(PROG, [PROG, ARGS...])
  tree DEPTH WIDTH             every node forks WIDTH children down to DEPTH levels, waits,
                               records {depth, children, failed}
  threads N                    start N threads, join them, record {threads: N, tids}
  orphan MS                    fork a child that forks a grandchild and exits at once; the
                               grandchild sleeps MS ms. Records: root {role, child},
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
                               parent reaps each with wait4; record {pids, user_us, sys_us}
  rusage-threads US [TOKEN]    one child per shape of threaded exit, 3 threads burning US µs
                               each: `group` (the main thread calls exit_group while they burn),
                               `leader-first` (the main thread leaves with exit(2) at once, the
                               last thread ends the process), `joined` (threads joined, then
                               exit), in that order; the parent reaps each with wait4; record
                               {pids, user_us, sys_us}
  rusage-of PROG [ARGS...]     fork+execv(PROG), reap it with wait4 (as time(1) does); record
                               {pid, user_us, sys_us}: the child's CPU and its reaped children's
  fill MIB                     write every byte of MIB MiB of fresh anonymous memory, unmap it,
                               record {mib} (st's fill.c)
  fillfill MIB                 fill MIB MiB and unmap it, then fork a child that fills and unmaps
                               2×MIB while the parent waits; record {role, mib} (st's fillfill.c)
  leave-child MIB MS           fork a child that touches MIB MiB, records {role: child, mib},
                               then holds it for MS ms; the root exits once the child recorded,
                               recording {role: root, child}
  cow-fork MIB                 touch MIB MiB, fork a child that only reads them (shared,
                               copy-on-write); both record {role, mib} while both hold them
  attach-tree N M K            touch N MiB, fork a child that touches N/2 MiB and waits; print
                               \"ready PID\" on stdout and wait for a byte on stdin; then fork K
                               children touching M MiB each (exit 10+i, {role: post}), end the
                               first child (exit 5, {role: pre}), exit 7 ({role: parent})
  attach-grow N M              touch N MiB, record {role: ready, mib}, print \"ready\" and wait
                               for a byte on stdin; then touch M MiB more, record {role: end,
                               mib} and exit 0 (M = 0: a holder idle from the attach to its end)
  page-cache FILE              drop FILE from the page cache, read it, record {file_bytes,
                               cached_before_bytes, cached_after_bytes} (mincore)
  cpu-phases MS                one thread burns MS ms of CPU, then two threads MS ms each at once
  peak-sleep MIB MS            touch MIB MiB, print a line, sleep MS ms, touch 16 pages more (an
                               exit's text); record {touched_unix_ns, held_kib, woke_unix_ns}
  double-fork MS               fork a child that forks a grandchild and exits; MS = 0: the
                               grandchild exits at once and the root exits once it is a zombie;
                               else the grandchild exits MS ms after the root. Records {role,
                               ..., exit_unix_ns}
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
/// Stack pre-faulted at startup so the recording path doesn't grow the stack.
const STACK_PREFAULT: usize = 128 * 1024;
/// Pages read (never written) by `fold_rss_counters`: more than the 64 faults after which a
/// pre-6.2 kernel folds a thread's pending RSS counts into the mm.
const FOLD_PAGES: usize = 128;

extern "C" {
    static environ: *const *mut libc::c_char;
}

fn die(msg: &str) -> ! {
    eprintln!("st-workload: {msg}");
    eprint!("{USAGE}");
    unsafe { libc::_exit(2) }
}

fn sys_die(what: &str) -> ! {
    let err = std::io::Error::last_os_error();
    eprintln!("st-workload[{}]: {what}: {err}", std::process::id());
    unsafe { libc::_exit(120) }
}

/// Touches `STACK_PREFAULT` bytes of stack below the current frame.
#[inline(never)]
fn prefault_stack() {
    let mut buf = [0u8; STACK_PREFAULT];
    for i in (0..STACK_PREFAULT).step_by(1024) {
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), 1) };
    }
    std::hint::black_box(&buf);
}

fn gettid() -> i64 {
    unsafe { libc::syscall(libc::SYS_gettid) }
}

/// Makes this thread's RSS counts visible in /proc/self/status. Before 6.2 (SPLIT_RSS_COUNTING)
/// each thread keeps its RSS counter updates to itself and folds them into the mm every 64 page
/// faults (and when it exits or execs), so VmHWM/VmRSS lag by up to 64 faults' worth of pages
/// (more with file fault-around) while the kernel's own exit figures (ru_maxrss, taskstats)
/// count them. Reading one byte of each of `FOLD_PAGES` fresh anonymous pages takes that many
/// faults, each mapping the shared zero page, which is not counted in RSS: the pending counts
/// are folded and nothing new is pending. A no-op on later kernels (no per-thread counts).
fn fold_rss_counters(region: usize) {
    let page = 4096;
    unsafe {
        // Drops the zero-page mappings of an earlier fold (not counted either), so the reads
        // below fault again.
        libc::madvise(
            region as *mut libc::c_void,
            FOLD_PAGES * page,
            libc::MADV_DONTNEED,
        );
        for i in 0..FOLD_PAGES {
            std::ptr::read_volatile((region + i * page) as *const u8);
        }
    }
}

/// Reserves the never-written region `fold_rss_counters` reads; returns its address.
fn fold_region() -> usize {
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            FOLD_PAGES * 4096,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        sys_die("mmap fold region");
    }
    p as usize
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
        }
    }

    /// Starts a line: `{"mode":M,"pid":P,"tid":T`. Add fields with `int`/`str`/`ints`, then
    /// call `finish` as the last thing before exit/exec.
    fn begin(&mut self, mode: &str) -> &mut Self {
        self.line.clear();
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
        prefault_text();
        for pass in 0..2 {
            self.line.truncate(prefix);
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
                unsafe { libc::write(-1, self.line.as_ptr().cast(), 0) };
            }
        }
        let Some(path) = &self.truth else { return };
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
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let p = map_anon(len);
    unsafe {
        for off in (0..len).step_by(page) {
            std::ptr::write_volatile(p.add(off), 1);
        }
    }
}

fn fork() -> libc::pid_t {
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
    let cpu_ns = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    };
    let until = cpu_ns() + us * 1000;
    while cpu_ns() < until {
        std::hint::spin_loop();
    }
}

/// wait4(pid): the child's rusage (dies unless it exited with status 0).
fn wait4_rusage(pid: libc::pid_t) -> libc::rusage {
    let mut st = 0;
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
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
        let r = unsafe { libc::waitpid(pid, &mut st, 0) };
        if r == pid {
            return libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            sys_die("waitpid");
        }
    }
}

/// Maps the text of the libc functions used after the final /proc/self/status read (and of
/// execv/execve, for modes that exec right after recording) by reading a few bytes of each.
/// The read fault maps the page (and its fault-around window) before we measure, so nothing
/// after the measurement faults in text. Needed explicitly because with several threads
/// faulting at once, fault-around skips folios it can't trylock, so whether e.g. `_exit`'s page
/// happens to be mapped already is not deterministic. (No failed exec attempts as a warm-up:
/// those would be visible to the tracer.)
fn prefault_text() {
    let fns: [usize; 9] = [
        libc::_exit as *const () as usize,
        libc::open as *const () as usize,
        libc::read as *const () as usize,
        libc::write as *const () as usize,
        libc::close as *const () as usize,
        libc::getpid as *const () as usize,
        libc::getppid as *const () as usize,
        libc::execv as *const () as usize,
        libc::execve as *const () as usize,
    ];
    for f in fns {
        for off in [0, 63, 127] {
            unsafe { std::ptr::read_volatile((f + off) as *const u8) };
        }
    }
}

fn execv(argv: &[CString], argv_ptrs: &[*const libc::c_char]) -> ! {
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
        unsafe { libc::prctl(libc::PR_SET_NAME, bytes.as_ptr()) };
        let _ = std::thread::spawn(|| ()).join();
        exit(0);
    }
    let mode = mode.to_owned();
    let mut rec = Recorder::new();
    match mode.as_str() {
        "touch" => {
            let mib: usize = parse(&args, 2, "MIB");
            touch(mib);
            rec.begin("touch").int("mib", mib as i64).finish();
            exit(0)
        }
        "peak-free" => {
            // Reach a peak of BIG MiB, note the exact VmRSS there, free it, then use SMALL MiB:
            // the kernel's hiwater_rss (raised lazily, from approximate counts) may lag the
            // peak; spacetime must not.
            let big: usize = parse(&args, 2, "BIG");
            let small: usize = parse(&args, 3, "SMALL");
            let len = big << 20;
            let p = map_anon(len);
            let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
            for off in (0..len).step_by(page) {
                unsafe { std::ptr::write_volatile(p.add(off), 1) };
            }
            // The first pass warms the reading path (its text, its buffer); the second folds
            // this thread's pending RSS counts first (see fold_rss_counters), so VmRSS is exact.
            let mut at_peak = 0;
            for pass in 0..2 {
                if pass == 1 {
                    fold_rss_counters(rec.fold);
                }
                let status = std::fs::read("/proc/self/status").unwrap_or_else(|_| die("status"));
                at_peak = status_kib(&status, b"VmRSS:");
            }
            unsafe { libc::munmap(p.cast(), len) };
            touch(small);
            rec.begin("peak-free")
                .int("peak_vmrss_kib", at_peak)
                .finish();
            exit(0)
        }
        "exit-together" => {
            // Several threads end at once: before 6.16 more than one of them can pass the
            // kernel-side "last thread" test, and the process must still end once.
            let n: usize = parse(&args, 2, "N");
            rec.begin("exit-together").int("threads", n as i64).finish();
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
            for _ in 1..n {
                let b = std::sync::Arc::clone(&barrier);
                std::thread::spawn(move || {
                    b.wait();
                    unsafe { libc::syscall(libc::SYS_exit, 0) };
                });
            }
            barrier.wait();
            unsafe { libc::syscall(libc::SYS_exit, 0) };
            exit(0)
        }
        "hold-together" => {
            // Concurrent holders that overlap by construction, not by timing: each keeps its
            // memory until every one of them has reached its peak (an emulated CPU can stall
            // one holder for seconds while another's sleep runs out).
            let n: usize = parse(&args, 2, "N");
            let dir = args
                .get(3)
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| die("missing DIR"));
            let mib: usize = parse(&args, 4, "MIB");
            let ms: u64 = parse(&args, 5, "MS");
            touch(mib);
            rec.warm_up();
            let me = dir.join(std::process::id().to_string());
            std::fs::write(&me, b"").unwrap_or_else(|_| die("create the ready file"));
            loop {
                let ready = std::fs::read_dir(&dir)
                    .unwrap_or_else(|_| die("read DIR"))
                    .count();
                if ready >= n {
                    break;
                }
                // Waiting for the others' files: a poll, not a guess at how long they take.
                std::thread::sleep(Duration::from_millis(1));
            }
            // Everything this process will touch is touched (the wait allocated too): fold its
            // pending RSS counts into the mm (see fold_rss_counters) so the kernel's tree sum
            // sees all of it. Then all are at their peak, long enough for the sampled figures
            // (PSS) to see it too.
            fold_rss_counters(rec.fold);
            std::thread::sleep(Duration::from_millis(ms));
            rec.begin("hold-together").int("mib", mib as i64).finish();
            exit(0)
        }
        "hold" => {
            // Touch MIB MiB, keep them resident for MS ms, then exit.
            let mib: usize = parse(&args, 2, "MIB");
            let ms: u64 = parse(&args, 3, "MS");
            touch(mib);
            // Everything counted in the mm (and seen by kmem:rss_stat) for the whole hold: warm
            // the sleep and recording paths, then fold this thread's pending RSS counts (see
            // fold_rss_counters).
            rec.warm_up();
            std::thread::sleep(Duration::from_millis(1));
            fold_rss_counters(rec.fold);
            std::thread::sleep(Duration::from_millis(ms));
            rec.begin("hold")
                .int("mib", mib as i64)
                .int("ms", ms as i64)
                .finish();
            exit(0)
        }
        "grow-exec" => {
            let mib: usize = parse(&args, 2, "MIB");
            let argv = exec_argv(&args, 3);
            let argv_ptrs = ptrs(&argv);
            touch(mib);
            rec.begin("grow-exec").int("mib", mib as i64).finish();
            execv(&argv, &argv_ptrs)
        }
        "tree" => {
            let depth: i64 = parse(&args, 2, "DEPTH");
            let width: i64 = parse(&args, 3, "WIDTH");
            tree_node(&mut rec, 0, depth, width)
        }
        "threads" => {
            let n: usize = parse(&args, 2, "N");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(n));
            let handles: Vec<_> = (0..n)
                .map(|_| {
                    let b = barrier.clone();
                    std::thread::Builder::new()
                        .spawn(move || {
                            let tid = gettid();
                            // All N threads are alive at once, so their tids are distinct.
                            b.wait();
                            tid
                        })
                        .unwrap_or_else(|e| die(&format!("spawn thread: {e}")))
                })
                .collect();
            let tids: Vec<i64> = handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| die("thread panicked")))
                .collect();
            // join() returns when a thread clears its tid, before its exit is done: wait
            // until the kernel has released them, so every worker's exit precedes the main
            // thread's and the main thread is the process's last (its end).
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count()) > 1
                && std::time::Instant::now() < until
            {
                std::thread::sleep(Duration::from_millis(1));
            }
            rec.begin("threads")
                .int("threads", n as i64)
                .ints("tids", &tids)
                .finish();
            exit(0)
        }
        "orphan" => {
            let ms: u64 = parse(&args, 2, "MS");
            let child = fork();
            if child == 0 {
                let me = unsafe { libc::getpid() };
                let grandchild = fork();
                if grandchild == 0 {
                    std::thread::sleep(Duration::from_millis(ms));
                    rec.begin("orphan")
                        .str("role", "grandchild")
                        .int("parent_at_fork", i64::from(me))
                        .int("ms", ms as i64)
                        .finish();
                    exit(0)
                }
                rec.begin("orphan")
                    .str("role", "child")
                    .int("grandchild", i64::from(grandchild))
                    .finish();
                exit(0)
            }
            let ok = wait_ok(child);
            rec.begin("orphan")
                .str("role", "root")
                .int("child", i64::from(child))
                .int("failed", i64::from(!ok))
                .finish();
            exit(0)
        }
        "rusage" => {
            // Arguments that are not numbers (a test's token) are skipped.
            let spins: Vec<u64> = args[2..]
                .iter()
                .filter_map(|a| a.to_str()?.parse().ok())
                .collect();
            let mut pids = Vec::with_capacity(spins.len());
            let mut user = Vec::with_capacity(spins.len());
            let mut sys = Vec::with_capacity(spins.len());
            for &us in &spins {
                let pid = fork();
                if pid == 0 {
                    burn_cpu_us(us);
                    exit(0);
                }
                let ru = wait4_rusage(pid);
                pids.push(i64::from(pid));
                user.push(timeval_us(ru.ru_utime));
                sys.push(timeval_us(ru.ru_stime));
            }
            rec.begin("rusage")
                .ints("pids", &pids)
                .ints("user_us", &user)
                .ints("sys_us", &sys)
                .finish();
            exit(0)
        }
        "rusage-threads" => {
            let us: u64 = parse(&args, 2, "US");
            let shapes = ["group", "leader-first", "joined"];
            let (mut pids, mut user, mut sys) = (Vec::new(), Vec::new(), Vec::new());
            for shape in shapes {
                let pid = fork();
                if pid == 0 {
                    threaded_exit(shape, us);
                }
                let ru = wait4_rusage(pid);
                pids.push(i64::from(pid));
                user.push(timeval_us(ru.ru_utime));
                sys.push(timeval_us(ru.ru_stime));
            }
            rec.begin("rusage-threads")
                .ints("pids", &pids)
                .ints("user_us", &user)
                .ints("sys_us", &sys)
                .finish();
            exit(0)
        }
        "rusage-of" => {
            let argv = exec_argv(&args, 2);
            let argv_ptrs = ptrs(&argv);
            let pid = fork();
            if pid == 0 {
                unsafe { libc::execv(argv[0].as_ptr(), argv_ptrs.as_ptr()) };
                exit(127);
            }
            let ru = wait4_rusage(pid);
            rec.begin("rusage-of")
                .int("child", i64::from(pid))
                .int("user_us", timeval_us(ru.ru_utime))
                .int("sys_us", timeval_us(ru.ru_stime))
                .finish();
            exit(0)
        }
        "storm" | "spawn" => {
            let n: usize = parse(&args, 2, "N");
            let argv = exec_argv(&args, 3);
            let argv_ptrs = ptrs(&argv);
            let mut pids: Vec<i64> = Vec::with_capacity(n);
            let mut failed = 0i64;
            if mode == "storm" {
                for _ in 0..n {
                    let pid = fork();
                    if pid == 0 {
                        unsafe { libc::execv(argv[0].as_ptr(), argv_ptrs.as_ptr()) };
                        exit(127);
                    }
                    pids.push(i64::from(pid));
                    failed += i64::from(!wait_ok(pid));
                }
            } else {
                for _ in 0..n {
                    let mut pid: libc::pid_t = 0;
                    let r = unsafe {
                        libc::posix_spawn(
                            &mut pid,
                            argv[0].as_ptr(),
                            std::ptr::null(),
                            std::ptr::null(),
                            argv_ptrs.as_ptr() as *const *mut libc::c_char,
                            environ,
                        )
                    };
                    if r != 0 {
                        eprintln!(
                            "st-workload: posix_spawn {:?}: {}",
                            argv[0],
                            std::io::Error::from_raw_os_error(r)
                        );
                        failed += 1;
                        continue;
                    }
                    pids.push(i64::from(pid));
                }
                failed += pids.iter().filter(|&&p| !wait_ok(p as libc::pid_t)).count() as i64;
            }
            rec.begin(&mode)
                .int("children", n as i64)
                .int("failed", failed)
                .ints("pids", &pids)
                .finish();
            exit(0)
        }
        "burst" => {
            let n: usize = parse(&args, 2, "N");
            let tag = args
                .get(3)
                .and_then(|t| t.to_str())
                .unwrap_or_else(|| die("missing TAG"));
            let me = CString::new("/proc/self/exe").unwrap_or_else(|_| die("CString"));
            let argv0 = CString::new(args[0].as_bytes()).unwrap_or_else(|_| die("argv[0]"));
            let quiet = CString::new("quiet-exit").unwrap_or_else(|_| die("CString"));
            let mut pids: Vec<i64> = Vec::with_capacity(n);
            let mut failed = 0i64;
            for i in 0..n {
                // Built before the fork: the child only execs.
                let code = CString::new((i % 256).to_string()).unwrap_or_else(|_| die("code"));
                let name = CString::new(format!("{tag}-{i}")).unwrap_or_else(|_| die("tag"));
                let argv = [argv0.as_ptr(), quiet.as_ptr(), code.as_ptr(), name.as_ptr()];
                let argv = [argv[0], argv[1], argv[2], argv[3], std::ptr::null()];
                let pid = fork();
                if pid == 0 {
                    unsafe { libc::execv(me.as_ptr(), argv.as_ptr()) };
                    exit(127);
                }
                pids.push(i64::from(pid));
                let mut status = 0;
                if unsafe { libc::waitpid(pid, &mut status, 0) } != pid
                    || !libc::WIFEXITED(status)
                    || libc::WEXITSTATUS(status) != (i % 256) as i32
                {
                    failed += 1;
                }
            }
            rec.begin("burst")
                .int("children", n as i64)
                .int("failed", failed)
                .ints("pids", &pids)
                .finish();
            exit(0)
        }
        "forkloop" => {
            let ms: u64 = parse(&args, 2, "MS");
            let until = std::time::Instant::now() + Duration::from_millis(ms);
            let mut forks = 0i64;
            while std::time::Instant::now() < until {
                let pid = fork();
                if pid == 0 {
                    unsafe { libc::_exit(0) };
                }
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                forks += 1;
            }
            println!("forks {forks}");
            rec.begin("forkloop").int("forks", forks).finish();
            exit(0)
        }
        "thread-exec" => {
            let argv = exec_argv(&args, 2);
            // The main thread folds its own pending RSS counts (see fold_rss_counters) before
            // the exec thread measures, then spins (no syscall text to fault in) until the
            // exec kills it.
            let folded = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let go = folded.clone();
            let fold = rec.fold;
            let _ = std::thread::Builder::new()
                .spawn(move || {
                    let argv_ptrs = ptrs(&argv);
                    prefault_stack();
                    while !go.load(std::sync::atomic::Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    rec.begin("thread-exec").finish();
                    // The kernel kills the other threads and gives this one the leader's pid.
                    execv(&argv, &argv_ptrs)
                })
                .unwrap_or_else(|e| die(&format!("spawn thread: {e}")));
            fold_rss_counters(fold);
            folded.store(true, std::sync::atomic::Ordering::Release);
            loop {
                std::hint::spin_loop();
            }
        }
        "exit" => {
            let code: i32 = parse(&args, 2, "CODE");
            rec.begin("exit").int("code", i64::from(code)).finish();
            exit(code)
        }
        "kill" => {
            let sig: i32 = parse(&args, 2, "SIG");
            rec.begin("kill").int("sig", i64::from(sig)).finish();
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
                libc::raise(sig);
            }
            eprintln!("st-workload: still alive after raise({sig})");
            exit(100)
        }
        "undumpable" => {
            let ms: u64 = parse(&args, 2, "MS");
            // SAFETY: plain syscall on this process.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
            std::thread::sleep(Duration::from_millis(ms));
            rec.begin("undumpable").int("ms", ms as i64).finish();
            exit(0)
        }
        "sleep" => {
            let ms: u64 = parse(&args, 2, "MS");
            std::thread::sleep(Duration::from_millis(ms));
            rec.begin("sleep").int("ms", ms as i64).finish();
            exit(0)
        }
        "whoami" => {
            let (uid, euid, gid, egid) = unsafe {
                (
                    libc::getuid(),
                    libc::geteuid(),
                    libc::getgid(),
                    libc::getegid(),
                )
            };
            let mut groups = vec![0 as libc::gid_t; 4096];
            let n = unsafe { libc::getgroups(groups.len() as i32, groups.as_mut_ptr()) };
            if n < 0 {
                sys_die("getgroups");
            }
            let groups: Vec<i64> = groups[..n as usize].iter().map(|&g| i64::from(g)).collect();
            rec.begin("whoami")
                .int("uid", i64::from(uid))
                .int("euid", i64::from(euid))
                .int("gid", i64::from(gid))
                .int("egid", i64::from(egid))
                .ints("groups", &groups)
                .finish();
            exit(0)
        }
        "fill" => {
            let mib: usize = parse(&args, 2, "MIB");
            fill_and_unmap(mib);
            rec.begin("fill").int("mib", mib as i64).finish();
            exit(0)
        }
        "fillfill" => fillfill(&mut rec, parse(&args, 2, "MIB")),
        "leave-child" => leave_child(&mut rec, parse(&args, 2, "MIB"), parse(&args, 3, "MS")),
        "cow-fork" => cow_fork(&mut rec, parse(&args, 2, "MIB")),
        "attach-tree" => attach_tree(
            &mut rec,
            parse(&args, 2, "N"),
            parse(&args, 3, "M"),
            parse(&args, 4, "K"),
        ),
        "attach-grow" => attach_grow(&mut rec, parse(&args, 2, "N"), parse(&args, 3, "M")),
        "double-fork" => truth::double_fork(&mut rec, parse(&args, 2, "MS")),
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
        "peak-sleep" => truth::peak_sleep(&mut rec, parse(&args, 2, "MIB"), parse(&args, 3, "MS")),
        "page-cache" => page_cache(&mut rec, args.get(2).unwrap_or_else(|| die("missing FILE"))),
        other => die(&format!("unknown mode {other:?}")),
    }
}

/// Maps `mib` MiB of private anonymous memory, writes every byte of it (as st's fill.c does:
/// RSS grows page by page, at the pace of a byte loop), then unmaps it.
fn fill_and_unmap(mib: usize) {
    let len = mib << 20;
    if len == 0 {
        return;
    }
    let p = map_anon(len);
    unsafe {
        for off in 0..len {
            std::ptr::write_volatile(p.add(off), b'F');
        }
        libc::munmap(p.cast(), len);
    }
}

/// st's fillfill.c: fill and free MIB MiB, then a child fills and frees twice that.
fn fillfill(rec: &mut Recorder, mib: usize) -> ! {
    fill_and_unmap(mib);
    let child = fork();
    if child == 0 {
        fill_and_unmap(2 * mib);
        rec.begin("fillfill")
            .str("role", "child")
            .int("mib", 2 * mib as i64)
            .finish();
        exit(0)
    }
    let ok = wait_ok(child);
    rec.begin("fillfill")
        .str("role", "parent")
        .int("mib", mib as i64)
        .int("failed", i64::from(!ok))
        .finish();
    exit(0)
}

/// A child that outlives the root while holding MIB MiB: it records its VmHWM, then tells the
/// root (through a pipe) that it may exit, and holds its memory for MS ms.
fn leave_child(rec: &mut Recorder, mib: usize, ms: u64) -> ! {
    let mut fds = [0; 2];
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        sys_die("pipe");
    }
    let child = fork();
    if child == 0 {
        unsafe { libc::close(fds[0]) };
        touch(mib);
        // Warm the sleep and recording paths, then fold pending RSS counts (as "hold" does):
        // nothing after the record raises the peak.
        rec.warm_up();
        std::thread::sleep(Duration::from_millis(1));
        fold_rss_counters(rec.fold);
        rec.begin("leave-child")
            .str("role", "child")
            .int("mib", mib as i64)
            .finish();
        if unsafe { libc::write(fds[1], b"x".as_ptr().cast(), 1) } != 1 {
            sys_die("write pipe");
        }
        std::thread::sleep(Duration::from_millis(ms));
        exit(0)
    }
    unsafe { libc::close(fds[1]) };
    let mut b = [0u8; 1];
    if unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) } != 1 {
        sys_die("read pipe");
    }
    rec.begin("leave-child")
        .str("role", "root")
        .int("child", i64::from(child))
        .finish();
    exit(0)
}

fn pipe_pair() -> [libc::c_int; 2] {
    let mut fds = [0; 2];
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        sys_die("pipe");
    }
    fds
}

fn send_byte(fd: libc::c_int) {
    if unsafe { libc::write(fd, b"x".as_ptr().cast(), 1) } != 1 {
        sys_die("write pipe");
    }
}

fn recv_byte(fd: libc::c_int) {
    let mut b = [0u8; 1];
    if unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) } != 1 {
        sys_die("read pipe");
    }
}

/// Touches MIB MiB, then forks a child that only reads them: the pages stay shared
/// (copy-on-write), yet each process's RSS counts them. Both hold until both have recorded
/// their VmHWM, so the tree's summed RSS reaches about 2×MIB while its distinct pages are
/// about MIB.
fn cow_fork(rec: &mut Recorder, mib: usize) -> ! {
    let len = mib << 20;
    let p = map_anon(len);
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    for off in (0..len).step_by(page) {
        unsafe { std::ptr::write_volatile(p.add(off), 1) };
    }
    let (ready, done) = (pipe_pair(), pipe_pair());
    let child = fork();
    if child == 0 {
        let mut sum = 0u64;
        for off in (0..len).step_by(page) {
            sum += u64::from(unsafe { std::ptr::read_volatile(p.add(off)) });
        }
        rec.begin("cow-fork")
            .str("role", "child")
            .int("mib", mib as i64)
            .int("pages_read", sum as i64)
            .finish();
        send_byte(ready[1]);
        recv_byte(done[0]);
        exit(0)
    }
    recv_byte(ready[0]);
    rec.begin("cow-fork")
        .str("role", "parent")
        .int("mib", mib as i64)
        .finish();
    send_byte(done[1]);
    let ok = wait_ok(child);
    exit(if ok { 0 } else { 1 })
}

/// Drops FILE from the page cache, reads it through a small buffer, and records how much of
/// it the page cache held before and after (mincore): the difference was brought in, and
/// charged, by this process, while its own RSS stays small.
fn page_cache(rec: &mut Recorder, path: &std::ffi::OsStr) -> ! {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap_or_else(|_| sys_die("open FILE"));
    let len = f.metadata().unwrap_or_else(|_| sys_die("stat FILE")).len() as usize;
    let fd = f.as_raw_fd();
    if unsafe { libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED) } != 0 {
        sys_die("posix_fadvise");
    }
    let before = cached_bytes(fd, len);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            sys_die("read FILE");
        }
        if n == 0 {
            break;
        }
    }
    let after = cached_bytes(fd, len);
    rec.begin("page-cache")
        .int("file_bytes", len as i64)
        .int("cached_before_bytes", before as i64)
        .int("cached_after_bytes", after as i64)
        .finish();
    exit(0)
}

/// The bytes of the file's first `len` that are in the page cache (mincore over a mapping
/// that is never touched, so it adds no RSS).
fn cached_bytes(fd: libc::c_int, len: usize) -> usize {
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        sys_die("mmap FILE");
    }
    let mut vec = vec![0u8; len.div_ceil(page)];
    if unsafe { libc::mincore(p, len, vec.as_mut_ptr()) } != 0 {
        sys_die("mincore");
    }
    unsafe { libc::munmap(p, len) };
    vec.iter().filter(|&&b| b & 1 != 0).count() * page
}

/// A process to attach to: it holds N MiB (its RSS recorded) until the byte on stdin, then
/// grows by M MiB.
fn attach_grow(rec: &mut Recorder, n: usize, m: usize) -> ! {
    touch(n);
    rec.warm_up();
    fold_rss_counters(rec.fold);
    rec.begin("attach-grow")
        .str("role", "ready")
        .int("mib", n as i64)
        .finish();
    let line = b"ready\n";
    if unsafe { libc::write(1, line.as_ptr().cast(), line.len()) } != line.len() as isize {
        sys_die("write stdout");
    }
    recv_byte(0);
    touch(m);
    fold_rss_counters(rec.fold);
    rec.begin("attach-grow")
        .str("role", "end")
        .int("mib", (n + m) as i64)
        .finish();
    exit(0)
}

/// A tree to attach to: what it touched before the byte on stdin predates the attach, what
/// it forks after follows it.
fn attach_tree(rec: &mut Recorder, n: usize, m: usize, k: usize) -> ! {
    touch(n);
    let pre = pipe_pair();
    let child = fork();
    if child == 0 {
        // Only the parent writes: its end, if the parent dies, ends this wait.
        unsafe { libc::close(pre[1]) };
        touch(n / 2);
        recv_byte(pre[0]);
        rec.begin("attach-tree")
            .str("role", "pre")
            .int("mib", (n / 2) as i64)
            .finish();
        exit(5)
    }
    let line = format!("ready {child}\n");
    if unsafe { libc::write(1, line.as_ptr().cast(), line.len()) } != line.len() as isize {
        sys_die("write stdout");
    }
    recv_byte(0);
    let mut post = Vec::new();
    for i in 0..k {
        let c = fork();
        if c == 0 {
            touch(m);
            rec.begin("attach-tree")
                .str("role", "post")
                .int("mib", m as i64)
                .int("code", 10 + i as i64)
                .finish();
            exit(10 + i as i32)
        }
        post.push(c);
    }
    for c in post {
        let mut st = 0;
        if unsafe { libc::waitpid(c, &mut st, 0) } != c {
            sys_die("waitpid");
        }
    }
    send_byte(pre[1]);
    let mut st = 0;
    if unsafe { libc::waitpid(child, &mut st, 0) } != child {
        sys_die("waitpid");
    }
    rec.begin("attach-tree")
        .str("role", "parent")
        .int("mib", n as i64)
        .finish();
    exit(7)
}
