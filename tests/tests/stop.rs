//! The stop of a run with processes still running (`--stop-on-root-exit`): it returns at
//! CMD's exit, reaps the zombies that are spacetime's own (a double fork's grandchild is
//! adopted by spacetime, the subreaper), reports the rest as running, and reads the figures of
//! the end so that they never contradict each other while a survivor keeps growing.

use std::{collections::HashSet, time::Duration};

use serde_json::Value;
use spacetime_tests::{assert_rss, Trace, MIB, PAGE};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

fn process(v: &Value, pid: i64) -> &Value {
    v["processes"]
        .as_array()
        .expect("processes")
        .iter()
        .find(|p| p["pid"].as_i64() == Some(pid))
        .unwrap_or_else(|| panic!("pid {pid} not in the report: {}", v["processes"]))
}

/// Runs `double-fork MS` with --stop-on-root-exit; returns the report, the root's truth line,
/// the grandchild's pid, and how long after the root's exit spacetime returned.
fn double_fork(ms: u64, tag: &str) -> (Value, spacetime_tests::Truth, i64, Duration, String) {
    let running = Trace::new([WL, "double-fork", &ms.to_string()])
        .flag("--stop-on-root-exit")
        .env("RUST_LOG", "spacetime::run::run_loop=debug")
        .tag(tag)
        .spawn();
    // `elapsed` counts from just before this: the return is never placed early.
    let spawned = spacetime_tests::unix_ns();
    let out = running.wait();
    let returned = spawned + out.elapsed.as_nanos() as i64;
    out.assert_code(0);
    let ctx = out.context();
    let v = out.json_value();
    let root = out
        .truth_of("double-fork")
        .into_iter()
        .find(|t| t.str("role") == "root")
        .unwrap_or_else(|| panic!("no root truth line\n{ctx}"))
        .clone();
    let after = Duration::from_nanos((returned - root.int("exit_unix_ns")).max(0) as u64);
    let grandchild = root.int("grandchild");
    (v, root, grandchild, after, ctx)
}

#[test]
fn a_double_forked_survivor_is_reported_running_and_the_stop_is_at_cmds_exit() {
    for run in 0..spacetime_tests::repetitions(2, 1) {
        let (v, root, grandchild, after, ctx) = double_fork(3000, "stop-survivor");
        let root = root.int("pid");
        let g = process(&v, grandchild);
        assert_eq!(
            g["state"], "running",
            "run {run}: the grandchild sleeps 3 s after CMD's exit\n{ctx}"
        );
        // Not waited for: it sleeps 3 s after CMD's exit, and is reported running (above).
        // The run ends at CMD's exit: its wall is CMD's, unless the survivor's memory changed
        // after it and before spacetime read it at the end (the grandchild wakes at CMD's
        // exit and faults pages in to sleep: 0.2 ms later here, 8 ms on an emulated CPU).
        // The end is then that change, as the kernel dated it, and only the survivor and the
        // tree it is part of are dated past CMD's exit.
        let r = process(&v, root);
        let root_end = r["end_ns"].as_u64().expect("the root exited");
        let wall = v["wall_ns"].as_u64().expect("wall_ns");
        let late: Vec<(String, u64)> = dates(&v)
            .into_iter()
            .filter(|&(_, t)| t > root_end)
            .collect();
        let latest = late.iter().map(|&(_, t)| t).max().unwrap_or(root_end);
        assert_eq!(
            wall, latest,
            "run {run}: wall {wall} ns, CMD exited at {root_end} ns, dated after it: \
             {late:?}\n{ctx}"
        );
        let survivor = format!("pid {grandchild} ");
        for (what, t) in &late {
            assert!(
                what.starts_with(&survivor) || what.starts_with("tree"),
                "run {run}: {what} dated {t} ns, after CMD's exit ({root_end} ns)\n{ctx}"
            );
        }
        eprintln!(
            "survivor run {run}: returned {after:?} after CMD's exit; wall - CMD's exit {} µs",
            (wall - root_end) / 1000
        );
    }
}

