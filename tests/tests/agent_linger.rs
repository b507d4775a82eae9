//! rss_stat through the agent: attached while a trace session needs it, and for a short
//! linger after the last one. Attached again within a grace period of its detach, a
//! tracepoint's first probe waits for that grace period (15-25 ms that the agent served no
//! one: every back-to-back trace paid it). Once the agent is idle it goes: no program runs
//! on every RSS change of a machine nobody traces. The CPU clock program (CPU over time) is
//! attached while a session that shows CPU over time is open, with no linger. Seen from the
//! kernel: the agent's own link and perf event descriptors, as /proc/PID/fd{,info} names them.

use std::time::Duration;

use spacetime_tests::agent::Agent;
use spacetime_tests::{assert_rss, TempDir, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// How long after its last session the agent keeps rss_stat by default (`--rss-linger`).
const LINGER: Duration = Duration::from_secs(2);

/// The text of each of a process's descriptors' fdinfo, with its path. A descriptor closed
/// since the listing has no fdinfo and is left out.
fn fdinfos(pid: i32) -> Vec<(std::path::PathBuf, String)> {
    let dir = format!("/proc/{pid}/fdinfo");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    entries
        .map_while(Result::ok)
        .filter_map(|e| Some((e.path(), std::fs::read_to_string(e.path()).ok()?)))
        .collect()
}

/// A field of an fdinfo text ("name:" with its colon), trimmed.
fn fdinfo_field<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// The ids of the agent's raw-tracepoint links on rss_stat.
fn rss_stat_links(pid: i32) -> Vec<u64> {
    fdinfos(pid)
        .into_iter()
        .filter(|(_, text)| fdinfo_field(text, "tp_name:") == Some("rss_stat"))
        .map(|(path, text)| {
            let id = fdinfo_field(&text, "link_id:").and_then(|v| v.parse().ok());
            id.unwrap_or_else(|| panic!("{}: no link_id\n{text}", path.display()))
        })
        .collect()
}

#[test]
fn rss_stat_stays_between_back_to_back_traces_and_leaves_an_idle_agent() {
    // A linger no run of this test outlasts: every trace ends with the link the first made.
    let agent = Agent::start_with("linger", &["--rss-linger", "3600"]);
    assert_eq!(
        rss_stat_links(agent.pid()),
        Vec::<u64>::new(),
        "rss_stat attached before any session"
    );
    let mut first: Option<u64> = None;
    for run in 0..4 {
        let out = Trace::new([WL, "touch", "8"])
            .through(&agent)
            .tag("linger")
            .run();
        out.assert_code(0);
        let v = out.json_value();
        assert!(
            v["totals"]["tree_peak_rss_bytes"].as_u64().unwrap_or(0) >= 8 << 20,
            "run {run}: the tree's peak is the 8 MiB touched\n{}",
            out.context()
        );
        let now = rss_stat_links(agent.pid());
        assert_eq!(
            now.len(),
            1,
            "run {run}: rss_stat links at the end: {now:?}"
        );
        let id = *first.get_or_insert(now[0]);
        assert_eq!(
            now[0], id,
            "run {run}: rss_stat was attached again between back-to-back traces"
        );
    }
    agent.stop();
    // A short linger: once the agent is idle, the program goes.
    let agent = Agent::start_with("linger-short", &["--rss-linger", "1"]);
    Trace::new([WL, "touch", "8"])
        .through(&agent)
        .tag("linger-short")
        .run()
        .assert_code(0);
    spacetime_tests::poll::wait_until("rss_stat detached after its linger", LINGER * 30, || {
        rss_stat_links(agent.pid()).is_empty()
    });
    agent.stop();
}

/// `touch 16` traced through an agent, then blocked in `cat FIFO` (a descendant of the
/// trace) until released.
struct Blocked {
    running: spacetime_tests::Running,
    fifo: std::path::PathBuf,
    /// The blocked `cat`'s pid: a traced process whose mm the agent follows or not.
    cat: i32,
    _dir: TempDir,
}

impl Blocked {
    /// Starts it with `flags` (and `--json` unless a `-f` format is among them); returns
    /// once it is blocked.
    fn start(agent: &Agent, flags: &[&str], tag: &str) -> Blocked {
        let dir = TempDir::new(tag);
        let fifo = dir.path().join("release");
        let fifo_s = fifo.to_str().expect("a UTF-8 temp path");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(
            made.as_ref().is_ok_and(|s| s.success()),
            "mkfifo {fifo_s}: {made:?}"
        );
        let script = format!("{WL} touch 16 && exec cat {fifo_s}");
        let mut t = Trace::new(["sh", "-c", &script]).through(agent).tag(tag);
        if flags.contains(&"-f") {
            t = t.no_json();
        }
        for f in flags {
            t = t.flag(f);
        }
        let mut running = t.spawn();
        let cat = running.wait_for_descendant(&["cat", fifo_s], Duration::from_secs(30));
        Blocked {
            running,
            fifo,
            cat,
            _dir: dir,
        }
    }

    /// Lets it end; returns the run.
    fn release(self) -> spacetime_tests::Outcome {
        // Opened for writing and closed: cat reads end of file and exits.
        let w = std::fs::OpenOptions::new().write(true).open(&self.fifo);
        drop(w.expect("open the FIFO"));
        self.running.wait()
    }
}

/// The tgids whose mms the agent's kernel side follows now (its `MM_STATE` map, found among
/// its descriptors).
fn followed_tgids(agent_pid: i32) -> Vec<u32> {
    let map_ids = fdinfos(agent_pid)
        .into_iter()
        .filter_map(|(_, text)| fdinfo_field(&text, "map_id:")?.parse::<u32>().ok());
    for id in map_ids {
        let named = aya::maps::MapInfo::from_id(id)
            .ok()
            .is_some_and(|i| i.name_as_str() == Some("MM_STATE"));
        if !named {
            continue;
        }
        let data = aya::maps::MapData::from_id(id).unwrap_or_else(|e| panic!("map {id}: {e}"));
        let map: aya::maps::HashMap<_, u64, spacetime_common::MmState> =
            aya::maps::HashMap::try_from(aya::maps::Map::HashMap(data))
                .unwrap_or_else(|e| panic!("MM_STATE as a hash map: {e}"));
        return map
            .iter()
            .filter_map(Result::ok)
            .map(|(_, v)| v.tgid)
            .collect();
    }
    panic!("the agent (pid {agent_pid}) holds no MM_STATE map");
}

#[test]
fn a_time_format_session_attaches_no_rss_stat_and_its_peak_is_the_workloads_own() {
    let agent = Agent::start("no-memory");
    // The control: a session that shows memory over time (the JSON) has rss_stat attached
    // while its command runs.
    let b = Blocked::start(&agent, &[], "memory");
    let links = rss_stat_links(agent.pid());
    assert_eq!(
        links.len(),
        1,
        "a JSON trace runs: rss_stat links {links:?}"
    );
    b.release().assert_code(0);
    // Once the agent has let it go, a `time -f` session runs with none.
    spacetime_tests::poll::wait_until("rss_stat detached", LINGER * 30, || {
        rss_stat_links(agent.pid()).is_empty()
    });
    let dir = TempDir::new("no-memory-out");
    let o = dir.path().join("time.txt");
    let o_s = o.to_str().expect("a UTF-8 temp path");
    let b = Blocked::start(&agent, &["-f", "%M", "-o", o_s], "no-memory");
    let links = rss_stat_links(agent.pid());
    assert!(
        links.is_empty(),
        "a `-f %M` trace runs: rss_stat links {links:?}"
    );
    let out = b.release();
    out.assert_code(0);
    // Its peak is the kernel's own at the image's end: the workload's VmHWM.
    let text = std::fs::read_to_string(&o).unwrap_or_else(|e| panic!("{o_s}: {e}"));
    let kib: u64 = text
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("%M is not a number: {text:?}\n{}", out.context()));
    let truth = out.truth_one("touch");
    assert_rss(
        "%M through the agent, no memory over time",
        kib * 1024,
        truth.vmhwm_bytes(),
    );
    agent.stop();
}

