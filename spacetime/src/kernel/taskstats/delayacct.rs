//! Delay accounting: whether the kernel accounts delays, and how that is set. From 5.14 the
//! sysctl `kernel.task_delayacct` switches it (off by default); before, it is set at boot
//! only: on unless the command line says `nodelayacct` (kernel/delayacct.c), with no sysctl.

use std::{io, sync::OnceLock};

const SYSCTL: &str = "/proc/sys/kernel/task_delayacct";
/// A function of kernel/delayacct.c (5.10 on), there when the kernel has delay accounting at
/// all (kallsyms lists functions whatever CONFIG_KALLSYMS_ALL says).
const COMPILED_IN: &str = " __delayacct_tsk_init\n";

/// How delay accounting is set on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DelayAcctSwitch {
    /// `kernel.task_delayacct` (5.14+): root switches it.
    Sysctl,
    /// Set at boot (`nodelayacct` turns it off), no sysctl: before 5.14.
    Boot,
    /// The kernel has no delay accounting (no CONFIG_TASK_DELAY_ACCT).
    Absent,
}

/// How delay accounting is set here.
pub fn delayacct_switch() -> io::Result<DelayAcctSwitch> {
    match std::fs::metadata(SYSCTL) {
        Ok(_) => Ok(DelayAcctSwitch::Sysctl),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(match compiled_in()? {
            true => DelayAcctSwitch::Boot,
            false => DelayAcctSwitch::Absent,
        }),
        Err(e) => Err(e),
    }
}

/// Whether the kernel has delay accounting at all, read from kallsyms once (about 10 MB; a
/// trace asks at its end): what the kernel was built with does not change while it runs.
fn compiled_in() -> io::Result<bool> {
    static COMPILED: OnceLock<bool> = OnceLock::new();
    if let Some(&known) = COMPILED.get() {
        return Ok(known);
    }
    // Names are shown to every reader of kallsyms (only addresses are hidden).
    let known = std::fs::read_to_string("/proc/kallsyms")?.contains(COMPILED_IN);
    Ok(*COMPILED.get_or_init(|| known))
}

/// Whether delay accounting is on. When off, the kernel leaves most delay fields (`blkio_*`,
/// `swapin_*`, `freepages_*`, ...) of tasks started meanwhile at zero; `cpu_*` come from the
/// scheduler and are filled either way.
pub fn delayacct_enabled() -> io::Result<bool> {
    // The sysctl read at once (a trace asks at its end), not looked for first.
    match crate::util::proc_text::with_one_piece_text(SYSCTL, parse_sysctl_bool) {
        // No sysctl: set at boot (before 5.14), or no delay accounting at all.
        Err(e) if e.kind() == io::ErrorKind::NotFound => match delayacct_switch()? {
            DelayAcctSwitch::Boot => Ok(!boot_says_off(&std::fs::read_to_string("/proc/cmdline")?)),
            // Or a sysctl that appeared a moment after it was not there: off then.
            DelayAcctSwitch::Absent | DelayAcctSwitch::Sysctl => Ok(false),
        },
        read => read?,
    }
}

/// Turns delay accounting on or off (needs CAP_SYS_ADMIN); returns the previous state. Only
/// tasks started after enabling it get delay data. Where it is set at boot, asking for what it
/// already is succeeds and anything else is refused (`Unsupported`).
pub fn set_delayacct(on: bool) -> io::Result<bool> {
    let old = delayacct_enabled()?;
    if old == on {
        return Ok(old);
    }
    match delayacct_switch()? {
        DelayAcctSwitch::Sysctl => {
            std::fs::write(SYSCTL, if on { "1\n" } else { "0\n" })?;
            Ok(old)
        }
        how => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            match how {
                DelayAcctSwitch::Absent => "this kernel has no delay accounting",
                _ => "this kernel has no kernel.task_delayacct (before 5.14): delay accounting is set at boot (`nodelayacct` turns it off)",
            },
        )),
    }
}

/// Whether a kernel command line turns delay accounting off.
fn boot_says_off(cmdline: &str) -> bool {
    cmdline.split_whitespace().any(|w| w == "nodelayacct")
}

fn parse_sysctl_bool(s: &str) -> io::Result<bool> {
    match s.trim() {
        "0" => Ok(false),
        "1" => Ok(true),
        other => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{SYSCTL} holds {other:?}, expected 0 or 1"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysctl_bool_parsing() {
        assert!(!parse_sysctl_bool("0\n").unwrap());
        assert!(parse_sysctl_bool("1\n").unwrap());
        assert!(parse_sysctl_bool("2\n").is_err());
    }

    #[test]
    fn only_the_word_nodelayacct_turns_it_off_at_boot() {
        assert!(boot_says_off("BOOT_IMAGE=/vmlinuz ro nodelayacct quiet"));
        assert!(!boot_says_off("BOOT_IMAGE=/vmlinuz ro quiet"));
        assert!(!boot_says_off("init=/nodelayacct-not-this"));
    }

    /// The kernel's own answer: a sysctl that exists is read as is; without one, delay
    /// accounting is there or not as kallsyms says.
    #[test]
    fn the_switch_is_what_the_kernel_has() {
        let sysctl = std::path::Path::new(SYSCTL).exists();
        let how = delayacct_switch().expect("read how delay accounting is set");
        assert_eq!(how == DelayAcctSwitch::Sysctl, sysctl, "{how:?}");
        if sysctl {
            let text = std::fs::read_to_string(SYSCTL).expect("read the sysctl");
            assert_eq!(delayacct_enabled().unwrap(), text.trim() == "1");
        }
    }
}
