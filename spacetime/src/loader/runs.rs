//! Between two runs of one loaded set of programs: what a run leaves in the kernel's maps
//! (processes still tracked, mms still followed, the tree-wide RSS and its peak, the pid the
//! last held child learnt) is cleared, so the next run starts from nothing.

use aya::{
    maps::{Array, HashMap},
    Ebpf, Pod,
};
use spacetime_common::{pidns_slot, MmState, TreeRss};

use super::{LoadError, Probes};

impl Probes {
    /// Stops tracing every process: `TRACKED` is emptied first, so no fork or exec adds to
    /// the rest afterwards, then the followed mms. Processes still running (a run stopped at
    /// its root's exit) go on untraced. Returns how many processes were still tracked.
    pub fn untrack_all(&mut self) -> Result<usize, LoadError> {
        let tracked = clear::<u32, u64>(&mut self.ebpf, "TRACKED")?;
        clear::<u64, MmState>(&mut self.ebpf, "MM_STATE")?;
        Ok(tracked)
    }

    /// Zeroes the tree-wide RSS (sum, peak, its time) and the pid `own_pid` learnt, so a run's
    /// figures are its own. Call with nothing tracked (after [`Probes::untrack_all`]).
    pub fn reset_run_state(&mut self) -> Result<(), LoadError> {
        const TREE: &str = "TREE_RSS";
        let map = self.ebpf.map_mut(TREE).ok_or(LoadError::MissingMap(TREE))?;
        let mut tree: Array<_, TreeRss> =
            Array::try_from(map).map_err(|source| LoadError::Map { name: TREE, source })?;
        tree.set(0, TreeRss::default(), 0)
            .map_err(|source| LoadError::Map { name: TREE, source })?;
        const PIDNS: &str = "PIDNS";
        let map = self
            .ebpf
            .map_mut(PIDNS)
            .ok_or(LoadError::MissingMap(PIDNS))?;
        let mut pidns: Array<_, u32> = Array::try_from(map).map_err(|source| LoadError::Map {
            name: PIDNS,
            source,
        })?;
        pidns
            .set(pidns_slot::KERNEL_PID, 0, 0)
            .map_err(|source| LoadError::Map {
                name: PIDNS,
                source,
            })
    }
}

/// Removes every entry of a hash map; returns how many there were. An entry the kernel
/// removes meanwhile (its process exited) is no error.
fn clear<K: Pod, V: Pod>(ebpf: &mut Ebpf, name: &'static str) -> Result<usize, LoadError> {
    let map = ebpf.map_mut(name).ok_or(LoadError::MissingMap(name))?;
    let mut m: HashMap<_, K, V> =
        HashMap::try_from(map).map_err(|source| LoadError::Map { name, source })?;
    let keys: Vec<K> = m.keys().filter_map(Result::ok).collect();
    for k in &keys {
        let _ = m.remove(k);
    }
    Ok(keys.len())
}
