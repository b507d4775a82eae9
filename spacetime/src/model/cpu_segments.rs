//! A process's CPU segments ([`crate::model::cpu_ticks`]), packed in place while they are few.
//! A 100k-process trace holds one list per process, most with one segment (from the fork to
//! the exit): as a list with one segment inline it took 32 bytes a process; packed it takes
//! 16, the segment in 5 to 9 bytes (its start against the process's, then its length and its
//! CPU). Segments that do not fit are a plain list, which they stay: a long process gets a
//! segment a tick, and unpacking them all at each would cost its whole list each time.

use std::borrow::Cow;

use smallvec::SmallVec;

use crate::model::{
    cpu_ticks::Segment,
    varint::{self, Varints},
};

/// Packed bytes held in place: with their length and the tag, 16 bytes.
const ROOM: usize = 14;

/// Segments a change holds in place.
const INLINE: usize = 4;

/// Segments unpacked for a change.
pub type Scratch = SmallVec<[Segment; INLINE]>;

#[derive(Clone, Debug)]
pub struct CpuSegments(Repr);

#[derive(Clone, Debug)]
enum Repr {
    /// LEB128 varints, three a segment: its start as a step from the one before (the first
    /// one's from the process's start), zigzagged (threads' segments interleave); its length;
    /// its CPU.
    Packed { len: u8, buf: [u8; ROOM] },
    /// Past [`ROOM`] bytes. A boxed `Vec` is one word where a `Vec` is three and a boxed
    /// slice two: either would make every process's 16 bytes 24 or 32.
    #[allow(clippy::box_collection)]
    List(Box<Vec<Segment>>),
}

impl Default for CpuSegments {
    fn default() -> CpuSegments {
        CpuSegments(Repr::Packed {
            len: 0,
            buf: [0; ROOM],
        })
    }
}

impl CpuSegments {
    /// The segments, in the order kept; `base_ns` is the process's start (the same at
    /// every call: the first segment's start is packed against it).
    pub fn get(&self, base_ns: u64) -> Cow<'_, [Segment]> {
        match &self.0 {
            Repr::Packed { len, buf } => {
                Cow::Owned(unpack(&buf[..*len as usize], base_ns).into_vec())
            }
            Repr::List(list) => Cow::Borrowed(list),
        }
    }

    /// Changes the segments with `f` (`base_ns` as for [`get`](Self::get)); returns what `f`
    /// returns.
    pub fn update<R>(&mut self, base_ns: u64, f: impl FnOnce(&mut Scratch) -> R) -> R {
        let (len, buf) = match &mut self.0 {
            Repr::List(list) => {
                let mut segments = Scratch::from_vec(std::mem::take(&mut **list));
                let r = f(&mut segments);
                **list = segments.into_vec();
                return r;
            }
            Repr::Packed { len, buf } => (len, buf),
        };
        let mut segments = unpack(&buf[..*len as usize], base_ns);
        let r = f(&mut segments);
        let mut packed = SmallVec::<[u8; ROOM]>::new();
        match pack(&segments, base_ns, &mut packed) {
            true if packed.len() <= ROOM => {
                buf[..packed.len()].copy_from_slice(&packed);
                *len = packed.len() as u8;
            }
            _ => self.0 = Repr::List(Box::new(spilled(segments))),
        }
        r
    }
}

/// `segments` as a list whose buffer outgrows [`Scratch`]'s inline room: `Scratch::from_vec`
/// keeps such a buffer and `into_vec` hands it back, so a change of a list allocates nothing;
/// a smaller one would be copied in place and a new one allocated at every change.
fn spilled(segments: Scratch) -> Vec<Segment> {
    let mut list = segments.into_vec();
    list.reserve_exact((INLINE + 1).saturating_sub(list.len()));
    list
}

/// Packs `segments` into `out`; false when one does not pack (it ends before it starts).
fn pack(segments: &[Segment], base_ns: u64, out: &mut SmallVec<[u8; ROOM]>) -> bool {
    let mut prev = base_ns;
    for s in segments {
        let Some(length) = s.to_ns.checked_sub(s.from_ns) else {
            return false;
        };
        let step = s.from_ns.wrapping_sub(prev) as i64;
        prev = s.from_ns;
        let zigzag = ((step << 1) ^ (step >> 63)) as u64;
        for v in [zigzag, length, s.cpu_ns] {
            varint::put(out, v);
        }
    }
    true
}

