//! Delay accounting switched on for as long as spacetime traces (`--delayacct`), and put back
//! as it was on every way out.

/// Whether the kernel accounts delays now.
pub fn delayacct_on() -> bool {
    crate::kernel::taskstats::delayacct_enabled().unwrap_or(false)
}

/// Restores `kernel.task_delayacct` when dropped, if it switched it on.
pub struct DelayAcct {
    restore: Option<bool>,
}

impl DelayAcct {
    /// `notice`: say that delays read 0 when accounting is off (-v only: the summary shows
    /// delays only then).
    pub fn configure(enable: bool, notice: bool) -> DelayAcct {
        if !enable {
            if notice && !delayacct_on() {
                crate::errln!("spacetime: delay accounting is off (sysctl kernel.task_delayacct=0): delays read 0; --delayacct turns it on for the trace");
            }
            return DelayAcct { restore: None };
        }
        match crate::kernel::taskstats::set_delayacct(true) {
            Ok(old) => DelayAcct {
                restore: (!old).then_some(old),
            },
            Err(e) => {
                crate::errln!("spacetime: cannot switch delay accounting on: {e}");
                DelayAcct { restore: None }
            }
        }
    }
}

impl Drop for DelayAcct {
    fn drop(&mut self) {
        if let Some(old) = self.restore {
            if let Err(e) = crate::kernel::taskstats::set_delayacct(old) {
                crate::errln!(
                    "spacetime: could not restore kernel.task_delayacct={}: {e}",
                    old as u8
                );
            }
        }
    }
}
