//! Telling a service manager that a long-running command is ready (systemd's `Type=notify`:
//! a `READY=1` datagram on `$NOTIFY_SOCKET`); nothing when no manager asked.

use std::io;

/// Sends `READY=1` with `status` (one line, control characters left out: a newline would
/// start another assignment). Ok and nothing sent when `NOTIFY_SOCKET` is not set.
pub fn ready(status: &str) -> io::Result<()> {
    let status = one_line(status);
    sd_notify::notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&status),
    ])
}

fn one_line(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_status_is_one_assignment() {
        assert_eq!(super::one_line("a\nREADY=0\x1b[2J"), "aREADY=0[2J");
    }
}
