//! `st-agent-client SOCKET CASE…`: a raw client of `spacetime agent`, speaking its protocol
//! (spacetime::kernel::remote::proto) as an attacker would: to ask it to trace a process it
//! must refuse, or one it must accept, and to try every route of the attack suite
//! (tests/tests/agent_attack.rs). Prints what it got, one fact per line (`error …` when the
//! attempt itself failed), and exits 0.
//!
//! Cases:
//!   own-child    a held child of this process, same uid, not exec'd: must be tracked
//!   not-child    pid 1 (not this process's child)
//!   other-uid    run as root: fork a held child (uid 0), then become uid 65534 and connect
//!   execd        a child that has already exec'd `sleep`
//!   reexec       a child that has exec'd this very program again (same file)
//!   not-pidfd    an ordinary file instead of a pidfd
//!   sessions N   open N sessions at once (hello on N connections); print the last answer
//!                (`sessions N hold`: then keep them open until stdin closes)
//!
//! `early:CASE` sends CASE's track request right after the hello, before the welcome came
//! (as `trace` does; the agent must prove it alike).
//!
//! The attack routes: `reuse` (reuse.rs), `flush-flood`, `records-flood`, `slow-storm`, `hold`, `idle`,
//! `share` (floods.rs), `watch-leak`, `watch-exits`, `watch-flood`, `watch-hoard` (watches.rs),
//! `ticks` (ticks.rs).

mod floods;
mod reuse;
mod ticks;
mod watches;

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use spacetime::kernel::remote::{
    proto::{self, Msg},
    sock,
};

fn pidfd(pid: i32) -> OwnedFd {
    // SAFETY: plain syscall; the result is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        println!(
            "error pidfd_open({pid}): {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(0);
    }
    // SAFETY: a fresh descriptor.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Forks a child that waits for a byte on a pipe (or, with `exec`, execs `sleep 30` at once,
/// or with `reexec` this program again, which waits); returns its pid and the pipe's write
/// end (dropping it ends the waiting child).
fn child(exec: bool) -> (i32, OwnedFd) {
    child_running(exec.then_some((c"/bin/sleep", c"30")))
}

