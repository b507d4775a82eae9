use super::*;
use crate::cmd::bench::{compare::compare, markup, model::testing::result};

fn layout() -> Layout {
    Layout {
        width: 80,
        cut: false,
        unit: None,
        color: false,
    }
}

fn sample() -> Vec<CommandResult> {
    let mib = 1u64 << 20;
    vec![
        result(
            "sleep 0.1 | cat",
            &[100_000_000, 102_000_000, 98_000_000],
            &[10 * mib; 3],
        ),
        result(
            "a,\"b\"\n`c`",
            &[50_000_000, 51_000_000, 49_000_000],
            &[20 * mib; 3],
        ),
    ]
}

#[test]
fn json_round_trips_with_the_issue_shape() {
    let results = sample();
    let cmp = compare(&results, None);
    let report = BenchReport {
        schema_version: SCHEMA_VERSION,
        spacetime_version: "0",
        programs: crate::kernel::provenance::Provenance::Own,
        interrupted: false,
        shell: None,
        results: &results,
        comparison: cmp.as_ref(),
    };
    let mut buf = Vec::new();
    json(&report, &mut buf).expect("json");
    let v: serde_json::Value = serde_json::from_slice(&buf).expect("valid JSON");
    let r0 = &v["results"][0];
    assert_eq!(r0["command"], "sleep 0.1 | cat");
    assert_eq!(r0["runs"], 3);
    assert_eq!(r0["exit_codes"], serde_json::json!([0, 0, 0]));
    for f in [
        "wall_ns",
        "user_ns",
        "sys_ns",
        "peak_rss_bytes",
        "tree_peak_rss_bytes",
        "processes",
    ] {
        for k in ["mean", "stddev", "median", "min", "max", "values"] {
            assert!(r0[f].get(k).is_some(), "{f}.{k} missing: {}", r0[f]);
        }
    }
    assert_eq!(r0["wall_ns"]["mean"], 100_000_000.0);
    // hyperfine's keys, in seconds.
    assert_eq!(r0["mean"], 0.1);
    assert_eq!(r0["stddev"], 0.002);
    assert_eq!(r0["median"], 0.1);
    assert_eq!(r0["min"], 0.098);
    assert_eq!(r0["max"], 0.102);
    assert_eq!(r0["user"], 0.05);
    assert_eq!(r0["times"], serde_json::json!([0.1, 0.102, 0.098]));
    assert_eq!(
        r0["memory_usage_byte"],
        serde_json::json!(vec![10u64 << 20; 3])
    );
    assert!(r0.get("parameters").is_none(), "no parameters: no key");
    assert_eq!(v["schema_version"], SCHEMA_VERSION);
    assert_eq!(r0["wall_ns"]["stddev"], 2_000_000.0);
    assert_eq!(
        r0["wall_ns"]["values"],
        serde_json::json!([100_000_000u64, 102_000_000u64, 98_000_000u64])
    );
    assert_eq!(
        v["results"][1]["command"], "a,\"b\"\n`c`",
        "exact bytes in JSON"
    );
    // The second command is the fastest, the first the smallest; the 2x memory is certain.
    assert_eq!(v["comparison"]["wall_ns"]["reference"], 1);
    assert_eq!(v["comparison"]["peak_rss_bytes"]["reference"], 0);
    let mem = &v["comparison"]["peak_rss_bytes"]["relative"][1];
    assert_eq!(
        (mem["ratio"].as_f64(), mem["significant"].as_bool()),
        (Some(2.0), Some(true))
    );
}

#[test]
fn csv_parses_back() {
    let results = sample();
    let mut buf = Vec::new();
    csv(&results, &mut buf).expect("csv");
    let mut rd = ::csv::Reader::from_reader(buf.as_slice());
    let header: Vec<String> = rd
        .headers()
        .expect("header")
        .iter()
        .map(String::from)
        .collect();
    assert_eq!(header.len(), 8 + 2 + 7 * 5 + 2);
    assert_eq!(
        header[..8],
        ["command", "mean", "stddev", "median", "user", "system", "min", "max"],
        "hyperfine's columns first"
    );
    let col = |name: &str| header.iter().position(|h| h == name).expect(name);
    let rows: Vec<::csv::StringRecord> = rd.records().map(|r| r.expect("row")).collect();
    assert_eq!(rows.len(), 2);
    assert_eq!(&rows[1][col("command")], "a,\"b\"\n`c`", "quoted and exact");
    assert_eq!(&rows[0][col("runs")], "3");
    assert_eq!(&rows[0][col("mean")], "0.1");
    let mean: f64 = rows[0][col("wall_ns_mean")].parse().expect("number");
    assert_eq!(mean, 100_000_000.0);
    let peak: u64 = rows[1][col("peak_rss_bytes_max")].parse().expect("number");
    assert_eq!(peak, 20 << 20);
    assert_eq!(&rows[0][col("failed_runs")], "0");
}

