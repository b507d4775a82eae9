//! The critical path: the chain of processes that set the wall time.
//!
//! A process tree records who started whom and when each ran, not what each waited for; the
//! path is read backwards from the end, the way a build's dependencies show in time. Starting
//! at the end of the trace, with the roots as candidates: of the current process's children,
//! take the one that ended last at or before the current time (what the process was waiting
//! for then); the time between that child's end and the current time is the process's own;
//! walk into the child the same way over its life; then continue in the parent from the
//! child's start, looking for the child that ended last before it. What is left before the
//! first such child is the process's own time again. A child's end here is the end of its
//! whole subtree (a descendant that outlives it keeps it on the path).
//!
//! Under `make -j`, a job starts when the one it depends on ends — or when a job slot frees up
//! — so each step of the walk lands on the job that held the next one back: the path is the
//! longest dependency chain as it ran. Siblings that ran alongside and ended earlier are off
//! the path. The segments cover the wall exactly, so each step's share of the wall adds up to
//! one.

/// A process as the walk sees it: its parent (index) and when it ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Node {
    pub parent: Option<usize>,
    pub start_ns: u64,
    /// Its exit, or the end of the trace for one still running.
    pub end_ns: u64,
}

/// A stretch of the wall the path spends in one process (`None`: no traced process, as
/// between two roots of an attach).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The process, or [`NO_NODE`]: 24 bytes a step where an `Option<usize>` made 32 (a
    /// 100 000-process build's path has 200 000 steps).
    node: u32,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A stretch in no traced process.
const NO_NODE: u32 = u32::MAX;

impl Segment {
    pub fn len_ns(&self) -> u64 {
        self.end_ns - self.start_ns
    }

    /// The process the stretch is spent in (`None`: no traced process).
    pub fn node(&self) -> Option<usize> {
        (self.node != NO_NODE).then_some(self.node as usize)
    }
}

struct Frame {
    node: Option<usize>,
    /// The window left to explain: from `lo` up to `t`.
    lo: u64,
    t: u64,
    /// Candidates are `kids[..hi]` (sorted by reach): each is taken at most once.
    kids: usize,
    hi: usize,
}

use crate::model::children::Children;

