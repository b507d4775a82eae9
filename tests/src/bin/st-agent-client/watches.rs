//! Watches through the agent, as a user who is not root.
//!
//!   watch-leak SECS      one watch read for SECS s and until stdin closes, then flushed,
//!                        while others run processes; prints
//!                        `records N`, `reaps R`, `own-exits E`, `reaps-unseen S` (free
//!                        records of processes whose exit the watch was not shown: another
//!                        user's, or ours that exited just before) and `foreign F` (records
//!                        about a process not of our uid: another uid's exec or exit, a fork, argv or
//!                        image record of a process of another uid; a taskstats record of
//!                        another uid), each on a `foreign-item` line; `unverified U`: records
//!                        of processes gone before /proc could say whose they were;
//!                        `hidden H`: bare markers of its own processes it could not ptrace at
//!                        their exit (a marker carrying more than its header is foreign)
//!   watch-exits          one watch read until stdin closes, then flushed: prints
//!                        `welcomed`, then `exit PID hidden|shown` for each group exit,
//!                        `exec PID` and `image-end PID` for each exec and image end, and
//!                        `taskstats PID` for each taskstats record of a thread
//!   watch-flood SECS     hello and close, as fast as the agent answers, for SECS s; prints
//!                        `hellos N welcomed W`
//!   watch-hoard N        N watch sessions held until stdin closes; prints `welcomed W
//!                        refused R` and the first refusal

use std::collections::HashSet;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use spacetime::kernel::{
    events::{decode, Event},
    remote::proto::{self, want, Msg},
};
use spacetime_common::{flags, EventHeader};
use spacetime_tests::raw::{Got, Raw};

fn fail(why: &str) -> ! {
    println!("error {why}");
    std::process::exit(0);
}

/// What the watch learnt of whose processes are ours, and what was not.
struct Leak {
    uid: u32,
    mine: HashSet<u32>,
    exited: HashSet<(u32, u64)>,
    records: u64,
    reaps: u64,
    own_exits: u64,
    /// Records of a process gone before /proc could say whose it was.
    unverified: u64,
    /// Free records of processes whose exit the watch was not shown.
    reaps_unseen: u64,
    /// Bare markers of processes of ours we could not ptrace at their exit (a setuid program).
    hidden: u64,
    foreign: Vec<String>,
}

