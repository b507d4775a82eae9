//! The commands, thin orchestrations over the layers below: [`cli`] parses the command line,
//! [`trace`] is one run of a session rendered, [`bench`] many runs compared, [`watch`] every
//! exit on the system, [`agent`] the daemon that serves the others' kernel side, [`doctor`] what works
//! on this machine.

pub mod agent;
pub mod bench;
pub mod cli;
pub mod completions;
pub mod diff;
pub mod doctor;
pub mod man;
mod quick_parse;
pub mod report;
pub mod trace;
pub mod watch;
