use super::*;

#[derive(clap::Parser)]
struct Cmd {
    #[command(flatten)]
    bench: BenchArgs,
}

fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
    use clap::Parser;
    Cmd::try_parse_from(args).map(|c| c.bench)
}

#[test]
fn options() {
    let b = parse(&["bench", "sleep 0.1", "sleep 0.2"]).expect("parse");
    assert_eq!((b.runs, b.warmup, b.no_shell), (None, 0, false));
    assert_eq!(b.run_bounds(), Ok(RunBounds { min: 10, max: None }));
    let b = parse(&[
        "bench",
        "-N",
        "-r",
        "3",
        "-w",
        "1",
        "-p",
        "sync",
        "--json",
        "r.json",
        "--export-csv",
        "r.csv",
        "--export-markdown",
        "r.md",
        "-i",
        "true",
        "false",
    ])
    .expect("parse");
    assert_eq!((b.runs, b.warmup), (Some(3), 1));
    assert_eq!(
        b.run_bounds(),
        Ok(RunBounds {
            min: 3,
            max: Some(3)
        })
    );
    assert!(b.no_shell && b.ignore_failure);
    assert_eq!(b.json.as_deref(), Some(std::path::Path::new("r.json")));
    assert!(parse(&["bench", "-r", "0", "true"]).is_err());
    assert!(parse(&["bench"]).is_err());
    assert!(
        parse(&["bench", "-r", "3", "-m", "2", "true"]).is_err(),
        "-r and -m"
    );
    assert!(
        parse(&["bench", "-N", "-S", "bash", "true"]).is_err(),
        "-N and -S"
    );
}

#[test]
fn hyperfine_names() {
    let b = parse(&[
        "bench",
        "--export-json",
        "h.json",
        "-P",
        "j",
        "1",
        "4",
        "-D",
        "1",
        "-s",
        "make clean",
        "-c",
        "rm -f x",
        "-C",
        "sync",
        "-n",
        "make -j{j}",
        "-u",
        "millisecond",
        "--sort",
        "mean-time",
        "-S",
        "bash --norc",
        "--output",
        "pipe",
        "--input",
        "null",
        "--export-asciidoc",
        "t.adoc",
        "--export-orgmode",
        "t.org",
        "-m",
        "2",
        "-M",
        "5",
        "make -j{j}",
    ])
    .expect("parse");
    assert_eq!(
        b.parameter_scan.as_deref(),
        Some(&["j".into(), "1".into(), "4".into()][..])
    );
    assert_eq!(b.time_unit, Some(TimeUnit::Millisecond));
    assert_eq!(b.sort, Sort::MeanTime);
    assert_eq!(
        b.run_bounds(),
        Ok(RunBounds {
            min: 2,
            max: Some(5)
        })
    );
    let b = parse(&[
        "bench",
        "-L",
        "a",
        "x,y",
        "-L",
        "b",
        "1,2",
        "--reference",
        "r",
        "c",
    ])
    .expect("parse");
    assert_eq!(b.parameter_list, ["a", "x,y", "b", "1,2"]);
    assert!(parse(&["bench", "-P", "j", "1", "2", "-L", "a", "b", "c"]).is_err());
    assert!(parse(&["bench", "-D", "1", "c"]).is_err(), "-D needs -P");
    // -M alone lowers the default minimum; -m above -M is refused.
    let b = parse(&["bench", "-M", "4", "c"]).expect("parse");
    assert_eq!(
        b.run_bounds(),
        Ok(RunBounds {
            min: 4,
            max: Some(4)
        })
    );
    let b = parse(&["bench", "-m", "6", "-M", "4", "c"]).expect("parse");
    assert!(b.run_bounds().is_err());
}

#[test]
fn time_units_as_hyperfine_prints_them() {
    assert_eq!(TimeUnit::auto(1.3).show(1.3), "1.300 s");
    assert_eq!(TimeUnit::auto(0.999).show(0.999), "999.0 ms");
    assert_eq!(TimeUnit::auto(0.0005).show(0.0005), "500.0 µs");
    assert_eq!(TimeUnit::Millisecond.show(1.3), "1300.0 ms");
}