#[test]
fn a_double_forked_zombie_is_reaped_by_spacetime_and_the_stop_does_not_wait_for_it() {
    // 0: the grandchild is a zombie (exited, adopted by spacetime) before CMD exits, as CMD
    // saw: reported exited, and reaped by spacetime, its parent (its free record came). 5: it
    // exits 5 ms after CMD, while spacetime waits for CMD's free record: spacetime reaps it
    // (its own) but the run stopped at CMD's exit, as the kernel dated both: running, every
    // time. Either way the stop does not wait for a zombie (it waited a whole second).
    for ms in [0, 5] {
        for run in 0..spacetime_tests::repetitions(3, 1) {
            let (v, root, grandchild, after, ctx) = double_fork(ms, "stop-zombie");
            let g = process(&v, grandchild);
            match ms {
                0 => {
                    assert_eq!(
                        root.int("grandchild_exited"),
                        1,
                        "CMD saw its grandchild exit\n{ctx}"
                    );
                    assert_eq!(g["state"], "exited", "run {run}\n{ctx}");
                }
                _ => assert_eq!(
                    g["state"], "running",
                    "run {run}: it exited after CMD: the run had stopped\n{ctx}"
                ),
            }
            // The end waits only for the release records of processes already reaped: its
            // wait ended with every record of those, or with the ones still missing (a grace
            // period longer than the wait) marked not final; never at its bound for a zombie
            // nobody reaps. Every exited process here was reaped (the zombie adopted by
            // spacetime too): those not final are the wait's missing, no more, no fewer.
            // Through an agent the agent waits, and its log is its own.
            let waits: Vec<&str> = out_lines(&ctx)
                .filter(|l| l.contains("for release records"))
                .collect();
            let own = std::env::var(spacetime_tests::agent::EXPECT_PROGRAMS_ENV).as_deref()
                != Ok("agent");
            if own {
                let last = waits.last().unwrap_or_else(|| {
                    panic!("run {run}: no wait for release records logged\n{ctx}")
                });
                let missing: usize = last
                    .rsplit_once("; ")
                    .and_then(|(_, m)| m.strip_suffix(" missing"))
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("run {run}: {last:?}"));
                let not_final = v["processes"]
                    .as_array()
                    .expect("processes")
                    .iter()
                    .filter(|p| p["state"] == "exited" && p["cpu_final"] != true)
                    .count();
                assert_eq!(
                    missing, not_final,
                    "run {run}: the end's wait missed the records of the reaped processes not \
                     final, only those: {waits:?}\n{ctx}"
                );
            }
            eprintln!(
                "zombie {ms} ms run {run}: grandchild {}, returned {after:?} after CMD's exit",
                g["state"]
            );
        }
    }
}

/// The lines of a run's context (its stderr among them).
fn out_lines(ctx: &str) -> impl Iterator<Item = &str> {
    ctx.lines().map(str::trim_end)
}

/// Every instant the report dates, in ns since its origin.
fn dates(v: &Value) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut add = |what: String, x: &Value| {
        if let Some(t) = x.as_u64() {
            out.push((what, t));
        }
    };
    for p in v["processes"].as_array().expect("processes") {
        add(format!("pid {} start", p["pid"]), &p["start_ns"]);
        add(format!("pid {} end", p["pid"]), &p["end_ns"]);
        for i in p["images"].as_array().expect("images") {
            add(format!("pid {} image start", p["pid"]), &i["start_ns"]);
            add(format!("pid {} image end", p["pid"]), &i["end_ns"]);
        }
    }
    add("tree peak".into(), &v["totals"]["tree_peak_at_ns"]);
    let tl = &v["timeline"];
    let mut series = vec![
        ("tree rss".to_string(), &tl["tree_rss"]),
        ("tree pss".to_string(), &tl["tree_pss"]),
    ];
    for p in tl["processes"].as_array().expect("timeline.processes") {
        series.push((format!("pid {} rss", p["pid"]), &p["rss"]));
        series.push((format!("pid {} pss", p["pid"]), &p["pss"]));
    }
    for (what, s) in series {
        for point in s.as_array().expect("a series") {
            add(what.clone(), &point[0]);
        }
    }
    out
}

