//! The tree-wide maximum PSS against the truth: the processes' own PSS (smaps_rollup, the
//! kernel's figure) read by themselves at the peak moment, and the tree's distinct pages (the
//! peak of a memory cgroup of the run's own, `--cgroup-peak`). One figure, within 5 % of the
//! truth, never above the distinct pages by more than 1 %, the maximum of the series it
//! summarises. Workloads: a 1 GiB touch read at once, st's fillfill, a copy-on-write fork
//! whose child reads (or writes) all it inherited, a Python fork pool, a JVM.

use std::{os::fd::AsRawFd, path::Path, process::Command};

use spacetime_tests::{
    pss_rounds::{held, until_known},
    u64_at, Outcome, TempDir, Trace, MIB,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// What a run's maximum PSS was made of, for a failure: the run, the tree's series, each
/// process's reads and the rounds.
fn made_of(out: &Outcome, v: &serde_json::Value) -> String {
    let tl = &v["timeline"];
    format!(
        "{}\ntree_pss: {}\nreads: {}\nsampling: {}",
        out.context(),
        tl["tree_pss"],
        tl["processes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| format!("pid {} {}", p["pid"], p["pss"]))
            .collect::<Vec<_>>()
            .join("; "),
        tl["pss_sampling"]
    )
}

/// Checks the run's maximum PSS against `truth` (bytes): the one figure, trusted, the series'
/// maximum, within 5 % of the truth and at most 1 % above the cgroup's peak.
fn check(out: &Outcome, truth: u64, what: &str) {
    out.assert_code(0);
    let v = out.json_value();
    let tl = &v["timeline"];
    let ctx = made_of(out, &v);
    let figure = v["totals"]["max_pss_bytes"].as_u64().unwrap_or_else(|| {
        panic!(
            "{what}: no max PSS ({}): {}\n{ctx}",
            v["totals"]["max_pss_unknown_reason"], v["timeline"]["max_pss"]
        )
    });
    assert_eq!(tl["max_pss"]["trusted"], true, "{what}: {}", tl["max_pss"]);
    assert_eq!(u64_at(tl, &["max_pss", "bytes"]), figure, "{what}");
    let series_max = tl["tree_pss"]
        .as_array()
        .expect("tree_pss")
        .iter()
        .filter_map(|p| p[1].as_u64())
        .max();
    assert_eq!(
        series_max,
        Some(figure),
        "{what}: max_pss_bytes is the maximum of the tree_pss series"
    );
    let cgroup = u64_at(&v, &["cgroup_peak", "peak_bytes"]);

    let off = (figure as f64 - truth as f64) / truth as f64;
    let over = (figure as f64 - cgroup as f64) / cgroup as f64;
    eprintln!(
        "{what}: max PSS {:.1} MiB, truth {:.1} MiB ({:+.1} %), cgroup {:.1} MiB ({:+.1} %), tree RSS peak {:.1} MiB; {}",
        figure as f64 / MIB as f64,
        truth as f64 / MIB as f64,
        100.0 * off,
        cgroup as f64 / MIB as f64,
        100.0 * over,
        u64_at(&v, &["totals", "tree_peak_rss_bytes"]) as f64 / MIB as f64,
        tl["pss_sampling"]
    );
    assert!(
        off.abs() <= 0.05,
        "{what}: max PSS {figure} is not within 5 % of the truth {truth}\n{ctx}"
    );
    assert!(
        over <= 0.01,
        "{what}: max PSS {figure} above the tree's distinct pages (cgroup peak {cgroup}) by more than 1 %\n{ctx}"
    );
}

/// The copy-on-write workload's size and how long it holds its peak: 160 MiB held 1.5 s (a
/// round of the two processes is ~4 ms of CPU on an idle machine, one per 200 ms at 2 % of a
/// CPU, and dearer beside the other tests' JVM and 1 GiB touch: a 500 ms hold once saw no
/// round between the one just after the fork and the parent's exit, so the maximum was
/// rightly untrusted); where programs start slowly (an emulated CPU: reading 320 MiB of page
/// tables there costs over 100 ms of CPU, five seconds of the sampling budget) 80 MiB held 5 s
/// (smaller, the tree's share of libc, charged to another cgroup, is 1 % of it).
fn cow_size() -> (String, u64) {
    let start_ms = (0..3)
        .map(|_| {
            let t = std::time::Instant::now();
            let ok = Command::new(WL)
                .arg("noop")
                .status()
                .expect("st-workload noop");
            assert!(ok.success(), "st-workload noop");
            t.elapsed().as_secs_f64() * 1e3
        })
        .fold(f64::MAX, f64::min);
    let (mib, ms) = if start_ms < 8.0 {
        (160, 1500)
    } else {
        (80, 5000)
    };
    (mib.to_string(), ms)
}

fn trace(cmd: &[&str], tag: &str) -> Outcome {
    // The program's own file pages, charged to the run's cgroup as PSS counts them.
    evict(&[Path::new(cmd[0])]);
    Trace::new(cmd).flag("--cgroup-peak").tag(tag).run()
}

fn kib_sum(out: &Outcome, mode: &str) -> u64 {
    out.truth_of(mode)
        .iter()
        .map(|t| t.int("pss_kib") as u64 * 1024)
        .sum()
}

#[test]
fn a_1_gib_touch_read_at_its_peak() {
    // 1 GiB here; a quarter of it under an emulated CPU, where touching it is 100 times
    // slower and a round reads the same page tables.
    let mib = spacetime_tests::repetitions(1024, 256).to_string();
    for run in 0..spacetime_tests::repetitions(3, 1) {
        // Held 300 ms at its peak at first: a round of a 1 GiB process costs ~7 ms, so at 2 %
        // of a CPU the first may come later, and a process that exits at its peak can end the
        // run before any round (then the figure is rightly unknown: held longer).
        let what = format!("{mib} MiB touch, run {run}");
        let out = held(300, &what, |hold| {
            trace(&[WL, "pss-touch", &mib, hold], "pss-touch")
        });
        check(&out, kib_sum(&out, "pss-touch"), &what);
    }
}

#[test]
fn st_fillfill_is_the_childs_fill_and_its_waiting_parent() {
    for run in 0..spacetime_tests::repetitions(2, 1) {
        let what = format!("fillfill 256 MiB, run {run}");
        let out = until_known(&what, |_| {
            trace(&[WL, "pss-fillfill", "256"], "pss-fillfill")
        });
        let truth = out.truth_of("pss-fillfill");
        let of = |role: &str| {
            truth
                .iter()
                .find(|t| t.str("role") == role)
                .unwrap_or_else(|| panic!("no {role} truth line"))
        };
        let (parent, child) = (of("parent"), of("child"));
        let at_child = (child.int("pss_kib") + child.int("parent_pss_kib")) as u64 * 1024;
        let truth = at_child.max(parent.int("pss_kib") as u64 * 1024);
        check(&out, truth, &what);
    }
}

#[test]
fn a_fork_whose_child_reads_what_it_inherited_counts_it_once() {
    for run in 0..spacetime_tests::repetitions(3, 1) {
        let (mib, hold) = cow_size();
        let what = format!("COW read, run {run}");
        let out = held(hold, &what, |hold| {
            trace(&[WL, "pss-cow", &mib, "read", hold], "pss-cow-read")
        });
        check(&out, kib_sum(&out, "pss-cow"), &what);
    }
}

#[test]
fn a_fork_whose_child_writes_what_it_inherited_counts_it_twice() {
    for run in 0..spacetime_tests::repetitions(3, 1) {
        let (mib, hold) = cow_size();
        let what = format!("COW write, run {run}");
        let out = held(hold, &what, |hold| {
            trace(&[WL, "pss-cow", &mib, "write", hold], "pss-cow-write")
        });
        check(&out, kib_sum(&out, "pss-cow"), &what);
    }
}

/// A copy-on-write write moves no RSS counter, so a maximum reached by writing what a fork
/// shares is seen only by a round that comes while it is held. Rounds are spaced here so the
/// write and a short hold may fall between them (at any speed some runs do, some do not): a
/// maximum is trusted only when within 5 % of the truth, and one withheld says a bound that
/// covers the truth. A starved guest once reported 106 MiB, trusted, for 161 MiB.
///
/// The workload runs from a copy of its own: the bound covers what the tree's own figures
/// can tell (docs/trace.md), and the other tests' runs of the same file, ending meanwhile,
/// raised the tree's share of its pages with no figure of the tree moving: the bound fell
/// 3-9 KiB short of the truth, beyond the 2 KiB the truth's reads may differ by, once in a
/// whole suite and in 2 of 240 runs with two other loops of it beside.
#[test]
fn a_maximum_no_round_saw_is_never_trusted() {
    let (mib, _) = cow_size();
    let own = TempDir::new("pss-cow-own-copy");
    let wl = own.path().join("st-workload");
    std::fs::copy(WL, &wl).expect("a copy of st-workload");
    let wl = wl.to_str().expect("a UTF-8 temporary path");
    let (mut trusted, mut withheld) = (0, 0);
    for (run, interval) in ["300", "1000", "3000"].iter().enumerate() {
        let out = Trace::new([wl, "pss-cow", &mib, "write", "300"])
            .flag("--pss-interval")
            .flag(interval)
            .tag("pss-cow-unseen")
            .run();
        out.assert_code(0);
        let truth = kib_sum(&out, "pss-cow") as f64;
        let v = out.json_value();
        let m = &v["timeline"]["max_pss"];
        let what = format!("COW write, rounds {interval} ms apart, run {run}: {m}");
        if m.is_null() {
            // No round at all: nothing is claimed.
            continue;
        }
        let bytes = u64_at(m, &["bytes"]) as f64;
        let unseen = u64_at(m, &["unseen_bytes"]) as f64;
        eprintln!("{what}; truth {truth}");
        if m["trusted"] == true {
            trusted += 1;
            assert!(
                (bytes - truth).abs() <= 0.05 * truth,
                "{what}: trusted, {bytes} against the truth {truth}\n{}",
                out.context()
            );
        } else {
            withheld += 1;
            // A bound: the truth's two reads (kB each) are the slack, nothing more.
            assert!(
                bytes + unseen + 2048.0 >= truth,
                "{what}: withheld, but its bound {} is below the truth {truth}\n{}",
                bytes + unseen,
                made_of(&out, &v)
            );
            assert!(
                v["totals"]["max_pss_unknown_reason"].is_string(),
                "{what}: withheld without a reason"
            );
        }
    }
    eprintln!("trusted {trusted}, withheld {withheld}");
}

/// Drops these files (directories: every file under them) from the page cache, so the run
/// that maps them next brings them in and is charged for them: the cgroup's peak then counts
/// them as the tree's distinct pages, as PSS does (a file mapped by a running process stays).
fn evict(paths: &[&Path]) {
    fn walk(p: &Path, n: &mut usize) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                walk(&e.path(), n);
            }
        } else if let Ok(f) = std::fs::File::open(p) {
            // SAFETY: advice on a descriptor we own.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            *n += 1;
        }
    }
    let mut n = 0;
    for p in paths {
        walk(p, &mut n);
    }
    assert!(n > 0, "nothing to evict in {paths:?}");
}

