//! `watch --metrics` against the real consumers: a Prometheus server scraping it every second
//! and answering queries about exits the test made, `promtool check metrics` on the text
//! format, the comm limit's overflow series, and idle connections under a descriptor limit.

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use spacetime_tests::prometheus::{promtool_check, Prometheus};
use spacetime_tests::watch::{http_get, http_get_accepting, parse_openmetrics, run, Watch};
use spacetime_tests::{gate::Gate, TempDir};

/// A copy of `src` named `name` in `dir`: its exits carry `name` as their comm.
fn program(dir: &Path, src: &str, name: &str) -> PathBuf {
    assert!(name.len() <= 15, "{name} is longer than a comm");
    let to = dir.join(name);
    std::fs::copy(src, &to).unwrap_or_else(|e| panic!("copy {src} to {}: {e}", to.display()));
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    to
}

/// A short name unique to this test process.
fn name(tag: &str) -> String {
    format!("{tag}{}", std::process::id() % 1_000_000)
}

#[test]
fn a_real_prometheus_scrapes_watch() {
    let dir = TempDir::new("prom");
    let ok_name = name("pok");
    let bad_name = name("pbad");
    let ok = program(dir.path(), "/bin/true", &ok_name);
    let bad = program(dir.path(), "/bin/false", &bad_name);
    let w = Watch::new()
        .flags(["--json", "--metrics", "127.0.0.1:0", "--exe"])
        .flag(format!("{}/*", dir.path().display()))
        .start();
    let prom = Prometheus::scraping(w.metrics_addr());
    // Each run's wall, spawn to reap: a bound of its lifetime and of its CPU time.
    let mut longest = Duration::ZERO;
    for program in std::iter::repeat_n(&ok, 20).chain(std::iter::repeat_n(&bad, 5)) {
        let t0 = Instant::now();
        run(&mut Command::new(program));
        longest = longest.max(t0.elapsed());
    }
    let exits = |comm: &str, status: &str| {
        prom.scalar(&format!(
            "spacetime_watch_exits_total{{job=\"spacetime\",comm=\"{comm}\",status=\"{status}\"}}"
        ))
    };
    prom.wait_until(
        "20 ok and 5 failed exits scraped",
        Duration::from_secs(90),
        || exits(&ok_name, "ok") == Some(20.0) && exits(&bad_name, "failed") == Some(5.0),
    );
    assert_eq!(prom.scalar("up{job=\"spacetime\"}"), Some(1.0));
    // A rate needs two scrapes after the exits: wait for it rather than for a fixed time.
    let rate = format!("rate(spacetime_watch_exits_total{{comm=\"{ok_name}\"}}[1m])");
    prom.wait_until("a rate of the exits", Duration::from_secs(30), || {
        prom.scalar(&rate).is_some()
    });
    let p90 = prom
        .scalar("histogram_quantile(0.9, sum by (le) (spacetime_watch_runtime_seconds_bucket))")
        .expect("a p90 of the run times");
    // The quantile lies in a bucket holding a run, whose upper edge is at most 1.1 times that
    // run's time (eight buckets an octave from 1/1024 s; twice allowed).
    let bound = (longest.as_secs_f64() * 2.0).max(1.0 / 1024.0);
    assert!(
        p90.is_finite() && p90 > 0.0 && p90 <= bound,
        "p90 {p90} s; the longest run took {longest:?}"
    );
    let cpu = prom
        .scalar(&format!(
            "sum(spacetime_watch_cpu_seconds_total{{comm=\"{ok_name}\"}})"
        ))
        .expect("CPU seconds of the exits");
    assert!(cpu > 0.0 && cpu < 5.0, "CPU of 20 × true: {cpu} s");
    let build = prom.query("spacetime_build_info");
    assert_eq!(build.len(), 1, "{build:?}");
    assert!(
        build[0].0["version"]
            .as_str()
            .is_some_and(|v| !v.is_empty()),
        "{build:?}"
    );
    assert!(
        prom.scalar("process_resident_memory_bytes{job=\"spacetime\"}")
            .is_some_and(|b| b > 1e6),
        "no process_resident_memory_bytes"
    );
    drop(prom);
    w.interrupt().assert_clean();
}

