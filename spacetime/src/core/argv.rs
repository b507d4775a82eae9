//! argv as both reducers assemble it: an exec record announces the argument area's length
//! and carries its first bytes; continuation records bring the rest, each at the offset where
//! the last ended. A record at any other offset is a gap (one was lost): the area stays as it
//! was.

use spacetime_common::flags;

/// An argument area being assembled.
#[derive(Clone, Debug, Default)]
pub struct ArgvAssembly {
    expected: u32,
    area: Vec<u8>,
}

impl ArgvAssembly {
    /// The exec record's first bytes of an area of `expected` bytes.
    pub fn new(first: Vec<u8>, expected: u32) -> ArgvAssembly {
        ArgvAssembly {
            expected,
            area: first,
        }
    }

    /// Every announced byte arrived.
    pub fn arrived(&self) -> bool {
        self.area.len() >= self.expected as usize
    }

    /// Exactly the announced bytes arrived, and the kernel neither cut the area nor failed to
    /// read it (`exec_flags`: the exec record's flags).
    pub fn complete(&self, exec_flags: u32) -> bool {
        self.area.len() == self.expected as usize
            && exec_flags & (flags::EXEC_ARGS_TRUNCATED | flags::EXEC_ARGS_FAULT) == 0
    }

    /// Appends a continuation at `offset`; false (and nothing appended) for a gap.
    pub fn append(&mut self, offset: u32, data: &[u8]) -> bool {
        if offset as usize != self.area.len() {
            return false;
        }
        self.area.extend_from_slice(data);
        true
    }

    /// The bytes so far.
    /// Bytes held for the area so far (its allocation), for a memory budget.
    pub fn held_bytes(&self) -> usize {
        self.area.capacity()
    }

    pub fn area(&self) -> &[u8] {
        &self.area
    }

    /// The bytes so far, taken (the assembly is left empty).
    pub fn take_area(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.area)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_in_order_complete_the_area() {
        let mut a = ArgvAssembly::new(b"ls\0-l".to_vec(), 8);
        assert!(!a.arrived());
        assert!(a.append(5, b"\0/\0"));
        assert!(a.arrived() && a.complete(0));
        assert_eq!(a.area(), b"ls\0-l\0/\0");
    }

    #[test]
    fn a_gap_appends_nothing() {
        let mut a = ArgvAssembly::new(b"ls\0".to_vec(), 10);
        assert!(!a.append(4, b"x"));
        assert_eq!(a.area(), b"ls\0");
        assert!(!a.arrived());
    }

    #[test]
    fn a_cut_area_is_not_complete() {
        let a = ArgvAssembly::new(b"ls\0".to_vec(), 3);
        assert!(a.complete(0));
        assert!(!a.complete(flags::EXEC_ARGS_TRUNCATED));
        assert!(!a.complete(flags::EXEC_ARGS_FAULT));
    }
}
