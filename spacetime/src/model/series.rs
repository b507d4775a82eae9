//! Memory series: step functions of bounded length ([`Series`]), and every process's
//! ([`ProcessSeries`], kept by key in [`Procs`]).
//!
//! A 100k-process trace holds one per process, most with two points (start and exit): they
//! are stored inline, in a list indexed by key ([`KeyIndex`]), not in a map entry and an
//! allocation of their own each.

use smallvec::{Array, SmallVec};

use std::borrow::Cow;

use crate::model::{
    cpu_segments::{CpuSegments, Scratch},
    cpu_ticks::Segment,
    key_index::KeyIndex,
    process::Key,
    series_packed::PackedSeries,
};

/// One value of a series: `bytes` from `ts_ns` on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Point {
    pub ts_ns: u64,
    pub bytes: u64,
}

impl Point {
    pub fn new(ts_ns: u64, bytes: u64) -> Point {
        Point { ts_ns, bytes }
    }
}

/// A step series with a bounded number of points.
#[derive(Clone, Debug, Default)]
pub struct Series {
    points: SmallVec<[Point; 2]>,
    /// Times the series was compacted (its points are then min/max per bucket).
    compactions: u32,
}

impl Series {
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    pub fn last(&self) -> Option<Point> {
        self.points.last().copied()
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// The largest value and its first time.
    pub fn max(&self) -> Option<Point> {
        self.points
            .iter()
            .copied()
            .reduce(|a, b| if b.bytes > a.bytes { b } else { a })
    }

    pub fn compacted(&self) -> bool {
        self.compactions > 0
    }

    /// Appends a value. A time earlier than the last point's (records from different CPUs)
    /// is moved just after it; a value at the same time replaces the last one (a sum being
    /// updated process by process within one sampling round); a value equal to the last one
    /// adds nothing. Past `cap` points the series is compacted.
    pub fn push(&mut self, p: Point, cap: usize) {
        push_point(&mut self.points, p);
        if self.points.len() > cap.max(8) {
            self.compact();
        }
    }

    /// Inserts a value at its time, for exact samples that may arrive late (a point the kernel
    /// held back, sent after later points of other processes): a value holds until the next
    /// point, so a late one goes where it belongs instead of after the last. Appending stays
    /// [`Series::push`].
    pub fn insert(&mut self, p: Point, cap: usize) {
        insert_point(&mut self.points, p);
        if self.points.len() > cap.max(8) {
            self.compact();
        }
    }

    /// Lowers each point to the largest value `ceiling` had up to its time; points before
    /// the ceiling's first are left. Returns by how much each point was lowered. A compacted
    /// ceiling keeps its extremes, so its running maximum is still its own.
    pub fn ceil_to_peak_of(&mut self, ceiling: &Series) -> Vec<u64> {
        let c = ceiling.points();
        let mut i = 0;
        let mut peak: Option<u64> = None;
        let mut lowered = Vec::with_capacity(self.points.len());
        for p in &mut self.points {
            while i < c.len() && c[i].ts_ns <= p.ts_ns {
                peak = Some(peak.map_or(c[i].bytes, |m| m.max(c[i].bytes)));
                i += 1;
            }
            let cut = peak.map_or(0, |m| p.bytes.saturating_sub(m));
            p.bytes -= cut;
            lowered.push(cut);
        }
        lowered
    }

    /// A series of these points, never compacted.
    pub(super) fn of_points(points: &[Point]) -> Series {
        Series {
            points: SmallVec::from_slice(points),
            compactions: 0,
        }
    }

    /// A series of points as they were written (a saved report's), compacted past `cap`.
    pub(super) fn written(points: &[Point], cap: usize) -> Series {
        let mut s = Series::of_points(points);
        while s.len() > cap.max(8) {
            let before = s.len();
            s.compact();
            if s.len() == before {
                break;
            }
        }
        s
    }

    /// Halves the number of points: each bucket of four keeps its minimum and maximum (in
    /// time order), so the series' extremes are never lost. The first point stays, so the
    /// series still starts where it did.
    pub fn compact(&mut self) {
        let Some(&first) = self.points.first() else {
            return;
        };
        let mut out: Vec<Point> = Vec::with_capacity(self.points.len() / 2 + 2);
        out.push(first);
        for bucket in self.points[1..].chunks(4) {
            let min = bucket.iter().min_by_key(|p| p.bytes).copied();
            let max = bucket.iter().max_by_key(|p| p.bytes).copied();
            let (Some(min), Some(max)) = (min, max) else {
                continue;
            };
            let (a, b) = if min.ts_ns <= max.ts_ns {
                (min, max)
            } else {
                (max, min)
            };
            for p in [a, b] {
                if out.last().is_none_or(|l| l.bytes != p.bytes) {
                    out.push(p);
                }
            }
        }
        self.points = SmallVec::from_vec(out);
        self.compactions += 1;
    }
}

/// What the timeline's budget does to a series of either kind; `base` is the process's start,
/// which a packed series packs its times against.
pub trait Steps {
    fn len(&self) -> usize;
    fn push(&mut self, p: Point, cap: usize, base: u64);
    fn compact(&mut self, base: u64);
}

impl Steps for Series {
    fn len(&self) -> usize {
        Series::len(self)
    }
    fn push(&mut self, p: Point, cap: usize, _: u64) {
        Series::push(self, p, cap)
    }
    fn compact(&mut self, _: u64) {
        Series::compact(self)
    }
}

impl Steps for PackedSeries {
    fn len(&self) -> usize {
        PackedSeries::len(self)
    }
    fn push(&mut self, p: Point, cap: usize, base: u64) {
        PackedSeries::push(self, p, cap, base)
    }
    fn compact(&mut self, base: u64) {
        PackedSeries::compact(self, base)
    }
}

/// [`Series::push`] without its compaction.
pub(super) fn push_point<A: Array<Item = Point>>(points: &mut SmallVec<A>, p: Point) {
    let mut p = p;
    if let Some(last) = points.last_mut() {
        if p.ts_ns < last.ts_ns {
            // Never replace a value that was really there: step just after it.
            p.ts_ns = last.ts_ns + 1;
        }
        if p.bytes == last.bytes {
            return;
        }
        if p.ts_ns == last.ts_ns {
            last.bytes = p.bytes;
            // The replaced value may now equal the one before it.
            let n = points.len();
            if n >= 2 && points[n - 2].bytes == p.bytes {
                points.pop();
            }
            return;
        }
    }
    points.push(p);
}

/// [`Series::insert`] without its compaction.
pub(super) fn insert_point<A: Array<Item = Point>>(points: &mut SmallVec<A>, p: Point) {
    let at = points.partition_point(|q| q.ts_ns <= p.ts_ns);
    if at == points.len() {
        return push_point(points, p);
    }
    if at > 0 && points[at - 1].bytes == p.bytes {
        return;
    }
    if at > 0 && points[at - 1].ts_ns == p.ts_ns {
        // Two values at one time: keep the larger, so a maximum is never replaced.
        let prev = &mut points[at - 1];
        prev.bytes = prev.bytes.max(p.bytes);
        return;
    }
    points.insert(at, p);
}

/// Per-process series.
#[derive(Clone, Debug, Default)]
pub struct ProcessSeries {
    pub rss: PackedSeries,
    /// CPU over time: the process's segments ([`crate::model::cpu_ticks`]), kept here to share
    /// the key and the index; packed against the key's start.
    pub(super) cpu: CpuSegments,
    /// PSS, for the processes that were sampled: most short ones never are, and a 100k-process
    /// trace would otherwise carry 56 empty bytes for each.
    pub(super) sampled: Option<Box<PssSeries>>,
}

// A 100 000-process trace holds one per process, beside its key.
const _: () = assert!(size_of::<ProcessSeries>() <= 48);

#[derive(Clone, Debug, Default)]
pub(super) struct PssSeries {
    pub(super) pss: Series,
    /// The largest PSS sampled.
    pub(super) max_pss: Option<Point>,
}

static NO_POINTS: Series = Series {
    points: SmallVec::new_const(),
    compactions: 0,
};

impl ProcessSeries {
    pub fn pss(&self) -> &Series {
        self.sampled.as_ref().map_or(&NO_POINTS, |s| &s.pss)
    }