#[test]
fn markdown_is_one_table_row_per_command() {
    let results = sample();
    let cmp = compare(&results, None);
    let opts = markup::Options { by_time: false };
    let text = markup::table(
        markup::Dialect::Markdown,
        &results,
        cmp.as_ref(),
        &opts,
        &layout(),
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    // Every row has the header's cells: a `|` inside a command is escaped.
    let cells = |l: &str| l.replace("\\|", "").matches('|').count();
    for l in &lines {
        assert_eq!(cells(l), cells(lines[0]), "{l}");
    }
    assert!(lines[2].starts_with("| `sleep 0.1 \\| cat` | 100.0 ± 2.0 | 98.0 | 102.0 | 2.00 ± "));
    assert!(
        lines[3].contains("| 50.0 ± 1.0 | 49.0 | 51.0 | 1.00 | 20.00 ± 0.00 |"),
        "{}",
        lines[3]
    );
    // The newline inside the second command is escaped: the row stays one line.
    assert!(lines[3].contains("\\n"), "{}", lines[3]);
}

#[test]
fn csv_keeps_bytes_that_are_not_utf8() {
    let mut r = result("x", &[1], &[4096]);
    r.text = b"printf \xff\n".to_vec();
    let mut buf = Vec::new();
    csv(&[r], &mut buf).expect("csv");
    let mut rd = ::csv::Reader::from_reader(buf.as_slice());
    let row = rd.byte_records().next().expect("a row").expect("parses");
    assert_eq!(&row[8], b"printf \xff\n", "command_line, exact");
}

#[test]
fn asciidoc_and_orgmode_are_hyperfine_s_layouts() {
    let results = sample();
    let cmp = compare(&results, None);
    let opts = markup::Options { by_time: true };
    let a = markup::table(
        markup::Dialect::AsciiDoc,
        &results,
        cmp.as_ref(),
        &opts,
        &layout(),
    );
    assert!(
        a.starts_with("[cols=\"<,>,>,>,>,>,>,>,>\"]\n|===\n| Command \n| Mean [ms] "),
        "{a}"
    );
    assert!(a.ends_with("|===\n"), "{a}");
    // By mean time: the faster second command first.
    assert!(
        a.find("| `a,").expect("second") < a.find("| `sleep").expect("first"),
        "{a}"
    );
    let o = markup::table(
        markup::Dialect::OrgMode,
        &results,
        cmp.as_ref(),
        &opts,
        &layout(),
    );
    let lines: Vec<&str> = o.lines().collect();
    assert!(
        lines[0].starts_with("| Command  |  Mean [ms] |  Min [ms] |"),
        "{o}"
    );
    assert_eq!(lines[1], "|--+--+--+--+--+--+--+--+--|");
    assert!(
        lines[3].starts_with("| =sleep 0.1 \\| cat=  |  100.0 ± 2.0 |"),
        "{o}"
    );
}

#[test]
fn parameters_are_hyperfine_s_key_and_columns() {
    let mut results = sample();
    for (i, r) in results.iter_mut().enumerate() {
        r.hyperfine.parameters = [("j".to_string(), (i + 1).to_string())].into();
    }
    let mut buf = Vec::new();
    csv(&results, &mut buf).expect("csv");
    let text = String::from_utf8(buf).expect("utf8");
    let header = text.lines().next().expect("header");
    assert!(
        header.starts_with(
            "command,mean,stddev,median,user,system,min,max,parameter_j,command_line,"
        ),
        "{header}"
    );
    let v = serde_json::to_value(&results[1]).expect("json");
    assert_eq!(v["parameters"], serde_json::json!({"j": "2"}));
}
