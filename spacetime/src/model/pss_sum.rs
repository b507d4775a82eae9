//! The tree-wide PSS over time, from rounds of reads taken together and the exact RSS
//! between them.
//!
//! PSS divides each page among the processes that map it, so a process's PSS changes when
//! another one forks, writes a page they shared, or exits. A sum of each process's latest
//! read mixes moments: a parent read before its fork (all private) plus its child read after
//! (half of the same pages) counts them one and a half times. So every live process is read
//! in one round ([`super::pss`]), and a round's reads are the sum. Between rounds each
//! process's PSS moves with its exact RSS from the kernel's points: its new anonymous pages
//! are its own (PSS = RSS), its new file and shmem pages count at the PSS/RSS ratio its
//! file pages had at its read. A process that began since the last round (a fork, an exec)
//! counts from what it began with: a fork's child holds its parent's pages, shared
//! copy-on-write, and adds nothing until it grows.
//!
//! What no read backs is kept as the uncertain part: a child's inherited anonymous pages (it
//! may have written them since, adding that much unseen), a new image's file pages (none to all
//! of them its own: a build's compilers share their program's pages, which PSS divides among
//! them; counted at the last round's ratio, eight starting together raised a Lua build's
//! estimate to 138-157 MiB where every later round found at most 132). The estimate plus that
//! part bounds what the tree may have held, but for what sharing took off the anonymous pages
//! the last round read: a copy-on-write copy changes no RSS counter (`wp_page_copy()`,
//! mm/memory.c, counts a new page only where the old one was a file's) yet adds a page to the
//! tree's PSS, and when a sharer ends, what it shared is the others' alone while their reads
//! still halve it. So a window between rounds may hold up to what sharing took off at the reads
//! (`Anonymous:` less `Pss_Anon:`) more; and no more than a page per minor fault of the
//! processes that shared (every copy is a fault: `stat` read before the round's first read,
//! as a copy between two sharers' reads grows the first one's share unseen; `task->min_flt`
//! at exit) plus what the ended ones shared, once every one of them is known; and no more
//! copies by one process than the pages it shared at its read ([`copy_cap`]). The next round
//! narrows the bound for the time since the last one: the tree held no more then than the round
//! finds, plus what was freed or exited in between. An image's last figures may come after it
//! left the sum (a round found it gone before its records came; the exit record's exact RSS,
//! which before 6.2 counts what the thread had not folded into the mm): what it held beyond
//! its last point widens the bound of the window it left in. The maximum is trusted when the
//! bound over the whole run exceeds it by at most 5 %.
//!
//! The kernel's exact tree-wide RSS bounds all of it: no page counts more than once in a PSS,
//! so the tree's PSS never exceeds its RSS at the same moment, nor the tree's peak RSS up to
//! then. The kernel sends RSS points at a bounded rate, but every new maximum of the tree,
//! dated when it happened: once every record is in, the tree's peak up to any moment is
//! exact, and no point of the series is left above it. A process's own points may come
//! after the tree's sum already holds their change, so an estimate can run above it; a
//! maximum that ran above it by more than 5 % is not trusted (it was built on figures the
//! kernel contradicts).

use super::{
    proc_read::Usage,
    timeline::{Point, Series},
};
use crate::model::tree::Key;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Closed windows kept for figures that come late: a process's last ones come right after
/// its end, so within a round or two.
const CLOSED_KEPT: usize = 16;

/// The maximum is trusted when the truth may differ from it by at most 1/20 of it.
pub const TRUST_SHIFT_DIV: u64 = 20;

/// The largest tree-wide PSS, and how far the truth may differ from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaxPss {
    pub ts_ns: u64,
    pub bytes: u64,
    /// How much more the tree may have held at some moment, unseen: file pages of images no
    /// round read, written copy-on-write pages, pages of an exited process now another's alone.
    pub unseen_bytes: u64,
    /// How far the estimate ran above the tree's peak RSS up to then (`bytes` is that peak).
    pub over_rss_bytes: u64,
}

/// Why a maximum is not trusted: the first of its parts that is over 5 % of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Withheld {
    /// The tree may have held more, unseen between rounds.
    Unseen,
    /// The estimate ran above the tree's exact RSS there.
    OverRss,
}

impl MaxPss {
    /// Why it is not trusted, or None when it is.
    pub fn withheld(&self) -> Option<Withheld> {
        let limit = self.bytes / TRUST_SHIFT_DIV;
        if self.unseen_bytes > limit {
            Some(Withheld::Unseen)
        } else if self.over_rss_bytes > limit {
            Some(Withheld::OverRss)
        } else {
            None
        }
    }
}

