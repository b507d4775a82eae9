//! Memory and CPU over time, one chart above the other on the same time axis. Left out when
//! they would carry nothing: memory for a single process that ran under 100 ms (or a series
//! of fewer than two points), CPU for a single process when it is spread evenly over its
//! life (a flat line) or the process ran less than 100 ms.

use super::Report;
use crate::{
    model::{cores::Method, timeline::RssSource},
    report::chart::{self, Spec, Style, Unit},
    util::units::{bytes, duration_ns},
};

/// A single process that ran less than this gets no memory chart.
const SHORT_NS: u64 = 100_000_000;

/// Both charts share the width of their y labels, so their time axes line up.
const LABEL_W: usize = 9;

/// The charts that carry something, each after a blank line.
pub(super) fn both(out: &mut String, r: &Report, width: usize, style: Style) {
    let series = &r.memory.points;
    let single = r.processes.len() <= 1;
    if series.len() >= 2 && !(single && r.wall_ns < SHORT_NS) {
        let t = &r.totals;
        let title = match (r.memory.source, t.tree_peak_rss_bytes, t.tree_peak_at_ns) {
            (RssSource::Kernel, Some(b), Some(at)) => format!(
                "memory (tree RSS) · peak {} at {}",
                bytes(b),
                duration_ns(at)
            ),
            (RssSource::Statm, Some(b), Some(at)) => format!(
                "memory (tree RSS, sampled from statm) · peak {} at {}",
                bytes(b),
                duration_ns(at)
            ),
            _ => "memory (tree RSS)".to_string(),
        };
        let spec = Spec {
            title: &title,
            t0_ns: 0,
            end_ns: r.wall_ns,
            width,
            height: 10,
            style,
            peak_bytes: t.tree_peak_rss_bytes.unwrap_or(0),
            unit: Unit::Bytes,
            min_label_w: LABEL_W,
        };
        out.push('\n');
        out.push_str(&chart::render(series, &spec));
    }
    let cpu = &r.analysis.cpu;
    // A single process's CPU spread over its life is a flat line; sampled, its threads show.
    let flat = single && (cpu.method == Method::Spread || r.wall_ns < SHORT_NS);
    if !flat && cpu.total_ns() > 0 && r.wall_ns > 0 {
        let mean = r.analysis.parallelism(r.wall_ns).unwrap_or(0.0);
        let title = cpu_title(cpu, mean, width);
        let values = |w: usize| -> Vec<u64> {
            cpu.columns(r.wall_ns, w)
                .into_iter()
                .map(|c| (c * 1000.0).round() as u64)
                .collect()
        };
        let max = values(width).into_iter().max().unwrap_or(0);
        let spec = Spec {
            title: &title,
            t0_ns: 0,
            end_ns: r.wall_ns,
            width,
            height: 4,
            style,
            peak_bytes: 0,
            unit: Unit::Millicores,
            min_label_w: LABEL_W,
        };
        out.push('\n');
        out.push_str(&chart::render_columns(max, &values, &spec));
    }
}

/// The CPU chart's title: how the series was made in full when it fits `width`, else in a
/// few words (a title is never cut).
fn cpu_title(cpu: &crate::model::cores::CpuSeries, mean: f64, width: usize) -> String {
    let full = format!("CPU in cores, {} · mean {mean:.2}", cpu.label());
    if crate::util::term::width(&full) <= width {
        return full;
    }
    format!("CPU in cores, {} · mean {mean:.2}", cpu.short_label())
}

#[cfg(test)]
mod tests {
    use crate::model::cores::{CpuSeries, Method};

    #[test]
    fn the_cpu_title_fits_80_columns() {
        for method in [Method::Ticks, Method::Spread] {
            let cpu = CpuSeries {
                method,
                ..CpuSeries::default()
            };
            let t = super::cpu_title(&cpu, 12.34, 80);
            assert!(crate::util::term::width(&t) <= 80, "{t}");
            assert!(t.ends_with("· mean 12.34"), "{t}");
            // Wide enough, the whole label.
            assert!(super::cpu_title(&cpu, 1.0, 200).contains(&cpu.label()));
        }
    }
}
