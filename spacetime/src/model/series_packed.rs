//! A process's RSS series, packed in place while it is short. A 100k-process trace holds one
//! per process, most with three or four points (start, growth, exit): as [`Point`]s in a list
//! of their own they took 80 bytes of heap each beside the series; packed they take 11 to 16
//! bytes inside it. A process that execs has more (nine for `/bin/true`: the loader and libc
//! mapped in): those stay packed on the heap, 35 to 40 bytes (a 48-byte heap block) where a
//! plain series took 300 (its box and a list of 16 points). Times are packed against a base,
//! the process's start, which the caller passes (the series does not keep it: 8 bytes a
//! process): the first time is a step from it of 2 or 3 bytes, where a time since boot took 7
//! (and the exec's nine points a 64-byte block, 1.6 MB of a 100 000-exec trace). Long series,
//! or points before the base or values that do not pack, are a plain [`Series`].

use std::borrow::Cow;

use smallvec::SmallVec;

use super::{
    series::{insert_point, push_point, Point, Series},
    varint::{self, Varints},
};

/// Packed bytes a series holds in place: with its length and the tag, 24 bytes. Four points
/// of a short-lived process take 11 to 16 (each step from the base or the point before 2 or
/// 3, each value 1 or 2).
const ROOM: usize = 22;

/// Points a series keeps packed on the heap before it becomes a plain [`Series`]: each update
/// unpacks and repacks them all.
const HEAP_POINTS: usize = 32;

/// The unit a value is packed in when it is a whole number of them (RSS is whole pages).
const PAGE: u64 = 4096;

/// Points unpacked for an update.
type Scratch = SmallVec<[Point; 16]>;

/// A step series ([`Series`]'s rules), packed while short.
#[derive(Clone, Debug)]
pub struct PackedSeries(Repr);

#[derive(Clone, Debug)]
enum Repr {
    /// LEB128 varints, two a point: its time (the first one's whole, then each one's step
    /// from the one before: times only grow) and its value (whole pages shifted left one, or
    /// bytes shifted left one with the low bit set).
    Packed {
        len: u8,
        buf: [u8; ROOM],
    },
    /// The same varints, past [`ROOM`] bytes: up to [`HEAP_POINTS`] points.
    Heap(Box<[u8]>),
    Full(Box<Series>),
}

impl Default for PackedSeries {
    fn default() -> PackedSeries {
        PackedSeries(Repr::Packed {
            len: 0,
            buf: [0; ROOM],
        })
    }
}

impl PackedSeries {
    /// The points, in time order; `base` is the one the series was packed against.
    pub fn points(&self, base: u64) -> Cow<'_, [Point]> {
        match &self.0 {
            Repr::Packed { .. } | Repr::Heap(_) => {
                Cow::Owned(unpack(self.bytes(), base).into_vec())
            }
            Repr::Full(s) => Cow::Borrowed(s.points()),
        }
    }

    pub fn last(&self, base: u64) -> Option<Point> {
        match &self.0 {
            Repr::Packed { .. } | Repr::Heap(_) => unpack(self.bytes(), base).last().copied(),
            Repr::Full(s) => s.last(),
        }
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            // Each varint ends with the one byte of it that has the top bit clear.
            Repr::Packed { .. } | Repr::Heap(_) => {
                self.bytes().iter().filter(|&&b| b < 0x80).count() / 2
            }
            Repr::Full(s) => s.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The packed bytes (none for a plain series).
    fn bytes(&self) -> &[u8] {
        match &self.0 {
            Repr::Packed { len, buf } => &buf[..*len as usize],
            Repr::Heap(b) => b,
            Repr::Full(_) => &[],
        }
    }

    /// [`Series::push`], packed against `base`.
    pub fn push(&mut self, p: Point, cap: usize, base: u64) {
        if let Repr::Full(s) = &mut self.0 {
            return s.push(p, cap);
        }
        self.update(p, (cap, base), push_point);
    }

    /// [`Series::insert`], packed against `base`.
    pub fn insert(&mut self, p: Point, cap: usize, base: u64) {
        if let Repr::Full(s) = &mut self.0 {
            return s.insert(p, cap);
        }
        self.update(p, (cap, base), insert_point);
    }

    /// [`Series::compact`] (`base`: the one it was packed against).
    pub fn compact(&mut self, base: u64) {
        if let Repr::Full(s) = &mut self.0 {
            return s.compact();
        }
        let mut s = Series::of_points(&unpack(self.bytes(), base));
        s.compact();
        self.0 = Repr::Full(Box::new(s));
    }

    /// A series of these points as they were written (a saved report's), packed against
    /// `base` when they pack; compacted past `cap` points.
    pub fn of_points(points: &[Point], cap: usize, base: u64) -> PackedSeries {
        PackedSeries(repr(points, cap, base))
    }

    /// A packed series with `p` pushed or inserted (`how`), as [`Series`] would: past `cap`
    /// points, or when the points no longer pack against `base`, it becomes one.
    fn update(&mut self, p: Point, (cap, base): (usize, u64), how: fn(&mut Scratch, Point)) {
        if let Repr::Full(_) = self.0 {
            return;
        }
        let mut points = unpack(self.bytes(), base);
        how(&mut points, p);
        self.0 = repr(&points, cap, base);
    }
}

/// `points` packed against `base` when they pack, else a plain [`Series`] (compacted past
/// `cap` points).
fn repr(points: &[Point], cap: usize, base: u64) -> Repr {
    let limit = cap.max(8);
    let mut packed = SmallVec::<[u8; ROOM]>::new();
    let fits = points.len() <= limit.min(HEAP_POINTS) && pack(points, base, &mut packed);
    match fits {
        true if packed.len() <= ROOM => {
            let mut buf = [0; ROOM];
            buf[..packed.len()].copy_from_slice(&packed);
            Repr::Packed {
                len: packed.len() as u8,
                buf,
            }
        }
        true => Repr::Heap(packed.as_slice().into()),
        false => Repr::Full(Box::new(Series::written(points, limit))),
    }
}

/// Packs the points into `out`, the first as a step from `base`; false when they do not pack
/// (one before the base, a value that does not fit).
fn pack(points: &[Point], base: u64, out: &mut SmallVec<[u8; ROOM]>) -> bool {
    let mut prev = base;
    for p in points {
        let Some(step) = p.ts_ns.checked_sub(prev) else {
            return false;
        };
        prev = p.ts_ns;
        let value = match p.bytes % PAGE {
            0 => (p.bytes / PAGE) << 1,
            _ if p.bytes >> 62 == 0 => (p.bytes << 1) | 1,
            _ => return false,
        };
        varint::put(out, step);
        varint::put(out, value);
    }
    true
}

fn unpack(bytes: &[u8], base: u64) -> Scratch {
    let mut next = Varints(bytes);
    let mut points = Scratch::new();
    let mut ts_ns = base;
    while let (Some(step), Some(value)) = (next.next(), next.next()) {
        ts_ns += step;
        let bytes = match value & 1 {
            0 => (value >> 1) * PAGE,
            _ => value >> 1,
        };
        points.push(Point { ts_ns, bytes });
    }
    points
}

#[cfg(test)]
#[path = "series_packed_tests.rs"]
mod tests;
