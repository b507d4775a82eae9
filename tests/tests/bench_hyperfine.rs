//! `spacetime bench --export-json` against hyperfine itself (Debian's hyperfine, installed
//! by the test tools): on the same commands, every key hyperfine writes is in spacetime's
//! export with the same JSON type and unit; a consumer written to hyperfine's documented
//! format reads spacetime's export; the export matches docs/bench.schema.json.

use std::process::Command;

use serde_json::Value;
use spacetime_tests::{
    assert_rss,
    bench::{bench, Out},
    python, TempDir,
};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

/// `hyperfine -N --export-json DIR/h.json ARGS…`, `WL` replaced by the workload.
fn hyperfine(dir: &TempDir, args: &[&str]) -> Value {
    let path = dir.path().join("h.json");
    let out = Command::new("hyperfine")
        .args(["--style", "none", "-N", "--export-json"])
        .arg(&path)
        .args(args.iter().map(|a| a.replace("WL", WL)))
        .output()
        .expect("running hyperfine (cargo xtask test installs Debian's)");
    assert!(
        out.status.success(),
        "hyperfine failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&path).expect("h.json")).expect("hyperfine's JSON")
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Every key of hyperfine's `h` is in spacetime's `s`, with the same type all the way down
/// (arrays of the same length); `where` names the place for the message.
fn same_shape(h: &Value, s: &Value, at: &str) {
    match (h, s) {
        (Value::Object(h), Value::Object(s)) => {
            for (k, hv) in h {
                let sv = s
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}.{k}: hyperfine writes it, spacetime does not"));
                same_shape(hv, sv, &format!("{at}.{k}"));
            }
        }
        (Value::Array(h), Value::Array(s)) => {
            assert_eq!(h.len(), s.len(), "{at}: lengths");
            for (i, (hv, sv)) in h.iter().zip(s).enumerate() {
                same_shape(hv, sv, &format!("{at}[{i}]"));
            }
        }
        _ => assert_eq!(kind(h), kind(s), "{at}: hyperfine {h}, spacetime {s}"),
    }
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|x| x.as_f64().expect("a number"))
        .collect()
}

/// hyperfine's figures of each result are spacetime's own, in seconds: the same runs.
fn check_units(h: &Value, s: &Value) {
    let (hr, sr) = (
        h["results"].as_array().expect("h"),
        s["results"].as_array().expect("s"),
    );
    assert_eq!(hr.len(), sr.len());
    for (h, s) in hr.iter().zip(sr) {
        let walls: Vec<f64> = f64s(&s["wall_ns"]["values"])
            .iter()
            .map(|w| w / 1e9)
            .collect();
        assert_eq!(f64s(&s["times"]), walls, "times are wall_ns in seconds");
        let mean = s["mean"].as_f64().expect("mean");
        assert!((mean - s["wall_ns"]["mean"].as_f64().expect("ns") / 1e9).abs() < 1e-12);
        assert_eq!(s["memory_usage_byte"], s["peak_rss_bytes"]["values"]);
        // The same unit as hyperfine's on the same command: a second is not a millisecond
        // (a factor of 1000), whatever the machine's load (seen: 5.4 times apart, 2 runs of
        // a 10 ms command on a loaded machine).
        let ratio = mean / h["mean"].as_f64().expect("hyperfine's mean");
        assert!(
            (1.0 / 30.0..30.0).contains(&ratio),
            "{}: spacetime {mean} s, hyperfine {} s",
            s["command"],
            h["mean"]
        );
        assert_eq!(s["command"], h["command"]);
    }
}

fn export(out: &Out) -> Value {
    assert_eq!(out.code, 0, "{}", out.context());
    out.json()
}

#[test]
fn export_json_has_every_key_hyperfine_writes_in_its_units() {
    let dir = TempDir::new("hyperfine-keys");
    let cmds = ["WL touch 32", "WL touch 64"];
    let h = hyperfine(&dir, &["--runs", "3", cmds[0], cmds[1]]);
    let out = bench(WL, "bench-hf-keys", &["-N", "-r", "3"], &cmds);
    let s = export(&out);
    same_shape(&h, &s, "$");
    check_units(&h, &s);
    // memory_usage_byte (hyperfine 1.19's) is each run's exact peak.
    let truth = out.truth();
    let mem = s["results"][1]["memory_usage_byte"]
        .as_array()
        .expect("memory");
    for (i, m) in mem.iter().enumerate() {
        assert_rss(
            &format!("run {i}"),
            m.as_u64().expect("bytes"),
            truth[3 + i].vmhwm_bytes(),
        );
    }
    // A parameter scan: hyperfine's `parameters`.
    let h = hyperfine(
        &dir,
        &[
            "--runs",
            "2",
            "-P",
            "mib",
            "8",
            "24",
            "-D",
            "8",
            "WL touch {mib}",
        ],
    );
    let out = bench(
        WL,
        "bench-hf-scan",
        &["-N", "-r", "2", "-P", "mib", "8", "24", "-D", "8"],
        &["WL touch {mib}"],
    );
    let s = export(&out);
    same_shape(&h, &s, "$");
    check_units(&h, &s);
    assert_eq!(
        s["results"][2]["parameters"],
        serde_json::json!({"mib": "24"})
    );
    // One run: hyperfine's stddev is null, and so is spacetime's.
    let h = hyperfine(&dir, &["--runs", "1", cmds[0]]);
    let s = export(&bench(WL, "bench-hf-one", &["-N", "-r", "1"], &cmds[..1]));
    same_shape(&h, &s, "$");
}

