//! What the emulated guest changes: limits that guard against a hang and loops that hunt a
//! rare defect scale with how fast instructions run; what a test asserts does not.

use std::time::Duration;

/// Default time limit for one `spacetime trace` run: a guard against a hang, never a speed
/// that is asserted. In the emulated guest, with other guests beside it on the same host CPUs,
/// a 200-process storm took more than 120 s (Debian 13's guest in CI); there it is 480 s, under
/// the guest's limit for a whole test binary (600 s), so a hang is still named by its command.
pub fn default_timeout() -> Duration {
    Duration::from_secs(repetitions(120, 480) as u64)
}

/// Set by the VM test's guest (`ST_EMULATED=1`): the CPU is emulated, about 100 times slower.
pub const EMULATED_ENV: &str = "ST_EMULATED";

/// The CPU a child may still be charged after its parent's wait4 read it: the tail of the
/// exit path between `exit_notify()` and the final `schedule()`, when the parent reaps on
/// another CPU first. A fixed run of instructions: preemption or a busy machine stretch its
/// wall, not its CPU; only a slower instruction stream does (microseconds here, tens in an
/// emulated guest), and this bound is 20 times what the emulated CPU ever needed.
pub const EXIT_TAIL_US: i64 = 1000;

/// How many times to repeat a loop that hunts a rare defect: `host` times, or `emulated` in the
/// VM test's guest, where each repetition costs a hundred times more. What each repetition
/// asserts is the same; only how often the hunt is tried differs.
pub fn repetitions(host: usize, emulated: usize) -> usize {
    if std::env::var_os(EMULATED_ENV).is_some() {
        emulated
    } else {
        host
    }
}
