//! Each process's children, by position, in one array: a `Vec` per process would cost 24
//! bytes each (and grow by doubling) in a 100k-process tree; this costs two `u32` a process.

/// Every process's children (the roots' at index `n`), each list in position order unless
/// sorted again: `list[at[i]..at[i + 1]]` are `i`'s.
pub struct Children {
    at: Vec<u32>,
    list: Vec<u32>,
}

impl Children {
    /// The children of `n` processes, `parent(i)` being `i`'s (`None`, or `n` or more: a root).
    pub fn new(n: usize, parent: impl Fn(usize) -> Option<usize>) -> Children {
        let slot = |i: usize| parent(i).filter(|&p| p < n).unwrap_or(n);
        // Counted at `slot + 2`, summed: `at[p + 1]` is where `p`'s list starts, then (each
        // child placed there moving it on) where it ends.
        let mut at = vec![0u32; n + 3];
        for i in 0..n {
            at[slot(i) + 2] += 1;
        }
        for i in 2..at.len() {
            at[i] += at[i - 1];
        }
        let mut list = vec![0u32; n];
        for i in 0..n {
            let s = &mut at[slot(i) + 1];
            list[*s as usize] = i as u32;
            *s += 1;
        }
        at.truncate(n + 2);
        Children { at, list }
    }

    /// Sorts each list by `key` (stable: equal keys stay in position order).
    pub fn sort_each<K: Ord>(&mut self, key: impl Fn(usize) -> K) {
        for w in self.at.windows(2) {
            self.list[w[0] as usize..w[1] as usize].sort_by_key(|&i| key(i as usize));
        }
    }

    /// `p`'s children (`n`: the roots).
    pub fn of(&self, p: usize) -> &[u32] {
        &self.list[self.at[p] as usize..self.at[p + 1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_in_position_order_and_roots_last() {
        // 0 and 3 are roots (3's parent is out of range); 1, 4 are 0's; 2 is 1's.
        let parent = [None, Some(0), Some(1), Some(9), Some(0)];
        let mut c = Children::new(parent.len(), |i| parent[i]);
        assert_eq!(c.of(0), [1, 4]);
        assert_eq!(c.of(1), [2]);
        assert_eq!(c.of(2), [] as [u32; 0]);
        assert_eq!(c.of(5), [0, 3]);
        c.sort_each(std::cmp::Reverse);
        assert_eq!(c.of(0), [4, 1]);
        assert_eq!(c.of(5), [3, 0]);
        let none = Children::new(0, |_| None);
        assert_eq!(none.of(0), [] as [u32; 0]);
    }
}
