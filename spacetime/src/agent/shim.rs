//! Stand-ins for the multi-session loader until it is merged: one session (0) only.
#![allow(dead_code)]

use crate::loader::{KernelCounters, LoadError, Probes};

pub type SessionId = u16;
pub const MAX_SESSIONS: u32 = 64;
/// Records carry session 0 until the kernel side routes them.
pub const ONE_SESSION: bool = true;

pub trait SessionsApi {
    fn track_in(&mut self, tgid: u32, s: SessionId) -> Result<(), LoadError>;
    fn untrack_session(&mut self, s: SessionId) -> Result<usize, LoadError>;
    fn reset_session(&mut self, s: SessionId) -> Result<(), LoadError>;
    fn tree_rss_of(&self, s: SessionId) -> Result<spacetime_common::TreeRss, LoadError>;
    fn followed_mms_of(&self, s: SessionId) -> Result<Vec<spacetime_common::MmState>, LoadError>;
    fn set_session_limit(&mut self, s: SessionId, n: u32) -> Result<(), LoadError>;
    fn counters_of(&self, s: SessionId) -> Result<KernelCounters, LoadError>;
    fn set_rss_following(&mut self, on: bool) -> Result<(), LoadError>;
}

impl SessionsApi for Probes {
    fn track_in(&mut self, tgid: u32, _: SessionId) -> Result<(), LoadError> {
        self.track(tgid)
    }
    fn untrack_session(&mut self, _: SessionId) -> Result<usize, LoadError> {
        self.untrack_all()
    }
    fn reset_session(&mut self, _: SessionId) -> Result<(), LoadError> {
        self.reset_run_state()
    }
    fn tree_rss_of(&self, _: SessionId) -> Result<spacetime_common::TreeRss, LoadError> {
        self.tree_rss()
    }
    fn followed_mms_of(&self, _: SessionId) -> Result<Vec<spacetime_common::MmState>, LoadError> {
        self.followed_mms()
    }
    fn set_session_limit(&mut self, _: SessionId, _: u32) -> Result<(), LoadError> {
        Ok(())
    }
    fn counters_of(&self, _: SessionId) -> Result<KernelCounters, LoadError> {
        self.counters()
    }
    fn set_rss_following(&mut self, _: bool) -> Result<(), LoadError> {
        Ok(())
    }
}
