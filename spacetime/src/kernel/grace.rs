//! How long to wait for release records. A process's final CPU record, when its last switch
//! could not prove the figures final, comes from `sched_process_free`, which runs in an RCU
//! callback queued at its reap: one RCU grace period later. A grace period takes 12-22 ms on an
//! idle machine and far longer on a starved one (over a second in an emulated guest whose host
//! took most of its CPU), so a fixed wait either ends too early there or holds every lost record
//! too long everywhere. A wait here lasts [`RELEASE_WAIT`], and, past it, until a grace period
//! that began after the wait's start has ended and its callbacks had [`AFTER_GRACE`] to run;
//! [`RELEASE_CAP`] at most.
//!
//! `membarrier(MEMBARRIER_CMD_GLOBAL)` returns after `synchronize_rcu()` (kernel/sched/
//! membarrier.c, 4.16 to 6.18; without waiting on one CPU, where a context switch is the grace
//! period). It blocks, so one worker thread calls it, started at the first wait and serving
//! every later one. Where the kernel refuses it (`nohz_full` CPUs: EINVAL), the wait is
//! [`RELEASE_WAIT`] alone.

use std::{
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread,
    time::{Duration, Instant},
};

use rustix::thread::{membarrier, MembarrierCommand};

/// The wait for release records, whatever grace periods take.
pub const RELEASE_WAIT: Duration = Duration::from_millis(1000);
/// How long an RCU callback may take to run once its grace period ended (a softirq or an
/// offload thread on a busy CPU).
pub const AFTER_GRACE: Duration = Duration::from_millis(250);
/// The longest wait: a grace period longer than this is an RCU stall, which the kernel
/// reports at 21 s.
pub const RELEASE_CAP: Duration = Duration::from_secs(10);

/// A wait for the release records of processes reaped before it began.
#[derive(Clone, Copy, Debug)]
pub struct Wait {
    since: Instant,
    /// Grace periods numbered this or later began after `since`.
    period: u64,
}

/// Grace periods as the worker saw them.
#[derive(Default)]
struct State {
    /// The latest period a wait needs.
    wanted: u64,
    /// Periods begun, and the last ended and when.
    begun: u64,
    ended: u64,
    ended_at: Option<Instant>,
    /// The kernel refused `membarrier`; no period will end.
    refused: bool,
    /// The owner is gone: the worker returns.
    closed: bool,
}

/// The worker and what it saw; dropping this stops the worker at its next look.
#[derive(Default)]
pub struct GracePeriods {
    shared: Arc<(Mutex<State>, Condvar)>,
    worker: bool,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // The worker holds the lock only to copy integers: a poisoned lock's state is whole.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl GracePeriods {
    /// A wait beginning now, for processes already reaped.
    pub fn wait(&mut self) -> Wait {
        self.wait_begun(Instant::now())
    }

    /// A wait that began at `since` and goes on now, for processes reaped before now: the
    /// grace period it needs is the first to begin after this call, asked of the worker
    /// (started at the first call).
    pub fn wait_begun(&mut self, since: Instant) -> Wait {
        let (m, cv) = &*self.shared;
        let period = {
            let mut s = lock(m);
            let period = s.begun + 1;
            s.wanted = s.wanted.max(period);
            period
        };
        cv.notify_one();
        if !self.worker {
            self.worker = true;
            let shared = Arc::clone(&self.shared);
            let spawned = thread::Builder::new()
                .name("spacetime-rcu".into())
                .spawn(move || work(&shared));
            if let Err(e) = spawned {
                log::debug!("no grace period worker: {e}");
                lock(m).refused = true;
            }
        }
        Wait { since, period }
    }

    /// Whether `w` is over at `now`: see the module's documentation.
    pub fn over(&self, w: &Wait, now: Instant) -> bool {
        let waited = now.saturating_duration_since(w.since);
        if waited < RELEASE_WAIT {
            return false;
        }
        if waited >= RELEASE_CAP {
            return true;
        }
        let s = lock(&self.shared.0);
        if s.refused {
            return true;
        }
        match s.ended_at {
            Some(at) if s.ended >= w.period => now >= at + AFTER_GRACE,
            _ => false,
        }
    }
}

