//! rss_stat through the agent: attached while a trace session needs it, and for a short
//! linger after the last one. Attached again within a grace period of its detach, a
//! tracepoint's first probe waits for that grace period (15-25 ms that the agent served no
//! one: every back-to-back trace paid it). Once the agent is idle it goes: no program runs
//! on every RSS change of a machine nobody traces. Seen from the kernel: the agent's own
//! link descriptors, as /proc/PID/fdinfo names them.

use std::time::{Duration, Instant};

use spacetime_tests::agent::Agent;
use spacetime_tests::Trace;

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// How long after its last session the agent keeps rss_stat (the agent's `RSS_LINGER`).
const LINGER: Duration = Duration::from_secs(2);

/// The ids of the agent's raw-tracepoint links on rss_stat.
fn rss_stat_links(pid: i32) -> Vec<u64> {
    let dir = format!("/proc/{pid}/fdinfo");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{dir}: {e}"));
    let mut ids = Vec::new();
    for entry in entries.map_while(Result::ok) {
        // A descriptor closed since the listing has no fdinfo: not a link then.
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
        };
        if field("tp_name:").as_deref() == Some("rss_stat") {
            let id = field("link_id:").and_then(|v| v.parse().ok());
            ids.push(
                id.unwrap_or_else(|| panic!("{}: no link_id\n{text}", entry.path().display())),
            );
        }
    }
    ids
}

#[test]
fn rss_stat_stays_between_back_to_back_traces_and_leaves_an_idle_agent() {
    let agent = Agent::start("linger");
    assert_eq!(
        rss_stat_links(agent.pid()),
        Vec::<u64>::new(),
        "rss_stat attached before any session"
    );
    let mut links = Vec::new();
    let mut judged = 0;
    let mut last_end: Option<Instant> = None;
    for run in 0..4 {
        let out = Trace::new([WL, "touch", "8"])
            .through(&agent)
            .tag("linger")
            .run();
        out.assert_code(0);
        let ended = Instant::now();
        let v = out.json_value();
        assert!(
            v["totals"]["tree_peak_rss_bytes"].as_u64().unwrap_or(0) >= 8 << 20,
            "run {run}: the tree's peak is the 8 MiB touched\n{}",
            out.context()
        );
        let now = rss_stat_links(agent.pid());
        // Each check within half the linger of the trace's end (an emulated CPU may be
        // slower): one link, the same one as at the last trace's end.
        if ended.elapsed() < LINGER / 2 {
            assert_eq!(
                now.len(),
                1,
                "run {run}: rss_stat links at the end: {now:?}"
            );
            if let (Some(prev), Some(t)) = (links.last(), last_end) {
                if t.elapsed() < LINGER / 2 {
                    assert_eq!(
                        now.first(),
                        Some(prev),
                        "run {run}: rss_stat was attached again between back-to-back traces"
                    );
                    judged += 1;
                }
            }
        }
        links.extend(now.first().copied());
        last_end = Some(Instant::now());
    }
    assert!(
        judged > 0,
        "no two traces ran within {:?} of each other: nothing judged",
        LINGER / 2
    );
    // Then detached: the agent's loop looks at least every 50 ms.
    let deadline = Instant::now() + LINGER + Duration::from_secs(8);
    loop {
        let now = rss_stat_links(agent.pid());
        if now.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rss_stat still attached {:?} after the last trace: {now:?}",
            LINGER + Duration::from_secs(8)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    agent.stop();
}