fn which(program: &str) -> std::path::PathBuf {
    let out = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .expect("sh");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !path.is_empty(),
        "{program} not found (cargo xtask test installs it)"
    );
    std::fs::canonicalize(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A pool of forked Python workers (multiprocessing, fork): the parent holds 40 MiB of
/// small objects whose reference counts every worker writes when it reads them (Python's
/// copy-on-write breaks), and each worker allocates 20 MiB. All meet at the peak, each reads
/// its own PSS, then they hold 1 s.
const POOL_PY: &str = r#"
import json, multiprocessing as mp, os, sys, time
N, PARENT_MIB, WORKER_MIB, HOLD_MS = (int(a) for a in sys.argv[1:5])

def pss_kib():
    with open('/proc/self/smaps_rollup') as f:
        for line in f:
            if line.startswith('Pss:'):
                return int(line.split()[1])
    return -1

def record(role, pss):
    with open(os.environ['ST_TRUTH'], 'a') as f:
        f.write(json.dumps({'mode': 'py-pool', 'role': role, 'pid': os.getpid(), 'pss_kib': pss}) + '\n')

data = [str(i) * 8 for i in range(PARENT_MIB * 1024 * 1024 // 96)]

def work(at_peak, read):
    total = sum(len(s) for s in data)
    mine = b'w' * (WORKER_MIB << 20)
    at_peak.wait()
    pss = pss_kib()
    read.wait()
    time.sleep(HOLD_MS / 1000)
    record('worker', pss)
    return total + len(mine)

if __name__ == '__main__':
    ctx = mp.get_context('fork')
    at_peak, read = ctx.Barrier(N + 1), ctx.Barrier(N + 1)
    workers = [ctx.Process(target=work, args=(at_peak, read)) for _ in range(N)]
    for w in workers:
        w.start()
    at_peak.wait()
    pss = pss_kib()
    read.wait()
    record('parent', pss)
    for w in workers:
        w.join()
    sys.exit(max(w.exitcode for w in workers))
"#;

/// The system's Python (Debian's /usr/bin/python3, else the first on PATH), and the files
/// it maps or reads: the executable and its standard library.
fn python() -> (std::path::PathBuf, Vec<std::path::PathBuf>) {
    let python = match Path::new("/usr/bin/python3").exists() {
        true => std::path::PathBuf::from("/usr/bin/python3"),
        false => which("python3"),
    };
    let out = Command::new(&python)
        .args([
            "-c",
            "import sys, sysconfig; print(sys.executable); print(sysconfig.get_paths()['stdlib'])",
        ])
        .output()
        .expect("python3");
    let files = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| std::fs::canonicalize(l.trim()).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    (python, files)
}

#[test]
fn a_python_fork_pool() {
    let dir = TempDir::new("pss-py");
    let script = dir.path().join("pool.py");
    std::fs::write(&script, POOL_PY).expect("write pool.py");
    let (python, files) = python();
    let files: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    for run in 0..spacetime_tests::repetitions(2, 1) {
        let what = format!("Python fork pool, run {run}");
        let out = held(1000, &what, |hold| {
            evict(&files);
            trace(
                &[
                    python.to_str().expect("utf-8"),
                    script.to_str().expect("utf-8"),
                    "4",
                    "40",
                    "20",
                    hold,
                ],
                "pss-py",
            )
        });
        assert_eq!(
            out.truth_of("py-pool").len(),
            5,
            "parent and 4 workers\n{}",
            out.context()
        );
        check(&out, kib_sum(&out, "py-pool"), &what);
    }
}

/// A JVM with a 256 MiB heap touched at start, which allocates 100 MiB in it, reads its own
/// PSS, holds 1 s.
const PEAK_JAVA: &str = r#"
import java.io.FileWriter;
import java.nio.file.Files;
import java.nio.file.Path;

public class Peak {
    public static void main(String[] args) throws Exception {
        int mib = Integer.parseInt(args[0]);
        byte[][] blocks = new byte[mib][];
        for (int i = 0; i < mib; i++) {
            blocks[i] = new byte[1 << 20];
            for (int j = 0; j < blocks[i].length; j += 4096) {
                blocks[i][j] = 1;
            }
        }
        long pss = -1;
        for (String line : Files.readAllLines(Path.of("/proc/self/smaps_rollup"))) {
            if (line.startsWith("Pss:")) {
                pss = Long.parseLong(line.split("\\s+")[1]);
            }
        }
        Thread.sleep(Long.parseLong(args[1]));
        try (FileWriter w = new FileWriter(System.getenv("ST_TRUTH"), true)) {
            w.write("{\"mode\":\"jvm\",\"pid\":" + ProcessHandle.current().pid()
                + ",\"pss_kib\":" + pss + ",\"blocks\":" + blocks.length + "}\n");
        }
    }
}
"#;

#[test]
fn a_jvm_with_a_256_mib_heap() {
    let dir = TempDir::new("pss-jvm");
    std::fs::write(dir.path().join("Peak.java"), PEAK_JAVA).expect("write Peak.java");
    let javac = Command::new(which("javac"))
        .arg("-d")
        .arg(dir.path())
        .arg(dir.path().join("Peak.java"))
        .output()
        .expect("javac");
    assert!(javac.status.success(), "javac: {javac:?}");
    let java = which("java");
    // The JDK's home: its libraries and class modules, mapped by the JVM.
    let home = java.parent().and_then(Path::parent).expect("JDK home");
    let classes = dir.path().to_str().expect("utf-8");
    for run in 0..spacetime_tests::repetitions(2, 1) {
        let what = format!("JVM 256 MiB heap, run {run}");
        let out = held(1000, &what, |hold| {
            evict(&[home]);
            trace(
                &[
                    java.to_str().expect("utf-8"),
                    "-Xms256m",
                    "-Xmx256m",
                    "-XX:+AlwaysPreTouch",
                    "-cp",
                    classes,
                    "Peak",
                    "100",
                    hold,
                ],
                "pss-jvm",
            )
        });
        check(&out, kib_sum(&out, "jvm"), &what);
    }
}

/// A spawn pool whose workers touch 50 MiB and free it at once: a worker's own points may come
/// after the tree's sum already holds its change (3 of 16 runs on a busy machine once showed a
/// trusted max PSS 6-16 % above the tree's peak RSS).
const SPAWN_PY: &str = r#"
import multiprocessing as mp, sys
def work(i):
    b = bytearray(50 << 20)
    for j in range(0, len(b), 4096):
        b[j] = 1
    return len(b)
if __name__ == '__main__':
    with mp.get_context('spawn').Pool(4) as p:
        sys.exit(0 if sum(p.map(work, range(16))) == 16 * (50 << 20) else 1)
"#;

/// The kernel's bound: a PSS never exceeds the RSS of the same moment, nor so the tree's peak
/// RSS up to then. Every point of the tree's PSS series against that peak, and the maximum
/// against the run's.
#[test]
fn the_tree_pss_never_exceeds_the_trees_peak_rss_up_to_then() {
    let dir = TempDir::new("pss-spawn");
    let script = dir.path().join("spawn.py");
    std::fs::write(&script, SPAWN_PY).expect("write spawn.py");
    let (python, _) = python();
    for run in 0..spacetime_tests::repetitions(4, 1) {
        let out = Trace::new([
            python.to_str().expect("utf-8"),
            script.to_str().expect("utf-8"),
        ])
        .tag("pss-spawn")
        .run();
        out.assert_code(0);
        let v = out.json_value();
        let tl = &v["timeline"];
        let pairs = |k: &str| -> Vec<(u64, u64)> {
            tl[k]
                .as_array()
                .unwrap_or_else(|| panic!("timeline.{k}"))
                .iter()
                .filter_map(|p| Some((p[0].as_u64()?, p[1].as_u64()?)))
                .collect()
        };
        let (rss, pss) = (pairs("tree_rss"), pairs("tree_pss"));
        assert!(
            !pss.is_empty(),
            "run {run}: no PSS series\n{}",
            out.context()
        );
        // The tree's RSS comes at a bounded rate, but each new maximum of it dated when it
        // happened: its peak up to any moment is exact.
        let mut peak_so_far = 0;
        let mut next = rss.iter().peekable();
        for &(t, p) in &pss {
            while let Some(&&(rt, r)) = next.peek() {
                if rt > t {
                    break;
                }
                peak_so_far = peak_so_far.max(r);
                next.next();
            }
            assert!(
                p <= peak_so_far,
                "run {run}: tree PSS {p} above the tree's peak RSS {peak_so_far} up to {t} ns\n{}",
                out.context()
            );
        }
        let peak = u64_at(&v, &["totals", "tree_peak_rss_bytes"]);
        let max = u64_at(tl, &["max_pss", "bytes"]);
        assert!(
            max <= peak,
            "run {run}: max PSS {max} above the tree's peak RSS {peak}"
        );
        eprintln!(
            "spawn pool run {run}: max PSS {:.1} MiB ({}), tree peak RSS {:.1} MiB",
            max as f64 / MIB as f64,
            tl["max_pss"]["trusted"],
            peak as f64 / MIB as f64
        );
    }
}
