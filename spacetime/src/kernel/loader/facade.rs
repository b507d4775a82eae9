//! What callers ask of the loaded programs, each answered by the part that owns it: the
//! sessions (sessions.rs, runs.rs), RSS following (rss.rs), the CPU clock (ticks.rs), the
//! programs' costs (stats.rs), `own_pid` (own_pid.rs) and the attach's iterator (adopt.rs).

use std::os::fd::RawFd;

use spacetime_common::{MmState, TreeRss};

use super::{
    adopt, own_pid, stats, KernelCounters, KernelProgramStats, LearnedPid, LoadError, Probes,
    SessionId,
};

impl Probes {
    /// Starts tracing the process `tgid` and everything it forks from now on, in session 0.
    pub fn track(&mut self, tgid: u32) -> Result<(), LoadError> {
        self.sessions.track_in(tgid, 0)
    }

    /// Starts tracing the process `tgid` and everything it forks from now on in `session`.
    /// It counts against the session's process limit. A process already traced in the same
    /// session (a tracked parent forked it meanwhile) stays as it is; in another session it
    /// is an error.
    pub fn track_in(&mut self, tgid: u32, session: SessionId) -> Result<(), LoadError> {
        self.sessions.track_in(tgid, session)
    }

    /// Stops tracing `tgid` (a process attached to that was gone before it was proven
    /// tracked: its pid must not make a later holder traced). Absent is not an error.
    pub fn untrack(&mut self, tgid: u32) -> Result<(), LoadError> {
        self.sessions.untrack(tgid)
    }

    /// Stops tracing every process of `session` (see its part's `untrack_session`); returns
    /// how many processes were still tracked. Other sessions are untouched.
    pub fn untrack_session(&mut self, session: SessionId) -> Result<usize, LoadError> {
        self.sessions.untrack_session(session)
    }

    /// Stops tracing every process (session 0's programs: see runs.rs); returns how many
    /// processes were still tracked.
    pub fn untrack_all(&mut self) -> Result<usize, LoadError> {
        self.sessions.untrack_all()
    }

    /// Zeroes session 0's tree-wide RSS (sum, peak, its time) and counters, and the pid
    /// `own_pid` learnt, so a run's figures are its own. Call with nothing tracked (after
    /// [`Probes::untrack_all`]).
    pub fn reset_run_state(&mut self) -> Result<(), LoadError> {
        self.sessions.reset_session(0)?;
        self.own_pid.forget()
    }

    /// The processes of `session` whose exit the kernel saw and whose final CPU record has
    /// not gone yet: tgid and leader start.
    pub fn awaiting_release(&self, session: SessionId) -> Result<Vec<(u32, u64)>, LoadError> {
        self.sessions.awaiting_release(session)
    }

    /// Whether the process (`tgid`, its leader started at `start_ns`) still waits for its
    /// final CPU record (false when that cannot be read).
    pub fn awaits_release(&self, tgid: u32, start_ns: u64) -> bool {
        self.sessions.awaits_release(tgid, start_ns)
    }

    /// Sets `session`'s tree-wide RSS, live process count and loss counters back to zero,
    /// before a run. Its process limit stays.
    pub fn reset_session(&mut self, session: SessionId) -> Result<(), LoadError> {
        self.sessions.reset_session(session)
    }

    /// Most processes `session` may have traced at once (0: no limit).
    pub fn set_session_limit(
        &mut self,
        session: SessionId,
        max_processes: u32,
    ) -> Result<(), LoadError> {
        self.sessions.set_session_limit(session, max_processes)
    }

    /// Whether the kernel follows the mms of `session`'s processes (memory over time).
    pub fn set_session_memory(
        &mut self,
        session: SessionId,
        follow: bool,
    ) -> Result<(), LoadError> {
        self.sessions.set_session_memory(session, follow)
    }

    /// Whose session `session` is (`None`: no check of its processes' execs).
    pub fn set_session_owner(
        &mut self,
        session: SessionId,
        owner: Option<crate::kernel::creds::Caller>,
    ) -> Result<(), LoadError> {
        self.sessions.set_session_owner(session, owner)
    }