/// What the run's maximum PSS is worth.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MaxPssFigure {
    /// PSS sampling was off, or the run ended before its first round.
    #[default]
    NotSampled,
    /// Backed by reads but for its uncertain part, under 5 % of it.
    Trusted(MaxPss),
    /// Too much of it estimated without a read: not a figure to print.
    Uncertain(MaxPss),
}

/// One process's part of the sum.
#[derive(Clone, Copy, Debug)]
struct Est {
    /// Points dated before this are older than what it counts from.
    last_ns: u64,
    /// What it counts from: its PSS at its last read (0 before any read of this image), its
    /// RSS and anonymous pages then (or when it began).
    pss: u64,
    rss: u64,
    anon: u64,
    /// Read since this image began.
    read: bool,
    /// Its file pages' PSS/RSS at its read (None before one, or without file pages: then new
    /// ones count at the last round's).
    ratio: Option<f64>,
    /// Not read since it began: the anonymous pages it began with (a child's, its parent's
    /// shared copy-on-write).
    cow: u64,
    /// What sharing took off its anonymous pages at its last read (with a process of the
    /// tree, or another), the round it was read in, its minor faults' bytes then and as it
    /// ended (None: not known).
    anon_shared: u64,
    round: u64,
    faulted: Option<u64>,
    end_faulted: Option<u64>,
    /// The most its faults in the period can have copied (None: not known): see
    /// [`copy_cap`].
    copy_cap: Option<u64>,
    /// Its exact RSS at its last point.
    last_rss: u64,
    /// Its estimate now; what it may hold unseen (`cow`, new file pages before a read).
    e: u64,
    u: u64,
}

/// The time since the last round: the most the tree may have held, and what left it.
#[derive(Clone, Copy, Debug)]
struct Window {
    /// The largest estimate plus its uncertain part; and plus what the ended sharers had
    /// shared until then.
    bound: u64,
    bound_left: u64,
    /// RSS freed by live processes, and held by processes when they ended.
    freed: u64,
    /// The sharing periods (from a read to the next, or to the image's end) that ended in
    /// it: what sharing took off at their reads; the bytes of the minor faults of their
    /// processes meanwhile (None: one is not known); of the ended ones, what they shared.
    shared: u64,
    faulted: Option<u64>,
    left: u64,
}

/// A closed window: the round that closed it, and what its bound was the lesser of.
#[derive(Clone, Copy, Debug)]
struct Closed {
    round: u64,
    most: u64,
    seen: u64,
}

/// An image that left the sum: when its last figure counted, its RSS then, and the window it
/// left in.
#[derive(Clone, Copy, Debug)]
struct Left {
    last_ns: u64,
    rss: u64,
    round: u64,
}

impl Default for Window {
    fn default() -> Window {
        Window {
            bound: 0,
            bound_left: 0,
            freed: 0,
            shared: 0,
            faulted: Some(0),
            left: 0,
        }
    }
}

impl Window {
    fn close(&mut self, shared: u64, (from, to): (Option<u64>, Option<u64>), cap: Option<u64>) {
        self.shared += shared;
        let faulted = from
            .zip(to)
            .map(|(a, b)| b.saturating_sub(a).min(cap.unwrap_or(u64::MAX)));
        self.faulted = self.faulted.zip(faulted).map(|(a, b)| a + b);
    }

    /// The most the tree may have held in it: `open` is what sharing took off in periods
    /// not ended yet (their faults not known). Undoing all of it is the most sharing can
    /// add; or, with every fault known, a page per fault beyond what the ended sharers left.
    fn most(&self, open: u64) -> u64 {
        let all = self.bound + self.shared + open;
        match (open, self.faulted) {
            (0, Some(f)) => all.min(self.bound_left + f),
            _ => all,
        }
    }
}

