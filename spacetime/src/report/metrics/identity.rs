//! `--metrics-label unit|container`: exits and CPU time by systemd unit or by container, each
//! its own family (a `comm` × `unit` product would multiply the series). Bounded like comm:
//! past `--metrics-comm-limit` distinct values, exits are counted under an overflow value no
//! unit name or container id can take (neither holds '[').

use std::collections::HashMap;

use super::{status_index, CommStats};
use crate::model::exit_view::ExitView;

/// Which identity a breakdown is by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IdLabel {
    /// The innermost systemd unit (`*.service`, `*.scope`).
    Unit,
    /// The container id (docker, containerd, cri-o, podman).
    Container,
}

impl IdLabel {
    /// The label's name, also the family's middle word.
    pub fn name(self) -> &'static str {
        match self {
            IdLabel::Unit => "unit",
            IdLabel::Container => "container",
        }
    }

    /// The value for processes outside any unit or container.
    pub fn none(self) -> &'static str {
        "[none]"
    }

    /// The overflow value.
    pub fn other(self) -> &'static str {
        match self {
            IdLabel::Unit => "[other units]",
            IdLabel::Container => "[other containers]",
        }
    }
}

/// Exits and CPU time by one identity label.
#[derive(Debug, Clone)]
pub struct ByIdentity {
    pub label: IdLabel,
    pub values: HashMap<Box<str>, CommStats>,
    pub other: CommStats,
    limit: usize,
}

impl ByIdentity {
    pub fn new(label: IdLabel, limit: usize) -> ByIdentity {
        ByIdentity {
            label,
            values: HashMap::new(),
            other: CommStats::default(),
            limit,
        }
    }

    /// Counts an exit; its run time and peak too with `histograms`.
    pub fn observe(&mut self, x: &ExitView, histograms: bool) {
        let value = match self.label {
            IdLabel::Unit => x.identity.systemd_unit.as_deref(),
            IdLabel::Container => x.identity.container_id.as_deref(),
        }
        .unwrap_or(self.label.none());
        let s = status_index(x.exit);
        let room = self.values.len() < self.limit;
        match self.values.get_mut(value) {
            Some(c) => c.add(s, x, histograms),
            None if room => self
                .values
                .entry(value.into())
                .or_default()
                .add(s, x, histograms),
            None => self.other.add(s, x, histograms),
        }
    }

    /// (value, figures), sorted, the overflow value last when used.
    pub fn rows(&self) -> Vec<(&str, &CommStats)> {
        let mut v: Vec<(&str, &CommStats)> = self.values.iter().map(|(k, c)| (&**k, c)).collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        if self.other.exits.iter().sum::<u64>() > 0 {
            v.push((self.label.other(), &self.other));
        }
        v
    }
}
