//! An index from process keys to slots of a list that holds the keys itself: 4 bytes a slot
//! (and the table's control byte) where a map from [`Key`] to an index holds 24.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;

use crate::model::process::Key;

/// Slots by key; the caller's list says which key a slot has (`key_of`).
#[derive(Debug, Default)]
pub struct KeyIndex {
    table: HashTable<u32>,
}

fn hash(key: &Key) -> u64 {
    FxBuildHasher.hash_one(key)
}

impl KeyIndex {
    /// The slot of `key`.
    pub fn get(&self, key: &Key, key_of: impl Fn(u32) -> Key) -> Option<usize> {
        self.table
            .find(hash(key), |&slot| key_of(slot) == *key)
            .map(|&slot| slot as usize)
    }

    /// Files `slot` under `key`, which no slot has yet.
    pub fn insert(&mut self, key: &Key, slot: usize, key_of: impl Fn(u32) -> Key) {
        let slot = u32::try_from(slot).expect("fewer than 2^32 processes");
        self.table
            .insert_unique(hash(key), slot, |&s| hash(&key_of(s)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_slot_by_its_key_and_nothing_else() {
        let keys: Vec<Key> = (0..1000u32)
            .map(|i| Key {
                tgid: i % 100,
                start_ns: u64::from(i) * 7,
            })
            .collect();
        let mut index = KeyIndex::default();
        for (slot, key) in keys.iter().enumerate() {
            index.insert(key, slot, |s| keys[s as usize]);
        }
        for (slot, key) in keys.iter().enumerate() {
            assert_eq!(index.get(key, |s| keys[s as usize]), Some(slot), "{key:?}");
        }
        let other = Key {
            tgid: 5,
            start_ns: 6,
        };
        assert_eq!(index.get(&other, |s| keys[s as usize]), None);
    }
}