fn child_running(exec: Option<(&std::ffi::CStr, &std::ffi::CStr)>) -> (i32, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: a valid array of two fds.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    let mut ready = [0; 2];
    // Closed on exec so that EOF says the exec happened.
    // SAFETY: a valid array of two fds.
    let r = unsafe { libc::pipe2(ready.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(r, 0, "pipe2");
    // SAFETY: single-threaded program; the child makes only async-signal-safe calls.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        // SAFETY: as above; never returns.
        unsafe {
            if let Some((path, arg)) = exec {
                let argv = [path.as_ptr(), arg.as_ptr(), std::ptr::null()];
                libc::execv(path.as_ptr(), argv.as_ptr());
                libc::_exit(127);
            }
            // Only the parent's write end may keep the pipe open.
            libc::close(fds[1]);
            let mut b = 0u8;
            libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
            libc::_exit(0);
        }
    }
    // SAFETY: closing our copies of the child's ends.
    unsafe {
        libc::close(fds[0]);
        libc::close(ready[1]);
        // EOF once the child exec'd (or exited), right away for a held child (no exec, the
        // read end is still open in it: wait only when it execs).
        if exec.is_some() {
            let mut b = 0u8;
            libc::read(ready[0], (&mut b as *mut u8).cast(), 1);
        }
        libc::close(ready[0]);
        (pid, OwnedFd::from_raw_fd(fds[1]))
    }
}

/// The descriptor CASE passes to the agent as its process; what must stay open (or be
/// killed at the end) goes to `keep`.
fn passed_descriptor(case: &str, keep: &mut Vec<OwnedFd>) -> OwnedFd {
    match case {
        "own-child" => {
            let (pid, hold) = child(false);
            keep.push(hold);
            pidfd(pid)
        }
        "not-child" => pidfd(1),
        "reexec" => {
            let me = std::fs::read_link("/proc/self/exe").expect("own path");
            let me = std::ffi::CString::new(me.into_os_string().into_encoded_bytes())
                .expect("a path without NUL");
            let (pid, hold) = child_running(Some((&me, c"--hold")));
            keep.push(hold);
            let fd = pidfd(pid);
            keep.push(pidfd(pid));
            fd
        }
        "execd" => {
            let (pid, hold) = child(true);
            keep.push(hold);
            let fd = pidfd(pid);
            // The child is killed when the test ends; make sure it does not outlive us.
            keep.push(pidfd(pid));
            fd
        }
        "other-uid" => {
            let (pid, hold) = child(false);
            keep.push(hold);
            let fd = pidfd(pid);
            // SAFETY: plain syscalls; dropping every privilege for good.
            unsafe {
                libc::setgroups(0, std::ptr::null());
                assert_eq!(libc::setresgid(65534, 65534, 65534), 0, "setresgid");
                assert_eq!(libc::setresuid(65534, 65534, 65534), 0, "setresuid");
            }
            fd
        }
        "not-pidfd" => std::fs::File::open("/etc/hostname")
            .or_else(|_| std::fs::File::open("/dev/null"))
            .expect("a file")
            .into(),
        other => {
            eprintln!("unknown case {other}");
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--hold") {
        // Re-exec'd by `reexec`: wait to be killed.
        loop {
            // SAFETY: plain syscall.
            unsafe { libc::pause() };
        }
    }
    let (Some(socket), Some(case)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: st-agent-client SOCKET CASE");
        std::process::exit(2);
    };
    let num = |i: usize| -> usize {
        args.get(i)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{case}: argument {i} must be a number"))
    };
    let socket_path = Path::new(socket);
    match case.as_str() {
        "sessions" => {
            let hold = args.get(4).is_some_and(|a| a == "hold");
            return sessions(socket_path, num(3), hold);
        }
        "reuse" => return reuse::run(socket_path, num(3), num(4), num(5)),
        "flush-rtt" => return floods::flush_rtt(socket_path, num(3) as u32),
        "flush-flood" => return floods::flush_flood(socket_path, num(3), num(4) as u64),
        "records-flood" => return floods::records_flood(socket_path, num(3), num(4) as u64),
        "hold" => return floods::hold(socket_path, num(3)),
        "slow-storm" => return floods::slow_storm(socket_path, num(3)),
        "idle" => return floods::idle(socket_path, num(3), num(4) as u64),
        "share" => return floods::share(socket_path, num(3), num(4)),
        "watch-leak" => return watches::leak(socket_path, num(3) as u64),
        "watch-exits" => return watches::exits(socket_path),
        "watch-flood" => return watches::flood(socket_path, num(3) as u64),
        "watch-hoard" => return watches::hoard(socket_path, num(3)),
        "ticks" => return ticks::run(socket_path, num(3) as u64),
        _ => {}
    }
    proof(socket_path, case);
}

/// A proof case: CASE's descriptor passed to the agent (with the hello for `hello:CASE`),
/// the agent's answer printed, then the session ended cleanly.
fn proof(socket: &Path, case: &str) {
    let mut keep = Vec::new();
    let (early, case) = match case.strip_prefix("early:") {
        Some(c) => (true, c),
        None => (false, case),
    };
    let passed = passed_descriptor(case, &mut keep);
    let Some(fd) = connect_with_hello(socket) else {
        return;
    };
    let track = || match sock::send(fd.as_fd(), &Msg::Track.encode(), Some(passed.as_fd())) {
        Ok(()) => true,
        Err(e) => {
            println!("error track: {e}");
            false
        }
    };
    if early && !track() {
        return;
    }
    let mut buf = vec![0u8; proto::MAX_MESSAGE + 1];
    let recv = |buf: &mut Vec<u8>| -> Option<Msg> {
        let r = sock::recv(fd.as_fd(), buf, true).ok()?;
        Msg::parse(&buf[..r.len]).ok()
    };
    match recv(&mut buf) {
        Some(Msg::Welcome(_)) => {}
        other => {
            println!("error welcome: {other:?}");
            return;
        }
    }
    if !early && !track() {
        return;
    }
    loop {
        match recv(&mut buf) {
            Some(Msg::Tracked { kernel_pid, .. }) => {
                println!("tracked {kernel_pid}");
                break;
            }
            Some(Msg::Refused { reason, .. }) => {
                println!("refused {}", String::from_utf8_lossy(&reason));
                break;
            }
            Some(_) => continue,
            None => {
                println!("error no answer");
                break;
            }
        }
    }
    // End the session cleanly; the held child ends when its pipe closes.
    let _ = sock::send(
        fd.as_fd(),
        &Msg::Finish { wait_release: true }.encode(),
        None,
    );
    while let Some(m) = recv(&mut buf) {
        if matches!(m, Msg::End(_)) {
            break;
        }
    }
    if case == "execd" || case == "reexec" {
        // SAFETY: our own child: the sleep we started.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                keep[1].as_raw_fd(),
                libc::SIGKILL,
                0,
                0,
            );
            libc::wait(std::ptr::null_mut());
        }
    }
    drop(keep);
}

/// Opens `n` connections, each with its hello, all kept open; prints `welcome` or
/// `refused REASON` for the last.
fn sessions(socket: &Path, n: usize, hold: bool) {
    let mut conns = Vec::new();
    let mut buf = vec![0u8; proto::MAX_MESSAGE + 1];
    let mut last = String::from("error none");
    for _ in 0..n {
        let Some(fd) = connect_with_hello(socket) else {
            return;
        };
        last = match sock::recv(fd.as_fd(), &mut buf, true)
            .ok()
            .and_then(|r| Msg::parse(&buf[..r.len]).ok())
        {
            Some(Msg::Welcome(_)) => "welcome".into(),
            Some(Msg::Refused { reason, .. }) => {
                format!("refused {}", String::from_utf8_lossy(&reason))
            }
            other => format!("error {other:?}"),
        };
        conns.push(fd);
    }
    println!("{last}");
    if hold {
        // Until the test closes our stdin.
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
    }
}

/// A connection to the agent at `socket` that has sent its hello (asking to trace); None,
/// with the error printed, when either fails.
fn connect_with_hello(socket: &Path) -> Option<OwnedFd> {
    let fd = match sock::connect(socket) {
        Ok(fd) => fd,
        Err(e) => {
            println!("error connect: {e}");
            return None;
        }
    };
    let hello = Msg::Hello {
        version: proto::VERSION,
        want: proto::want::TRACE,
        max_processes: 0,
    };
    if sock::send(fd.as_fd(), &hello.encode(), None).is_err() {
        println!("error hello");
        return None;
    }
    Some(fd)
}
