//! Taskstats figures packed as LEB128 varints in one byte buffer. Most of a record's figures
//! are small or zero, so a record takes ~30 bytes instead of 192; a 100k-process trace keeps
//! one per exit until the cross-check, and one sum per process after it. Which figures, in
//! which order, is the declaration's (`sums.rs`): nothing here names one.

use super::ProcessTaskstats;

/// How two sums of one figure combine.
#[derive(Clone, Copy, Debug)]
pub(super) enum How {
    Add,
    /// A peak: the larger.
    Max,
}

/// One figure's value: how it combines and packs.
pub(super) trait Value: Copy {
    fn combine(&mut self, o: Self, how: How);
    fn pack(self, out: &mut Vec<u8>);
    fn unpack(from: &mut std::slice::Iter<'_, u8>) -> Self;
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn take(from: &mut std::slice::Iter<'_, u8>) -> u64 {
    let (mut v, mut shift) = (0u64, 0);
    for &b in from.by_ref() {
        v |= u64::from(b & 0x7f) << shift;
        shift += 7;
        if b & 0x80 == 0 {
            break;
        }
    }
    v
}

impl Value for u64 {
    fn combine(&mut self, o: u64, how: How) {
        match how {
            How::Add => *self += o,
            How::Max => *self = (*self).max(o),
        }
    }

    fn pack(self, out: &mut Vec<u8>) {
        put(out, self);
    }

    fn unpack(from: &mut std::slice::Iter<'_, u8>) -> u64 {
        take(from)
    }
}

impl Value for u32 {
    fn combine(&mut self, o: u32, how: How) {
        match how {
            How::Add => *self += o,
            How::Max => *self = (*self).max(o),
        }
    }

    fn pack(self, out: &mut Vec<u8>) {
        put(out, u64::from(self));
    }

    fn unpack(from: &mut std::slice::Iter<'_, u8>) -> u32 {
        take(from) as u32
    }
}

/// A figure some records (or older reports) lack: absent on one side, the other's.
impl Value for Option<u64> {
    fn combine(&mut self, o: Option<u64>, how: How) {
        match (self.as_mut(), o) {
            (Some(a), Some(b)) => a.combine(b, how),
            (None, b) => *self = b,
            (Some(_), None) => {}
        }
    }

    /// A presence byte, then the value.
    fn pack(self, out: &mut Vec<u8>) {
        put(out, u64::from(self.is_some()));
        if let Some(v) = self {
            put(out, v);
        }
    }

    fn unpack(from: &mut std::slice::Iter<'_, u8>) -> Option<u64> {
        (take(from) != 0).then(|| take(from))
    }
}

/// Appends `s` to `buf`; returns where it starts.
pub fn pack(buf: &mut Vec<u8>, s: &ProcessTaskstats) -> usize {
    let at = buf.len();
    s.pack_into(buf);
    at
}

/// The figures packed at `at` by [`pack`].
pub fn unpack(buf: &[u8], at: usize) -> ProcessTaskstats {
    ProcessTaskstats::unpack_from(&mut buf[at..].iter())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_every_figure() {
        let mut s = ProcessTaskstats {
            utime_us: u64::MAX,
            minflt: 87,
            read_char: 3072,
            hiwater_rss_kib: 1 << 40,
            coremem_mib_us: Some(u64::MAX),
            records: u32::MAX,
            cancelled_write_bytes: 4096,
            ..ProcessTaskstats::default()
        };
        s.delays.irq_ns = 127;
        s.delays.cpu_ns = 128;
        let mut buf = vec![9];
        let a = pack(&mut buf, &ProcessTaskstats::default());
        let b = pack(&mut buf, &s);
        let c = pack(&mut buf, &ProcessTaskstats::default());
        assert_eq!(a, 1);
        assert_eq!(unpack(&buf, a), ProcessTaskstats::default());
        assert_eq!(unpack(&buf, b), s);
        assert_eq!(unpack(&buf, c), ProcessTaskstats::default());
    }
}
