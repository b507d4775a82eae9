//! The one event loop of `trace` and `watch`: the ring buffer drained when the kernel wakes
//! us and on a 50 ms tick, undecodable records counted, taskstats records read on the tick,
//! kernel log records flushed, signals read from a signalfd, a timer of the command's own.
//! What each command does with them is a [`Consumer`]; a command's own event source (watch's
//! metrics endpoint) is a [`Source`].

use std::{future::Future, io, time::Duration};

use tokio::io::{unix::AsyncFd, Interest};

use crate::kernel::counters::CounterSource;
use crate::{
    kernel::{
        events::{decode, Event},
        source::{Io, Records},
        taskstats::{TaskstatsError, TaskstatsListener, TaskstatsRecord},
    },
    util::clock::monotonic_ns,
};

/// How often the ring buffer is drained when the kernel has not woken us: it wakes us only
/// when the ring fills up (wake-ups are costly per record).
pub const DRAIN_INTERVAL: Duration = Duration::from_millis(50);

/// taskstats records decoded at a time (744 bytes each): a part is kept, packed, before the
/// next is read.
const TASKSTATS_PART: usize = 256;

/// What a command does with what the loop reads.
pub trait Consumer {
    /// The command's own event source, polled with the others.
    type Extra: Source;

    /// A decoded record.
    fn event(&mut self, ev: Event);
    /// Where undecodable records are counted.
    fn decode_errors(&mut self) -> &mut u64;
    /// Whether records are taken from the ring now (the rest stay there).
    fn taking(&self) -> bool {
        true
    }
    /// After each drain of the ring.
    fn drained(&mut self) {}
    /// A signal arrived; the ring is drained after this and before [`Consumer::signal`].
    fn before_signal(&mut self, _signo: libc::c_int, _from_process: bool) {}
    /// A signal: `from_process` when a process sent it (not the kernel or the terminal).
    fn signal(&mut self, signo: libc::c_int, from_process: bool);
    /// taskstats records read on the tick, after the ring was drained (a process's fork is
    /// in the ring before its exit record is sent).
    fn taskstats(&mut self, batch: &mut Vec<TaskstatsRecord>);
    /// The listener failed: no more records come.
    fn taskstats_failed(&mut self, e: &TaskstatsError);
    /// The end of each tick.
    fn tick(&mut self, taskstats: Option<&TaskstatsListener>, counters: &dyn CounterSource);
    /// When [`Consumer::due`] is next to be called (CLOCK_MONOTONIC ns), if ever.
    fn next_due(&self) -> Option<u64> {
        None
    }
    fn due(&mut self) {}
    /// Whether [`Consumer::tick`] may read what a kernel record would have told first (a
    /// PSS round due, or one whose processes' cost is not known yet).
    fn tick_reads(&self, _now_ns: u64) -> bool {
        false
    }
    /// What the command's own source produced.
    fn extra(&mut self, _item: <Self::Extra as Source>::Item, _source: &Self::Extra) {}
    /// The loop stops once this is true.
    fn done(&self) -> bool;
}

/// An event source of a command's own.
pub trait Source {
    type Item;
    fn next(&mut self) -> impl Future<Output = Self::Item>;
}

/// No source of its own.
pub struct NoSource;

impl Source for NoSource {
    type Item = ();
    fn next(&mut self) -> impl Future<Output = ()> {
        std::future::pending()
    }
}

/// Reads taskstats records waiting in the socket into `batch`, up to about
/// [`TASKSTATS_PART`]; returns whether more may wait.
fn read_taskstats<C: Consumer>(io: &mut Io, batch: &mut Vec<TaskstatsRecord>, c: &mut C) -> bool {
    let mut more = false;
    if let Some(t) = io.taskstats.as_deref_mut() {
        match t.drain_some(batch, TASKSTATS_PART) {
            Ok(m) => more = m,
            Err(e) => {
                c.taskstats_failed(&e);
                io.taskstats = None;
            }
        }
    }
    if !more {
        io.ring.take_taskstats(batch);
    }
    more
}

/// Every taskstats record waiting, each part read before a drain of the ring (every record
/// read has its process's fork in the ring) and handed to the consumer after it.
pub fn take_taskstats<C: Consumer>(io: &mut Io, c: &mut C) {
    let mut batch = Vec::new();
    loop {
        let more = read_taskstats(io, &mut batch, c);
        drain(io.ring, c);
        c.taskstats(&mut batch);
        batch.clear();
        if !more {
            return;
        }
    }
}

/// Hands every record in the ring buffer to `c`, while it takes them.
pub fn drain<C: Consumer>(ring: &mut dyn Records, c: &mut C) {
    if c.taking() {
        ring.each_record(&mut |item| hand(item, c));
    }
    c.drained();
}

