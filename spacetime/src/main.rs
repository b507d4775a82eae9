// std's own start-up is skipped: `main` below is the C runtime's entry.
#![no_main]

use std::{
    ffi::{c_char, c_int, CStr, OsString},
    io::Write,
    os::unix::ffi::OsStrExt,
};

#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: musl_alloc::Split = musl_alloc::Split;

use spacetime::cmd::cli::{Cli, Command, EXIT_OWN_FAILURE};

/// The process's entry, called by the C runtime in place of std's start-up (`fn main`), which
/// finds the main thread's stack bounds for its overflow message by reading /proc/self/maps
/// (glibc's `pthread_getattr_np`) and sets up an alternate signal stack for it: about 0.1 ms
/// of the 2.4 ms a /bin/true traced through the agent takes, on every run. What spacetime
/// relies on of it is done here: SIGPIPE ignored (a closed pipe is an error spacetime
/// reports, not its death), standard descriptors that are closed opened on /dev/null (no file
/// spacetime opens takes their numbers), stdout flushed at the end, exit status 101 after a
/// panic. The arguments are read here from the C runtime's vector: std's `args` are empty
/// without its start-up on musl (glibc hands them to std's initializer; musl does not).
#[no_mangle]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    // SAFETY: the C runtime's vector of `argc` NUL-terminated strings, alive for the process.
    let command = unsafe { subcommand(argc, argv) };
    #[cfg(target_env = "musl")]
    // SAFETY: nothing was allocated yet: this is the process's first statement.
    unsafe {
        musl_alloc::choose(command)
    };
    #[cfg(not(target_env = "musl"))]
    let _ = command;
    standard_fds_open();
    // SAFETY: changes one signal's disposition before any thread exists.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    // SAFETY: the C runtime's vector of `argc` NUL-terminated strings, alive for the process.
    let args: Vec<OsString> = (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| unsafe { std::ffi::OsStr::from_bytes(CStr::from_ptr(*argv.add(i)).to_bytes()) })
        .map(|a| a.to_os_string())
        .collect();
    let code = std::panic::catch_unwind(|| run(args)).unwrap_or(101);
    let _ = std::io::stdout().flush();
    code
}

/// The subcommand's name, read without allocating: the first argument that is not an option
/// (the only options before it, `-v`, `-h` and `-V`, take no value).
///
/// # Safety
/// `argv` holds `argc` NUL-terminated strings that outlive the process.
unsafe fn subcommand<'a>(argc: c_int, argv: *const *const c_char) -> &'a [u8] {
    (1..usize::try_from(argc).unwrap_or(0))
        // SAFETY: the caller's vector, as above.
        .map(|i| unsafe { CStr::from_ptr(*argv.add(i)) }.to_bytes())
        .find(|a| !a.starts_with(b"-"))
        .unwrap_or_default()
}

/// Opens /dev/null on whichever of descriptors 0, 1 and 2 is closed, as std's start-up does.
fn standard_fds_open() {
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: polls three descriptors for nothing (an invalid one comes back POLLNVAL);
    // `fds` outlives the call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) };
    if r < 0 {
        return;
    }
    for p in fds.iter().filter(|p| p.revents & libc::POLLNVAL != 0) {
        // Takes the lowest free number: the closed one, as the lower ones are open.
        if let Ok(fd) = rustix::fs::open(
            "/dev/null",
            rustix::fs::OFlags::RDWR,
            rustix::fs::Mode::empty(),
        ) {
            // Kept open for the process's life, at the number it took.
            debug_assert_eq!(std::os::fd::AsRawFd::as_raw_fd(&fd), p.fd);
            std::mem::forget(fd);
        }
    }
}

