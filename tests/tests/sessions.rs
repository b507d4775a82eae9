//! Several sessions in one loaded set of programs, against the real kernel: each record says
//! whose process it is about, each session's tree-wide RSS is its own, forgetting one session
//! leaves the others traced, a session's process limit refuses exactly the forks beyond it,
//! and with `rss_stat` detached no RSS record comes.
//!
//! Each test loads its own programs and starts its workloads as held children, tracked
//! (`Probes::track_in`) before they exec.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::Path;

use spacetime::kernel::events::{decode, Event};
use spacetime::kernel::loader::{LoadOptions, Probes, SessionId};
use spacetime::kernel::ring::Ring;
use spacetime::run::launch::{spawn_held, Held};
use spacetime_common::{flags, kind};
use spacetime_tests::{assert_rss, TempDir, Truth, MIB, PAGE};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn load() -> Probes {
    Probes::load(&LoadOptions {
        track_rss: true,
        ..LoadOptions::default()
    })
    .unwrap_or_else(|e| panic!("the programs load: {e}"))
}

/// `st-workload ARGS` held before its exec, its truth lines going to `truth`.
fn held(truth: &Path, args: &[&str]) -> Held {
    let mut argv: Vec<OsString> = vec!["/usr/bin/env".into()];
    argv.push(format!("ST_TRUTH={}", truth.display()).into());
    argv.push(WL.into());
    argv.extend(args.iter().map(OsString::from));
    spawn_held(Path::new("/usr/bin/env"), &argv, None, None)
        .unwrap_or_else(|e| panic!("starting {args:?}: {e}"))
}

/// `sh -c SCRIPT` held before its exec.
fn held_sh(script: &str) -> Held {
    let argv: Vec<OsString> = vec!["sh".into(), "-c".into(), script.into()];
    spawn_held(Path::new("/bin/sh"), &argv, None, None)
        .unwrap_or_else(|e| panic!("starting sh -c {script:?}: {e}"))
}

/// Tracks the held child into `session` and lets it exec; returns its pid.
fn start_in(probes: &mut Probes, h: Held, session: SessionId) -> i32 {
    let pid = h.pid;
    probes
        .track_in(pid as u32, session)
        .unwrap_or_else(|e| panic!("tracking {pid} in session {session}: {e}"));
    h.release()
        .unwrap_or_else(|e| panic!("releasing {pid}: {e}"))
}

/// Waits for our child `pid` and asserts it exited 0.
fn wait_ok(pid: i32) {
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(
        r,
        pid,
        "waitpid({pid}): {}",
        std::io::Error::last_os_error()
    );
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "{pid} ended with status {status:#x}"
    );
}

/// Every record waiting in the ring buffer, decoded.
fn drain(ring: &mut Ring) -> Vec<Event> {
    let mut out = Vec::new();
    while let Some(item) = ring.next_record() {
        out.push(decode(&item).unwrap_or_else(|e| panic!("undecodable record: {e}")));
    }
    out
}

fn truth(path: &Path) -> Vec<Truth> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("truth file {}: {e}", path.display()))
        .lines()
        .map(|l| Truth(serde_json::from_str(l).unwrap_or_else(|e| panic!("truth {l:?}: {e}"))))
        .collect()
}

fn vmhwm(t: &Truth) -> u64 {
    t.int("vmhwm_kib") as u64 * 1024
}

/// Processes whose group exit was recorded, by session.
fn ended(events: &[Event]) -> BTreeMap<u16, BTreeSet<u32>> {
    let mut m: BTreeMap<u16, BTreeSet<u32>> = BTreeMap::new();
    for e in events {
        if let Event::Exit(x) = e {
            if x.hdr.flags & flags::EXIT_GROUP_DEAD != 0 {
                m.entry(e.session()).or_default().insert(x.hdr.tgid);
            }
        }
    }
    m
}

/// The largest exact peak the kernel recorded for an image of process `tgid`.
fn image_peak(events: &[Event], tgid: u32) -> u64 {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Rss(r) if r.hdr.tgid == tgid && r.hdr.flags & flags::RSS_MM_PEAK != 0 => {
                Some(r.rss_pages * PAGE)
            }
            _ => None,
        })
        .max()
        .unwrap_or_else(|| panic!("no image peak recorded for {tgid}"))
}

