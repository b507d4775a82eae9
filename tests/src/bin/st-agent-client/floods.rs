//! Floods and hoards: what one user can make the agent hold.
//!
//!   flush-flood CONNS SECS      CONNS sessions send Flush without ever reading, for SECS s or
//!                               until the agent closes them; prints `closed K` and `sent N`
//!   records-flood CONNS SECS    CONNS sessions each trace a child of ours that runs
//!                               /bin/true with a 128 KiB argv as fast as it can for SECS s;
//!                               none reads; prints `done`
//!   slow-storm CONNS            CONNS sessions each trace a child of ours that runs
//!                               /bin/true with a 128 KiB argv as fast as it can; none reads
//!                               until stdin closes; then the storms stop, each session
//!                               finishes and reads to its end; prints `dropped N` (records
//!                               the agent dropped for these sessions) and `ended K`
//!   hold CONNS                  CONNS connections without a hello, held until stdin closes;
//!                               prints `connected N`
//!   idle CONNS SECS             CONNS sessions that say hello and nothing more; prints
//!                               `closed K` (by the agent within SECS s) and `welcomed W`
//!   share SESSIONS CHILDREN     SESSIONS sessions each trace a child of ours that forks
//!                               CHILDREN children living until all are counted; prints
//!                               `tracked T untracked U` over all sessions

use std::io::Read;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::{Duration, Instant};

use spacetime::kernel::remote::proto::{want, Msg};
use spacetime_common::flags;
use spacetime_tests::raw::{pidfd_open, Answer, Got, Raw};

fn fail(why: &str) -> ! {
    println!("error {why}");
    std::process::exit(0);
}

