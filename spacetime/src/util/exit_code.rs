//! Exit statuses of spacetime's own, shared by every command.

/// Exit status for spacetime's own failures (bad usage, missing privileges), as env(1),
/// timeout(1) and nice(1) do, so they are not mistaken for CMD's status.
pub const EXIT_OWN_FAILURE: i32 = 125;

/// Exit status when the `spacetime agent` a command ran through went away before the end
/// (sysexits.h's EX_UNAVAILABLE): what it had not sent is missing. A trace keeps CMD's own
/// status when that is not 0.
pub const EXIT_AGENT_GONE: i32 = 69;
