//! `ticks CPU_MS`: where the agent's CPU clock ticks go. Two sessions of this user: one asks
//! for CPU over time, one does not; each traces a held child of ours that, once released,
//! spins until it has run CPU_MS ms of CPU (ticks find it running, however busy the
//! machine). Prints `cpu-clock STATE` (the first session's welcome) and `ready`, then waits
//! for a line on stdin: meanwhile the test runs another user's traced work through the
//! agent. Then both sessions finish and read to their end, and it prints `own-ticks N`
//! (ticks of its child that reached the session that asked), `unasked-ticks N` (ticks that
//! reached the other session: none may) and `foreign N` (records or taskstats of any
//! process but each session's own child, each listed on a `foreign-item` line).

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use spacetime::kernel::remote::proto::{want, CpuClockState, Msg};
use spacetime_common::kind;
use spacetime_tests::raw::{foreign, pidfd_open, Answer, Got, Raw};

use crate::floods::{go, held};

fn fail(why: &str) -> ! {
    println!("error {why}");
    std::process::exit(0);
}

/// This process's CPU time so far (a forked child's starts at 0), ns.
fn own_cpu_ns() -> u64 {
    // The vDSO's clock: async-signal-safe.
    spacetime_tests::clock::clock_ns(spacetime_tests::clock::ClockId::ProcessCPUTime) as u64
}

/// A session asking for `want_bits`, tracking a held child that spins for `cpu_ms` ms of CPU
/// once released: (session, child pid, its go pipe, what came meanwhile).
fn spinner(
    socket: &Path,
    want_bits: u8,
    cpu_ms: u64,
) -> (Raw, i32, std::os::fd::OwnedFd, Vec<Msg>, CpuClockState) {
    let (mut r, w) = Raw::session(socket, want_bits).unwrap_or_else(|e| fail(&e));
    let (pid, pipe) = held(move || {
        while own_cpu_ns() < cpu_ms * 1_000_000 {
            std::hint::spin_loop();
        }
    });
    let fd = pidfd_open(pid, 0).unwrap_or_else(|e| fail(&format!("pidfd: {e}")));
    let mut got = Vec::new();
    match r.track(fd.as_fd(), &mut got) {
        Answer::Tracked(_) => {}
        other => fail(&format!("own held child: {other:?}")),
    }
    (r, pid, pipe, got, w.cpu_clock)
}

/// Finishes the session's run: every message up to its End.
fn finish(r: &mut Raw, got: &mut Vec<Msg>) {
    if let Err(e) = r.send(&Msg::Finish { wait_release: true }) {
        fail(&format!("finish: {e}"));
    }
    loop {
        match r.recv(Duration::from_secs(60)) {
            Got::Msg(Msg::End(_)) => return,
            Got::Msg(m) => got.push(m),
            other => fail(&format!("no End: {other:?}")),
        }
    }
}

/// Tick records among `msgs` (of `tgid` only, when given).
fn ticks(msgs: &[Msg], tgid: Option<u32>) -> usize {
    msgs.iter()
        .filter_map(|m| match m {
            Msg::Records(rs) => Some(rs),
            _ => None,
        })
        .flatten()
        .filter_map(|r| spacetime::kernel::events::decode(r).ok())
        .filter(|ev| ev.header().kind == kind::TICK)
        .filter(|ev| tgid.is_none_or(|t| ev.header().tgid == t))
        .count()
}

pub fn run(socket: &Path, cpu_ms: u64) {
    let (mut asked, a_pid, a_go, mut a_got, clock) =
        spinner(socket, want::TRACE | want::CPU_OVER_TIME, cpu_ms);
    let (mut unasked, u_pid, u_go, mut u_got, _) = spinner(socket, want::TRACE, cpu_ms);
    match clock {
        CpuClockState::Ticking { cpus } => println!("cpu-clock ticking {cpus}"),
        other => println!("cpu-clock {other:?}"),
    }
    go(&a_go);
    go(&u_go);
    println!("ready");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    for pid in [a_pid, u_pid] {
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
    }
    finish(&mut asked, &mut a_got);
    finish(&mut unasked, &mut u_got);
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let mut bad = foreign(&a_got, &HashSet::from([a_pid as u32]), uid);
    bad.extend(foreign(&u_got, &HashSet::from([u_pid as u32]), uid));
    for b in &bad {
        println!("foreign-item {b}");
    }
    println!("own-ticks {}", ticks(&a_got, Some(a_pid as u32)));
    println!("unasked-ticks {}", ticks(&u_got, None));
    println!("foreign {}", bad.len());
}
