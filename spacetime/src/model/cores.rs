//! CPU over time: how many cores the traced processes used, in fixed buckets of time.
//!
//! Each process's CPU time is the kernel's exact figure (what `wait4` returns: the
//! scheduler's run time). *When* it was spent comes, where the kernel's CPU clock program ran
//! ([`Method::Ticks`]), from its threads' run time sampled at [`TICK_HZ`] per CPU
//! ([`crate::model::cpu_ticks`]): each segment between two points is spread over its own
//! interval, and what no point places (a process that lived under a tick, a thread's CPU before
//! its first sample) over the process's life. Without the program ([`Method::Spread`]) a
//! process's CPU is spread evenly over its life: approximate — right for a compiler that
//! computes from start to end, flattened for a process that waits. Either way the split is
//! done in whole nanoseconds so that the buckets add up to the total exactly: the series'
//! integral is the report's CPU time, to the nanosecond (sampled run time that exceeds the
//! reported CPU is scaled down to it).

use serde::{ser::SerializeMap, Serialize, Serializer};

use crate::model::cpu_ticks::{Segment, TICK_HZ};

/// A process's CPU and its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Use {
    pub start_ns: u64,
    /// Its exit, or the end of the trace for one still running.
    pub end_ns: u64,
    pub cpu_ns: u64,
}

/// How a series placed CPU in time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Method {
    /// Each process's CPU spread evenly over its life (approximate).
    #[default]
    Spread,
    /// The threads' run time sampled by the kernel's CPU clock tick.
    Ticks,
}

impl Method {
    /// The name the JSON gives it.
    pub fn name(self) -> &'static str {
        match self {
            Method::Spread => "spread",
            Method::Ticks => "ticks",
        }
    }
}

/// CPU nanoseconds spent in each bucket of `bucket_ns`, the first starting at 0.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuSeries {
    pub bucket_ns: u64,
    pub cpu_ns: Vec<u64>,
    pub method: Method,
    /// [`Method::Ticks`]: of the total, the CPU no tick placed, spread over its process's life.
    pub unsampled_ns: u64,
    /// [`Method::Ticks`]: ticks not kept (past the bound on segments): their CPU went to the
    /// thread's next point, coarser, not lost.
    pub ticks_dropped: u64,
}

/// A process's CPU and its life, with its threads' sampled segments (times relative to the
/// series' start).
#[derive(Clone, Copy, Debug)]
pub struct Sampled<'a> {
    pub life: Use,
    pub segments: &'a [Segment],
}

/// At most this many buckets: finer than any chart draws, small in a report.
pub const MAX_BUCKETS: u64 = 1000;

/// A round bucket width (1, 2 or 5 × 10^k ns, at least 1 ms) giving at most
/// [`MAX_BUCKETS`] over `wall_ns`.
pub fn bucket_for(wall_ns: u64) -> u64 {
    let raw = wall_ns.div_ceil(MAX_BUCKETS).max(1_000_000);
    let mut p = 1u64;
    loop {
        for m in [1, 2, 5] {
            if p.saturating_mul(m) >= raw {
                return p * m;
            }
        }
        p = p.saturating_mul(10);
    }
}

impl CpuSeries {
    /// The series over `[0, wall_ns]`.
    pub fn of(uses: impl IntoIterator<Item = Use>, wall_ns: u64) -> CpuSeries {
        let bucket_ns = bucket_for(wall_ns);
        let n = (wall_ns / bucket_ns + 1) as usize;
        let mut cpu_ns = vec![0u64; n];
        for u in uses {
            spread(&mut cpu_ns, bucket_ns, u);
        }
        CpuSeries {
            bucket_ns,
            cpu_ns,
            ..CpuSeries::default()
        }
    }