#[test]
fn beside_a_session_with_memory_a_time_format_sessions_mms_are_not_followed() {
    let agent = Agent::start("mixed-memory");
    let with = Blocked::start(&agent, &[], "mixed-with");
    let without = Blocked::start(&agent, &["-f", "%e"], "mixed-without");
    // rss_stat runs for the first: the second's processes are told apart in the kernel.
    assert_eq!(rss_stat_links(agent.pid()).len(), 1, "rss_stat attached");
    // /proc shows cat's argv from the exec's new mm on, a little before the exec's
    // tracepoint has the agent follow it: polled until it does.
    spacetime_tests::poll::wait_for(
        "the JSON trace's cat followed",
        Duration::from_secs(30),
        || {
            followed_tgids(agent.pid())
                .contains(&(with.cat as u32))
                .then_some(())
        },
    );
    let followed = followed_tgids(agent.pid());
    assert!(
        !followed.contains(&(without.cat as u32)),
        "the `-f %e` trace's process {} is followed: {followed:?}",
        without.cat
    );
    without.release().assert_code(0);
    let out = with.release();
    out.assert_code(0);
    // The followed one's figures are still the kernel's exact ones.
    let v = out.json_value();
    assert!(
        v["totals"]["tree_peak_rss_bytes"].as_u64().unwrap_or(0) >= 16 << 20,
        "the tree's peak is the 16 MiB touched\n{}",
        out.context()
    );
    agent.stop();
}

/// The agent's perf event links now: its CPU clock program's, one per online CPU while
/// attached.
fn perf_events(pid: i32) -> usize {
    fdinfos(pid)
        .into_iter()
        .filter(|(_, text)| fdinfo_field(text, "link_type:") == Some("perf"))
        .count()
}

/// The CPU clock program runs only while a trace session that shows CPU over time is open:
/// not before, not for a `time -f` session, on every online CPU once however many sessions
/// want it, and not after the last (no linger: attaching it again takes about 0.1 ms).
#[test]
fn the_cpu_clock_ticks_only_while_a_session_shows_cpu_over_time() {
    let agent = Agent::start("cpu-clock");
    assert_eq!(perf_events(agent.pid()), 0, "ticking before any session");
    let without = Blocked::start(&agent, &["-f", "%e"], "clock-without");
    assert_eq!(
        perf_events(agent.pid()),
        0,
        "only a `-f %e` trace runs, and the CPU clock ticks"
    );
    let with = Blocked::start(&agent, &[], "clock-with");
    let ticking = perf_events(agent.pid());
    let second = Blocked::start(&agent, &[], "clock-second");
    assert_eq!(
        perf_events(agent.pid()),
        ticking,
        "a second session attached the CPU clock again"
    );
    second.release().assert_code(0);
    let out = with.release();
    out.assert_code(0);
    let cpu = &out.json_value()["timeline"]["cpu"];
    assert_eq!(cpu["method"], "ticks", "{cpu}\n{}", out.context());
    assert_eq!(
        Some(ticking as u64),
        cpu["online_cpus"].as_u64(),
        "perf events while it ran, against the CPUs online\n{cpu}"
    );
    // The JSON sessions are gone: the `-f` one alone is open.
    spacetime_tests::poll::wait_until("the CPU clock detached", LINGER * 30, || {
        perf_events(agent.pid()) == 0
    });
    without.release().assert_code(0);
    agent.stop();
}
