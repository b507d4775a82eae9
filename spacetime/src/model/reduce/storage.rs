//! What the reducer asks of a storage: where a record's process is, and the few rules that
//! differ between keeping every process (`trace`, [`super::Kept`]) and keeping the live ones
//! within bounds (`watch`, [`super::LiveSet`]).

use std::sync::Arc;

use spacetime_common::{ExitEvent, ImageEndEvent};

use super::{Process, Stats};
use crate::model::process::{Key, Names};

/// A storage of processes the reducer ([`super::Store`]) fills.
pub trait Storage {
    /// A process as the storage holds it.
    type Held: Held;
    /// A process that left the storage at its end (none leave a storage that keeps all).
    type Ended;

    /// The process a record for `key` is about. Keeping all, made when unknown; in the live
    /// set, found by the identity rule, and made (within the bound) only with `create`.
    fn find(&mut self, key: Key, create: bool, stats: &mut Stats) -> Option<&mut Self::Held>;

    /// Whether a record for `key` reaches a process held.
    fn knows(&mut self, key: Key, stats: &mut Stats) -> bool;

    /// Whether a process with this tgid can be added (or replace the one held).
    fn has_room(&self, tgid: u32) -> bool;

    /// Whether a process counts its live children (for the ghosts of ancestry).
    fn counts_children(&self) -> bool;

    /// A fork record names `tgid`: it started while traced.
    fn forked(&mut self, tgid: u32);

    /// The pids shown are a PID namespace's, from the fork records.
    fn namespace_pids(&self) -> bool;

    /// Room for images a forked child gets at its fork.
    fn child_images(&self) -> usize;

    /// Names an exec gave, as held; `whole`: its argv arrived whole; `args_len`: the argv
    /// bytes it announced.
    fn exec_names(
        &mut self,
        names: Names,
        whole: bool,
        args_len: usize,
        stats: &mut Stats,
    ) -> Arc<Names>;

    /// Whether the images a process left are kept (else only its current one).
    fn keeps_images(&self) -> bool;

    /// Whether argv shows what arrived as each record comes (a trace reports whatever
    /// arrived), rather than once every byte came or the image ended (watch).
    fn publishes_partial_argv(&self) -> bool;

    /// The group exit of a process not held: what ended, if anything is returned for it.
    fn unknown_exit(&mut self, x: &ExitEvent, stats: &mut Stats) -> Option<Self::Ended>;

    /// The process held for `tgid` ended (its first group exit).
    fn ended(&mut self, tgid: u32, stats: &mut Stats) -> Option<Self::Ended>;
}

/// A process as a storage holds it: the [`Process`], and what the storage keeps beside it.
pub trait Held {
    fn process(&mut self) -> &mut Process;

    /// It forked a child (`count`: the child counts as a live child of its); whether the
    /// child is in the `--pid-tree`.
    fn forked_child(&mut self, _count: bool) -> bool {
        false
    }

    /// Its fork record came (`in_tree`: its parent is in the `--pid-tree`).
    fn fork_record(&mut self, _in_tree: bool) {}

    /// An exec added its image (`keep_images`: the images it left are kept).
    fn exec_done(&mut self, _keep_images: bool) {}

    /// An image ended by an image-end record (`shared_mm`: it ran on its parent's memory).
    fn image_ended(&mut self, _m: &ImageEndEvent, _shared_mm: bool) {}

    /// One of its threads (or the last one) exited having run `runtime_ns`.
    fn thread_exited(&mut self, _runtime_ns: u64) {}
}

impl Held for Process {
    fn process(&mut self) -> &mut Process {
        self
    }
}
