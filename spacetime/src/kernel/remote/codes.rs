//! The protocol's typed answers: why the agent refused ([`Refusal`]), whether its taskstats
//! records come ([`TaskstatsState`]), whether its CPU clock runs for a session
//! ([`CpuClockState`]); and what a client can read of a taskstats datagram. Each travels as
//! one byte beside the words for people.

/// Why the agent refused: what a client may decide on (the text beside it is for people).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Refusal {
    /// Anything not below.
    Other = 0,
    /// The client speaks another protocol version.
    Version = 1,
    /// The agent does not serve what was asked.
    NotServed = 2,
    /// The client is in another PID namespace than the agent.
    Namespace = 3,
    /// The agent serves as many connections, sessions or watches as it can.
    Busy = 4,
    /// The user holds as many as one user may.
    UserLimit = 5,
    /// A malformed message, or one out of order: the connection ends.
    Protocol = 6,
    /// The process was not proven the client's to trace (not its child, another user's,
    /// exec'd, gone, a thread…).
    NotProven = 7,
    /// The agent could not do it (loading, tracking).
    Failed = 8,
}

impl Refusal {
    pub(super) fn from_u8(v: u8) -> Refusal {
        match v {
            1 => Refusal::Version,
            2 => Refusal::NotServed,
            3 => Refusal::Namespace,
            4 => Refusal::Busy,
            5 => Refusal::UserLimit,
            6 => Refusal::Protocol,
            7 => Refusal::NotProven,
            8 => Refusal::Failed,
            _ => Refusal::Other,
        }
    }
}

/// Whether the agent's taskstats records come, and if not, why (its listener's state).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum TaskstatsState {
    #[default]
    Available = 0,
    /// The agent runs outside the host's network namespace.
    OtherNetNamespace = 1,
    /// Opening or registering its listener failed ([`Welcome::taskstats_error`] says how).
    Failed = 2,
}

impl TaskstatsState {
    pub(super) fn from_u8(v: u8) -> TaskstatsState {
        match v {
            0 => TaskstatsState::Available,
            1 => TaskstatsState::OtherNetNamespace,
            _ => TaskstatsState::Failed,
        }
    }
}

/// Whether the agent's CPU clock program samples a session's threads (CPU over time from
/// their run time, as with a trace's own programs), as its welcome says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CpuClockState {
    /// The session did not ask for CPU over time.
    #[default]
    NotAsked,
    /// It runs on this many CPUs, and stays attached while the session is open.
    Ticking { cpus: u32 },
    /// It cannot run (why, for people): CPU over time is each process's CPU spread over its
    /// life.
    Failed(Vec<u8>),
}

impl CpuClockState {
    pub(super) const NOT_ASKED: u8 = 0;
    pub(super) const TICKING: u8 = 1;
    pub(super) const FAILED: u8 = 2;

    pub(super) fn code(&self) -> u8 {
        match self {
            CpuClockState::NotAsked => Self::NOT_ASKED,
            CpuClockState::Ticking { .. } => Self::TICKING,
            CpuClockState::Failed(_) => Self::FAILED,
        }
    }
}

/// The (pid, real uid) of each record in a taskstats datagram as `Msg::Taskstats` carries
/// it (a thread group's record names no one: pid 0). What a client can learn from one.
pub fn datagram_identities(datagram: &[u8]) -> Vec<(u32, u32)> {
    let mut records = Vec::new();
    crate::kernel::taskstats::parse_messages(
        datagram,
        &mut records,
        &mut crate::kernel::taskstats::ListenerStats::default(),
    );
    records.iter().map(|r| (r.ac_pid, r.ac_uid)).collect()
}
