//! The one way the tests wait: on a condition, polled, with a deadline after which they panic
//! with a message that says what never happened. No test sleeps for a guessed duration to let
//! something happen (a sleep that measures a rate over a window is a measurement, not a wait).

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How long a daemon (a watch, an agent) may take to load its programs and say it is ready, or
/// a process to exec: a bound for a failure only (an emulated CPU shared with other work has
/// taken over a minute).
pub const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// Polls `f` every `every` until it gives a value, or `timeout` has passed (`None`).
pub fn poll<T>(timeout: Duration, every: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let until = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= until {
            return None;
        }
        std::thread::sleep(every);
    }
}

/// Polls `f` every 10 ms until it gives a value; panics with `what` after `timeout` (as on
/// this machine: [`crate::hang_guard`] scales it in the guest).
pub fn wait_for<T>(what: &str, timeout: Duration, f: impl FnMut() -> Option<T>) -> T {
    let timeout = crate::hang_guard(timeout);
    poll(timeout, Duration::from_millis(10), f)
        .unwrap_or_else(|| panic!("no {what} within {timeout:?}"))
}

/// Waits up to `timeout` for `child` to exit; after it, kills and reaps it and returns `None`
/// (the caller panics with what it knows of the child).
pub fn exit_within(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let timeout = crate::hang_guard(timeout);
    let status = poll(timeout, Duration::from_millis(5), || {
        child
            .try_wait()
            .unwrap_or_else(|e| panic!("wait for pid {}: {e}", child.id()))
    });
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    status
}

/// Whether process `pid` is asleep (state S in /proc/PID/stat): blocked in a system call.
pub fn is_sleeping(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| r.trim_start().starts_with('S'))
        })
        .unwrap_or(false)
}

/// [`wait_for`] of a condition: returns once `cond` holds; panics with `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    wait_for(what, timeout, || cond().then_some(()));
}
