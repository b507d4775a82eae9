//! Where kernel records come from: the ring buffer of programs loaded here, or an agent's
//! connection carrying the same records (the agent forwards its ring's bytes); and everything
//! the event loop reads from, as one value ([`Io`]).

use std::os::fd::{AsRawFd, RawFd};

use crate::kernel::{
    counters::CounterSource,
    loader::KernelLogger,
    remote::client::AgentConn,
    ring::Ring,
    taskstats::{TaskstatsListener, TaskstatsRecord},
};

/// Records, in the order the kernel wrote them.
pub trait Records {
    /// Hands records to `each`, in order, while it returns true.
    fn each_record(&mut self, each: &mut dyn FnMut(&[u8]) -> bool);
    /// What to wait on for records; None when no more will come.
    fn wait_fd(&self) -> Option<RawFd>;
    /// Records that reach `each_record` only when asked for (an agent's tick) are fetched:
    /// after this, everything the kernel had written is available. Nothing to do for a ring.
    fn sync(&mut self) {}
    /// The run is over (its processes reaped): everything of it the kernel holds is fetched.
    /// Through an agent that is the one round trip that ends the run, in which the agent
    /// waits for the final CPU records of the processes reaped (`await_release`). Returns
    /// whether they must still be waited for here (a local ring: they come into it).
    fn end_of_run(&mut self, await_release: bool) -> bool {
        await_release
    }
    /// taskstats records that came with the records (an agent's), appended to `out`.
    fn take_taskstats(&mut self, _out: &mut Vec<TaskstatsRecord>) {}
    /// Hands `each` the records that begin before `end` (a ring's position, from
    /// [`Ring::written`]), in order, while it returns true; returns whether every one was
    /// handed on (false: one is still being written). A source without positions (an
    /// agent's connection) hands on what it holds.
    fn each_record_before(&mut self, _end: u64, each: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        self.each_record(each);
        true
    }
}

/// Throws away what `records` holds; returns how many records.
pub fn discard(records: &mut dyn Records) -> usize {
    let mut n = 0;
    records.each_record(&mut |_| {
        n += 1;
        true
    });
    n
}

impl Records for Ring {
    fn each_record(&mut self, each: &mut dyn FnMut(&[u8]) -> bool) {
        while let Some(item) = self.next_record() {
            if !each(&item) {
                break;
            }
        }
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }

    fn each_record_before(&mut self, end: u64, each: &mut dyn FnMut(&[u8]) -> bool) -> bool {
        while let Some(item) = self.next_record_before(end) {
            if !each(&item) {
                break;
            }
        }
        self.taken_to(end)
    }
}

impl Records for AgentConn {
    fn each_record(&mut self, each: &mut dyn FnMut(&[u8]) -> bool) {
        self.pump();
        while let Some(r) = self.next_record() {
            if !each(&r) {
                break;
            }
        }
        self.tell_if_gone();
    }

    fn wait_fd(&self) -> Option<RawFd> {
        self.raw_fd()
    }

    fn sync(&mut self) {
        AgentConn::sync(self);
    }

    fn end_of_run(&mut self, await_release: bool) -> bool {
        self.end_run(await_release);
        false
    }

    fn take_taskstats(&mut self, out: &mut Vec<TaskstatsRecord>) {
        AgentConn::take_taskstats(self, out);
    }
}

/// What the event loop reads from.
pub struct Io<'a> {
    pub ring: &'a mut dyn Records,
    /// A signalfd (see [`crate::util::signals::signal_fd`]).
    pub sigfd: RawFd,
    pub logger: Option<&'a mut KernelLogger>,
    /// None once it failed.
    pub taskstats: Option<&'a mut TaskstatsListener>,
    /// The kernel side's counters, read while the loop runs.
    pub counters: &'a dyn CounterSource,
}

impl Io<'_> {
    /// Writes out what the programs logged (a debug build's `aya-log`), if anything.
    pub fn flush_log(&mut self) {
        if let Some(l) = self.logger.as_mut() {
            l.flush();
        }
    }
}
