//! The runs that are not measured: warm-up runs and the setup, prepare, conclude and cleanup
//! commands, started as the measured runs are (the same shell, streams and user).

use std::{
    ffi::OsString,
    io,
    os::unix::process::{CommandExt, ExitStatusExt},
    process::Command,
};

use super::streams::std_stdio;
use crate::run::launch::{Credentials, Stdio};

/// Runs `argv` to its end; returns its status as a shell gives it (128+N for signal N).
pub fn run(argv: &[OsString], creds: Option<&Credentials>, stdio: Stdio) -> io::Result<i32> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(std_stdio(stdio.stdin)?)
        .stdout(std_stdio(stdio.stdout)?)
        .stderr(std_stdio(stdio.stderr)?);
    if let Some(c) = creds.cloned() {
        // SAFETY: only async-signal-safe syscalls on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setgroups(c.groups.len(), c.groups.as_ptr()) != 0
                    || libc::setgid(c.gid) != 0
                    || libc::setuid(c.uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let st = cmd.status()?;
    Ok(st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0)))
}
