//! A fast hasher for maps keyed by pids, ids and process keys: one multiplication per word
//! instead of SipHash, which the per-event paths (watch's table, trace's tree and timeline)
//! would otherwise spend most of their hashing time in. Keys are
//! kernel-assigned numbers, not attacker-chosen strings, so flooding resistance is not needed.

use std::{
    collections::{HashMap, HashSet},
    hash::{BuildHasherDefault, Hasher},
};

#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        // Multiplying by an odd constant is a bijection on every low-bit window, so sequential
        // pids spread over buckets; the high bits (hashbrown's tags) get the mixed bits.
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A `HashMap` keyed by ids, with [`IdHasher`].
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A `HashSet` of ids, with [`IdHasher`].
pub type IdSet<T> = HashSet<T, BuildHasherDefault<IdHasher>>;
