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
//!
//! No bucket holds more than the online CPUs could run in it (`bucket_ns` × CPUs): spreading
//! evenly is a guess, and many processes' guesses, or clocks a tick apart, can stack above the
//! machine. What a full bucket cannot take goes to the buckets of the same segment or life
//! that have room, in proportion to it; the ticks' segments are placed first, so CPU no tick
//! placed fills the room they left.

use std::borrow::Cow;

use serde::{ser::SerializeMap, Deserialize, Deserializer, Serialize, Serializer};

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
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
    /// The online CPUs that bound every bucket (unknown: no bound).
    pub cpus: Option<u32>,
}

/// A process's CPU and its life, with its threads' sampled segments (times relative to the
/// series' start).
#[derive(Clone, Debug)]
pub struct Sampled<'a> {
    pub life: Use,
    /// Unpacked for this process alone (a list of every process's would be held at once).
    pub segments: Cow<'a, [Segment]>,
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
    /// The series over `[0, wall_ns]`, each bucket bounded by `cpus` online CPUs.
    pub fn of(uses: impl IntoIterator<Item = Use>, wall_ns: u64, cpus: Option<u32>) -> CpuSeries {
        let bucket_ns = bucket_for(wall_ns);
        let n = (wall_ns / bucket_ns + 1) as usize;
        let mut series = CpuSeries {
            bucket_ns,
            cpu_ns: vec![0u64; n],
            cpus,
            ..CpuSeries::default()
        };
        let mut b = series.buckets();
        for u in uses {
            b.spread(u);
        }
        series
    }

    /// The series over `[0, wall_ns]` from sampled run time; segment times are CLOCK_MONOTONIC,
    /// `t0_ns` the series' start. Every process's segments are placed before the CPU no tick
    /// placed, which goes where they left room.
    pub fn sampled<'a>(
        procs: impl IntoIterator<Item = Sampled<'a>>,
        t0_ns: u64,
        wall_ns: u64,
        cpus: Option<u32>,
    ) -> CpuSeries {
        let mut series = CpuSeries::of([], wall_ns, cpus);
        series.method = Method::Ticks;
        let mut b = series.buckets();
        let rests: Vec<Use> = procs
            .into_iter()
            .filter_map(|p| b.place(p, t0_ns))
            .collect();
        let unsampled_ns = rests_total(&rests);
        for u in rests {
            b.spread(u);
        }
        series.unsampled_ns = unsampled_ns;
        series
    }

    fn buckets(&mut self) -> Buckets<'_> {
        let cap_ns = self
            .cpus
            .map_or(u64::MAX, |c| self.bucket_ns.saturating_mul(c.max(1) as u64));
        Buckets {
            v: &mut self.cpu_ns,
            bucket_ns: self.bucket_ns,
            cap_ns,
        }
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

    /// Sampled by the kernel, and adding up to `total_ns`: a series read back that is kept as
    /// it was written (a spread one is derived again from the processes).
    pub fn sampled_to(&self, total_ns: u64) -> bool {
        let sum = self.cpu_ns.iter().try_fold(0u64, |a, &b| a.checked_add(b));
        self.method == Method::Ticks && self.bucket_ns > 0 && sum == Some(total_ns)
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
        let n = if ticks { 8 } else { 5 } + usize::from(self.cpus.is_some());
        let mut m = s.serialize_map(Some(n))?;
        m.serialize_entry("method", self.method.name())?;
        m.serialize_entry("approximate", &!ticks)?;
        if let Some(c) = self.cpus {
            m.serialize_entry("online_cpus", &c)?;
        }
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

/// `timeline.cpu` read back, as `Serialize` writes it (an older report may lack a part).
impl<'de> Deserialize<'de> for CpuSeries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<CpuSeries, D::Error> {
        #[derive(Default, Deserialize)]
        #[serde(default)]
        struct Written {
            method: Method,
            online_cpus: Option<u32>,
            unsampled_cpu_ns: u64,
            ticks_dropped: u64,
            bucket_ns: u64,
            cpu_ns: Vec<u64>,
        }
        let w = Written::deserialize(d)?;
        Ok(CpuSeries {
            bucket_ns: w.bucket_ns,
            cpu_ns: w.cpu_ns,
            method: w.method,
            unsampled_ns: w.unsampled_cpu_ns,
            ticks_dropped: w.ticks_dropped,
            cpus: w.online_cpus,
        })
    }
}