/// Double forks whose middle processes exit as CMD does (not waited for), in 16 rows of
/// exits from CMD's exit on: across the end of the trace, some exit before spacetime's last
/// drain of the run, some between it and its read of the memory the kernel follows (their
/// last records then in the ring only), some after. Each process gets one answer: exited
/// with its exact peak, or running at the stop (CMD's exit) with its peak so far; never
/// running with no peak while its RSS is in the timeline and the tree's peak.
#[test]
fn double_forks_ending_with_cmd_give_every_process_one_answer() {
    let n = spacetime_tests::storm_size(300, 60);
    for run in 0..spacetime_tests::repetitions(6, 1) {
        let out = Trace::new([WL, "daemon-race", &n.to_string(), "16", "1", "0"])
            .flag("--stop-on-root-exit")
            .tag("stop-race")
            .run();
        out.assert_code(0);
        let ctx = out.context();
        let v = out.json_value();
        let procs = v["processes"].as_array().expect("processes");
        assert_eq!(
            procs.len(),
            1 + 2 * n,
            "run {run}: CMD, its {n} middles and their grandchildren\n{ctx}"
        );
        let tree_peak = v["totals"]["tree_peak_rss_bytes"]
            .as_u64()
            .expect("tree peak");
        // Processes whose memory the timeline counts (in the tree's sum too).
        let followed: HashSet<i64> = v["timeline"]["processes"]
            .as_array()
            .expect("timeline.processes")
            .iter()
            .filter(|s| s["rss"].as_array().is_some_and(|r| !r.is_empty()))
            .filter_map(|s| s["pid"].as_i64())
            .collect();
        for p in procs {
            one_answer(p, &followed, tree_peak, &format!("run {run}"), &ctx);
        }
        // Their peaks are exact whatever their state: each recorded its VmHWM once its
        // memory stopped changing, before CMD's exit.
        let truth = out.truth_of("daemon-race");
        let mut exited = 0;
        for t in truth
            .iter()
            .filter(|t| matches!(t.str("role"), "middle" | "root"))
        {
            let p = process(&v, i64::from(t.pid()));
            exited += usize::from(p["state"] == "exited");
            let peak = p["peak_rss_bytes"].as_u64().unwrap_or(0);
            let what = format!(
                "run {run}: {} pid {} ({})",
                t.str("role"),
                t.pid(),
                p["state"]
            );
            assert_rss(&what, peak, t.vmhwm_bytes());
        }
        assert_eq!(truth.len(), 1 + n, "run {run}: truth lines\n{ctx}");
        eprintln!(
            "race run {run}: {} of {} with truth exited, the rest running at the stop",
            exited,
            1 + n
        );
    }
}

/// One process's answer: its state, end, exit and peak agree, and memory the timeline
/// counts has a figure, within the tree's peak.
fn one_answer(p: &Value, followed: &HashSet<i64>, tree_peak: u64, run: &str, ctx: &str) {
    let pid = p["pid"].as_i64().expect("pid");
    let state = p["state"].as_str().unwrap_or("?");
    let peak = p["peak_rss_bytes"].as_u64();
    let (end, exit) = (&p["end_ns"], &p["exit"]);
    match state {
        "exited" => assert!(
            end.is_u64() && !exit.is_null() && peak.is_some(),
            "{run}: pid {pid} exited: end_ns {end}, exit {exit}, peak {peak:?}\n{ctx}"
        ),
        "running" => assert!(
            end.is_null() && exit.is_null(),
            "{run}: pid {pid} running: end_ns {end}, exit {exit}\n{ctx}"
        ),
        _ => panic!("{run}: pid {pid}: state {state}\n{ctx}"),
    }
    match peak {
        Some(b) => assert!(
            b <= tree_peak,
            "{run}: pid {pid}'s peak {b} above the tree's {tree_peak}\n{ctx}"
        ),
        None => assert!(
            p["peak_rss_unknown_reason"].is_string() && !followed.contains(&pid),
            "{run}: pid {pid} ({state}) has no peak (why: {}), yet its RSS is in the \
             timeline: {}\n{ctx}",
            p["peak_rss_unknown_reason"],
            followed.contains(&pid)
        ),
    }
}