#[test]
fn two_sessions_each_get_their_own_records_and_tree_peak() {
    let dir = TempDir::new("sessions");
    let mut probes = load();
    let mut ring = probes.take_events().expect("ring buffer");
    // Session 1's children touch 64 MiB each, session 2's 16: a sum that mixed them up
    // would break the bounds below.
    let sessions: [(SessionId, u64); 2] = [(1, 64), (2, 16)];
    let mut roots = Vec::new();
    for &(s, mib) in &sessions {
        probes.reset_session(s).expect("reset_session");
        let path = dir.path().join(format!("s{s}"));
        let h = held(&path, &["storm", "2", WL, "touch", &mib.to_string()]);
        roots.push((s, start_in(&mut probes, h, s), path));
    }
    for (_, pid, _) in &roots {
        wait_ok(*pid);
    }
    let events = drain(&mut ring);
    let ended = ended(&events);
    for (s, root, path) in &roots {
        let t = truth(path);
        let pids: BTreeSet<u32> = t.iter().map(|t| t.pid() as u32).collect();
        assert_eq!(pids.len(), 3, "session {s}: root and two children: {t:?}");
        assert!(
            pids.contains(&(*root as u32)),
            "session {s}: root {root} in its truth"
        );
        // Every record about these processes carries their session, and nothing else does.
        for e in &events {
            let h = e.header();
            let about_ours = pids.contains(&h.tgid)
                || matches!(e, Event::Fork(f) if pids.contains(&f.child_tgid));
            assert_eq!(
                about_ours,
                e.session() == *s,
                "session {s} ({pids:?}): record of kind {} for {} says session {}",
                h.kind,
                h.tgid,
                e.session()
            );
        }
        for k in [
            kind::FORK,
            kind::EXEC,
            kind::EXIT,
            kind::RSS,
            kind::IMAGE_END,
        ] {
            assert!(
                events
                    .iter()
                    .any(|e| e.session() == *s && e.header().kind == k),
                "session {s}: no record of kind {k}"
            );
        }
        assert_eq!(
            ended.get(s),
            Some(&pids),
            "session {s}: the processes that ended"
        );
        // Each child's exact image peak is its own VmHWM.
        let children: Vec<&Truth> = t.iter().filter(|t| t.mode() == "touch").collect();
        assert_eq!(children.len(), 2, "session {s}: two touch children");
        for c in &children {
            let what = format!("session {s}: pid {} image peak", c.pid());
            assert_rss(&what, image_peak(&events, c.pid() as u32), vmhwm(c));
        }
        // The tree peak: at least the biggest child, at most the root and the biggest child
        // at their peaks at once (the children run one after the other); and nothing left
        // in the sum once all ended.
        let tree = probes.tree_rss_of(*s).expect("tree_rss_of");
        let peak = tree.peak_pages as u64 * PAGE;
        let biggest = children.iter().map(|c| vmhwm(c)).max().unwrap_or(0);
        let root_hwm = t
            .iter()
            .find(|t| t.mode() == "storm")
            .map(vmhwm)
            .unwrap_or_else(|| panic!("session {s}: no root truth line"));
        let most = root_hwm + biggest;
        eprintln!("session {s}: tree peak {peak}, biggest child {biggest}, root {root_hwm}");
        assert!(
            peak + 8 * PAGE >= biggest && peak <= most + 8 * PAGE,
            "session {s}: tree peak {peak} outside [{biggest}, {most}]"
        );
        assert_eq!(tree.rss_pages, 0, "session {s}: pages left in the tree sum");
        assert!(
            probes
                .followed_mms_of(*s)
                .expect("followed_mms_of")
                .is_empty(),
            "session {s}: mms still followed"
        );
        let c = probes.counters_of(*s).expect("counters_of");
        assert_eq!(c.lost(), 0, "session {s}: loss {c:?}");
    }
    let big = probes.tree_rss_of(1).expect("tree_rss_of").peak_pages as u64 * PAGE;
    let small = probes.tree_rss_of(2).expect("tree_rss_of").peak_pages as u64 * PAGE;
    assert!(
        big > 64 * MIB && small < 32 * MIB,
        "tree peaks {big} and {small}: each session's own"
    );
    assert_eq!(
        probes.tree_rss().expect("tree_rss").peak_pages,
        0,
        "session 0 untouched"
    );
}