#[derive(Debug)]
pub struct PssSum {
    procs: FxHashMap<Key, Est>,
    /// Images that ended sharing, their faults not known yet: the kernel sends an mm's end
    /// before its process's exit record, which says them (or a read of its next image).
    ending: FxHashMap<Key, Est>,
    sum: u64,
    /// Σ u over the processes.
    uncertain: u64,
    /// What sharing took off at the reads of the live processes; of it, the current round's;
    /// what sharers found gone in this round left to reads of it before (the next window's).
    shared: u64,
    fresh: u64,
    carry: u64,
    window: Window,
    /// The most the tree may have held before the last round, rounds' findings applied.
    bound: u64,
    /// The last windows closed, for what an ended image's late figures add to them.
    closed: VecDeque<Closed>,
    /// Images that ended (or a round found gone) whose last figures may still come: the
    /// kernel's last point as it stops following the mm, and the exact RSS of the exit
    /// record (before 6.2 with the thread's counts not folded into the mm).
    left: FxHashMap<Key, Left>,
    /// PSS/RSS of the file pages over the last round's reads (1 before any).
    file_ratio: f64,
    /// This round's file pages so far: PSS and RSS.
    round_file: (u64, u64),
    rounds: u64,
    series: Series,
    cap: usize,
    max: Option<MaxPss>,
    /// Once every record is in: the tree's peak RSS, which no PSS of it exceeds.
    peak_rss: Option<u64>,
    /// Once every record is in (or as a saved report wrote it): the figure, final.
    settled: Option<MaxPssFigure>,
}

impl PssSum {
    pub fn new(cap: usize) -> PssSum {
        PssSum {
            procs: FxHashMap::default(),
            ending: FxHashMap::default(),
            sum: 0,
            uncertain: 0,
            shared: 0,
            fresh: 0,
            carry: 0,
            window: Window::default(),
            bound: 0,
            closed: VecDeque::new(),
            left: FxHashMap::default(),
            file_ratio: 1.0,
            round_file: (0, 0),
            rounds: 0,
            series: Series::default(),
            cap,
            max: None,
            peak_rss: None,
            settled: None,
        }
    }

    /// A settled sum as a saved report wrote it: its series and its figure.
    pub fn restored(series: Series, figure: MaxPssFigure) -> PssSum {
        PssSum {
            series,
            settled: Some(figure),
            ..PssSum::new(0)
        }
    }

    /// Every record is in: each point no higher than the tree's peak RSS up to its time (the
    /// maxima the kernel held back included: they arrive after the estimates they bound were
    /// drawn), and the maximum found again on what is left.
    pub fn settle(&mut self, tree_rss: &Series) {
        let lowered = self.series.ceil_to_peak_of(tree_rss);
        self.peak_rss = tree_rss.max().map(|p| p.bytes);
        self.settle_max(&lowered);
        self.settled = Some(self.figure());
    }

    /// The maximum found again on the series lowered by `lowered` at each point.
    fn settle_max(&mut self, lowered: &[u64]) {
        let Some(online) = self.max else {
            return;
        };
        let best = self.series.points().iter().zip(lowered).reduce(|a, b| {
            if b.0.bytes > a.0.bytes {
                b
            } else {
                a
            }
        });
        if let Some((p, &cut)) = best {
            let earlier = match p.ts_ns == online.ts_ns {
                true => online.over_rss_bytes,
                false => 0,
            };
            self.max = Some(MaxPss {
                ts_ns: p.ts_ns,
                bytes: p.bytes,
                unseen_bytes: 0,
                over_rss_bytes: earlier + cut,
            });
        }
    }

    /// The tree-wide series: one point per change.
    pub fn series(&self) -> &Series {
        &self.series
    }

    /// The estimate now and what may have changed unseen (among it, the file pages of images
    /// no round has read yet).
    pub fn now(&self) -> (u64, u64) {
        (self.sum, self.uncertain + self.window.left)
    }

    /// The largest value of the series, how much more the tree may have held unseen, and
    /// whether that is little enough.
    pub fn figure(&self) -> MaxPssFigure {
        if let Some(settled) = self.settled {
            return settled;
        }
        let Some(max) = self.max.filter(|_| self.rounds > 0) else {
            return MaxPssFigure::NotSampled;
        };
        let bound = self.bound.max(self.window.most(self.shared));
        let bound = self.peak_rss.map_or(bound, |peak| bound.min(peak));
        let m = MaxPss {
            unseen_bytes: bound.saturating_sub(max.bytes),
            ..max
        };
        match m.withheld() {
            None => MaxPssFigure::Trusted(m),
            Some(_) => MaxPssFigure::Uncertain(m),
        }
    }