    /// The series over `[0, wall_ns]` from sampled run time; segment times are CLOCK_MONOTONIC,
    /// `t0_ns` the series' start.
    pub fn sampled<'a>(
        procs: impl IntoIterator<Item = Sampled<'a>>,
        t0_ns: u64,
        wall_ns: u64,
    ) -> CpuSeries {
        let mut series = CpuSeries::of([], wall_ns);
        series.method = Method::Ticks;
        for p in procs {
            series.unsampled_ns += place(&mut series.cpu_ns, series.bucket_ns, p, t0_ns);
        }
        series
    }

    /// How the series was made, for the charts' titles.
    pub fn label(&self) -> String {
        match self.method {
            Method::Ticks => {
                format!("sampled at {TICK_HZ} Hz from the threads' run time, integral exact")
            }
            Method::Spread => "approximate: each process's CPU spread over its life".into(),
        }
    }

    /// [`CpuSeries::label`] in a few words, for a title that must fit 80 columns.
    pub fn short_label(&self) -> String {
        match self.method {
            Method::Ticks => format!("sampled at {TICK_HZ} Hz, total exact"),
            Method::Spread => "approximate, spread over each life".into(),
        }
    }

    pub fn total_ns(&self) -> u64 {
        self.cpu_ns.iter().sum()
    }

    /// The most cores in use in one bucket.
    pub fn peak_cores(&self) -> f64 {
        let max = self.cpu_ns.iter().copied().max().unwrap_or(0);
        max as f64 / self.bucket_ns.max(1) as f64
    }

    /// Average cores in use over each of `cols` equal slices of `[0, span_ns)`: each
    /// bucket's CPU counted in the slices it overlaps, in proportion.
    pub fn columns(&self, span_ns: u64, cols: usize) -> Vec<f64> {
        let span = span_ns.max(1) as f64;
        let col_ns = span / cols.max(1) as f64;
        let mut out = vec![0f64; cols];
        let b = self.bucket_ns as f64;
        for (k, &v) in self.cpu_ns.iter().enumerate() {
            if v == 0 {
                continue;
            }
            let (s, e) = (k as f64 * b, (k as f64 + 1.0) * b);
            let first = ((s / col_ns) as usize).min(cols.saturating_sub(1));
            for (c, slot) in out.iter_mut().enumerate().skip(first) {
                let (cs, ce) = (c as f64 * col_ns, (c as f64 + 1.0) * col_ns);
                if cs >= e {
                    break;
                }
                let overlap = e.min(ce) - s.max(cs);
                if overlap > 0.0 {
                    *slot += v as f64 * overlap / b;
                }
            }
        }
        out.iter_mut().for_each(|x| *x /= col_ns);
        out
    }
}

impl Serialize for CpuSeries {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ticks = self.method == Method::Ticks;
        let mut m = s.serialize_map(Some(if ticks { 8 } else { 5 }))?;
        m.serialize_entry("method", self.method.name())?;
        m.serialize_entry("approximate", &!ticks)?;
        if ticks {
            m.serialize_entry("tick_hz", &TICK_HZ)?;
            m.serialize_entry("unsampled_cpu_ns", &self.unsampled_ns)?;
            m.serialize_entry("ticks_dropped", &self.ticks_dropped)?;
        }
        m.serialize_entry("bucket_ns", &self.bucket_ns)?;
        m.serialize_entry("total_cpu_ns", &self.total_ns())?;
        m.serialize_entry("cpu_ns", &self.cpu_ns)?;
        m.end()
    }
}

/// Adds a process's CPU: its segments where they were sampled, the rest over its life; when
/// the segments hold more than its CPU, they are scaled down to it (whole nanoseconds whose
/// running sums telescope to the CPU exactly). Returns the CPU spread over its life.
fn place(buckets: &mut [u64], bucket_ns: u64, p: Sampled, t0_ns: u64) -> u64 {
    let total = p.life.cpu_ns;
    let sampled: u64 = p.segments.iter().map(|s| s.cpu_ns).sum();
    let mut at = |s: &Segment, cpu_ns: u64| {
        let u = Use {
            start_ns: s.from_ns.saturating_sub(t0_ns),
            end_ns: s.to_ns.saturating_sub(t0_ns),
            cpu_ns,
        };
        spread(buckets, bucket_ns, u);
    };
    if sampled <= total {
        for s in p.segments {
            at(s, s.cpu_ns);
        }
        let rest = total - sampled;
        spread(
            buckets,
            bucket_ns,
            Use {
                cpu_ns: rest,
                ..p.life
            },
        );
        return rest;
    }
    let scaled = |sum: u64| (total as u128 * sum as u128 / sampled as u128) as u64;
    let mut sum = 0u64;
    for s in p.segments {
        let before = scaled(sum);
        sum += s.cpu_ns;
        at(s, scaled(sum) - before);
    }
    0
}

