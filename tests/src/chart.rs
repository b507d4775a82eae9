//! The summary's memory chart, read back as a person sees it.

/// "1.25 MiB" → bytes.
fn label_bytes(label: &str) -> Option<u64> {
    let (num, unit) = label.trim().split_once(' ')?;
    let shift = match unit {
        "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return None,
    };
    Some((num.parse::<f64>().ok()? * (1u64 << shift) as f64) as u64)
}

/// The summary's chart: its top label is at least the headline peak and its tallest column
/// reaches it (to an eighth of a row).
pub fn assert_chart_reaches(stderr: &str, peak: u64) {
    let lines: Vec<&str> = stderr.lines().collect();
    let title = lines
        .iter()
        .position(|l| l.starts_with("memory (tree RSS)"))
        .unwrap_or_else(|| panic!("no chart in the summary:\n{stderr}"));
    let rows: Vec<&str> = lines[title + 1..]
        .iter()
        .take_while(|l| l.contains('┤') || l.contains('│'))
        .copied()
        .collect();
    assert!(rows.len() >= 2, "chart rows:\n{stderr}");
    let (label, _) = rows[0].split_once('┤').expect("a label on the top row");
    let top = label_bytes(label).unwrap_or_else(|| panic!("top label {label:?}"));
    assert!(
        top as f64 >= peak as f64 * 0.995,
        "the axis ({label}) stops below the headline peak {peak}:\n{stderr}"
    );
    let eighths = |c: char| " ▁▂▃▄▅▆▇█".chars().position(|b| b == c).unwrap_or(0) as u64;
    let plots: Vec<Vec<char>> = rows
        .iter()
        .map(|r| r.split(['┤', '│']).nth(1).unwrap_or("").chars().collect())
        .collect();
    let width = plots.iter().map(Vec::len).max().unwrap_or(0);
    let tallest = (0..width)
        .map(|c| {
            plots
                .iter()
                .map(|row| row.get(c).map_or(0, |&ch| eighths(ch)))
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0);
    let want = (peak as f64 * rows.len() as f64 * 8.0 / top as f64).floor() as u64;
    assert!(
        tallest + 1 >= want,
        "the tallest column is {tallest} eighths, the peak needs {want} (top {top}):\n{stderr}"
    );
}