    /// A process's exact RSS and anonymous pages at `ts_ns`, from the kernel. Not for a
    /// process gone (exited, or found gone by a round): the kernel's points for it that come
    /// later (a held-back peak, the last value as it stops following the mm) are no image
    /// beginning; the timeline leaves them out.
    pub fn rss(&mut self, key: Key, ts_ns: u64, rss: u64, anon: u64) {
        let ratio = self.file_ratio;
        let Some(est) = self.procs.get_mut(&key) else {
            // It began (a fork's child, an exec's image): what it holds is counted elsewhere
            // or is next to nothing; its inherited anonymous pages are uncertain.
            let est = Est {
                last_ns: ts_ns,
                pss: 0,
                rss,
                anon,
                read: false,
                ratio: None,
                cow: anon,
                anon_shared: 0,
                round: self.rounds,
                faulted: None,
                end_faulted: None,
                copy_cap: None,
                last_rss: rss,
                e: 0,
                u: anon,
            };
            self.procs.insert(key, est);
            // The image before it (an exec's) has had its last figures.
            self.left.remove(&key);
            self.uncertain += anon;
            self.push(ts_ns);
            return;
        };
        if ts_ns < est.last_ns {
            return;
        }
        est.last_ns = ts_ns;
        self.window.freed += est.last_rss.saturating_sub(rss);
        est.last_rss = rss;
        let (e, u) = estimate(est, rss, anon, ratio);
        self.sum = self.sum + e - est.e;
        self.uncertain = self.uncertain + u - est.u;
        (est.e, est.u) = (e, u);
        self.push(ts_ns);
    }

    /// A process read in the current round; `ts_ns` is when the read ended (the page walk
    /// sees the mm as it is then: a munmap running meanwhile is done in it, while the kernel's
    /// points dated during the walk still count the pages).
    pub fn read(&mut self, key: Key, ts_ns: u64, u: Usage) {
        let est = Est {
            last_ns: ts_ns,
            pss: u.pss_bytes,
            rss: u.rss_bytes,
            anon: u.anon_bytes,
            read: true,
            ratio: u.file_ratio(),
            cow: 0,
            anon_shared: u.anon_shared_bytes(),
            round: self.rounds,
            faulted: u.faulted_bytes,
            end_faulted: None,
            copy_cap: copy_cap(&u),
            last_rss: u.rss_bytes,
            e: u.pss_bytes,
            u: 0,
        };
        self.shared += est.anon_shared;
        self.fresh += est.anon_shared;
        let file_rss = u.rss_bytes.saturating_sub(u.anon_bytes);
        let file_pss = est.ratio.map_or(0, |r| (r * file_rss as f64) as u64);
        self.round_file = (self.round_file.0 + file_pss, self.round_file.1 + file_rss);
        let old = self.procs.insert(key, est);
        // The faults now bound those of any earlier image of it.
        for o in old.iter().chain(self.ending.remove(&key).as_ref()) {
            self.end_sharing(o, u.faulted_bytes);
        }
        // What it freed since its last point, seen by the read only.
        self.window.freed += old.map_or(0, |o| o.last_rss.saturating_sub(u.rss_bytes));
        let (e, u) = old.map_or((0, 0), |o| (o.e, o.u));
        self.sum = self.sum + est.e - e;
        self.uncertain -= u;
    }

    /// Every live process was read (or found gone): the sum is the round's.
    pub fn round_done(&mut self, ts_ns: u64) {
        // Since the last round the tree held no more than this round finds, plus what left it
        // in between (freed, or held by processes that ended), nor more than its bound. The
        // sharing this round's reads found is the next window's.
        let seen = self.sum + self.window.freed;
        let most = self.window.most(self.shared - self.fresh);
        self.bound = self.bound.max(most.min(seen));
        if self.closed.len() == CLOSED_KEPT {
            self.closed.pop_front();
        }
        self.closed.push_back(Closed {
            round: self.rounds,
            most,
            seen,
        });
        self.rounds += 1;
        self.window = Window {
            left: std::mem::take(&mut self.carry),
            ..Window::default()
        };
        self.fresh = 0;
        let (pss, rss) = std::mem::take(&mut self.round_file);
        if rss > 0 {
            self.file_ratio = (pss as f64 / rss as f64).min(1.0);
        }
        self.push(ts_ns);
    }

