//! `reuse THREAD_TRIES RACE_TRIES FORKS`: the attack on stale tracking entries.
//!
//! 1. Thread pidfds: a held child of ours starts a thread; its `pidfd_open(tid,
//!    PIDFD_THREAD)` is passed to the agent as if it were a process (kernel 6.9+).
//! 2. The exit race: a child that exits within microseconds of its fork, its pidfd passed at
//!    once, so that the agent's proof and its insert straddle the exit.
//!
//! A `Tracked` answer keeps its session (with its possibly stale entry) for the end; the
//! next tries go on in a new session. Then FORKS children are forked and reaped as fast as
//! possible, cycling the pid counter so that other users' processes land on the pids tried.
//! It prints `candidates PID…` (every pid and tid tried) and `ready`, and waits for a line
//! on stdin: meanwhile the test starts root's processes on those very pids. Last, every
//! session fetches what the agent holds for it, and the client prints `foreign N` (records
//! or taskstats about a process it did not start, each listed on a `foreign-item` line),
//! `tracked K`, `thread-tries N` or `thread-pidfd unsupported (…)`, `race-tries N`,
//! `race-misnamed N` (own children refused as not dumpable), `forks N`.

use std::collections::HashSet;
use std::io::BufRead;
use std::os::fd::AsFd;
use std::path::Path;

use spacetime::kernel::remote::proto::{want, Msg};
use spacetime_tests::raw::{foreign, pidfd_open, Answer, Raw};

/// `pidfd_open`'s PIDFD_THREAD (O_EXCL).
const PIDFD_THREAD: u32 = libc::O_EXCL as u32;

struct Attack {
    socket: std::path::PathBuf,
    /// The session tries go to now; sessions kept with what they were told tracked.
    current: Raw,
    armed: Vec<Raw>,
    own: HashSet<u32>,
    candidates: Vec<u32>,
    tracked: usize,
    others: Vec<Msg>,
    /// Refusals of the client's own, never-setuid children that blamed a setuid exec (an
    /// exiting child's /proc files are root's: the audit saw 115-226 in 400 races).
    misnamed: usize,
}

impl Attack {
    fn try_pidfd(&mut self, fd: std::os::fd::BorrowedFd<'_>) {
        match self.current.track(fd, &mut self.others) {
            Answer::Tracked(_) if self.armed.len() < MAX_ARMED => {
                self.tracked += 1;
                // Keep this session and what it holds; go on in another.
                let (fresh, _) =
                    Raw::session(&self.socket, want::TRACE).unwrap_or_else(|e| fail(&e));
                self.armed.push(std::mem::replace(&mut self.current, fresh));
            }
            Answer::Tracked(_) => {
                // As many kept as a user may hold: end this run, its session goes on.
                self.tracked += 1;
                self.finish();
            }
            Answer::Refused(why) => {
                if why.contains("not dumpable") {
                    self.misnamed += 1;
                }
            }
            Answer::Gone(why) => fail(&format!("the agent went away: {why}")),
        }
    }
}

impl Attack {
    fn finish(&mut self) {
        if let Err(e) = self.current.send(&Msg::Finish { wait_release: true }) {
            fail(&format!("finish: {e}"));
        }
        loop {
            match self.current.recv(std::time::Duration::from_secs(60)) {
                spacetime_tests::raw::Got::Msg(Msg::End(_)) => return,
                spacetime_tests::raw::Got::Msg(m) => self.others.push(m),
                other => fail(&format!("no End: {other:?}")),
            }
        }
    }
}

/// Sessions kept with a run of what they were told tracked: a user holds 8 sessions, one is
/// the current one, one is left for spare.
const MAX_ARMED: usize = 6;

fn fail(why: &str) -> ! {
    println!("error {why}");
    std::process::exit(0);
}

/// A child that starts a thread which reports its tid and waits; returns (child pid, tid,
/// the pipe that holds the thread).
fn child_with_thread() -> (i32, i32, std::os::fd::OwnedFd) {
    let (tid_r, tid_w) = pipe();
    let (hold_r, hold_w) = pipe();
    // SAFETY: a single-threaded parent; the child only runs a thread and waits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        drop(tid_r);
        drop(hold_w);
        let t = std::thread::spawn(move || {
            // SAFETY: plain syscall.
            let tid = unsafe { libc::gettid() };
            let _ = rustix_write(&tid_w, &tid.to_le_bytes());
            let _ = rustix_read(&hold_r);
        });
        let _ = t.join();
        // SAFETY: leaving the child.
        unsafe { libc::_exit(0) };
    }
    drop(tid_w);
    drop(hold_r);
    let bytes = rustix_read(&tid_r);
    let tid = i32::from_le_bytes(bytes[..4].try_into().unwrap_or([0; 4]));
    (pid, tid, hold_w)
}

