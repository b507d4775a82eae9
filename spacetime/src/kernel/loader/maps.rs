//! Maps taken out of the loaded object by the part that owns them (the programs keep their
//! own references: a map lives while a program using it is loaded, or while it is held here).

use aya::{maps::Map, Ebpf};

use super::LoadError;

/// Some of the object's maps, by name.
pub(super) struct Maps(Vec<(&'static str, Map)>);

impl Maps {
    /// Takes `names` out of `ebpf`: each must be in the object.
    pub(super) fn take(ebpf: &mut Ebpf, names: &[&'static str]) -> Result<Maps, LoadError> {
        let maps = names
            .iter()
            .map(|&name| {
                Ok((
                    name,
                    ebpf.take_map(name).ok_or(LoadError::MissingMap(name))?,
                ))
            })
            .collect::<Result<_, LoadError>>()?;
        Ok(Maps(maps))
    }

    pub(super) fn map(&self, name: &str) -> Option<&Map> {
        self.0.iter().find(|(n, _)| *n == name).map(|(_, m)| m)
    }

    pub(super) fn map_mut(&mut self, name: &str) -> Option<&mut Map> {
        self.0.iter_mut().find(|(n, _)| *n == name).map(|(_, m)| m)
    }
}