    /// The current round found a process gone (exited, its exit record not here yet): its
    /// part leaves the sum now. Kept until its exit record, its last read would stand beside
    /// reads of the others taken after its exit, which count the pages it shared as theirs
    /// alone: twice (a child's 80 MiB of its parent's 160, shared copy-on-write, beside the
    /// parent's 160 read after the child exited: 240 for 160). A read earlier in the round
    /// may predate the exit: what it found shared may be its own now, unseen until the next
    /// round (at most what the gone one shared). No point: the round's sum is its end's.
    /// `faulted`: its final minor faults' bytes, when its stat was read as a zombie's. Not
    /// read (already reaped: a round that comes before the records, as through an agent),
    /// its exit record says them: its sharing waits for it, as an image's end does.
    pub fn read_gone(&mut self, key: Key, faulted: Option<u64>) {
        // Its mm ended before (before 6.16 the exit record waits for the address space's
        // teardown, seconds in a starved guest): what the round found says its faults.
        if faulted.is_some() {
            if let Some(est) = self.ending.remove(&key) {
                self.end_sharing(&est, faulted);
            }
        }
        let Some(est) = self.procs.remove(&key) else {
            return;
        };
        self.sum -= est.e;
        self.uncertain -= est.u;
        // What it shared is another's alone now, also for the reads of this round before it
        // (at most what they found shared).
        self.carry += est.anon_shared.min(self.fresh);
        self.window.left += est.anon_shared;
        self.window.freed += est.last_rss;
        self.left_sum(key, &est);
        self.end_sharing_at(key, est, faulted);
    }

    /// `est` left the sum in the current window: its last figures may come after.
    fn left_sum(&mut self, key: Key, est: &Est) {
        let left = Left {
            last_ns: est.last_ns,
            rss: est.last_rss,
            round: self.rounds,
        };
        self.left.insert(key, left);
    }

    /// A figure of an image that left the sum, come after it left: the kernel's last point
    /// (after a round found the process gone), or the exact RSS of its exit record. What it
    /// held beyond its last point counted, it held in the window it left in, unseen: that
    /// window's bound, and what left the tree in it, grow by as much.
    pub fn late_rss(&mut self, key: Key, ts_ns: u64, rss: u64) {
        // Still in the sum (from 6.16 the exit record comes before the mm's end): what it
        // holds beyond its last point may be any of it, until it leaves with it. An image
        // before it (an exec's) left for good when it began.
        if let Some(est) = self.procs.get_mut(&key) {
            let excess = rss.saturating_sub(est.last_rss);
            if ts_ns >= est.last_ns && excess > 0 {
                (est.last_rss, est.u) = (rss, est.u + excess);
                self.uncertain += excess;
                self.widen();
            }
            return;
        }
        let Some(l) = self.left.get_mut(&key) else {
            return;
        };
        let excess = rss.saturating_sub(l.rss);
        if ts_ns < l.last_ns || excess == 0 {
            return;
        }
        l.rss = rss;
        if l.round == self.rounds {
            self.window.bound += excess;
            self.window.bound_left += excess;
            self.window.freed += excess;
            return;
        }
        match self.closed.iter_mut().find(|w| w.round == l.round) {
            Some(w) => {
                (w.most, w.seen) = (w.most + excess, w.seen + excess);
                self.bound = self.bound.max(w.most.min(w.seen));
            }
            // Older than the windows kept: as much more than the bound, which holds.
            None => self.bound += excess,
        }
    }

    /// `key`'s image's sharing ends with its final faults (`to`), or, not known yet, waits in
    /// `ending` for the exit record that says them.
    fn end_sharing_at(&mut self, key: Key, est: Est, to: Option<u64>) {
        match to {
            Some(_) => self.end_sharing(&est, to),
            None if est.anon_shared > 0 => {
                if let Some(older) = self.ending.insert(key, est) {
                    self.end_sharing(&older, None);
                }
            }
            None => {}
        }
    }

    /// A sharing period ends (a read, the image's end): what it took off, and what its process
    /// faulted meanwhile (`to`: its minor faults' bytes now).
    fn end_sharing(&mut self, est: &Est, to: Option<u64>) {
        if est.anon_shared == 0 {
            // Its pages were its own: its faults copied none.
            return;
        }
        self.shared = self.shared.saturating_sub(est.anon_shared);
        if est.round == self.rounds {
            // Read in this round: its period was the next window's.
            self.fresh = self.fresh.saturating_sub(est.anon_shared);
        }
        self.window
            .close(est.anon_shared, (est.faulted, to), est.copy_cap);
    }

    /// A process's minor faults as it exited (bytes of as many pages), before [`Self::ended`].
    pub fn exit_faults(&mut self, key: Key, bytes: u64) {
        if let Some(est) = self.procs.get_mut(&key) {
            est.end_faulted = Some(bytes);
        }
        if let Some(est) = self.ending.remove(&key) {
            self.end_sharing(&est, Some(bytes));
        }
    }