fn pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: a valid array of two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: fresh descriptors we own.
    unsafe {
        (
            std::os::fd::FromRawFd::from_raw_fd(fds[0]),
            std::os::fd::FromRawFd::from_raw_fd(fds[1]),
        )
    }
}

fn rustix_write(fd: &std::os::fd::OwnedFd, b: &[u8]) -> isize {
    // SAFETY: a valid buffer on our own descriptor.
    unsafe {
        libc::write(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            b.as_ptr().cast(),
            b.len(),
        )
    }
}

fn rustix_read(fd: &std::os::fd::OwnedFd) -> Vec<u8> {
    let mut b = [0u8; 8];
    // SAFETY: a valid buffer on our own descriptor.
    let n = unsafe {
        libc::read(
            std::os::fd::AsRawFd::as_raw_fd(fd),
            b.as_mut_ptr().cast(),
            8,
        )
    };
    b[..n.max(0) as usize].to_vec()
}

fn reap(pid: i32) {
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
}

/// Forks a child that spins for `spin_us` µs and exits; returns its pid.
fn short_child(spin_us: u64) -> i32 {
    // SAFETY: a single-threaded parent; the child only spins and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let t = std::time::Instant::now();
        while t.elapsed().as_micros() < u128::from(spin_us) {
            std::hint::spin_loop();
        }
        // SAFETY: leaving the child.
        unsafe { libc::_exit(0) };
    }
    pid
}

pub fn run(socket: &Path, thread_tries: usize, race_tries: usize, forks: usize) {
    let (current, _) = Raw::session(socket, want::TRACE).unwrap_or_else(|e| fail(&e));
    let mut a = Attack {
        socket: socket.to_path_buf(),
        current,
        armed: Vec::new(),
        own: HashSet::new(),
        candidates: Vec::new(),
        tracked: 0,
        others: Vec::new(),
        misnamed: 0,
    };
    let mut thread_done = 0;
    for _ in 0..thread_tries {
        let (pid, tid, hold) = child_with_thread();
        a.own.insert(pid as u32);
        a.candidates.push(tid as u32);
        let fd = match pidfd_open(tid, PIDFD_THREAD) {
            Ok(fd) => fd,
            Err(e) => {
                println!("thread-pidfd unsupported ({e}: kernel before 6.9)");
                drop(hold);
                reap(pid);
                break;
            }
        };
        a.try_pidfd(fd.as_fd());
        thread_done += 1;
        drop(hold);
        reap(pid);
    }
    println!("thread-tries {thread_done}");
    println!("thread-tracked {}", a.tracked);
    for i in 0..race_tries {
        let pid = short_child((i as u64 * 37) % 300);
        a.own.insert(pid as u32);
        a.candidates.push(pid as u32);
        if let Ok(fd) = pidfd_open(pid, 0) {
            a.try_pidfd(fd.as_fd());
        }
        reap(pid);
    }
    println!("race-tries {race_tries}");
    println!("race-misnamed {}", a.misnamed);
    for _ in 0..forks {
        let pid = short_child(0);
        a.own.insert(pid as u32);
        reap(pid);
    }
    println!("forks {forks}");
    let list: Vec<String> = a.candidates.iter().map(u32::to_string).collect();
    println!("candidates {}", list.join(" "));
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let mut got = std::mem::take(&mut a.others);
    let mut closed = 0;
    for (n, s) in a.armed.iter_mut().chain([&mut a.current]).enumerate() {
        match s.flush(n as u32 + 1) {
            Ok(msgs) => got.extend(msgs),
            // The agent closed it (a session with nothing traced, idle while the forks
            // ran): it ended, and with it anything it held.
            Err(_) => closed += 1,
        }
    }
    println!("closed-by-agent {closed}");
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let bad = foreign(&got, &a.own, uid);
    for b in &bad {
        println!("foreign-item {b}");
    }
    println!("tracked {}", a.tracked);
    println!("foreign {}", bad.len());
}
