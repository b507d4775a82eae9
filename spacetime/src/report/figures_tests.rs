use super::*;

const MIB_US: u64 = 1_000_000;

/// A confirmed process: `mib` MiB held over `cpu_us` of CPU.
fn held(mib: u64, cpu_us: u64) -> ProcessTaskstats {
    ProcessTaskstats {
        utime_us: cpu_us / 2,
        stime_us: cpu_us - cpu_us / 2,
        coremem_mib_us: Some(mib * cpu_us),
        ..ProcessTaskstats::default()
    }
}

fn mean(sums: &Sums) -> Result<u64, Unknown> {
    sums.value(&FIGURES[0])
}

#[test]
fn the_table_names_each_key_and_letter_once() {
    let mut keys: Vec<&str> = FIGURES.iter().map(|f| f.key).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), FIGURES.len());
    let mut letters: Vec<char> = FIGURES.iter().filter_map(|f| f.letter).collect();
    letters.sort_unstable();
    letters.dedup();
    assert_eq!(
        letters.len(),
        FIGURES.iter().filter(|f| f.letter.is_some()).count()
    );
    for f in FIGURES.iter().filter(|f| !f.places.is_empty()) {
        assert!(f.key.ends_with(f.unit.suffix()), "{}", f.key);
        assert!(!f.meaning.is_empty() && !f.checked.is_empty(), "{}", f.key);
    }
    assert_eq!(FIGURES[0].reason_key(), "mean_rss_on_cpu_unknown_reason");
}

#[test]
fn a_mean_weighs_each_process_by_its_cpu() {
    let mut one = Sums::default();
    one.add(Some(&held(96, 1_000_000)));
    assert_eq!(mean(&one), Ok(96 * MIB));
    // 10 MiB for 3 s and 50 MiB for 1 s: 20 MiB on average over the 4 s.
    let mut two = Sums::default();
    two.add(Some(&held(10, 3 * MIB_US)));
    two.add(Some(&held(50, MIB_US)));
    two.add(None);
    assert_eq!(mean(&two), Ok(20 * MIB));
}

#[test]
fn a_null_mean_says_why() {
    assert_eq!(mean(&Sums::default()), Err(Unknown::NotConfirmed));
    let mut idle = Sums::default();
    idle.add(Some(&held(5, 0)));
    assert_eq!(mean(&idle), Err(Unknown::NoCpu));
    let mut old = Sums::default();
    old.add(Some(&ProcessTaskstats {
        utime_us: 7,
        ..ProcessTaskstats::default()
    }));
    assert_eq!(mean(&old), Err(Unknown::NotKept));
    let json = serde_json::to_string(&Json {
        sums: Ok(idle),
        place: Place::Process,
    })
    .unwrap();
    assert_eq!(
        json,
        r#"{"mean_rss_on_cpu_bytes":null,"mean_rss_on_cpu_unknown_reason":"taskstats counted no CPU time (less than a tick)"}"#
    );
}

#[test]
fn letter_counts_sum_as_gnu_time_did() {
    let t = ProcessTaskstats {
        majflt: 2,
        read_bytes: 1023,
        write_bytes: 4096,
        cancelled_write_bytes: 1024,
        ..ProcessTaskstats::default()
    };
    let mut s = Sums::default();
    s.add(Some(&t));
    s.add(Some(&t));
    let of = |l| s.value(Figure::by_letter(l).unwrap());
    // Blocks per process, then summed: 1023 bytes are 1 block each.
    assert_eq!((of('F'), of('I'), of('O')), (Ok(4), Ok(2), Ok(12)));
}

fn repo_file(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(name)
}

/// docs/json.md's table of the figures, as the declaration writes it.
fn docs_table() -> String {
    let mut out = String::from(
        "| figure | unit | written for | definition | from | `-f` | `diff` | checked against |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for f in FIGURES.iter().filter(|f| !f.places.is_empty()) {
        let places: Vec<&str> = f
            .places
            .iter()
            .map(|p| match p {
                Place::Process => "each process",
                Place::Program => "each program (`by_program`)",
                Place::Tree => "the tree (`totals`)",
            })
            .collect();
        out.push_str(&format!(
            "| `{}` | {} | {} | {} (null: `{}`) | {} | {} | {} | {} |\n",
            f.key,
            match f.unit {
                Unit::Bytes => "bytes",
                Unit::Count => "count",
            },
            places.join(", "),
            f.meaning,
            f.reason_key(),
            f.source,
            f.letter.map_or("—".into(), |l| format!("`%{l}` (KiB)")),
            if f.diff { "yes" } else { "no" },
            f.checked
        ));
    }
    out
}

/// docs/json.md holds the table between its markers; `SPACETIME_WRITE_DOCS=1` writes it.
#[test]
fn docs_json_md_has_the_table() {
    const FROM: &str = "<!-- figures: from report/figures.rs -->\n";
    const TO: &str = "<!-- /figures -->";
    let path = repo_file("docs/json.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let (a, rest) = text
        .split_once(FROM)
        .expect("docs/json.md lacks the figures' markers");
    let (_, b) = rest
        .split_once(TO)
        .expect("docs/json.md lacks the figures' end marker");
    let want = format!("{a}{FROM}{}{TO}{b}", docs_table());
    if std::env::var_os("SPACETIME_WRITE_DOCS").is_some() {
        std::fs::write(&path, &want).unwrap();
    }
    assert!(
        text == want,
        "docs/json.md's table differs from the declaration (SPACETIME_WRITE_DOCS=1 writes it)"
    );
}

/// The schema describes each figure where the JSON writes it, with its meaning.
#[test]
fn the_schema_has_each_figure() {
    let text = std::fs::read_to_string(repo_file("docs/trace-report.schema.json")).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    let props = |place: Place| {
        let p = &schema["properties"];
        match place {
            Place::Process => &schema["$defs"]["process"]["properties"],
            Place::Program => &p["by_program"]["items"]["properties"],
            Place::Tree => &p["totals"]["properties"],
        }
    };
    for f in FIGURES {
        for &place in f.places {
            let want = serde_json::json!({
                "description": f.meaning,
                "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]
            });
            assert_eq!(props(place)[f.key], want, "{} at {place:?}", f.key);
            let reason = serde_json::json!({
                "type": "string",
                "description": format!("Why {} is null (only then).", f.key)
            });
            assert_eq!(props(place)[f.reason_key()], reason, "{place:?}");
        }
    }
}