/// Adds `u`'s CPU to the buckets its life overlaps, in proportion; the amounts telescope, so
/// they add up to `u.cpu_ns` exactly.
fn spread(buckets: &mut [u64], bucket_ns: u64, u: Use) {
    let last = buckets.len() - 1;
    let at = |t: u64| ((t / bucket_ns) as usize).min(last);
    let (s, e) = (u.start_ns, u.end_ns.max(u.start_ns));
    if e == s || at(s) == at(e) {
        buckets[at(s)] += u.cpu_ns;
        return;
    }
    let life = (e - s) as u128;
    let done = |t: u64| (u.cpu_ns as u128 * (t - s) as u128 / life) as u64;
    let mut prev = 0;
    for (k, slot) in buckets.iter_mut().enumerate().take(at(e) + 1).skip(at(s)) {
        let upto = if k == at(e) {
            u.cpu_ns
        } else {
            done(((k as u64 + 1) * bucket_ns).min(e))
        };
        *slot += upto - prev;
        prev = upto;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn the_buckets_add_up_to_the_cpu_exactly() {
        let uses = [
            Use {
                start_ns: 3,
                end_ns: 1_234_567_891,
                cpu_ns: 987_654_321,
            },
            Use {
                start_ns: 500 * MS + 7,
                end_ns: 500 * MS + 7,
                cpu_ns: 11,
            },
            Use {
                start_ns: 999 * MS,
                end_ns: 1_700 * MS,
                cpu_ns: 699 * MS + 3,
            },
        ];
        let s = CpuSeries::of(uses, 1_700 * MS);
        assert_eq!(s.bucket_ns, 2 * MS);
        assert_eq!(s.total_ns(), 987_654_321 + 11 + 699 * MS + 3);
        assert_eq!(s.cpu_ns.len(), 851);
    }

    #[test]
    fn a_process_busy_over_its_life_fills_its_buckets_evenly() {
        // One core for 10 ms from 2 ms on, half a core from 0 to 20 ms.
        let uses = [
            Use {
                start_ns: 2 * MS,
                end_ns: 12 * MS,
                cpu_ns: 10 * MS,
            },
            Use {
                start_ns: 0,
                end_ns: 20 * MS,
                cpu_ns: 10 * MS,
            },
        ];
        let s = CpuSeries::of(uses, 20 * MS);
        assert_eq!(s.bucket_ns, MS);
        assert_eq!(s.cpu_ns[0], MS / 2);
        assert_eq!(s.cpu_ns[5], MS + MS / 2);
        assert_eq!(s.cpu_ns[15], MS / 2);
        assert!((s.peak_cores() - 1.5).abs() < 1e-9);
        let cols = s.columns(20 * MS, 4);
        assert_eq!(cols.len(), 4);
        assert!((cols[0] - (0.5 + 3.0 / 5.0)).abs() < 1e-9, "{cols:?}");
        assert!((cols[3] - 0.5).abs() < 1e-9, "{cols:?}");
        // The average over the columns is the CPU over the span.
        let mean: f64 = cols.iter().sum::<f64>() / 4.0;
        assert!((mean - 1.0).abs() < 1e-9, "{cols:?}");
    }

    #[test]
    fn sampled_segments_place_cpu_and_the_integral_stays_exact() {
        let seg = |from_ns, to_ns, cpu_ns| Segment {
            from_ns,
            to_ns,
            cpu_ns,
        };
        let t0 = 1_000 * MS;
        // One core from 0 to 10 ms, then two from 10 to 20 ms; 1 ms nobody sampled.
        let a = [
            seg(t0, t0 + 10 * MS, 10 * MS),
            seg(t0 + 10 * MS, t0 + 20 * MS, 10 * MS),
        ];
        let b = [seg(t0 + 10 * MS, t0 + 20 * MS, 10 * MS)];
        let life = |cpu_ns| Use {
            start_ns: 0,
            end_ns: 20 * MS,
            cpu_ns,
        };
        let s = CpuSeries::sampled(
            [
                Sampled {
                    life: life(21 * MS),
                    segments: &a,
                },
                Sampled {
                    life: life(10 * MS),
                    segments: &b,
                },
            ],
            t0,
            20 * MS,
        );
        assert_eq!((s.method, s.unsampled_ns), (Method::Ticks, MS));
        assert_eq!(s.total_ns(), 31 * MS);
        // 1 ms spread over 20 buckets: 50 µs each.
        assert_eq!(s.cpu_ns[3], MS + MS / 20);
        assert_eq!(s.cpu_ns[15], 2 * MS + MS / 20);
        // Sampled run time beyond the reported CPU is scaled down to it, exactly.
        let over = CpuSeries::sampled(
            [Sampled {
                life: life(7 * MS + 1),
                segments: &a,
            }],
            t0,
            20 * MS,
        );
        assert_eq!((over.total_ns(), over.unsampled_ns), (7 * MS + 1, 0));
        assert!(
            over.cpu_ns[2] > 0 && over.cpu_ns[12] > 0,
            "{:?}",
            over.cpu_ns
        );
    }

    #[test]
    fn bucket_widths_are_round() {
        assert_eq!(bucket_for(0), MS);
        assert_eq!(bucket_for(999 * MS), MS);
        assert_eq!(bucket_for(1_001 * MS), 2 * MS);
        assert_eq!(bucket_for(60_000 * MS), 100 * MS);
    }
}