fn run(args: Vec<OsString>) -> c_int {
    fixed_mmap_threshold();
    spacetime::util::term::init_locale();
    let cli = match Cli::from_args(args.clone()) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_OWN_FAILURE } else { 0 };
            let e = spacetime::cmd::cli::explain(e, args.into_iter().skip(1));
            let _ = e.print();
            return code;
        }
    };
    let level = match cli.global.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(level))
        .format_timestamp(None)
        .init();
    let code = match cli.command {
        Command::Trace(args) => spacetime::cmd::trace::main(args, cli.global.verbose),
        Command::Watch(args) => spacetime::cmd::watch::main(args, cli.global.verbose),
        Command::Bench(args) => spacetime::cmd::bench::main(*args, cli.global.verbose),
        Command::Agent(args) => spacetime::cmd::agent::main(args),
        Command::Report(args) => spacetime::cmd::report::main(args, cli.global.verbose),
        Command::Diff(args) => spacetime::cmd::diff::main(args),
        Command::Doctor(args) => spacetime::cmd::doctor::main(args),
        Command::Completions { shell } => written(spacetime::cmd::completions::write(
            shell,
            &mut std::io::stdout().lock(),
        )),
        Command::Man(args) => man(args),
    };
    code.clamp(0, 255)
}

/// Large blocks (128 KiB and up) always come from mmap. glibc's threshold otherwise rises to
/// the size of the largest mmap'd block freed (the kernel BTF read at start-up, 5.5 MB), and
/// from then on a growing table (one entry per traced process) is reallocated inside the heap,
/// leaving behind copies the heap never gives back: 86.7 MB against 77.3 MB of spacetime's own
/// peak RSS on a 100 000-process trace, at the same CPU time.
///
/// And no fast bins: a small block freed into one is never merged with its neighbours, and a
/// trace frees a few small blocks per process among those it keeps (each process's series,
/// its names), so on a 100 000-exec trace the heap grew 1.5 MB past what it held (7.3 MB for
/// 5.8 in use). Freed blocks now merge (the per-thread cache still takes the churn): peak RSS
/// 62.6-62.8 MiB there, was 63.5; the same wall and CPU there and on a traced /bin/true.
fn fixed_mmap_threshold() {
    #[cfg(target_env = "gnu")]
    // SAFETY: allocator settings, changed before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
        libc::mallopt(libc::M_MXFAST, 0);
    }
}

/// `spacetime man`: a page on stdout, or every page into a directory.
fn man(args: spacetime::cmd::cli::ManArgs) -> i32 {
    use spacetime::cmd::man;
    match (args.dir, args.page) {
        (Some(dir), _) => match man::write_dir(&dir) {
            Ok(paths) => {
                for p in paths {
                    eprintln!("{}", p.display());
                }
                0
            }
            Err(e) => {
                eprintln!(
                    "spacetime: writing the manual pages into {}: {e}",
                    dir.display()
                );
                EXIT_OWN_FAILURE
            }
        },
        (None, Some(page)) => written(man::write_sub(&page, &mut std::io::stdout().lock())),
        (None, None) => written(man::write_main(&mut std::io::stdout().lock())),
    }
}

/// Exit status of a command that only writes to stdout: a reader that went away is no failure.
fn written(r: std::io::Result<()>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("spacetime: writing to stdout: {e}");
            EXIT_OWN_FAILURE
        }
    }
}

/// The allocator of the musl build (a glibc build keeps glibc's, tuned in
/// [`fixed_mmap_threshold`]). musl's own maps each size class apart: a traced /bin/true took
/// 75 more page faults at its start than with glibc. Blocks under 128 KiB come from dlmalloc
/// (std's allocator on wasm), which takes memory in 64 KiB pieces and merges freed blocks at
/// once; larger ones from musl, which maps each alone and grows it with mremap, as glibc does
/// at the threshold spacetime fixes: dlmalloc alone grows a large table by copying it into a
/// new piece and keeps both, and a 100 000-exec trace peaked at 81.8 MiB against 63.2.
///
/// The daemons (`agent`, `watch`) take every block from musl: dlmalloc gives memory back only
/// from the top of its heap, so one block kept above what a flood of unread records freed
/// held all of it (an agent kept 40 MiB of a user's 64 MiB share after the user left, where
/// musl's allocator, which unmaps a group once its blocks are free, kept 1 MiB). A daemon
/// starts once; its start's page faults do not count.
#[cfg(target_env = "musl")]
mod musl_alloc {
    use std::{
        alloc::{GlobalAlloc, Layout, System},
        sync::{
            atomic::{AtomicBool, Ordering},
            Mutex,
        },
    };

