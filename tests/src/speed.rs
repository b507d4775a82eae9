//! What the emulated guest changes: limits that guard against a hang and loops that hunt a
//! rare defect scale with how fast instructions run; what a test asserts does not.

use std::time::Duration;

use crate::clock::monotonic_ns;

/// Default time limit for one `spacetime trace` run: a guard against a hang, never a speed
/// that is asserted. In the emulated guest, with other guests beside it on the same host CPUs,
/// a 200-process storm took more than 120 s (Debian 13's guest in CI); there it is 480 s, under
/// the guest's limit for a whole test binary (600 s), so a hang is still named by its command.
pub fn default_timeout() -> Duration {
    Duration::from_secs(repetitions(120, 480) as u64)
}

/// A limit on a wait, as a test states it for this machine: in the emulated guest 4 times
/// longer (as [`default_timeout`]), at most 540 s, under the guest's limit for a test binary.
/// A guard against a hang, never a speed: a guest beside four others on two CPUs once took
/// more than 30 s to answer what the host answers in a second.
pub fn hang_guard(limit: Duration) -> Duration {
    if emulated() {
        (limit * 4).min(Duration::from_secs(540)).max(limit)
    } else {
        limit
    }
}

/// Set by the VM test's guest (`ST_EMULATED=1`): the CPU is emulated, about 100 times slower.
pub const EMULATED_ENV: &str = "ST_EMULATED";

/// The CPU a child may still be charged after its parent's wait4 read it: the tail of the
/// exit path between `exit_notify()` and the final `schedule()`, when the parent reaps on
/// another CPU first. A fixed run of instructions: on a real CPU preemption or a busy machine
/// stretch its wall, not its CPU; only a slower instruction stream does (microseconds here,
/// tens in an emulated guest), and this bound is 20 times what the emulated CPU ever needed.
/// See [`exit_tail_us`] for an emulated guest on a busy host.
pub const EXIT_TAIL_US: i64 = 1000;

/// The most CPU a child may still be charged after its parent's wait4 returned at
/// `reaped_ns` (CLOCK_MONOTONIC, [`monotonic_ns`]), asked once the trace is over:
/// [`EXIT_TAIL_US`], or in an emulated guest at most the wall since the reap. There the vCPU
/// may wait for the host's CPU in the middle of the tail while the guest's clock runs on (no
/// steal time under TCG), and the kernel charges the wait to the exiting task: 40 ms once, in
/// a guest beside four others on two CPUs. One thread is never charged more than the wall.
pub fn exit_tail_us(reaped_ns: i64) -> i64 {
    if emulated() {
        EXIT_TAIL_US.max((monotonic_ns() - reaped_ns) / 1000)
    } else {
        EXIT_TAIL_US
    }
}

/// Whether this runs in the VM test's emulated guest.
pub fn emulated() -> bool {
    std::env::var_os(EMULATED_ENV).is_some()
}

/// How many times to repeat a loop that hunts a rare defect: `host` times, or `emulated` in the
/// VM test's guest, where each repetition costs a hundred times more. What each repetition
/// asserts is the same; only how often the hunt is tried differs.
pub fn repetitions(host: usize, emulated: usize) -> usize {
    if self::emulated() {
        emulated
    } else {
        host
    }
}