/// The real uid of a running process.
fn real_uid(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

impl Leak {
    fn record(&mut self, rec: &[u8], ev: Event) {
        self.records += 1;
        let h = *ev.header();
        let key = (h.tgid, h.leader_start_ns);
        match ev {
            // Says only that a process of ours ended: nothing past the header.
            Event::Exit(x) if x.hdr.flags & flags::EXIT_HIDDEN != 0 => {
                let past = rec.get(std::mem::size_of::<EventHeader>()..).unwrap_or(&[]);
                if past.iter().all(|&b| b == 0) {
                    self.hidden += 1;
                } else {
                    self.foreign
                        .push(format!("a hidden marker of tgid {} with content", h.tgid));
                }
            }
            Event::Exec(e) if e.uid != self.uid => self
                .foreign
                .push(format!("exec of tgid {} uid {}", h.tgid, e.uid)),
            Event::Exec(_) => {
                self.mine.insert(h.tgid);
            }
            Event::Exit(x) if x.uid != self.uid => self
                .foreign
                .push(format!("exit of tgid {} uid {}", h.tgid, x.uid)),
            Event::Exit(x) => {
                self.mine.insert(h.tgid);
                if x.hdr.flags & flags::EXIT_GROUP_DEAD != 0 {
                    self.own_exits += 1;
                    self.exited.insert(key);
                }
            }
            Event::Reap(_) => {
                self.reaps += 1;
                // One of ours that exited just before the watch began is the only other
                // kind the watch may get: a few at most.
                if !self.exited.remove(&key) {
                    self.reaps_unseen += 1;
                }
            }
            Event::Fork(f) if self.mine.contains(&h.tgid) => {
                self.mine.insert(f.child_tgid);
            }
            other if !self.mine.contains(&h.tgid) => {
                // A process of ours started before the watch (its exec unseen): /proc says
                // whose it is while it runs.
                match real_uid(h.tgid) {
                    Some(u) if u == self.uid => {
                        self.mine.insert(h.tgid);
                        if let Event::Fork(f) = other {
                            self.mine.insert(f.child_tgid);
                        }
                    }
                    Some(u) => self.foreign.push(format!(
                        "record kind {} of tgid {} of uid {u}",
                        other.header().kind,
                        h.tgid
                    )),
                    None => self.unverified += 1,
                }
            }
            _ => {}
        }
    }

    fn message(&mut self, m: Msg) {
        match m {
            Msg::Records(rs) => {
                for rec in rs {
                    match decode(&rec) {
                        Ok(ev) => self.record(&rec, ev),
                        Err(e) => self.foreign.push(format!("undecodable: {e}")),
                    }
                }
            }
            Msg::Taskstats(ds) => {
                for d in &ds {
                    self.taskstats(d);
                }
            }
            _ => {}
        }
    }

    fn taskstats(&mut self, d: &[u8]) {
        for (pid, uid) in proto::datagram_identities(d) {
            if pid != 0 && uid != self.uid {
                self.foreign
                    .push(format!("taskstats of pid {pid} uid {uid}"));
            }
        }
    }
}

pub fn leak(socket: &Path, secs: u64) {
    let (mut r, w) = Raw::session(socket, want::WATCH).unwrap_or_else(|e| fail(&e));
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    println!("sees-uid {}", w.sees_uid);
    let mut l = Leak {
        uid,
        mine: HashSet::from([std::process::id()]),
        exited: HashSet::new(),
        records: 0,
        reaps: 0,
        own_exits: 0,
        unverified: 0,
        reaps_unseen: 0,
        hidden: 0,
        foreign: Vec::new(),
    };
    let done = stdin_closed();
    let end = Instant::now() + Duration::from_secs(secs);
    let mut next_own = Instant::now();
    while Instant::now() < end || !done.load(std::sync::atomic::Ordering::Relaxed) {
        // Our own processes now and then: they must be seen.
        if Instant::now() >= next_own {
            next_own += Duration::from_millis(200);
            let _ = std::process::Command::new("/bin/true").status();
        }
        match r.recv(Duration::from_millis(50)) {
            Got::Msg(m) => l.message(m),
            Got::Timeout => {}
            other => fail(&format!("the watch ended: {other:?}")),
        }
    }
    // Everything the kernel wrote before stdin closed, and the datagrams that waited for it.
    for m in r.flush(1).unwrap_or_else(|e| fail(&e)) {
        l.message(m);
    }
    for f in &l.foreign {
        println!("foreign-item {f}");
    }
    println!("records {}", l.records);
    println!("reaps {}", l.reaps);
    println!("own-exits {}", l.own_exits);
    println!("unverified {}", l.unverified);
    println!("reaps-unseen {}", l.reaps_unseen);
    println!("hidden {}", l.hidden);
    println!("foreign {}", l.foreign.len());
}

/// Set once stdin is closed (the test's word that what it ran has ended).
fn stdin_closed() -> std::sync::Arc<std::sync::atomic::AtomicBool> {
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d = done.clone();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        d.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    done
}

/// Prints what one message of a watch says of exits and taskstats records.
fn say_exits(m: Msg) {
    match m {
        Msg::Records(rs) => {
            for rec in rs {
                let x = match decode(&rec) {
                    Ok(Event::Exit(x)) => x,
                    Ok(Event::Exec(e)) => {
                        println!("exec {}", e.hdr.tgid);
                        continue;
                    }
                    Ok(Event::ImageEnd(e)) => {
                        println!("image-end {}", e.hdr.tgid);
                        continue;
                    }
                    _ => continue,
                };
                if x.hdr.flags & flags::EXIT_GROUP_DEAD == 0 {
                    continue;
                }
                let seen = match x.hdr.flags & flags::EXIT_HIDDEN {
                    0 => "shown",
                    _ => "hidden",
                };
                println!("exit {} {seen}", x.hdr.tgid);
            }
        }
        Msg::Taskstats(ds) => {
            for d in &ds {
                for (pid, _) in proto::datagram_identities(d) {
                    if pid != 0 {
                        println!("taskstats {pid}");
                    }
                }
            }
        }
        _ => {}
    }
}

pub fn exits(socket: &Path) {
    let (mut r, _) = Raw::session(socket, want::WATCH).unwrap_or_else(|e| fail(&e));
    println!("welcomed");
    let done = stdin_closed();
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        match r.recv(Duration::from_millis(50)) {
            Got::Msg(m) => say_exits(m),
            Got::Timeout => {}
            other => fail(&format!("the watch ended: {other:?}")),
        }
    }
    // Everything the kernel wrote before stdin closed, and the datagrams that waited for it.
    for m in r.flush(1).unwrap_or_else(|e| fail(&e)) {
        say_exits(m);
    }
    println!("flushed");
}

pub fn flood(socket: &Path, secs: u64) {
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut hellos, mut welcomed) = (0u64, 0u64);
    while Instant::now() < end {
        hellos += 1;
        if Raw::session(socket, want::WATCH).is_ok() {
            welcomed += 1;
        }
    }
    println!("hellos {hellos} welcomed {welcomed}");
}

pub fn hoard(socket: &Path, n: usize) {
    let mut held = Vec::new();
    let mut first = None;
    for _ in 0..n {
        match Raw::session(socket, want::WATCH) {
            Ok((r, _)) => held.push(r),
            Err(e) => {
                first.get_or_insert(e);
            }
        }
    }
    println!("welcomed {} refused {}", held.len(), n - held.len());
    if let Some(e) = first {
        println!("first-refusal {e}");
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
}
