//! The columns of `watch`'s table, chosen for the terminal's width: header and rows are laid
//! out from the same [`WatchLayout`], so they agree column for column.

use std::fmt::Write as _;

/// The table's columns before COMMAND, in order.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Col {
    Time,
    Pid,
    Ppid,
    Uid,
    Exit,
    Runtime,
    Cpu,
    Peak,
    Thr,
}

impl Col {
    pub const ALL: [Col; 9] = [
        Col::Time,
        Col::Pid,
        Col::Ppid,
        Col::Uid,
        Col::Exit,
        Col::Runtime,
        Col::Cpu,
        Col::Peak,
        Col::Thr,
    ];

    /// (header, width, right-aligned, spaces before it).
    pub fn spec(self, ms: bool) -> (&'static str, usize, bool, usize) {
        match self {
            Col::Time => ("TIME", if ms { 12 } else { 8 }, false, 0),
            Col::Pid => ("PID", 7, true, 1),
            Col::Ppid => ("PPID", 7, true, 1),
            Col::Uid => ("UID", 5, true, 1),
            Col::Exit => ("EXIT", 7, false, 2),
            Col::Runtime => ("RUNTIME", 8, true, 1),
            Col::Cpu => ("CPU", 8, true, 1),
            Col::Peak => ("PEAK RSS", 8, true, 1),
            Col::Thr => ("THR", 4, true, 1),
        }
    }
}

/// The columns a table line has: all of them when the width is unlimited; on a narrow
/// terminal THR, UID, the milliseconds, CPU, PPID, RUNTIME then TIME go, in that order, until
/// COMMAND keeps a third of the line (at least 16 columns). Header and rows share it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchLayout {
    pub cols: Vec<Col>,
    pub ms: bool,
}

impl WatchLayout {
    pub fn for_width(width: Option<usize>) -> WatchLayout {
        let mut lay = WatchLayout {
            cols: Col::ALL.to_vec(),
            ms: true,
        };
        let Some(w) = width else { return lay };
        let want = (w / 3).max(16);
        let drops = [
            Some(Col::Thr),
            Some(Col::Uid),
            None,
            Some(Col::Cpu),
            Some(Col::Ppid),
            Some(Col::Runtime),
            Some(Col::Time),
        ];
        for d in drops {
            if lay.fixed() + want <= w {
                break;
            }
            match d {
                Some(c) => lay.cols.retain(|&x| x != c),
                None => lay.ms = false,
            }
        }
        lay
    }

    /// Columns taken before COMMAND.
    pub fn fixed(&self) -> usize {
        let first = self.cols.first().map_or(0, |c| c.spec(self.ms).3);
        self.cols
            .iter()
            .map(|c| {
                let (_, w, _, sep) = c.spec(self.ms);
                w + sep
            })
            .sum::<usize>()
            - first
            + 2
    }

    /// Each column's text laid out, then the two spaces before COMMAND.
    pub fn line(&self, cell: impl Fn(Col) -> String) -> String {
        let mut s = String::new();
        for (i, &c) in self.cols.iter().enumerate() {
            let (_, w, right, sep) = c.spec(self.ms);
            if i > 0 {
                s.extend(std::iter::repeat_n(' ', sep));
            }
            let v = cell(c);
            let _ = if right {
                write!(s, "{v:>w$}")
            } else {
                write!(s, "{v:<w$}")
            };
        }
        s.push_str("  ");
        s
    }

    pub fn header(&self) -> String {
        self.line(|c| c.spec(self.ms).0.to_string())
    }
}
