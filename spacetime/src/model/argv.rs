//! argv as both reducers assemble it: an exec record announces the argument area's length
//! and carries its first bytes; continuation records bring the rest, each at the offset where
//! the last ended. A record at any other offset is a gap (one was lost): the area stays as it
//! was.

use std::sync::Arc;

use spacetime_common::flags;

use super::process::Names;
use crate::kernel::events::Exec;
use crate::util::arg_area::{area_into_args, without_final_nul};

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

    /// The bytes so far, moved out.
    pub fn into_area(self) -> Vec<u8> {
        self.area
    }

    /// The bytes so far, taken (the assembly is left empty).
    pub fn take_area(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.area)
    }
}

/// The rest of an image's argv, streaming in continuation records after its exec record.
#[derive(Clone, Debug)]
pub struct PendingArgv {
    asm: ArgvAssembly,
    exec_flags: u32,
}

/// What a continuation record did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Appended {
    /// Nothing was streaming, or it did not follow on: nothing appended.
    Gap,
    /// Appended; more is to come.
    Partial,
    /// The last bytes: the names hold the whole area.
    Arrived,
}

impl PendingArgv {
    /// Bytes held while streaming.
    pub fn held_bytes(&self) -> usize {
        self.asm.held_bytes()
    }
}

/// The names an exec record gives (its first argv bytes included) and, when continuation
/// records are to follow, the assembly of the rest.
pub fn exec_names(e: Exec) -> (Names, Option<Box<PendingArgv>>) {
    let expected = e.args_len as usize;
    let exe = e.filename.into_boxed_slice();
    if e.args.len() >= expected {
        let asm = ArgvAssembly::new(e.args, e.args_len);
        let names = Names {
            exe,
            comm: e.comm,
            argv_complete: asm.complete(e.hdr.flags),
            args: area_into_args(asm.into_area()),
        };
        return (names, None);
    }
    let names = Names::from_area(exe, e.comm, &e.args, false);
    let mut area = e.args;
    area.reserve_exact(expected - area.len());
    let pending = PendingArgv {
        asm: ArgvAssembly::new(area, e.args_len),
        exec_flags: e.hdr.flags,
    };
    (names, Some(Box::new(pending)))
}

/// Appends a continuation record to the argv streaming into `names`. Once every byte came the
/// names take the whole area (moved, not copied) and `pending` is emptied.
pub fn append_args(
    pending: &mut Option<Box<PendingArgv>>,
    names: &mut Arc<Names>,
    offset: u32,
    data: &[u8],
) -> Appended {
    let Some(p) = pending.as_deref_mut() else {
        return Appended::Gap;
    };
    if !p.asm.append(offset, data) {
        return Appended::Gap;
    }
    if !p.asm.arrived() {
        return Appended::Partial;
    }
    let n = Arc::make_mut(names);
    n.argv_complete = p.asm.complete(p.exec_flags);
    n.args = area_into_args(p.asm.take_area());
    *pending = None;
    Appended::Arrived
}

/// Gives `names` the argv bytes that arrived so far (not complete); with `end`, streaming
/// ends there (the image ended, or its process).
pub fn publish_partial(pending: &mut Option<Box<PendingArgv>>, names: &mut Arc<Names>, end: bool) {
    let Some(p) = pending.as_deref() else {
        return;
    };
    let n = Arc::make_mut(names);
    n.args = without_final_nul(p.asm.area()).into();
    n.argv_complete = false;
    if end {
        *pending = None;
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

    fn exec(flags: u32, args_len: u32, first: &[u8]) -> Exec {
        Exec {
            hdr: spacetime_common::EventHeader {
                flags,
                ..Default::default()
            },
            old_pid: 1,
            uid: 0,
            cgroup_id: 0,
            comm: "ls".into(),
            filename: b"/bin/ls".to_vec(),
            args_len,
            args: first.to_vec(),
        }
    }

    #[test]
    fn an_argv_in_its_exec_record_is_complete_at_once() {
        let (names, pending) = exec_names(exec(0, 6, b"ls\0-l\0"));
        assert!(pending.is_none() && names.argv_complete);
        assert_eq!(names.args.as_ref(), b"ls\0-l");
        let (names, pending) = exec_names(exec(flags::EXEC_ARGS_FAULT, 0, b""));
        assert!(pending.is_none() && !names.argv_complete);
    }

    #[test]
    fn a_streamed_argv_shows_its_first_bytes_then_the_whole_area() {
        let (names, mut pending) = exec_names(exec(0, 9, b"ls\0-"));
        let mut names = Arc::new(names);
        assert_eq!(names.args.as_ref(), b"ls\0-");
        assert_eq!(
            append_args(&mut pending, &mut names, 7, b"x"),
            Appended::Gap
        );
        assert_eq!(
            append_args(&mut pending, &mut names, 4, b"l\0"),
            Appended::Partial
        );
        // Not shown until asked (watch) or every byte came.
        assert_eq!(names.args.as_ref(), b"ls\0-");
        publish_partial(&mut pending, &mut names, false);
        assert_eq!(
            (names.args.as_ref(), names.argv_complete),
            (&b"ls\0-l"[..], false)
        );
        assert_eq!(
            append_args(&mut pending, &mut names, 6, b"/\0\0"),
            Appended::Arrived
        );
        assert!(pending.is_none() && names.argv_complete);
        assert_eq!(names.argv().count(), 4, "{:?}", names.args);
        assert_eq!(
            append_args(&mut pending, &mut names, 9, b"y"),
            Appended::Gap
        );
    }

    #[test]
    fn a_cut_argv_streams_up_to_the_cap_and_stays_incomplete() {
        let (names, mut pending) = exec_names(exec(flags::EXEC_ARGS_TRUNCATED, 6, b"ab\0"));
        let mut names = Arc::new(names);
        assert_eq!(
            append_args(&mut pending, &mut names, 3, b"cd\0"),
            Appended::Arrived
        );
        assert_eq!(
            (names.args.as_ref(), names.argv_complete),
            (&b"ab\0cd"[..], false)
        );
    }

    #[test]
    fn an_ended_stream_keeps_what_arrived() {
        let (names, mut pending) = exec_names(exec(0, 100, b"ab\0c"));
        let mut names = Arc::new(names);
        // A forked child shares the names: it keeps what it inherited.
        let child = Arc::clone(&names);
        assert_eq!(
            append_args(&mut pending, &mut names, 4, b"d"),
            Appended::Partial
        );
        publish_partial(&mut pending, &mut names, true);
        assert!(pending.is_none());
        assert_eq!(
            (names.args.as_ref(), names.argv_complete),
            (&b"ab\0cd"[..], false)
        );
        assert_eq!(child.args.as_ref(), b"ab\0c");
    }
}