#[test]
fn forgetting_one_session_leaves_the_other_traced() {
    let dir = TempDir::new("sessions-untrack");
    let mut probes = load();
    let mut ring = probes.take_events().expect("ring buffer");
    let (p1, p2) = (dir.path().join("s1"), dir.path().join("s2"));
    let h1 = held(&p1, &["forkloop", "200"]);
    let h2 = held(&p2, &["forkloop", "200"]);
    let (pid1, pid2) = (h1.pid, h2.pid);
    probes.track_in(pid1 as u32, 1).expect("track_in 1");
    probes.track_in(pid2 as u32, 2).expect("track_in 2");
    assert_eq!(probes.live_processes_of(1).expect("live"), 1);
    assert_eq!(probes.untrack_session(1).expect("untrack_session"), 1);
    assert_eq!(probes.live_processes_of(1).expect("live"), 0);
    assert_eq!(probes.live_processes_of(2).expect("live"), 1);
    h1.release().expect("release 1");
    h2.release().expect("release 2");
    wait_ok(pid1);
    wait_ok(pid2);
    let events = drain(&mut ring);
    assert!(
        !events
            .iter()
            .any(|e| e.session() == 1 || e.header().tgid == pid1 as u32),
        "session 1 was forgotten before its exec, yet records came"
    );
    let forks = truth(&p2)[0].int("forks") as usize;
    assert!(forks > 0, "session 2's workload forked");
    let forked: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fork(f) if f.hdr.tgid == pid2 as u32 && f.hdr.session == 2 => Some(f.child_tgid),
            _ => None,
        })
        .collect();
    assert_eq!(forked.len(), forks, "session 2: a fork record per fork");
    let forked: BTreeSet<u32> = forked.into_iter().collect();
    let ended = ended(&events);
    let ended2 = ended.get(&2).expect("session 2 ended processes");
    assert!(
        forked.is_subset(ended2) && ended2.contains(&(pid2 as u32)),
        "session 2: every process seen ending"
    );
    assert_eq!(
        probes.live_processes_of(2).expect("live"),
        0,
        "slots given back"
    );
}

#[test]
fn a_session_limit_refuses_exactly_the_forks_beyond_it() {
    const LIMIT: u32 = 6;
    const HOLDERS_EACH: usize = 8;
    let dir = TempDir::new("sessions-limit");
    let mut probes = load();
    let mut ring = probes.take_events().expect("ring buffer");
    probes.reset_session(5).expect("reset_session");
    probes
        .set_session_limit(5, LIMIT)
        .expect("set_session_limit");
    // Two subshells fork their holders at once (on both CPUs); no holder exits before all
    // 16 exist (hold-together waits for every one's ready file), so no slot comes back while
    // forks compete for them.
    let ready = dir.path().join("ready");
    std::fs::create_dir(&ready).expect("ready dir");
    let one = format!(
        "WL hold-together {} {} 1 10",
        2 * HOLDERS_EACH,
        ready.display()
    )
    .replace("WL", WL);
    // A literal list: `$(seq)` would fork a process that exits while the holders compete.
    let list: Vec<String> = (1..=HOLDERS_EACH).map(|i| i.to_string()).collect();
    let loop_ = format!("(for i in {}; do {one} & done; wait)", list.join(" "));
    let root = start_in(
        &mut probes,
        held_sh(&format!("{loop_} & {loop_} & wait")),
        5,
    );
    wait_ok(root);
    let events = drain(&mut ring);
    let forks: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::Fork(f) if f.hdr.flags & flags::FORK_THREAD == 0 => {
                assert_eq!(f.hdr.session, 5, "fork record of {}", f.hdr.tgid);
                Some(f.hdr.flags)
            }
            _ => None,
        })
        .collect();
    let refused = forks
        .iter()
        .filter(|&&f| f & flags::FORK_UNTRACKED != 0)
        .count();
    eprintln!("limit {LIMIT}: {} forks, {refused} refused", forks.len());
    // The root is one of the session's LIMIT processes: LIMIT - 1 forks get a slot.
    assert_eq!(
        forks.len() - refused,
        LIMIT as usize - 1,
        "tracked forks of {} ({refused} refused)",
        forks.len()
    );
    assert!(refused > 0, "the workload forked beyond the limit");
    let c = probes.counters_of(5).expect("counters_of");
    assert_eq!(c.session_limit, refused as u64, "counted refusals: {c:?}");
    assert_eq!(probes.counters_of(0).expect("counters_of").session_limit, 0);
    assert_eq!(
        probes.live_processes_of(5).expect("live"),
        0,
        "slots given back"
    );
}

#[test]
fn rss_stat_detached_sends_no_rss_record() {
    let dir = TempDir::new("sessions-rss");
    let mut probes = load();
    let mut ring = probes.take_events().expect("ring buffer");
    assert!(probes.rss_following(), "attached at load");
    let mut rss_records = Vec::new();
    for on in [false, true] {
        probes.set_rss_following(on).expect("set_rss_following");
        // Idempotent.
        probes
            .set_rss_following(on)
            .expect("set_rss_following again");
        assert_eq!(probes.rss_following(), on);
        let path = dir.path().join(format!("rss-{on}"));
        let pid = start_in(&mut probes, held(&path, &["touch", "8"]), 3);
        wait_ok(pid);
        let events = drain(&mut ring);
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::Exit(x) if x.hdr.tgid == pid as u32)),
            "rss following {on}: the exit of {pid} recorded"
        );
        rss_records.push(events.iter().filter(|e| matches!(e, Event::Rss(_))).count());
    }
    assert_eq!(rss_records[0], 0, "RSS records while rss_stat was detached");
    assert!(rss_records[1] > 0, "no RSS record once attached again");
}