    /// Whether `tgid` is tracked now, and in which session.
    pub fn tracked_in(&self, tgid: u32) -> Result<Option<SessionId>, LoadError> {
        self.sessions.tracked_in(tgid)
    }

    /// Processes `session` has traced now, as its limit counts them.
    pub fn live_processes_of(&self, session: SessionId) -> Result<i64, LoadError> {
        self.sessions.live_processes_of(session)
    }

    /// Session 0's tree-wide RSS as the kernel followed it: current sum, peak and when.
    pub fn tree_rss(&self) -> Result<TreeRss, LoadError> {
        self.sessions.tree_rss_of(0)
    }

    /// `session`'s tree-wide RSS as the kernel followed it: current sum, peak and when.
    pub fn tree_rss_of(&self, session: SessionId) -> Result<TreeRss, LoadError> {
        self.sessions.tree_rss_of(session)
    }

    /// The mms the kernel still follows for session 0 (processes running now).
    pub fn followed_mms(&self) -> Result<Vec<MmState>, LoadError> {
        self.sessions.followed_mms_of(0)
    }

    /// The mms the kernel still follows for `session` (its processes running now).
    pub fn followed_mms_of(&self, session: SessionId) -> Result<Vec<MmState>, LoadError> {
        self.sessions.followed_mms_of(session)
    }

    /// Loss and failure counters of every session together, and the programs' recursion
    /// misses.
    pub fn counters(&self) -> Result<KernelCounters, LoadError> {
        self.sessions
            .counters(|| stats::recursion_misses(&self.ebpf))
    }

    /// `session`'s own loss and failure counters (session 0's with the programs' recursion
    /// misses).
    pub fn counters_of(&self, session: SessionId) -> Result<KernelCounters, LoadError> {
        self.sessions
            .counters_of(session, || stats::recursion_misses(&self.ebpf))
    }

    /// Whether the kernel follows RSS changes now (`rss_stat` attached).
    pub fn rss_following(&self) -> bool {
        self.rss.following()
    }

    /// Attaches or detaches the `rss_stat` program (a no-op when already so; see rss.rs).
    pub fn set_rss_following(&mut self, on: bool) -> Result<(), LoadError> {
        self.rss.set(&mut self.ebpf, self.rss_tracking, on)
    }

    /// The CPU clock program runs now: on how many CPUs (0: it does not).
    pub fn cpu_ticking(&self) -> usize {
        self.ticks.ticking()
    }

    /// Attaches or detaches the CPU clock program (a no-op when already so); returns the
    /// CPUs it runs on. Err: why it cannot run (see ticks.rs).
    pub fn set_cpu_ticking(&mut self, on: bool) -> Result<usize, String> {
        self.ticks.set(&mut self.ebpf, on)
    }

    /// Run counts and times of every loaded program, and whether the kernel is counting them.
    /// Never fails: a program whose figures cannot be read is left out (and logged).
    pub fn program_stats(&self) -> KernelProgramStats {
        self.load_times.program_stats(&self.ebpf)
    }

    /// The `own_pid` program, to be run by a child with [`super::run_own_pid`]; None when it
    /// did not load.
    pub fn own_pid_program(&self) -> Option<RawFd> {
        own_pid::program(&self.ebpf)
    }

    /// What the last run of `own_pid` recorded; None when it never ran.
    pub fn learned_pid(&self) -> Result<Option<LearnedPid>, LoadError> {
        self.own_pid.learned()
    }

    /// Follows the mms of the running processes attached to (adopt.rs). Call it after every
    /// process attached to is tracked. Returns false (nothing done) when RSS is not followed.
    pub fn adopt_running(&mut self) -> Result<bool, LoadError> {
        if !self.rss_tracking {
            return Ok(false);
        }
        adopt::adopt_running(&mut self.ebpf, self.atomics.program("adopt_mms"))?;
        Ok(true)
    }
}

impl crate::kernel::counters::CounterSource for Probes {
    fn current(&self) -> Option<KernelCounters> {
        self.counters()
            .map_err(|e| log::warn!("cannot read the kernel counters: {e}"))
            .ok()
    }
}