/// Hands `c` everything the kernel recorded until now: through an agent, its records are
/// fetched first.
fn take_all<C: Consumer>(io: &mut Io<'_>, c: &mut C) {
    io.ring.sync();
    drain(io.ring, c);
}

/// Longest [`drain_before`] waits for a record another CPU is still writing: its program runs
/// between the record's reserve and its commit for microseconds, unless its CPU is taken
/// away meanwhile.
const WRITING_GRACE: Duration = Duration::from_millis(100);

/// Hands `c` every record that begins before `end` (a ring's position, from
/// [`Ring::written`]), none after: one still being written is waited for (bounded).
pub fn drain_before<C: Consumer>(ring: &mut dyn Records, c: &mut C, end: u64) {
    let since = std::time::Instant::now();
    while c.taking() {
        let all = ring.each_record_before(end, &mut |item| hand(item, c));
        if all || since.elapsed() >= WRITING_GRACE {
            if !all {
                log::debug!(
                    "a record before the end was still being written after {WRITING_GRACE:?}"
                );
            }
            break;
        }
        std::thread::sleep(Duration::from_micros(20));
    }
    c.drained();
}

/// One record to `c`, decoded (or counted as undecodable); whether `c` takes more.
fn hand<C: Consumer>(item: &[u8], c: &mut C) -> bool {
    match decode(item) {
        Ok(ev) => c.event(ev),
        Err(e) => {
            *c.decode_errors() += 1;
            log::debug!("undecodable record: {e}");
        }
    }
    c.taking()
}

/// Sleeps until `due` (CLOCK_MONOTONIC ns), or forever when nothing is due.
async fn sleep_until(due: Option<u64>) {
    match due {
        Some(due) => {
            tokio::time::sleep(Duration::from_nanos(due.saturating_sub(monotonic_ns()))).await
        }
        None => std::future::pending().await,
    }
}

/// Runs until `c` is done.
pub async fn run<C: Consumer>(io: &mut Io<'_>, c: &mut C, extra: &mut C::Extra) -> io::Result<()> {
    let ready = match io.ring.wait_fd() {
        // SAFETY: the ring buffer and the signalfd stay open and unchanged for longer than
        // these registrations (dropped at the end of this function).
        Some(fd) => Some(unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }?),
        None => None,
    };
    // SAFETY: as above.
    let sig = unsafe { AsyncFd::register_with_interest(io.sigfd, Interest::READABLE) }?;
    let mut tick = tokio::time::interval(DRAIN_INTERVAL);
    while !c.done() {
        tokio::select! {
            // Once the source has nothing more to give (an agent gone), only the other arms.
            guard = async {
                match &ready {
                    Some(r) => r.readable().await,
                    None => std::future::pending().await,
                }
            }, if ready.is_some() && io.ring.wait_fd().is_some() => {
                let mut guard = guard?;
                drain(io.ring, c);
                guard.clear_ready();
            }
            guard = sig.readable() => {
                let mut guard = guard?;
                let signals = crate::util::signals::read_signals(io.sigfd);
                // Through an agent, records wait in its ring until fetched: a stop signal is
                // forwarded to every process the kernel has recorded until now, a fork of the
                // last milliseconds included. Not for SIGCHLD, which comes with every exit.
                if signals.iter().any(|&(signo, _)| signo != libc::SIGCHLD) {
                    io.ring.sync();
                }
                for (signo, from_process) in signals {
                    c.before_signal(signo, from_process);
                    drain(io.ring, c);
                    c.signal(signo, from_process);
                }
                guard.clear_ready();
            }
            _ = sleep_until(c.next_due()) => {
                // What the kernel recorded before the sample goes first: a PSS round's read
                // supersedes a process's older points, and those the ring still held would
                // be dropped unseen (a fill's last 6 MiB, made before the read found the
                // process exiting, once left a trusted maximum 1.2 % low). Through an agent
                // they are fetched first: a process its round finds gone, its exit record
                // still in the agent's ring, is reaped already, its last faults unread.
                take_all(io, c);
                c.due();
            }
            item = extra.next() => c.extra(item, extra),
            _ = tick.tick() => {
                // taskstats records are read on this tick, not as each arrives: one wake-up
                // per exit cost ~10 µs of CPU per process at storm rates; 50 ms of records
                // fit the socket buffer many times over. A backlog (after a stall) is taken in
                // parts: decoded whole, 8 MiB of it was 12 MB of records.
                take_taskstats(io, c);
                io.flush_log();
                // A round due now runs in the tick: what the kernel recorded goes first, as
                // for a round run when due (a child's held peak, written as it unmapped,
                // once came after the read that superseded it: a trusted maximum 6 % low).
                if c.tick_reads(monotonic_ns()) {
                    take_all(io, c);
                }
                c.tick(io.taskstats.as_deref(), io.counters);
            }
        }
    }
    Ok(())
}
