//! `kernel.task_delayacct` as the tests read it, a truth apart from spacetime's own reading.

const TASK_DELAYACCT: &str = "/proc/sys/kernel/task_delayacct";

/// The sysctl's text, or None on a kernel before 5.14, which has none and accounts delays
/// unless booted with `nodelayacct` (checked here: a guest booted so could not pass a test
/// that wants delays on).
pub fn task_delayacct() -> Option<String> {
    match std::fs::read_to_string(TASK_DELAYACCT) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let cmdline = std::fs::read_to_string("/proc/cmdline")
                .unwrap_or_else(|e| panic!("reading /proc/cmdline: {e}"));
            assert!(
                !cmdline.split_whitespace().any(|w| w == "nodelayacct"),
                "no {TASK_DELAYACCT} and delay accounting off at boot: {cmdline}"
            );
            None
        }
        Err(e) => panic!("reading {TASK_DELAYACCT}: {e}"),
    }
}
