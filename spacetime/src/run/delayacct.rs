//! Delay accounting switched on for as long as spacetime traces (`--delayacct`), and put back
//! as it was once the last trace that wanted it is over, on every way out, a SIGKILL
//! included.
//!
//! Every spacetime that wants it on (an embedded `trace --delayacct`, an agent serving one)
//! holds a shared lock on [`LOCK`] while it runs. The one that switches it on writes what it
//! was before into [`RECORD`] first. Leaving, a holder tries the exclusive lock: only the last
//! gets it, and puts back what the record says. A holder killed outright loses its lock with
//! its descriptors, so the next spacetime that takes the exclusive lock and finds a record
//! left repairs it. Two traces at once therefore never switch it off under each other.

use std::{fs::File, io, os::fd::AsFd, path::Path};

use rustix::fs::{flock, FlockOperation};

/// The directory of spacetime's state that must outlive a process (root's, 0755).
const STATE_DIR: &str = "/run/spacetime";
/// Held shared by every spacetime that wants delay accounting on.
const LOCK: &str = "/run/spacetime/delayacct.lock";
/// `kernel.task_delayacct` as it was before spacetime switched it on ("0"); absent when
/// spacetime did not switch it.
const RECORD: &str = "/run/spacetime/delayacct.before";

/// Whether the kernel accounts delays now.
pub fn delayacct_on() -> bool {
    crate::kernel::taskstats::delayacct_enabled().unwrap_or(false)
}

/// Holds delay accounting on while alive (see the module's comment).
pub struct DelayAcct {
    held: Option<File>,
}

impl DelayAcct {
    /// `notice`: say that delays read 0 when accounting is off (-v only: the summary shows
    /// delays only then).
    pub fn configure(enable: bool, notice: bool) -> DelayAcct {
        if !enable {
            if notice && !delayacct_on() {
                crate::errln!("spacetime: delay accounting is off (sysctl kernel.task_delayacct=0): delays read 0; --delayacct turns it on for the trace");
            }
            return DelayAcct { held: None };
        }
        match hold(Path::new(STATE_DIR), Path::new(LOCK), Path::new(RECORD)) {
            Ok(lock) => DelayAcct { held: Some(lock) },
            Err(e) => {
                crate::errln!("spacetime: cannot switch delay accounting on: {e}");
                DelayAcct { held: None }
            }
        }
    }
}

impl Drop for DelayAcct {
    fn drop(&mut self) {
        if let Some(lock) = self.held.take() {
            if let Err(e) = release(&lock, Path::new(RECORD)) {
                crate::errln!("spacetime: could not put kernel.task_delayacct back: {e}");
            }
        }
    }
}

/// Puts back what a holder killed before its end left switched on, if no one holds delay
/// accounting now (an agent starting: one killed earlier may have left it on).
pub fn repair_left() {
    let Ok(f) = File::open(LOCK) else { return };
    if flock(f.as_fd(), FlockOperation::NonBlockingLockExclusive).is_ok() {
        if let Err(e) = repair(Path::new(RECORD)) {
            log::warn!("putting kernel.task_delayacct back: {e}");
        }
        let _ = flock(f.as_fd(), FlockOperation::Unlock);
    }
}

/// Puts back what `record` says, if it says anything; call with the exclusive lock held.
fn repair(record: &Path) -> io::Result<()> {
    match std::fs::read_to_string(record) {
        Ok(before) => {
            if before.trim() == "0" {
                crate::kernel::taskstats::set_delayacct(false)?;
            }
            std::fs::remove_file(record)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Takes a shared hold on delay accounting, switching it on (and recording what it was) if
/// no one holds it yet; repairs what a holder killed before its end left.
fn hold(dir: &Path, lock: &Path, record: &Path) -> io::Result<File> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)?;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(lock)?;
    loop {
        if flock(f.as_fd(), FlockOperation::NonBlockingLockExclusive).is_ok() {
            // Alone: a record left is a killed holder's.
            repair(record)?;
            if !crate::kernel::taskstats::delayacct_enabled()? {
                std::fs::write(record, "0\n")?;
                crate::kernel::taskstats::set_delayacct(true)?;
            }
            flock(f.as_fd(), FlockOperation::LockShared)?;
            return Ok(f);
        }
        // Others hold it: on already, unless the last of them is putting it back now.
        flock(f.as_fd(), FlockOperation::LockShared)?;
        if crate::kernel::taskstats::delayacct_enabled()? {
            return Ok(f);
        }
        flock(f.as_fd(), FlockOperation::Unlock)?;
    }
}

/// Gives the hold back; the last holder puts back what was recorded.
fn release(f: &File, record: &Path) -> io::Result<()> {
    flock(f.as_fd(), FlockOperation::Unlock)?;
    if flock(f.as_fd(), FlockOperation::NonBlockingLockExclusive).is_ok() {
        let r = repair(record);
        flock(f.as_fd(), FlockOperation::Unlock)?;
        return r;
    }
    Ok(())
}