pub fn flush_flood(socket: &Path, conns: usize, secs: u64) {
    let mut sessions: Vec<Option<Raw>> = (0..conns)
        .map(|_| {
            Some(
                Raw::session(socket, want::TRACE)
                    .unwrap_or_else(|e| fail(&e))
                    .0,
            )
        })
        .collect();
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut sent, mut closed) = (0u64, 0usize);
    while Instant::now() < end && closed < conns {
        for s in sessions.iter_mut() {
            let Some(r) = s else { continue };
            for seq in 0..256 {
                match r.send_nowait(&Msg::Flush { seq }) {
                    Ok(()) => sent += 1,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    // The agent closed it: what it was for.
                    Err(_) => {
                        closed += 1;
                        *s = None;
                        break;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("sent {sent}");
    println!("closed {closed}");
}

/// `n` Flush round trips, one after the other, on one session: prints the wall of each on
/// average (the agent's loop latency as a client sees it).
pub fn flush_rtt(socket: &Path, n: u32) {
    let (mut r, _) = Raw::session(socket, want::TRACE).unwrap_or_else(|e| fail(&e));
    let start = Instant::now();
    for seq in 0..n {
        r.flush(seq).unwrap_or_else(|e| fail(&e));
    }
    let ns = start.elapsed().as_nanos() / u128::from(n.max(1));
    println!("round trips {n}");
    println!("ns per round trip {ns}");
}

/// Forks a held child that, once its pipe gives a byte, runs `work` and exits; returns its
/// pid and the pipe's write end.
pub(crate) fn held(work: impl FnOnce()) -> (i32, std::os::fd::OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: a valid array of two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the child waits on the pipe and runs async-signal-safe work only.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut b = [0u8];
        // SAFETY: our end of the pipe.
        unsafe {
            libc::close(fds[1]);
            libc::read(fds[0], b.as_mut_ptr().cast(), 1);
        }
        work();
        // SAFETY: leaving the child.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: closing the child's end; the write end is ours.
    unsafe {
        libc::close(fds[0]);
        (pid, std::os::fd::FromRawFd::from_raw_fd(fds[1]))
    }
}

pub(crate) fn go(pipe: &std::os::fd::OwnedFd) {
    // SAFETY: one byte on our own pipe.
    unsafe {
        libc::write(
            std::os::fd::AsRawFd::as_raw_fd(pipe),
            [1u8].as_ptr().cast(),
            1,
        )
    };
}

/// A session tracking a held child running `work`: (session, child pid, its go pipe).
fn traced(socket: &Path, work: impl FnOnce()) -> (Raw, i32, std::os::fd::OwnedFd) {
    let (mut r, _) = Raw::session(socket, want::TRACE).unwrap_or_else(|e| fail(&e));
    let (pid, pipe) = held(work);
    let fd = pidfd_open(pid, 0).unwrap_or_else(|e| fail(&format!("pidfd: {e}")));
    match r.track(fd.as_fd(), &mut Vec::new()) {
        Answer::Tracked(_) => {}
        other => fail(&format!("own held child: {other:?}")),
    }
    (r, pid, pipe)
}

pub fn records_flood(socket: &Path, conns: usize, secs: u64) {
    // Each exec's argv travels in full (up to 256 KiB): the heaviest records there are.
    let big = std::ffi::CString::new(vec![b'a'; 128 << 10]).expect("no NUL");
    let truth = c"/bin/true";
    let mut kept = Vec::new();
    for _ in 0..conns {
        let big = big.clone();
        let (r, pid, pipe) = traced(socket, move || {
            let argv = [truth.as_ptr(), big.as_ptr(), std::ptr::null()];
            let end = Instant::now() + Duration::from_secs(secs);
            while Instant::now() < end {
                // SAFETY: a fork whose child execs at once.
                let c = unsafe { libc::fork() };
                if c == 0 {
                    // SAFETY: exec, or leave the child.
                    unsafe {
                        libc::execv(truth.as_ptr(), argv.as_ptr());
                        libc::_exit(127);
                    }
                }
                // SAFETY: reaping our own child.
                unsafe { libc::waitpid(c, std::ptr::null_mut(), 0) };
            }
        });
        go(&pipe);
        kept.push((r, pid, pipe));
    }
    for (_, pid, _) in &kept {
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(*pid, std::ptr::null_mut(), 0) };
    }
    println!("done");
}

/// Runs `argv` (fork, exec, wait) over and over until `stop` is readable (its write end
/// closed).
fn exec_until(argv: &[*const libc::c_char; 3], stop: i32) {
    loop {
        let mut p = libc::pollfd {
            fd: stop,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout.
        if unsafe { libc::poll(&mut p, 1, 0) } != 0 {
            return;
        }
        // SAFETY: a fork whose child execs at once.
        let c = unsafe { libc::fork() };
        if c == 0 {
            // SAFETY: exec, or leave the child.
            unsafe {
                libc::execv(argv[0], argv.as_ptr());
                libc::_exit(127);
            }
        }
        // SAFETY: reaping our own child.
        unsafe { libc::waitpid(c, std::ptr::null_mut(), 0) };
    }
}

pub fn slow_storm(socket: &Path, conns: usize) {
    let big = std::ffi::CString::new(vec![b'a'; 128 << 10]).expect("no NUL");
    let mut stop = [0; 2];
    // SAFETY: a valid array of two fds; the storms poll the read end.
    let r = unsafe { libc::pipe2(stop.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2");
    let mut kept = Vec::new();
    for _ in 0..conns {
        let big = big.clone();
        let (r, pid, pipe) = traced(socket, move || {
            // SAFETY: the child's copy of the write end: only ours may keep the pipe open.
            unsafe { libc::close(stop[1]) };
            let argv = [c"/bin/true".as_ptr(), big.as_ptr(), std::ptr::null()];
            exec_until(&argv, stop[0]);
        });
        go(&pipe);
        kept.push((r, pid, pipe));
    }
    println!("storming {}", kept.len());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    // SAFETY: closing our write end stops every storm.
    unsafe { libc::close(stop[1]) };
    let (mut dropped, mut ended) = (0u64, 0usize);
    for (mut r, pid, _) in kept {
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        if r.send(&Msg::Finish {
            wait_release: false,
        })
        .is_err()
        {
            continue;
        }
        loop {
            match r.recv(Duration::from_secs(60)) {
                Got::Msg(Msg::End(e)) => {
                    dropped += e.dropped_records;
                    ended += 1;
                    break;
                }
                Got::Msg(_) => {}
                Got::Timeout | Got::Closed | Got::Bad(_) => break,
            }
        }
    }
    println!("dropped {dropped}");
    println!("ended {ended}");
}

pub fn hold(socket: &Path, conns: usize) {
    let mut held = Vec::new();
    for _ in 0..conns {
        match Raw::connect(socket) {
            Ok(r) => held.push(r),
            Err(e) => {
                println!("connect-error {e}");
                break;
            }
        }
    }
    println!("connected {}", held.len());
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}

pub fn idle(socket: &Path, conns: usize, secs: u64) {
    let mut sessions = Vec::new();
    for _ in 0..conns {
        match Raw::session(socket, want::TRACE) {
            Ok((r, _)) => sessions.push(r),
            Err(e) => println!("hello-error {e}"),
        }
    }
    println!("welcomed {}", sessions.len());
    let end = Instant::now() + Duration::from_secs(secs);
    let mut closed = 0;
    for r in sessions.iter_mut() {
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match r.recv(left) {
                Got::Closed => {
                    closed += 1;
                    break;
                }
                Got::Timeout => break,
                _ => {}
            }
        }
    }
    println!("closed {closed}");
}

pub fn share(socket: &Path, sessions: usize, children: usize) {
    let mut kept = Vec::new();
    let mut holds = Vec::new();
    for _ in 0..sessions {
        // Each grandchild waits on a pipe the held child keeps open until it dies.
        let (r, pid, pipe) = traced(socket, move || {
            let mut fds = [0; 2];
            // SAFETY: a valid array; the grandchildren block on the read end.
            unsafe { libc::pipe(fds.as_mut_ptr()) };
            for _ in 0..children {
                // SAFETY: a fork whose child waits for the pipe to close, then exits.
                if unsafe { libc::fork() } == 0 {
                    let mut b = [0u8];
                    // SAFETY: the child's own copy of the pipe.
                    unsafe {
                        libc::close(fds[1]);
                        libc::read(fds[0], b.as_mut_ptr().cast(), 1);
                        libc::_exit(0);
                    }
                }
            }
            // Until the client's pipe closes (its stdin ends).
            let mut b = [0u8];
            // SAFETY: reading our own stdin.
            unsafe { libc::read(0, b.as_mut_ptr().cast(), 1) };
        });
        go(&pipe);
        kept.push(r);
        holds.push((pid, pipe));
    }
    // Until every fork has come (each child forks at once), or 20 s.
    let (mut tracked, mut untracked) = (0u64, 0u64);
    let end = Instant::now() + Duration::from_secs(20);
    let mut seq = 0;
    while tracked + untracked < (sessions * children) as u64 && Instant::now() < end {
        for r in kept.iter_mut() {
            seq += 1;
            for m in r.flush(seq).unwrap_or_else(|e| fail(&e)) {
                let Msg::Records(rs) = m else { continue };
                for rec in rs {
                    if let Ok(spacetime::kernel::events::Event::Fork(f)) =
                        spacetime::kernel::events::decode(&rec)
                    {
                        if f.hdr.flags & flags::FORK_THREAD != 0 {
                            continue;
                        }
                        match f.hdr.flags & flags::FORK_UNTRACKED {
                            0 => tracked += 1,
                            _ => untracked += 1,
                        }
                    }
                }
            }
        }
    }
    println!("tracked {tracked} untracked {untracked}");
}