fn unpack(bytes: &[u8], base_ns: u64) -> Scratch {
    let mut next = Varints(bytes);
    let mut segments = Scratch::new();
    let mut prev = base_ns;
    while let (Some(zigzag), Some(length), Some(cpu_ns)) = (next.next(), next.next(), next.next()) {
        let step = ((zigzag >> 1) as i64) ^ -((zigzag & 1) as i64);
        let from_ns = prev.wrapping_add(step as u64);
        prev = from_ns;
        segments.push(Segment {
            from_ns,
            to_ns: from_ns + length,
            cpu_ns,
        });
    }
    segments
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(from_ns: u64, to_ns: u64, cpu_ns: u64) -> Segment {
        Segment {
            from_ns,
            to_ns,
            cpu_ns,
        }
    }

    #[test]
    fn one_short_process_segment_packs_in_place_and_reads_back() {
        assert_eq!(size_of::<CpuSegments>(), 16);
        let base = 9_322_361_000_000;
        let mut c = CpuSegments::default();
        assert!(c.get(base).is_empty());
        let i = c.update(base, |s| {
            s.push(seg(base, base + 1_200_000, 900_000));
            s.len() - 1
        });
        assert_eq!(i, 0);
        assert!(matches!(c.0, Repr::Packed { len, .. } if len <= 9), "{c:?}");
        assert_eq!(c.get(base).as_ref(), [seg(base, base + 1_200_000, 900_000)]);
    }

    #[test]
    fn interleaved_threads_and_many_segments_read_back_exactly() {
        let base = 5_000;
        let mut c = CpuSegments::default();
        let mut want = Vec::new();
        // A second thread's segment starting before the first's (a negative step), then a
        // long process's ticks past what packs in place.
        for s in [seg(7_000, 9_000, 1_500), seg(6_000, 9_500, 3_000)]
            .into_iter()
            .chain((0..50).map(|k| seg(10_000 + k * 10_000_000, 20_000 + k * 10_000_000, 10_000)))
        {
            c.update(base, |segs| segs.push(s));
            want.push(s);
            assert_eq!(c.get(base).as_ref(), want.as_slice());
        }
        assert!(matches!(&c.0, Repr::List(l) if l.capacity() > INLINE));
        // A change of an earlier segment (run time a tick had not been told of).
        c.update(base, |segs| segs[1].cpu_ns += 7);
        want[1].cpu_ns += 7;
        assert_eq!(c.get(base).as_ref(), want.as_slice());
        // Extremes: a start far from the base, lengths and CPU near the top of a u64.
        let mut c = CpuSegments::default();
        let far = seg(u64::MAX - 10, u64::MAX - 1, u64::MAX / 2);
        c.update(0, |segs| segs.push(far));
        assert_eq!(c.get(0).as_ref(), [far]);
    }

    #[test]
    fn a_short_list_keeps_a_buffer_that_outgrows_the_scratch() {
        // One segment far from the base does not pack in 14 bytes: a list of one. Its buffer
        // must stay larger than the scratch's inline room, or each change would copy it in
        // place and allocate a new one (an allocation a tick for such a process).
        let mut c = CpuSegments::default();
        let far = seg(u64::MAX / 2, u64::MAX / 2 + 10, u64::MAX / 4);
        c.update(0, |s| s.push(far));
        for change in 0..3 {
            let Repr::List(list) = &c.0 else {
                panic!("change {change}: not a list: {c:?}")
            };
            assert_eq!(list.len(), 1, "change {change}");
            assert!(
                list.capacity() > INLINE,
                "change {change}: a buffer of {} would be copied into the scratch",
                list.capacity()
            );
            c.update(0, |s| s[0].cpu_ns += 1);
        }
        assert_eq!(c.get(0)[0].cpu_ns, u64::MAX / 4 + 3);
    }
}