    /// The process exited, after [`Self::ended`]: an image's sharing whose faults no record
    /// said ends, as much as it shared.
    pub fn exited(&mut self, key: Key) {
        self.left.remove(&key);
        if let Some(est) = self.ending.remove(&key) {
            self.end_sharing(&est, None);
        }
    }

    /// The current round could not read a process that is not known gone (the read failed):
    /// its last read no longer backs anything. What that read found leaves the estimate and
    /// becomes uncertain, so a stale read is neither summed with fresher ones nor lost; what
    /// it grew since still counts. The next read that succeeds backs it again.
    pub fn read_failed(&mut self, key: Key, ts_ns: u64) {
        let Some(est) = self.procs.get_mut(&key) else {
            return;
        };
        if !est.read {
            // Nothing read backs it already: it counts as it did.
            return;
        }
        // What it faults from now on is not known: nor what it copied.
        est.faulted = None;
        let backed = est.pss;
        let (e, u) = (est.e.saturating_sub(backed), est.u + backed);
        self.sum = self.sum - est.e + e;
        self.uncertain = self.uncertain - est.u + u;
        (est.pss, est.e, est.u, est.read, est.cow) = (0, e, u, false, backed);
        self.push(ts_ns);
    }

    /// A process's image ended (exec replaced it, or the process exited) at `ts_ns`: its
    /// part leaves the sum; the next image, if any, begins with its first point.
    pub fn ended(&mut self, key: Key, ts_ns: u64) {
        let Some(est) = self.procs.remove(&key) else {
            return;
        };
        self.sum -= est.e;
        self.uncertain -= est.u;
        self.end_sharing_at(key, est, est.end_faulted);
        self.window.left += est.anon_shared;
        self.window.freed += est.last_rss;
        self.left_sum(key, &est);
        self.push(ts_ns);
    }

    fn push(&mut self, ts_ns: u64) {
        // One value per instant: a later change at the same time steps just after it, so
        // the series keeps every value the maximum may be.
        let ts = match self.series.last() {
            Some(l) if ts_ns <= l.ts_ns => l.ts_ns + 1,
            _ => ts_ns,
        };
        self.series.push(Point::new(ts, self.sum), self.cap);
        self.widen();
        if self.max.is_none_or(|m| self.sum > m.bytes) {
            self.max = Some(MaxPss {
                ts_ns: ts,
                bytes: self.sum,
                unseen_bytes: 0,
                over_rss_bytes: 0,
            });
        }
    }

    /// The window's bound holds what the tree may hold now.
    fn widen(&mut self) {
        let bound = self.sum + self.uncertain;
        self.window.bound = self.window.bound.max(bound);
        self.window.bound_left = self.window.bound_left.max(bound + self.window.left);
    }
}

/// The most a read process's faults in its sharing period can have copied on write: every
/// fault between the round's start and the end of its read (a copy then grows another
/// sharer's share unseen, or the walk found the page already its own), and after the read one
/// copy at most of each page it shared then, of which there are at most twice what sharing
/// took off (a page of k sharers takes 1 - 1/k of a page off each). Pages it shares later by forking are its child's to bound (its inherited pages).
/// Faults beyond that are writes to pages of its own: a Python's teardown touches every
/// object once its workers are gone, 38 MB of faults that no copy made. (Pages KSM merges
/// after the read, in a process that asked for merging, are not in it.)
fn copy_cap(u: &Usage) -> Option<u64> {
    let before_read = u.read_faulted_bytes?.saturating_sub(u.faulted_bytes?);
    Some(before_read.saturating_add(u.anon_shared_bytes().saturating_mul(2)))
}

/// A process's estimate at (`rss`, `anon`) from what it counts from: (estimate, what it may
/// hold unseen).
fn estimate(est: &Est, rss: u64, anon: u64, tree_ratio: f64) -> (u64, u64) {
    let d_anon = anon as f64 - est.anon as f64;
    let d_file = rss.saturating_sub(anon) as f64 - est.rss.saturating_sub(est.anon) as f64;
    match est.read {
        true => {
            let ratio = est.ratio.unwrap_or(tree_ratio);
            let e = (est.pss as f64 + d_anon + ratio * d_file).max(0.0) as u64;
            (e, 0)
        }
        // Its new file pages are any part of their RSS in a PSS, none known before a read:
        // they count in what it may hold unseen, not in the estimate.
        false => {
            let e = (est.pss as f64 + d_anon).max(0.0) as u64;
            (e, est.cow + d_file.max(0.0) as u64)
        }
    }
}

#[cfg(test)]
#[path = "pss_sum_tests.rs"]
mod tests;