    /// The largest PSS sampled.
    pub fn max_pss(&self) -> Option<Point> {
        self.sampled.as_ref().and_then(|s| s.max_pss)
    }

    pub(super) fn sampled(&mut self) -> &mut PssSeries {
        self.sampled.get_or_insert_with(Box::default)
    }
}

/// Every process's series, in the order first recorded, found by key; and which processes
/// are gone (exited, or found gone by a PSS round).
#[derive(Debug, Default)]
pub struct Procs {
    list: Vec<(Key, ProcessSeries)>,
    index: KeyIndex,
    /// By slot: 1 byte a process where a set of keys took 22.
    gone: Vec<bool>,
}

impl ProcessSeries {
    /// Nothing recorded: a slot made only to say the process is gone.
    fn is_blank(&self) -> bool {
        self.rss.is_empty() && self.sampled.is_none()
    }
}

impl Procs {
    fn slot_of(&self, key: &Key) -> Option<usize> {
        let list = &self.list;
        self.index.get(key, |s| list[s as usize].0)
    }

    /// The process's series, when any point was recorded for it.
    pub fn get(&self, key: &Key) -> Option<&ProcessSeries> {
        let slot = self.slot_of(key)?;
        Some(&self.list[slot].1).filter(|s| !s.is_blank())
    }