#[test]
fn a_process_growing_at_the_stop_never_contradicts_the_report() {
    for run in 0..spacetime_tests::repetitions(6, 2) {
        let out = Trace::new([WL, "grow-at-stop", "20", "160"])
            .flag("--stop-on-root-exit")
            .flag("--cgroup-peak")
            .tag("stop-grow")
            .run();
        out.assert_code(0);
        let ctx = out.context();
        let v = out.json_value();
        let grower = out
            .truth_of("grow-at-stop")
            .into_iter()
            .find(|t| t.str("role") == "started")
            .unwrap_or_else(|| panic!("no grower truth line\n{ctx}"))
            .clone();
        let g = process(&v, grower.int("pid"));
        assert_eq!(
            g["state"], "running",
            "run {run}: the grower still grows\n{ctx}"
        );
        let peaks: Vec<(i64, u64)> = v["processes"]
            .as_array()
            .expect("processes")
            .iter()
            .map(|p| {
                (
                    p["pid"].as_i64().unwrap_or(0),
                    p["peak_rss_bytes"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        let tree = v["totals"]["tree_peak_rss_bytes"]
            .as_u64()
            .expect("tree peak");
        for &(pid, peak) in &peaks {
            assert!(
                tree >= peak,
                "run {run}: tree peak {tree} below pid {pid}'s peak {peak}\n{ctx}"
            );
        }
        let wall = v["wall_ns"].as_u64().expect("wall_ns");
        for (what, t) in dates(&v) {
            assert!(
                t <= wall,
                "run {run}: {what} dated {t} ns, after the run's end (wall {wall} ns)\n{ctx}"
            );
        }
        // The cgroup counts every page the tree charged, read after the processes' figures:
        // at least the grower's peak, less its file pages (charged to whoever read them
        // first, maybe another cgroup; the most it had is at its end).
        let cg = v["cgroup_peak"]["peak_bytes"]
            .as_u64()
            .expect("cgroup peak");
        let g_peak = g["peak_rss_bytes"].as_u64().expect("grower's peak so far");
        let done = wait_done(&out);
        let file = grower.int("rss_file_kib").max(done) as u64 * 1024;
        assert!(
            g_peak >= 20 * MIB && cg + file + 16 * PAGE >= g_peak,
            "run {run}: cgroup peak {cg} below the grower's peak {g_peak} less its {file} \
             bytes of file pages\n{ctx}"
        );
        eprintln!(
            "grow run {run}: wall {:.1} ms, tree peak {:.1} MiB, grower {:.1} MiB, cgroup {:.1} MiB",
            wall as f64 / 1e6,
            tree as f64 / MIB as f64,
            g_peak as f64 / MIB as f64,
            cg as f64 / MIB as f64
        );
    }
}

/// Waits for the grower's own end (the next run's memory and cgroup); its file pages then.
fn wait_done(out: &spacetime_tests::Outcome) -> i64 {
    let until = std::time::Instant::now() + spacetime_tests::hang_guard(Duration::from_secs(30));
    loop {
        let text = std::fs::read_to_string(out.dir.path().join("truth.jsonl")).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains("\"done\"")) {
            let v: Value = serde_json::from_str(line).expect("a truth line");
            return v["rss_file_kib"].as_i64().expect("rss_file_kib");
        }
        assert!(std::time::Instant::now() < until, "the grower never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}
