//! `trace -f` against GNU time itself (Debian's `time` package, /usr/bin/time): the same
//! workload under `/usr/bin/time` as the traced root, GNU time's `-v` output beside
//! spacetime's `-f verbose`, field by field. Exact where both read the same kernel figure
//! (page size, exit status, the fields Linux leaves at 0, blocks written); within the
//! root's own share where spacetime counts the whole tree, `/usr/bin/time` included, and GNU
//! time its children (CPU, faults, context switches); and spacetime's peak is the workload's
//! own VmHWM, where GNU time's `ru_maxrss` may be raised by the image before exec.

use std::path::Path;

use spacetime_tests::{assert_rss, TempDir, Trace};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");
const GNU_TIME: &str = "/usr/bin/time";

/// `time -v`'s lines as (label, value).
fn fields(path: &Path) -> Vec<(String, String)> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .filter(|l| l.starts_with('\t'))
        .map(|l| {
            let (k, v) = l[1..]
                .split_once(": ")
                .unwrap_or_else(|| panic!("not `label: value`: {l:?}\n{text}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn value<'a>(f: &'a [(String, String)], label: &str) -> &'a str {
    f.iter()
        .find(|(k, _)| k == label)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {label:?} in {f:?}"))
}

fn num(f: &[(String, String)], label: &str) -> f64 {
    let v = value(f, label);
    v.trim_end_matches('%')
        .parse()
        .unwrap_or_else(|_| panic!("{label}: {v:?} is not a number"))
}

/// Seconds of `m:ss.cc` (what both print under an hour).
fn clock(v: &str) -> f64 {
    let (m, s) = v.split_once(':').unwrap_or_else(|| panic!("{v:?}"));
    m.parse::<f64>().expect("minutes") * 60.0 + s.parse::<f64>().expect("seconds")
}

fn within(what: &str, got: f64, want: f64, below: f64, above: f64) {
    assert!(
        got >= want - below && got <= want + above,
        "{what}: spacetime {got}, GNU time {want} (allowed -{below} +{above})"
    );
}

/// User + system, elapsed and %P of spacetime's `-f verbose` (`s`) and GNU time's `-v` (`g`),
/// against the figures of spacetime's JSON.
fn cpu_and_elapsed(s: &[(String, String)], g: &[(String, String)], out: &spacetime_tests::Outcome) {
    // CPU and elapsed, by what each tool measures, with no allowance for speed. spacetime's
    // JSON holds each process's CPU as wait4 reports it: GNU time's children are the
    // workload, and spacetime's tree is the workload plus GNU time itself. Both print
    // hundredths, truncated, so a printed user + system lies up to 0.02 s below its figure.
    let json = out.json_value();
    let ns = |v: &serde_json::Value, k: &str| {
        v[k].as_u64().unwrap_or_else(|| panic!("{k}")) as f64 / 1e9
    };
    let workload = json["processes"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["pid"] != json["processes"][0]["pid"]))
        .unwrap_or_else(|| panic!("the workload's process\n{}", out.context()));
    let cpu =
        |f: &[(String, String)]| num(f, "User time (seconds)") + num(f, "System time (seconds)");
    const EPS: f64 = 0.001;
    let tree_cpu = ns(&json, "user_ns") + ns(&json, "sys_ns");
    within("user + system, the tree", cpu(s), tree_cpu, 0.02 + EPS, EPS);
    let workload_cpu = ns(workload, "user_ns") + ns(workload, "sys_ns");
    within(
        "GNU time's user + system, its child",
        cpu(g),
        workload_cpu,
        0.02 + EPS,
        EPS,
    );
    // GNU time's clock runs from before its fork to after its wait: it holds the workload's
    // life and is held by the root's (the tree's wall). Printed to the hundredth, truncated.
    let wall =
        |f: &[(String, String)]| clock(value(f, "Elapsed (wall clock) time (h:mm:ss or m:ss)"));
    within(
        "elapsed, the tree",
        wall(s),
        ns(&json, "wall_ns"),
        0.01 + EPS,
        EPS,
    );
    let life = ns(workload, "end_ns") - ns(workload, "start_ns");
    assert!(
        wall(g) >= life - 0.01 - EPS && wall(g) <= ns(&json, "wall_ns") + EPS,
        "GNU time's elapsed {} is not between the workload's life {life} and the tree's wall {}",
        wall(g),
        ns(&json, "wall_ns")
    );
    // %P is GNU time's formula on the JSON's figures: CPU over wall in whole milliseconds.
    let ms = |k: &str| json[k].as_u64().unwrap_or_else(|| panic!("{k}")) / 1_000_000;
    let want = (ms("user_ns") + ms("sys_ns")) * 100 / ms("wall_ns").max(1);
    assert_eq!(
        value(s, "Percent of CPU this job got"),
        format!("{want}%"),
        "%P from the JSON's user, sys and wall"
    );
}

#[test]
fn verbose_is_gnu_time_v_field_by_field() {
    let dir = TempDir::new("gnu-v");
    let gnu = dir.path().join("gnu.txt");
    let st = dir.path().join("st.txt");
    let cmd = [
        GNU_TIME.as_ref(),
        "-v".as_ref(),
        "-o".as_ref(),
        gnu.as_os_str(),
    ]
    .into_iter()
    .chain([WL, "touch", "256"].map(std::ffi::OsStr::new));
    let out = Trace::new(cmd)
        .flag("-f")
        .flag("verbose")
        .flag("-o")
        .flag(&st)
        .tag("gnu-v")
        .run();
    assert_eq!(out.code(), 0, "{}", out.context());
    let (g, s) = (fields(&gnu), fields(&st));
    let labels = |f: &[(String, String)]| f.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(labels(&s), labels(&g), "the same labels in the same order");
    assert_eq!(s.len(), 23);
    // The command: spacetime's root is /usr/bin/time, whose own command line is GNU's.
    let gcmd = value(&g, "Command being timed");
    let scmd = value(&s, "Command being timed");
    assert!(
        scmd.starts_with(&format!("\"{GNU_TIME} -v -o ")) && scmd.ends_with(&gcmd[1..]),
        "{scmd} / {gcmd}"
    );
    // Exact: the same kernel figure, or what Linux never fills.
    for l in [
        "Page size (bytes)",
        "Exit status",
        "Average shared text size (kbytes)",
        "Average unshared data size (kbytes)",
        "Average stack size (kbytes)",
        "Average total size (kbytes)",
        "Average resident set size (kbytes)",
        "Swaps",
        "Socket messages sent",
        "Socket messages received",
        "Signals delivered",
    ] {
        assert_eq!(value(&s, l), value(&g, l), "{l}");
    }
    cpu_and_elapsed(&s, &g, &out);
    // Faults and switches: the same counters, plus GNU time's own (its exec and its wait).
    let minor = "Minor (reclaiming a frame) page faults";
    within(minor, num(&s, minor), num(&g, minor), 0.0, 400.0);
    assert!(
        num(&g, minor) > 60_000.0,
        "256 MiB touched: {}",
        num(&g, minor)
    );
    let major = "Major (requiring I/O) page faults";
    within(major, num(&s, major), num(&g, major), 0.0, 20.0);
    // Taskstats records a process at its exit, before exit_mm() unmaps its 256 MiB, which
    // wait4's figures include: every preemption of that unmap is a switch GNU time counts and
    // taskstats cannot. How many depends on how busy the CPU is (CI saw 12 fewer): no lower
    // bound holds at any speed. Above, spacetime adds only GNU time's own switches.
    for l in ["Voluntary context switches", "Involuntary context switches"] {
        within(l, num(&s, l), num(&g, l), f64::INFINITY, 40.0);
    }
    // Peak: spacetime's is the workload's own VmHWM, exactly.
    let truth = out.truth.first().expect("the workload's truth line");
    let max = "Maximum resident set size (kbytes)";
    assert_rss(max, num(&s, max) as u64 * 1024, truth.vmhwm_bytes());
    within(max, num(&s, max), num(&g, max), 4096.0, 4096.0);
}

#[test]
fn io_blocks_and_status_lines_match_gnu_time() {
    // Direct I/O on the checkout's file system (not a tmpfs): storage reads and writes that
    // getrusage counts in 512-byte blocks.
    let dir = TempDir::new("gnu-io");
    let data =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gnu-io-{}", std::process::id()));
    let st = dir.path().join("st.txt");
    let script = format!(
        "dd if=/dev/zero of={d} bs=1M count=8 oflag=direct 2>/dev/null && \
         dd if={d} of=/dev/null bs=1M iflag=direct 2>/dev/null; rm -f {d}; exit 3",
        d = data.display()
    );
    // GNU time writes to its stderr (a pipe here): no file of its own whose pages it dirties.
    let cmd = [GNU_TIME, "-f", "%I %O %x", "sh", "-c", &script];
    let out = Trace::new(cmd)
        .flag("-f")
        .flag("%I %O %x")
        .flag("-o")
        .flag(&st)
        .tag("gnu-io")
        .no_json()
        .run();
    assert_eq!(out.code(), 3, "{}", out.context());
    let s = std::fs::read_to_string(&st).unwrap_or_else(|e| panic!("{}: {e}", st.display()));
    // GNU time's line about the status first, then the figures, in both.
    let status = "Command exited with non-zero status 3";
    let g = out
        .stderr
        .lines()
        .skip_while(|l| *l != status)
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(g.starts_with(status), "GNU time's lines: {}", out.context());
    assert_eq!(s.lines().next(), Some(status), "{s}");
    let figures = |t: &str| -> Vec<u64> {
        let l = t
            .lines()
            .nth(1)
            .unwrap_or_else(|| panic!("no figures: {t:?}"));
        l.split(' ')
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{l:?}")))
            .collect()
    };
    let (gf, sf) = (figures(&g), figures(&s));
    assert!(
        gf[0] >= 16384 && gf[1] >= 16384,
        "8 MiB read and written: {g}"
    );
    // The same counters, and GNU time's own (spacetime's tree holds GNU time; GNU time reports
    // its children): the pages of its binary if they were not cached, and for writes at most a
    // page (it writes to a pipe; CI once saw one page, 8 blocks, under a loaded disk).
    within("%I", sf[0] as f64, gf[0] as f64, 0.0, 256.0);
    within("%O", sf[1] as f64, gf[1] as f64, 0.0, 8.0);
    assert_eq!((sf[2], gf[2]), (3, 3), "%x");
}

/// `line` with every figure as `9` (both print figures of their own; the layout is compared).
fn layout(line: &str) -> String {
    let mut out = String::new();
    for c in line.chars() {
        let c = if c.is_ascii_digit() || c == '?' {
            '9'
        } else {
            c
        };
        if !(c == '9' && out.ends_with('9')) {
            out.push(c);
        }
    }
    out
}

/// `-f posix` is `time -p` and `-f default` GNU time given no format, line for line, when
/// CMD exits non-zero and when a signal kills it (each run beside GNU time running the same
/// command): `time -p` never says how CMD ended, GNU time's default says it first.
#[test]
fn posix_and_default_are_gnu_time_p_and_no_format() {
    let dir = TempDir::new("gnu-named");
    for (ending, code) in [("exit 3", 3), ("kill -TERM $$", 128 + 15)] {
        for (name, gnu_flag) in [("posix", Some("-p")), ("default", None)] {
            let st = dir.path().join(format!("{name}-{code}.txt"));
            let out = Trace::new(["sh", "-c", ending])
                .flag("-f")
                .flag(name)
                .flag("-o")
                .flag(&st)
                .tag("gnu-named")
                .no_json()
                .run();
            assert_eq!(out.code(), code, "{}", out.context());
            let gnu = std::process::Command::new(GNU_TIME)
                .args(gnu_flag)
                .args(["sh", "-c", ending])
                .output()
                .expect("running GNU time");
            assert_eq!(gnu.status.code(), Some(code), "GNU time's status");
            let ours = std::fs::read_to_string(&st).expect("spacetime's -o file");
            let ours: Vec<String> = ours.lines().map(layout).collect();
            let gnu: Vec<String> = String::from_utf8_lossy(&gnu.stderr)
                .lines()
                .map(layout)
                .collect();
            assert_eq!(ours, gnu, "-f {name} after `{ending}`: {}", out.context());
            let said = ours.iter().any(|l| l.starts_with("Command "));
            assert_eq!(said, name == "default", "-f {name}: {ours:?}");
        }
    }
}