    fn slot(&mut self, key: Key) -> usize {
        if let Some(slot) = self.slot_of(&key) {
            return slot;
        }
        let slot = self.list.len();
        self.list.push((key, ProcessSeries::default()));
        // Once settled, no flag is kept: every process counts as gone.
        if self.gone.len() == slot {
            self.gone.push(false);
        }
        let list = &self.list;
        self.index.insert(&key, slot, |s| list[s as usize].0);
        slot
    }

    /// The process's CPU segments (absolute times), none when it had none.
    pub fn cpu(&self, key: &Key) -> Cow<'_, [Segment]> {
        self.slot_of(key).map_or(Cow::Borrowed(&[]), |slot| {
            self.list[slot].1.cpu.get(key.start_ns)
        })
    }

    /// Changes the process's CPU segments with `f` (none yet: an empty list); returns what
    /// `f` returns.
    pub(super) fn update_cpu<R>(&mut self, key: Key, f: impl FnOnce(&mut Scratch) -> R) -> R {
        let slot = self.slot(key);
        self.list[slot].1.cpu.update(key.start_ns, f)
    }

    /// The process's series, made empty when it has none.
    pub fn entry(&mut self, key: Key) -> &mut ProcessSeries {
        let slot = self.slot(key);
        &mut self.list[slot].1
    }

    /// The process exited or a round found it gone: the kernel's points for it that come
    /// later (a held-back peak, the last value as it stops following the mm) are no image
    /// beginning.
    pub fn set_gone(&mut self, key: Key) {
        let slot = self.slot(key);
        if let Some(gone) = self.gone.get_mut(slot) {
            *gone = true;
        }
    }

    pub fn is_gone(&self, key: &Key) -> bool {
        self.slot_of(key)
            .is_some_and(|slot| self.gone.get(slot).copied().unwrap_or(true))
    }

    /// No record comes any more: which processes are gone is no longer asked (all are).
    pub fn settle(&mut self) {
        self.gone = Vec::new();
        // The list grew by doubling: up to half of it (1.5 MB of a 100 000-process trace)
        // would stay empty under the report built next.
        self.list.shrink_to_fit();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &ProcessSeries)> {
        self.list
            .iter()
            .filter(|(_, s)| !s.is_blank())
            .map(|(k, s)| (k, s))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Key, &mut ProcessSeries)> {
        self.list.iter_mut().map(|(k, s)| (&*k, s))
    }
}
