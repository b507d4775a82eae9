//! Between two runs of one loaded set of programs: what a run leaves in the kernel's maps
//! (processes still tracked, mms still followed, the tree-wide RSS and its peak, the pid the
//! last held child learnt) is cleared, so the next run starts from nothing.

use aya::{maps::HashMap, Pod};
use spacetime_common::{MmState, Tracked};

use super::{maps::Maps, sessions::Sessions, LoadError};

impl Sessions {
    /// Stops tracing every process: `TRACKED` is emptied first, so no fork or exec adds to
    /// the rest afterwards, then the followed mms; session 0's live count and roots are back
    /// to none. Programs loaded for one command or bench serve session 0 alone (an agent's
    /// sessions end one by one, `untrack_session`): resetting the other 63 cost two map
    /// writes and a read each, every run. Processes still running (a run stopped at its
    /// root's exit) go on untraced. Returns how many processes were still tracked (running:
    /// an ended entry waiting for its release record is removed, not counted).
    pub(super) fn untrack_all(&mut self) -> Result<usize, LoadError> {
        // Every process gone through its exit: nothing to walk the maps for (an ended entry
        // left goes with its release record, which a next run does not know and drops).
        let tracked = match self.holds_nothing(0)? {
            true => 0,
            false => {
                let gone = clear::<u32, Tracked>(&mut self.maps, "TRACKED")?;
                clear::<u64, MmState>(&mut self.maps, "MM_STATE")?;
                gone.iter().filter(|t| t.ended == 0).count()
            }
        };
        self.zero_count(0)?;
        Ok(tracked)
    }
}

/// Removes every entry of a hash map; returns the values this removal took. An entry the
/// kernel removes meanwhile (its process exited) is no error.
fn clear<K: Pod, V: Pod>(ebpf: &mut Maps, name: &'static str) -> Result<Vec<V>, LoadError> {
    let map = ebpf.map_mut(name).ok_or(LoadError::MissingMap(name))?;
    let mut m: HashMap<_, K, V> =
        HashMap::try_from(map).map_err(|source| LoadError::Map { name, source })?;
    let found: Vec<(K, V)> = m.iter().filter_map(Result::ok).collect();
    Ok(found
        .into_iter()
        .filter(|(k, _)| m.remove(k).is_ok())
        .map(|(_, v)| v)
        .collect())
}