/// The path over `[0, wall_ns]`, in time order; consecutive stretches of one process merged.
/// `node(i)` is process `i` of `n`: asked for again rather than copied, so the walk over a
/// 100k-process tree holds its reach and its children lists only (a `u64` and two `u32` a
/// process).
pub fn critical_path(n: usize, node: impl Fn(usize) -> Node, wall_ns: u64) -> Vec<Segment> {
    let parent = |i: usize| node(i).parent.filter(|&p| p < n && p != i);
    // When each subtree ends: later children first (they come later in start order).
    let mut reach: Vec<u64> = (0..n).map(|i| node(i).end_ns.min(wall_ns)).collect();
    for i in (0..n).rev() {
        if let Some(p) = parent(i).filter(|&p| p < i) {
            reach[p] = reach[p].max(reach[i]);
        }
    }
    let mut kids = Children::new(n, parent);
    kids.sort_each(|i| (reach[i], std::cmp::Reverse(node(i).start_ns)));
    // Pushed from the end backwards, a stretch that continues the last one's process merges
    // with it.
    let mut out: Vec<Segment> = Vec::new();
    let mut push = |node: Option<usize>, start_ns: u64, end_ns: u64| {
        if end_ns <= start_ns {
            return;
        }
        // A tree's processes are counted in u32 everywhere (pids, the key index's slots).
        let node = node.map_or(NO_NODE, |n| n as u32);
        match out.last_mut() {
            Some(l) if l.node == node && l.start_ns == end_ns => l.start_ns = start_ns,
            _ => out.push(Segment {
                node,
                start_ns,
                end_ns,
            }),
        }
    };
    let mut stack = vec![Frame {
        node: None,
        lo: 0,
        t: wall_ns,
        kids: n,
        hi: kids.of(n).len(),
    }];
    while let Some(f) = stack.last_mut() {
        let list = kids.of(f.kids);
        let t = f.t;
        let idx = list[..f.hi].partition_point(|&c| reach[c as usize] <= t);
        let pick = idx
            .checked_sub(1)
            .map(|i| (i, list[i] as usize))
            .filter(|&(_, c)| reach[c] > f.lo);
        let Some((i, c)) = pick else {
            push(f.node, f.lo, f.t);
            stack.pop();
            continue;
        };
        push(f.node, reach[c], f.t);
        let start = node(c).start_ns.clamp(f.lo, reach[c]);
        f.t = start;
        f.hi = i;
        let child = Frame {
            node: Some(c),
            lo: start,
            t: reach[c],
            kids: c,
            hi: kids.of(c).len(),
        };
        stack.push(child);
    }
    out.reverse();
    out.shrink_to_fit();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(parent: Option<usize>, start_ns: u64, end_ns: u64) -> Node {
        Node {
            parent,
            start_ns,
            end_ns,
        }
    }

    fn path(nodes: &[Node], wall: u64) -> Vec<(Option<usize>, u64, u64)> {
        let p = critical_path(nodes.len(), |i| nodes[i], wall);
        assert_eq!(p.iter().map(Segment::len_ns).sum::<u64>(), wall, "{p:?}");
        p.iter().map(|s| (s.node(), s.start_ns, s.end_ns)).collect()
    }

    #[test]
    fn a_dependency_chain_beside_shorter_jobs() {
        // make (0) runs a → b → c → d one after the other (100 each), and e, f (50 each)
        // alongside a.
        let nodes = [
            node(None, 0, 420),
            node(Some(0), 5, 105),   // a
            node(Some(0), 6, 56),    // e
            node(Some(0), 7, 57),    // f
            node(Some(0), 106, 206), // b
            node(Some(0), 207, 307), // c
            node(Some(0), 308, 408), // d
        ];
        assert_eq!(
            path(&nodes, 420),
            [
                (Some(0), 0, 5),
                (Some(1), 5, 105),
                (Some(0), 105, 106),
                (Some(4), 106, 206),
                (Some(0), 206, 207),
                (Some(5), 207, 307),
                (Some(0), 307, 308),
                (Some(6), 308, 408),
                (Some(0), 408, 420),
            ]
        );
    }

    #[test]
    fn a_job_slot_is_the_dependency_under_make_j2() {
        // Two slots: A [0,100] and B [10,150]; C starts when A frees its slot, D when B does.
        let nodes = [
            node(None, 0, 300),
            node(Some(0), 0, 100),   // A
            node(Some(0), 10, 150),  // B
            node(Some(0), 101, 290), // C: the last to end
            node(Some(0), 151, 200), // D
        ];
        let p = path(&nodes, 300);
        let steps: Vec<Option<usize>> = p.iter().map(|s| s.0).collect();
        assert_eq!(steps, [Some(1), Some(0), Some(3), Some(0)], "{p:?}");
    }

    #[test]
    fn nested_processes_and_an_orphan_that_outlives_its_parent() {
        // sh (0) runs cc (1), which runs cc1 (2) then as (3); sh leaves a daemon (4) behind
        // that ends last.
        let nodes = [
            node(None, 0, 100),
            node(Some(0), 10, 90),
            node(Some(1), 12, 60),
            node(Some(1), 61, 88),
            node(Some(0), 95, 150),
        ];
        assert_eq!(
            path(&nodes, 150),
            [
                (Some(0), 0, 10),
                (Some(1), 10, 12),
                (Some(2), 12, 60),
                (Some(1), 60, 61),
                (Some(3), 61, 88),
                (Some(1), 88, 90),
                (Some(0), 90, 95),
                (Some(4), 95, 150),
            ]
        );
    }

    #[test]
    fn two_roots_leave_the_time_between_them_to_no_process() {
        let nodes = [node(None, 0, 40), node(None, 60, 100)];
        assert_eq!(
            path(&nodes, 100),
            [(Some(0), 0, 40), (None, 40, 60), (Some(1), 60, 100)]
        );
        // Instant processes and an empty trace.
        let nodes = [node(None, 0, 0), node(Some(0), 0, 0)];
        assert_eq!(path(&nodes, 0), []);
        assert_eq!(path(&[], 10), [(None, 0, 10)]);
    }

    #[test]
    fn a_deep_chain_does_not_recurse() {
        let n: usize = 200_000;
        let nodes: Vec<Node> = (0..n)
            .map(|i| node(i.checked_sub(1), i as u64, 2 * n as u64 - i as u64))
            .collect();
        let p = critical_path(n, |i| nodes[i], 2 * n as u64);
        assert_eq!(p.len(), 2 * n - 1);
    }
}