    /// What glibc's fixed M_MMAP_THRESHOLD is, and about musl's own.
    const LARGE: usize = 128 << 10;

    pub struct Split;

    static SMALL: Small = Small(Mutex::new(Heap(dlmalloc::Dlmalloc::new())));

    /// dlmalloc's heap behind std's mutex. The crate's own global instance takes a pthread
    /// mutex at every call, two calls into libc: a trace's client makes about 900
    /// allocator calls, and the parse of its command line, about 300 of them, took 30.7 µs
    /// with that lock against 23.3 with this one (the parse alone in a loop, warm).
    struct Small(Mutex<Heap>);

    struct Heap(dlmalloc::Dlmalloc);

    // SAFETY: the heap's pointers are to memory it mapped itself, reached only under the
    // mutex, from whichever thread holds it.
    unsafe impl Send for Heap {}

    impl Small {
        fn with<R>(&self, f: impl FnOnce(&mut dlmalloc::Dlmalloc) -> R) -> R {
            // A panic never unwinds out of `f` (dlmalloc does not panic): no heap is left
            // half-changed behind a poisoned lock.
            let mut heap = self.0.lock().unwrap_or_else(|e| e.into_inner());
            f(&mut heap.0)
        }

        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            self.with(|h| h.malloc(layout.size(), layout.align()))
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            self.with(|h| h.calloc(layout.size(), layout.align()))
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            self.with(|h| h.free(ptr, layout.size(), layout.align()))
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            self.with(|h| h.realloc(ptr, layout.size(), layout.align(), new_size))
        }
    }

    /// Every block from musl: set once, before the first allocation, and never changed.
    static DAEMON: AtomicBool = AtomicBool::new(false);

    /// Picks the allocator of the process's small blocks from its subcommand.
    ///
    /// # Safety
    /// Called before anything is allocated (each block is then freed by the allocator that
    /// made it), while the process has one thread.
    pub unsafe fn choose(subcommand: &[u8]) {
        let daemon = matches!(subcommand, b"agent" | b"watch");
        DAEMON.store(daemon, Ordering::Relaxed);
    }

    fn large(size: usize) -> bool {
        size >= LARGE || DAEMON.load(Ordering::Relaxed)
    }

    // SAFETY: each block is allocated, grown and freed by the allocator its size picks, and a
    // layout's size decides the same way at each of those calls (GlobalAlloc passes the
    // block's layout back; `DAEMON` is fixed before the first), except across the threshold,
    // where realloc moves the block.
    unsafe impl GlobalAlloc for Split {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            match large(layout.size()) {
                true => System.alloc(layout),
                false => SMALL.alloc(layout),
            }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            match large(layout.size()) {
                true => System.alloc_zeroed(layout),
                false => SMALL.alloc_zeroed(layout),
            }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            match large(layout.size()) {
                true => System.dealloc(ptr, layout),
                false => SMALL.dealloc(ptr, layout),
            }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            match (large(layout.size()), large(new_size)) {
                (true, true) => System.realloc(ptr, layout, new_size),
                (false, false) => SMALL.realloc(ptr, layout, new_size),
                _ => {
                    // SAFETY: the caller guarantees `new_size` with this alignment is a layout.
                    let new = Layout::from_size_align_unchecked(new_size, layout.align());
                    let moved = self.alloc(new);
                    if !moved.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, moved, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    moved
                }
            }
        }
    }
}