fn rests_total(rests: &[Use]) -> u64 {
    rests.iter().map(|u| u.cpu_ns).sum()
}

/// The series' buckets while CPU is added, each holding at most `cap_ns`.
struct Buckets<'a> {
    v: &'a mut [u64],
    bucket_ns: u64,
    cap_ns: u64,
}

impl Buckets<'_> {
    /// Adds a process's sampled segments; when they hold more than its CPU, they are scaled
    /// down to it (whole nanoseconds whose running sums telescope to the CPU exactly).
    /// Returns its CPU no segment placed, to spread over its life once every segment is in.
    fn place(&mut self, p: Sampled, t0_ns: u64) -> Option<Use> {
        let total = p.life.cpu_ns;
        let sampled: u64 = p.segments.iter().map(|s| s.cpu_ns).sum();
        let scaled = |sum: u64| match sampled <= total {
            true => sum,
            false => (total as u128 * sum as u128 / sampled as u128) as u64,
        };
        let mut sum = 0u64;
        for s in p.segments.iter() {
            let before = scaled(sum);
            sum += s.cpu_ns;
            self.spread(Use {
                start_ns: s.from_ns.saturating_sub(t0_ns),
                end_ns: s.to_ns.saturating_sub(t0_ns),
                cpu_ns: scaled(sum) - before,
            });
        }
        // `then`, not `then_some`: the difference is taken only when it is not negative.
        (sampled < total).then(|| Use {
            cpu_ns: total - sampled,
            ..p.life
        })
    }

    /// Adds `u`'s CPU to the buckets its life overlaps, in proportion; the amounts telescope,
    /// so they add up to `u.cpu_ns` exactly. What a full bucket cannot take goes to the
    /// others of `u`'s life with room ([`Self::fill`]), and past them to the nearest buckets
    /// with room ([`Self::spill`]).
    fn spread(&mut self, u: Use) {
        let last = self.v.len() - 1;
        let at = |t: u64| ((t / self.bucket_ns) as usize).min(last);
        let (s, e) = (u.start_ns, u.end_ns.max(u.start_ns));
        // Its life is [s, e): a bucket starting at e holds none of it.
        let (first, end) = (at(s), at(e.saturating_sub(1).max(s)));
        let mut left = 0;
        if first == end {
            left = self.add(first, u.cpu_ns);
        } else {
            let life = (e - s) as u128;
            let done = |t: u64| (u.cpu_ns as u128 * (t - s) as u128 / life) as u64;
            let mut prev = 0;
            for k in first..=end {
                let upto = match k == end {
                    true => u.cpu_ns,
                    false => done(((k as u64 + 1) * self.bucket_ns).min(e)),
                };
                left += self.add(k, upto - prev);
                prev = upto;
            }
        }
        if left > 0 {
            left = self.fill(first, end, left);
        }
        if left > 0 {
            self.spill(first, end, left);
        }
    }

    /// Adds up to `ns` to bucket `k`, as far as it has room; returns what did not fit.
    fn add(&mut self, k: usize, ns: u64) -> u64 {
        let put = ns.min(self.cap_ns.saturating_sub(self.v[k]));
        self.v[k] += put;
        ns - put
    }

    /// Shares `ns` among buckets `first..=end` in proportion to their room (the shares
    /// telescope, and none exceeds its room); returns what exceeds their room.
    fn fill(&mut self, first: usize, end: usize, ns: u64) -> u64 {
        let room = |v: u64| self.cap_ns.saturating_sub(v) as u128;
        let total: u128 = self.v[first..=end].iter().map(|&v| room(v)).sum();
        if total == 0 {
            return ns;
        }
        let put = (ns as u128).min(total);
        let (mut seen, mut prev) = (0u128, 0u128);
        for k in first..=end {
            seen += room(self.v[k]);
            let upto = put * seen / total;
            self.v[k] += (upto - prev) as u64;
            prev = upto;
        }
        ns - put as u64
    }

    /// More CPU than the machine could run over a life (times a tick apart, or clocks that
    /// disagree): the nearest buckets outside it with room take it; a series full everywhere
    /// keeps it at the life's start, so the integral stays exact.
    fn spill(&mut self, first: usize, end: usize, mut ns: u64) {
        for d in 1..self.v.len() {
            for k in [first.checked_sub(d), end.checked_add(d)]
                .into_iter()
                .flatten()
            {
                if ns > 0 && k < self.v.len() {
                    ns = self.add(k, ns);
                }
            }
            if ns == 0 {
                return;
            }
        }
        self.v[first] += ns;
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
        let s = CpuSeries::of(uses, 1_700 * MS, None);
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
        let s = CpuSeries::of(uses, 20 * MS, None);
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
                    segments: Cow::Borrowed(&a),
                },
                Sampled {
                    life: life(10 * MS),
                    segments: Cow::Borrowed(&b),
                },
            ],
            t0,
            20 * MS,
            None,
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
                segments: Cow::Borrowed(&a),
            }],
            t0,
            20 * MS,
            None,
        );
        assert_eq!((over.total_ns(), over.unsampled_ns), (7 * MS + 1, 0));
        assert!(
            over.cpu_ns[2] > 0 && over.cpu_ns[12] > 0,
            "{:?}",
            over.cpu_ns
        );
    }

    #[test]
    fn a_full_bucket_passes_its_excess_to_the_rest_of_the_life() {
        // One CPU. A fills 2..4 ms; B, 4 ms of CPU over 0..8 ms, would put 1 ms in each
        // 2 ms bucket: its share of 2..4 goes to 0..2, 4..6 and 6..8, in proportion to room.
        let uses = [
            Use {
                start_ns: 2 * MS,
                end_ns: 4 * MS,
                cpu_ns: 2 * MS,
            },
            Use {
                start_ns: 0,
                end_ns: 8 * MS,
                cpu_ns: 4 * MS,
            },
        ];
        let s = CpuSeries::of(uses, 1_999 * MS, Some(1));
        assert_eq!(s.bucket_ns, 2 * MS);
        assert_eq!(s.total_ns(), 6 * MS);
        assert_eq!(
            &s.cpu_ns[..5],
            [4 * MS / 3, 2 * MS, 4 * MS / 3, 4 * MS / 3 + 1, 0]
        );
        // With no bound the even spread stacks above one CPU.
        let free = CpuSeries::of(uses, 1_999 * MS, None);
        assert_eq!(free.cpu_ns[1], 3 * MS);
    }

    #[test]
    fn a_life_without_room_spills_to_the_nearest_buckets_that_have_some() {
        // One CPU, 1 ms buckets, 0..5 ms full; 2 ms more within 2..3 ms: buckets 5 and 6.
        let busy = Use {
            start_ns: 0,
            end_ns: 5 * MS,
            cpu_ns: 5 * MS,
        };
        let late = Use {
            start_ns: 2 * MS,
            end_ns: 3 * MS - 1,
            cpu_ns: 2 * MS,
        };
        let s = CpuSeries::of([busy, late], 20 * MS, Some(1));
        assert_eq!(&s.cpu_ns[..8], [MS, MS, MS, MS, MS, MS, MS, 0]);
        assert_eq!(s.total_ns(), 7 * MS);
        // A series full everywhere keeps the rest where it was spent: the integral holds.
        let s = CpuSeries::of([busy, late], MS / 2, Some(1));
        assert_eq!((s.cpu_ns.len(), s.total_ns()), (1, 7 * MS));
    }

    #[test]
    fn cpu_no_tick_placed_goes_where_the_segments_left_room() {
        // One CPU: ticks placed 10 ms in 0..10 ms; 10 ms more, unsampled, over 0..20 ms
        // goes to 10..20 ms, not over the full half.
        let t0 = 1_000 * MS;
        let segs = [Segment {
            from_ns: t0,
            to_ns: t0 + 10 * MS,
            cpu_ns: 10 * MS,
        }];
        let life = Use {
            start_ns: 0,
            end_ns: 20 * MS,
            cpu_ns: 20 * MS,
        };
        // The life first in the input: the segments are still placed before it.
        let other = Sampled {
            life: Use { cpu_ns: 0, ..life },
            segments: Cow::Borrowed(&[]),
        };
        let s = CpuSeries::sampled(
            [
                other,
                Sampled {
                    life,
                    segments: Cow::Borrowed(&segs),
                },
            ],
            t0,
            20 * MS,
            Some(1),
        );
        assert_eq!((s.unsampled_ns, s.total_ns()), (10 * MS, 20 * MS));
        assert!(s.cpu_ns[..20].iter().all(|&v| v == MS), "{:?}", s.cpu_ns);
    }

    #[test]
    fn many_short_lives_on_two_cpus_never_exceed_them() {
        // 2 000 processes of up to 3 ms each, each one core busy: 2 CPUs' worth overall,
        // stacked unevenly; every bucket within 2 CPUs, the integral exact.
        let mut x = 12345u64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        let wall = 1_000 * MS;
        let uses: Vec<Use> = (0..2_000)
            .map(|_| {
                let start_ns = next(wall - 3 * MS);
                let life = 1 + next(3 * MS);
                Use {
                    start_ns,
                    end_ns: start_ns + life,
                    cpu_ns: life / 2,
                }
            })
            .collect();
        let want: u64 = uses.iter().map(|u| u.cpu_ns).sum();
        let s = CpuSeries::of(uses.iter().copied(), wall, Some(2));
        assert_eq!(s.total_ns(), want);
        assert!(
            s.cpu_ns.iter().all(|&v| v <= 2 * s.bucket_ns),
            "{:?}",
            s.cpu_ns
        );
        assert!(CpuSeries::of(uses, wall, None).peak_cores() > 2.0);
    }

    #[test]
    fn bucket_widths_are_round() {
        assert_eq!(bucket_for(0), MS);
        assert_eq!(bucket_for(999 * MS), MS);
        assert_eq!(bucket_for(1_001 * MS), 2 * MS);
        assert_eq!(bucket_for(60_000 * MS), 100 * MS);
    }

    /// A series read back is the one written: the JSON's names both ways, and only a sampled
    /// series that adds up to the CPU it claims is kept as written.
    #[test]
    fn a_series_read_back_is_the_one_written() {
        let ticks = CpuSeries {
            bucket_ns: 10 * MS,
            cpu_ns: vec![3 * MS, 10 * MS, 0, 7],
            method: Method::Ticks,
            unsampled_ns: 5,
            ticks_dropped: 2,
            cpus: Some(2),
        };
        let spread = CpuSeries {
            method: Method::Spread,
            cpus: None,
            ..ticks.clone()
        };
        for s in [&ticks, &spread] {
            let json = serde_json::to_string(s).expect("json");
            let back: CpuSeries = serde_json::from_str(&json).expect("read back");
            let again = serde_json::to_string(&back).expect("json");
            assert_eq!(again, json);
            if s.method == Method::Spread {
                // Spread writes no tick counts: derived again, never kept.
                assert!(!back.sampled_to(s.total_ns()));
            } else {
                assert_eq!(&back, s);
            }
        }
        assert!(ticks.sampled_to(13 * MS + 7));
        assert!(
            !ticks.sampled_to(13 * MS),
            "a series that does not add up is derived again"
        );
        assert!(serde_json::from_str::<CpuSeries>(r#"{"method": "guessed"}"#).is_err());
    }
}
