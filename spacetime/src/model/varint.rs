//! LEB128 varints, as the packed RSS series and CPU segments hold them: seven bits a byte, the
//! top bit set on every byte but a number's last.

/// Appends `v` to `out`.
pub(super) fn put(out: &mut impl Extend<u8>, mut v: u64) {
    while v >= 0x80 {
        out.extend([v as u8 | 0x80]);
        v >>= 7;
    }
    out.extend([v as u8]);
}

/// The numbers in `bytes`, in order (a last one cut short is left out).
pub(super) struct Varints<'a>(pub(super) &'a [u8]);

impl Iterator for Varints<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate() {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.0 = &self.0[i + 1..];
                return Some(v);
            }
        }
        None
    }
}
