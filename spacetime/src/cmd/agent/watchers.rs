//! Watch clients: each gets a system-mode set of programs of its own, loaded when it says
//! hello and unloaded when it goes (a kernel-side uid filter is per set). A non-root client's
//! set filters in the kernel by its uid, and it receives only the taskstats records of its
//! uid's processes: it sees its own exits and nobody else's. Root's sees every exit.

use aya::maps::{MapData, RingBuf};
use spacetime_common::{filter_flags, mode, KernelFilter};

use super::clients::Client;
use crate::kernel::{
    loader::{KernelCounters, LoadError, LoadOptions, Probes},
    taskstats::TaskstatsRecord,
};

/// An exit record the kernel-side filter reduced to a marker (see `flags::EXIT_FILTERED`).
fn is_filtered_exit(record: &[u8]) -> bool {
    let (Some(kind), Some(flags)) = (record.get(0..2), record.get(4..8)) else {
        return false;
    };
    let kind = u16::from_le_bytes([kind[0], kind[1]]);
    let flags = u32::from_le_bytes([flags[0], flags[1], flags[2], flags[3]]);
    kind == spacetime_common::kind::EXIT && flags & spacetime_common::flags::EXIT_FILTERED != 0
}

/// Watch clients at once (each costs a loaded set of programs).
pub const MAX_WATCHES: usize = 4;

pub(super) struct Watching {
    pub probes: Probes,
    ring: RingBuf<MapData>,
    last: KernelCounters,
    /// None: root, every exit.
    uid: Option<u32>,
}

impl Watching {
    /// Loads system-mode programs for a client of `uid` (its exits only unless root).
    pub fn load(uid: u32) -> Result<Watching, LoadError> {
        let mut filter = KernelFilter::default();
        let only = (uid != 0).then_some(uid);
        if let Some(u) = only {
            filter.flags |= filter_flags::UID;
            filter.n_uids = 1;
            filter.uids[0] = u;
        }
        let mut probes = Probes::load(&LoadOptions {
            mode: mode::SYSTEM,
            filter,
            cgroup_names: true,
            ..LoadOptions::default()
        })?;
        Ok(Watching {
            ring: probes.take_events()?,
            probes,
            last: KernelCounters::default(),
            uid: only,
        })
    }

    /// Sends the client every record its programs wrote, but, to a non-root client, the
    /// bare exit markers of processes its filter kept out (another user's exits).
    pub fn drain(&mut self, c: &mut Client) {
        while let Some(item) = self.ring.next() {
            if self.uid.is_some() && is_filtered_exit(&item) {
                continue;
            }
            c.record(&item);
        }
    }

    /// Whether a taskstats datagram (its records) may go to this client.
    pub fn may_see(&self, records: &[TaskstatsRecord]) -> bool {
        match self.uid {
            None => true,
            // A thread group's record carries no identity: it goes with its pid record.
            Some(u) => {
                records.iter().any(|r| r.ac_pid != 0 && r.ac_uid == u)
                    && records.iter().all(|r| r.ac_uid == u || r.ac_pid == 0)
            }
        }
    }

    /// The counters, when they changed since last asked.
    pub fn counters_changed(&mut self) -> Option<KernelCounters> {
        let now = self.probes.counters().ok()?;
        (now != self.last).then(|| {
            self.last = now;
            now
        })
    }
}