#[test]
fn both_formats_are_clean_and_negotiated() {
    let w = Watch::new()
        .flags(["--json", "--metrics", "127.0.0.1:0"])
        .start();
    let addr = w.metrics_addr();
    run(&mut Command::new("/bin/true"));
    let (code, headers, text) = http_get_accepting(addr, "/metrics", "");
    assert_eq!(code, 200, "{text}");
    assert_eq!(
        headers.get("content-type").map(String::as_str),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let (ok, out) = promtool_check(&text);
    assert!(ok, "promtool check metrics:\n{out}\n---\n{text}");
    let (_, headers, om) = http_get(addr, "/metrics");
    assert!(
        headers
            .get("content-type")
            .is_some_and(|c| c.starts_with("application/openmetrics-text")),
        "{headers:?}"
    );
    parse_openmetrics(&om).unwrap_or_else(|e| panic!("{e}\n{om}"));
    w.interrupt().assert_clean();
}

#[test]
fn overflow_series_cannot_collide_with_a_program() {
    let dir = TempDir::new("prom-overflow");
    // Four programs for a limit of two, and one named like the overflow value as far as a comm
    // allows (15 bytes).
    let mut names: Vec<String> = (0..4).map(|i| name(&format!("ov{i}x"))).collect();
    names.push("[other programs".to_string());
    let progs: Vec<PathBuf> = names
        .iter()
        .map(|n| program(dir.path(), "/bin/true", n))
        .collect();
    let w = Watch::new()
        .flags([
            "--json",
            "--metrics",
            "127.0.0.1:0",
            "--metrics-comm-limit",
            "2",
        ])
        .flag("--exe")
        .flag(format!("{}/*", dir.path().display()))
        .start();
    let addr = w.metrics_addr();
    for p in &progs {
        run(&mut Command::new(p));
    }
    for n in &names {
        w.wait_for_stdout(&format!("\"{n}\""), Duration::from_secs(30));
    }
    let (_, _, om) = http_get(addr, "/metrics");
    let families = parse_openmetrics(&om).unwrap_or_else(|e| panic!("{e}\n{om}"));
    let exits = families
        .iter()
        .find(|f| f.name == "spacetime_watch_exits")
        .unwrap_or_else(|| panic!("no exits family\n{om}"));
    let total: f64 = exits.samples.iter().map(|s| s.value).sum();
    assert_eq!(total, 5.0, "{om}");
    let overflow = exits.value(
        "spacetime_watch_exits_total",
        &[("comm", "[other programs]"), ("status", "ok")],
    );
    assert_eq!(overflow, Some(3.0), "{om}");
    let series: std::collections::HashSet<_> = exits.samples.iter().map(|s| &s.labels).collect();
    assert_eq!(
        series.len(),
        exits.samples.len(),
        "a series appears twice\n{om}"
    );
    let (_, _, text) = http_get_accepting(addr, "/metrics", "text/plain");
    let (ok, out) = promtool_check(&text);
    assert!(ok, "promtool check metrics:\n{out}\n---\n{text}");
    w.interrupt().assert_clean();
}

/// One OpenMetrics scrape; `None` if the connection is refused or closed unanswered.
fn try_scrape(addr: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text\r\n\r\n")
        .ok()?;
    let mut resp = String::new();
    s.read_to_string(&mut resp).ok()?;
    let (head, body) = resp.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// spacetime's user + system CPU in clock ticks, from /proc.
fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    let rest = &stat[stat.rfind(')').expect("comm end") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    f[11].parse::<u64>().expect("utime") + f[12].parse::<u64>().expect("stime")
}

#[test]
fn idle_connections_neither_spin_nor_block_scrapes() {
    // Scoped to the tree of a shell that waits at a gate, without taskstats: the second
    // measured below is then the accept loop's alone, not the decoding of every exit the
    // machine (and the suite beside it) makes meanwhile.
    let gate = Gate::new("prometheus-idle-gate");
    let mut waiting = Command::new("sh");
    waiting.args(["-c", &gate.wait()]);
    let mut waiting = waiting.spawn().expect("spawning sh");
    let tree = waiting.id().to_string();
    let w = Watch::new()
        .flags(["--json", "--metrics", "127.0.0.1:0", "--no-taskstats"])
        .flags(["--pid-tree", &tree])
        .start();
    let addr = w.metrics_addr();
    // Room for 4 more descriptors, fewer than the connections served at once: accept() then
    // fails with EMFILE while connections stay queued.
    let open = std::fs::read_dir(format!("/proc/{}/fd", w.pid()))
        .expect("/proc/PID/fd")
        .count() as u64;
    let lim = libc::rlimit {
        rlim_cur: open + 4,
        rlim_max: open + 4,
    };
    // SAFETY: prlimit on a child of ours, with a valid rlimit.
    let r = unsafe { libc::prlimit(w.pid(), libc::RLIMIT_NOFILE, &lim, std::ptr::null_mut()) };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
    let idle: Vec<TcpStream> = (0..100)
        .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok())
        .collect();
    assert_eq!(idle.len(), 100, "connections opened");
    // Over one second with every descriptor taken and connections still queued, a loop that
    // retried accept() at once would burn the whole CPU.
    let before = cpu_ticks(w.pid());
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let ticks = cpu_ticks(w.pid()) - before;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let share = ticks as f64 / hz / t0.elapsed().as_secs_f64();
    assert!(
        share < 0.25,
        "watch used {:.0} % of a CPU with idle connections",
        share * 100.0
    );
    drop(idle);
    // Once they are gone, a scrape is answered (the pause after an error is at most 2 s).
    let until = Instant::now() + Duration::from_secs(60);
    let body = loop {
        if let Some(body) = try_scrape(addr) {
            break body;
        }
        assert!(
            Instant::now() < until,
            "no scrape answered after the idle connections"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let families = parse_openmetrics(&body).unwrap_or_else(|e| panic!("{e}\n{body}"));
    let refused: f64 = families
        .iter()
        .find(|f| f.name == "spacetime_watch_metrics_refused_connections")
        .map(|f| f.samples.iter().map(|s| s.value).sum())
        .unwrap_or(0.0);
    assert!(refused > 0.0, "no refused connection counted\n{body}");
    w.interrupt().assert_clean();
    gate.open();
    let st = waiting.wait().expect("waiting for sh");
    assert!(st.success(), "the shell at the gate ended with {st}");
}

#[test]
fn unit_and_container_families_pass_promtool() {
    let w = Watch::new()
        .flags(["--json", "--metrics", "127.0.0.1:0"])
        .flags(["--metrics-label", "unit", "--metrics-label", "container"])
        .flag("--metrics-histograms")
        .start();
    let addr = w.metrics_addr();
    run(&mut Command::new("/bin/true"));
    w.wait_until("an exit line", Duration::from_secs(30), |s| !s.is_empty());
    let (code, _, text) = http_get_accepting(addr, "/metrics", "");
    assert_eq!(code, 200, "{text}");
    for family in [
        "spacetime_watch_unit_exits_total",
        "spacetime_watch_container_cpu_seconds_total",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} counter")),
            "{family}:\n{text}"
        );
    }
    for family in [
        "spacetime_watch_comm_peak_rss_bytes",
        "spacetime_watch_unit_runtime_seconds",
        "spacetime_watch_container_peak_rss_bytes",
    ] {
        assert!(
            text.contains(&format!("# TYPE {family} histogram")),
            "{family}:\n{text}"
        );
    }
    let (ok, out) = promtool_check(&text);
    assert!(ok, "promtool check metrics:\n{out}\n---\n{text}");
    let (_, _, om) = http_get(addr, "/metrics");
    parse_openmetrics(&om).unwrap_or_else(|e| panic!("strict OpenMetrics parse: {e}\n{om}"));
    w.interrupt().assert_clean();
}

/// The value at rank ceil(q·n) of `v`: what a quantile of these observations is.
fn nearest_rank(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[((q * s.len() as f64).ceil() as usize).clamp(1, s.len()) - 1]
}

/// `--metrics-histograms`: p50, p90 and p99 of one program's peak RSS and of another's run
/// time, as a real Prometheus computes them from the buckets, against the truth: the
/// processes' own VmHWM, and the run times the watch reported. docs/watch.md quotes this
/// bound and the errors the `quantile-error:` lines print.
#[test]
fn quantiles_by_program_from_a_real_prometheus_are_within_ten_percent() {
    const WL: &str = env!("CARGO_BIN_EXE_st-workload");
    let dir = TempDir::new("prom-q");
    let (mem, slow) = (name("pqm"), name("pqs"));
    let m = program(dir.path(), WL, &mem);
    let s = program(dir.path(), WL, &slow);
    let w = Watch::new()
        .flags([
            "--json",
            "--metrics",
            "127.0.0.1:0",
            "--metrics-histograms",
            "--exe",
        ])
        .flag(format!("{}/*", dir.path().display()))
        .start();
    let prom = Prometheus::scraping(w.metrics_addr());
    let truth = dir.path().join("truth.jsonl");
    // 40 peaks from 2 to 80 MiB, 20 run times from 10 to 200 ms.
    for mib in (2..=80).step_by(2) {
        run(Command::new(&m)
            .args(["touch", &mib.to_string()])
            .env("ST_TRUTH", &truth));
    }
    for ms in (10..=200).step_by(10) {
        run(Command::new(&s)
            .args(["sleep", &ms.to_string()])
            .env("ST_TRUTH", "/dev/null"));
    }
    let count = |family: &str, comm: &str| {
        prom.scalar(&format!(
            "spacetime_watch_comm_{family}_count{{comm=\"{comm}\"}}"
        ))
    };
    prom.wait_until("every exit scraped", Duration::from_secs(90), || {
        count("peak_rss_bytes", &mem) == Some(40.0) && count("runtime_seconds", &slow) == Some(20.0)
    });
    let out = w.interrupt();
    out.assert_clean();
    let peaks: Vec<f64> = spacetime_tests::read_truth(&truth)
        .iter()
        .map(|t| t.vmhwm_bytes() as f64)
        .collect();
    assert_eq!(peaks.len(), 40);
    let runtimes: Vec<f64> = out
        .json_lines()
        .iter()
        .filter(|v| v["comm"] == slow.as_str())
        .map(|v| v["runtime_ns"].as_f64().expect("runtime") / 1e9)
        .collect();
    assert_eq!(runtimes.len(), 20);
    for (family, comm, truth) in [
        ("peak_rss_bytes", &mem, &peaks),
        ("runtime_seconds", &slow, &runtimes),
    ] {
        for q in [0.5, 0.9, 0.99] {
            let est = prom
                .scalar(&format!(
                    "histogram_quantile({q}, sum by (comm, le) \
                     (spacetime_watch_comm_{family}_bucket{{comm=\"{comm}\"}}))"
                ))
                .unwrap_or_else(|| panic!("no p{} of {family}", q * 100.0));
            let want = nearest_rank(truth, q);
            let err = (est - want).abs() / want;
            eprintln!(
                "quantile-error: {family} p{}: Prometheus {est:.4e}, truth {want:.4e}, {:+.2} %",
                q * 100.0,
                (est - want) / want * 100.0
            );
            assert!(
                err <= 0.10,
                "{family} p{}: Prometheus {est}, truth {want}",
                q * 100.0
            );
        }
    }
}