#[test]
fn a_consumer_of_hyperfines_format_reads_the_export_and_it_matches_the_schema() {
    let a = bench(
        WL,
        "bench-consumer",
        &["-N", "-r", "4"],
        &["WL touch 8", "WL touch 16"],
    );
    let reference = format!("{WL} touch 1");
    let b = bench(
        WL,
        "bench-consumer-scan",
        &[
            "-r",
            "2",
            "-P",
            "n",
            "1",
            "3",
            "-n",
            "touch {n}",
            "--reference",
            &reference,
        ],
        &["WL touch {n}"],
    );
    let c = bench(
        WL,
        "bench-consumer-one",
        &["-N", "-r", "1", "-i"],
        &["WL exit 3"],
    );
    let mut files = Vec::new();
    for out in [&a, &b, &c] {
        export(out);
        let path = out.path("bench.json");
        let run = python::python_with("json", &[])
            .arg(python::script("hyperfine_consumer.py"))
            .arg(&path)
            .output()
            .expect("python3");
        assert!(
            run.status.success(),
            "the consumer refused {}: {}{}",
            path.display(),
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(String::from_utf8_lossy(&run.stdout).contains("P_05 .. P_95"));
        files.push(path);
    }
    let v = b.json();
    assert_eq!(v["results"][0]["command"], reference);
    assert_eq!(
        v["results"][2]["command"], "touch 2",
        "named, parameter substituted"
    );
    assert!(v["shell"]["spawn_wall_ns"].as_u64().expect("a shell") > 0);
    let check = python::check_json("bench.schema.json", false, &files);
    assert!(
        check.status.success(),
        "exports do not match docs/bench.schema.json:\n{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}

/// A line's painted pieces: (SGR code, text with every figure as `9`), in order.
fn painted(line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("\x1b[") {
        rest = &rest[at + 2..];
        let Some(m) = rest.find('m') else { break };
        let code = rest[..m].to_string();
        rest = &rest[m + 1..];
        if code == "0" {
            continue;
        }
        let end = rest.find("\x1b[").unwrap_or(rest.len());
        let mut text = String::new();
        for c in rest[..end].chars() {
            let c = if c.is_ascii_digit() { '9' } else { c };
            if !(c == '9' && text.ends_with('9')) {
                text.push(c);
            }
        }
        out.push((code, text.trim().to_string()));
    }
    out
}

/// The painted pieces of the lines both print: `Benchmark N`, the time and range lines, the
/// summary's first lines (hyperfine quotes the names, so those are compared by colour only).
fn colours(stdout: &str) -> Vec<Vec<(String, String)>> {
    let plain = |l: &str| {
        let mut s = String::new();
        let mut rest = l;
        while let Some(at) = rest.find("\x1b[") {
            s.push_str(&rest[..at]);
            rest = rest[at..].split_once('m').map_or("", |(_, r)| r);
        }
        s + rest
    };
    stdout
        .lines()
        .filter_map(|l| {
            let p = plain(l);
            let keep = ["Benchmark ", "  Time (", "  Range (", "Summary"]
                .iter()
                .any(|k| p.starts_with(k));
            if keep {
                Some(painted(l))
            } else if p.ends_with(" ran") || p.contains(" times faster than ") {
                Some(
                    painted(l)
                        .into_iter()
                        .map(|(c, _)| (c, String::new()))
                        .collect(),
                )
            } else {
                None
            }
        })
        .collect()
}

/// `--style` as hyperfine's, beside it on the same commands (stdout a file, as in a script):
/// colour where hyperfine colours, in its colours on the same words, none where it has none,
/// and nothing at all with `none`; `NO_COLOR` does not undo an explicit `color`, as there.
#[test]
fn style_colours_what_hyperfine_colours() {
    let commands = ["WL sleep 1", "WL sleep 20"];
    for (style, no_color) in [
        ("color", false),
        ("full", false),
        ("color", true),
        ("basic", false),
        ("nocolor", false),
        ("auto", false),
        ("none", false),
    ] {
        let mut h = Command::new("hyperfine");
        h.args(["--style", style, "-N", "-r", "3"])
            .args(commands.iter().map(|c| c.replace("WL", WL)));
        if no_color {
            h.env("NO_COLOR", "1");
        }
        let h = h.output().expect("running hyperfine");
        assert!(h.status.success(), "hyperfine --style {style}");
        let flags = ["--style", style, "-N", "-r", "3"];
        // The bench inherits the environment (the tests run one at a time).
        if no_color {
            std::env::set_var("NO_COLOR", "1");
        }
        let s = bench(WL, "bench-style", &flags, &commands);
        std::env::remove_var("NO_COLOR");
        assert_eq!(s.code, 0, "{}", s.context());
        let (hs, ss) = (
            String::from_utf8_lossy(&h.stdout).into_owned(),
            String::from_utf8_lossy(&s.stdout).into_owned(),
        );
        assert_eq!(
            ss.contains('\x1b'),
            hs.contains('\x1b'),
            "--style {style} (NO_COLOR: {no_color}): colour in one, not the other:\n{hs}\n{ss}"
        );
        assert_eq!(ss.is_empty(), hs.is_empty(), "--style {style}:\n{hs}\n{ss}");
        assert_eq!(
            colours(&ss),
            colours(&hs),
            "--style {style}: spacetime\n{ss}\nhyperfine\n{hs}"
        );
    }
}
