//! Exit statuses of spacetime's own, shared by every command.

/// Exit status for spacetime's own failures (bad usage, missing privileges), as env(1),
/// timeout(1) and nice(1) do, so they are not mistaken for CMD's status.
pub const EXIT_OWN_FAILURE: i32 = 125;
