use super::*;
use crate::cmd::bench::model::testing::result;

fn layout(width: usize) -> Layout {
    Layout {
        width,
        cut: true,
        unit: None,
        color: false,
    }
}

#[test]
fn blocks_fit_80_columns_and_say_one_peak_for_one_process() {
    let mib = 1 << 20;
    let a = result(
        "small \x1b[31m",
        &[10_000_000, 12_000_000],
        &[10 * mib, 10 * mib],
    );
    assert!(header(1, &a.shown, &layout(80)).starts_with("Benchmark 1: small \\e[31m"));
    let block = block(&a, &[], &layout(80));
    assert!(
        block.contains(
            "  Time (mean ± σ):      11.0 ms ±   1.4 ms    [User: 5.5 ms, System: 2.8 ms]"
        ),
        "{block}"
    );
    assert!(
        block.contains("  Range (min … max):    10.0 ms …  12.0 ms    2 runs"),
        "{block}"
    );
    // One process: its peak is the tree's, said once.
    assert!(
        block.contains("  Peak RSS (mean ± σ): 10.0 MiB ±      0 B    [10.0 MiB … 10.0 MiB]"),
        "{block}"
    );
    assert!(!block.contains("tree"), "{block}");
    assert!(!block.contains("Warning"), "{block}");
    for l in block.lines() {
        assert!(crate::util::term::width(l) <= 80, "{l:?}");
    }
    // Several processes: the largest one's and the tree's.
    let mut b = result("big", &[30_000_000, 34_000_000], &[20 * mib, 20 * mib]);
    b.processes = Stats::of(&[3, 3]).expect("stats");
    let block = super::block(&b, &[], &layout(80));
    assert!(block.contains("  Peak RSS, largest:"), "{block}");
    assert!(block.contains("  Peak RSS, tree:"), "{block}");
}

#[test]
fn long_figures_move_to_the_next_line_and_warnings_wrap() {
    let hour = 3_600_000_000_000u64;
    let r = result("slow", &[hour, hour + 1], &[4096, 4096]);
    let w = [crate::cmd::bench::warnings::Warning::FastExecution];
    for width in [80, 60] {
        let text = block(&r, &w, &layout(width));
        for l in text.lines() {
            assert!(
                crate::util::term::width(l) <= width,
                "{l:?} over {width}\n{text}"
            );
        }
        assert!(
            text.contains("Warning: Command took less than 5 ms"),
            "{text}"
        );
    }
}

#[test]
fn failures_and_loss_are_flagged() {
    let mut r = result("x", &[1, 2, 3], &[4096; 3]);
    r.exit_codes = vec![0, 1, 1];
    r.incomplete_runs = vec![2];
    r.lost_events = vec![0, 0, 7];
    let block = block(&r, &[], &layout(80));
    assert!(
        block.contains("2 of 3 runs exited non-zero (exit codes: 0 ×1, 1 ×2)"),
        "{block}"
    );
    assert!(block.contains("runs 3 lost 7 records"), "{block}");
}

#[test]
fn a_scan_is_a_table_of_time_and_memory_per_value() {
    let mib = 1 << 20;
    let mut results = Vec::new();
    for j in 1..=4u64 {
        let mut r = result(
            &format!("make -j{j}"),
            &[400_000_000 / j, 410_000_000 / j],
            &[(60 + j) * mib; 2],
        );
        r.params = vec![("j".into(), j.to_string())];
        r.processes = Stats::of(&[5, 5]).expect("stats");
        r.tree_peak_rss_bytes = Stats::of(&[(100 * j) * mib; 2]);
        results.push(r);
    }
    let t = parameter_table(&results, &layout(80)).expect("a table");
    let lines: Vec<&str> = t.lines().collect();
    assert_eq!(lines[0], "Parameter scan");
    assert!(
        lines[1].contains("#  j") && lines[1].contains("Tree peak"),
        "{t}"
    );
    assert!(
        lines[5].contains("4") && lines[5].contains("101.2 ms ±") && lines[5].contains("400 MiB"),
        "{t}"
    );
    for l in &lines {
        assert!(crate::util::term::width(l) <= 80, "{l}");
    }
    results.iter_mut().for_each(|r| r.params.clear());
    assert!(parameter_table(&results, &layout(80)).is_none());
}