impl Drop for GracePeriods {
    fn drop(&mut self) {
        lock(&self.shared.0).closed = true;
        self.shared.1.notify_one();
    }
}

/// The worker: one grace period at a time while a wait needs a later one.
fn work(shared: &(Mutex<State>, Condvar)) {
    let (m, cv) = shared;
    loop {
        let period = {
            let mut s = lock(m);
            while !s.closed && s.wanted <= s.begun {
                s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
            }
            if s.closed {
                return;
            }
            s.begun += 1;
            s.begun
        };
        let done = membarrier(MembarrierCommand::Global);
        let mut s = lock(m);
        match done {
            Ok(()) => {
                s.ended = period;
                s.ended_at = Some(Instant::now());
            }
            Err(e) => {
                log::debug!("membarrier(MEMBARRIER_CMD_GLOBAL): {e}; release waits are fixed");
                s.refused = true;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grace periods without a worker: the test says what ended and when.
    fn without_worker() -> GracePeriods {
        let mut g = GracePeriods::default();
        g.worker = true;
        g
    }

    #[test]
    fn a_wait_lasts_until_a_later_grace_period_ended_and_its_callbacks_ran() {
        let mut g = without_worker();
        let w = g.wait();
        let t = |ms: u64| w.since + Duration::from_millis(ms);
        assert!(!g.over(&w, t(500)), "never before RELEASE_WAIT");
        assert!(!g.over(&w, t(1000)), "no period ended: the wait goes on");
        assert!(g.over(&w, w.since + RELEASE_CAP), "at most RELEASE_CAP");
        // A period that began before the wait does not end it.
        {
            let mut s = lock(&g.shared.0);
            s.ended = w.period - 1;
            s.ended_at = Some(t(1500));
        }
        assert!(!g.over(&w, t(3000)), "an earlier period");
        // One that began after: its end, then AFTER_GRACE.
        {
            let mut s = lock(&g.shared.0);
            s.ended = w.period;
            s.ended_at = Some(t(2000));
        }
        assert!(!g.over(&w, t(2000) + AFTER_GRACE - Duration::from_millis(1)));
        assert!(g.over(&w, t(2000) + AFTER_GRACE));
        // Ended early: RELEASE_WAIT still holds.
        lock(&g.shared.0).ended_at = Some(t(20));
        assert!(!g.over(&w, t(999)));
        assert!(g.over(&w, t(1000)));
    }

    #[test]
    fn where_the_kernel_refuses_the_wait_is_release_wait() {
        let mut g = without_worker();
        let w = g.wait();
        lock(&g.shared.0).refused = true;
        assert!(!g.over(&w, w.since + RELEASE_WAIT / 2));
        assert!(g.over(&w, w.since + RELEASE_WAIT));
    }

    #[test]
    fn the_worker_sees_a_grace_period_begun_after_the_wait_end() {
        let mut g = GracePeriods::default();
        let w = g.wait();
        let w2 = g.wait();
        assert!(w2.period >= w.period, "{w2:?} after {w:?}");
        let start = Instant::now();
        loop {
            let s = lock(&g.shared.0);
            if s.refused {
                // Refused here (nohz_full CPUs, a kernel without it, a seccomp filter): the
                // kernel refuses this thread too, and a wait is RELEASE_WAIT alone.
                drop(s);
                assert!(
                    membarrier(MembarrierCommand::Global).is_err(),
                    "membarrier(MEMBARRIER_CMD_GLOBAL) refused to the worker, not to this thread"
                );
                assert!(!g.over(&w2, w2.since + RELEASE_WAIT / 2));
                assert!(g.over(&w2, w2.since + RELEASE_WAIT));
                return;
            }
            if s.ended >= w2.period {
                let at = s.ended_at.expect("ended_at with ended");
                assert!(at >= w2.since, "the period ended after the wait began");
                break;
            }
            drop(s);
            // Bounded only so a stalled kernel fails the test instead of hanging it.
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "no grace period ended"
            );
            thread::sleep(Duration::from_millis(1));
        }
        // A wait begun now needs a later period.
        assert!(g.wait().period > w2.period);
    }
}
