//! Each session's live tracked processes against its limit. A fork takes a slot before its
//! child joins `TRACKED`, the group exit of a tracked process gives it back. The count is one
//! atomic add each way: forks racing for the last slots are admitted in the order their adds
//! land, so N+k forks against N free slots see exactly k refused.
//!
//! `FETCH` (see `atomics`): where the kernel has no fetching add (before 5.12), the slot is
//! taken with a plain atomic add and the count read after it: the limit still holds, but
//! forks racing for the last slots can all read the others' adds and all be refused.

use crate::{atomics, SESSIONS, SESSION_LIMITS};

/// Takes a slot of `session` for a new process; false (nothing taken) when the session is
/// at its limit.
#[inline(always)]
pub fn admit<const FETCH: bool>(session: u16) -> bool {
    let Some(count) = SESSIONS.get_ptr_mut(session as u32) else {
        return false;
    };
    // SAFETY: an aligned i64 of our own map value, changed only with atomics.
    let forked = unsafe { atomics::add_and_read::<FETCH>(&raw mut (*count).forked, 1) };
    // Written by userspace only, as a whole value.
    let Some(limit) = SESSION_LIMITS.get(session as u32) else {
        return true;
    };
    if limit.max_processes == 0 || forked + limit.roots as i64 <= limit.max_processes as i64 {
        return true;
    }
    // SAFETY: as above.
    unsafe { atomics::add(&raw mut (*count).forked, -1) };
    false
}

/// Gives back the slot of a tracked process of `session` that ended (or was never tracked
/// after all).
#[inline(always)]
pub fn release(session: u16) {
    if let Some(count) = SESSIONS.get_ptr_mut(session as u32) {
        // SAFETY: as in `admit`.
        unsafe { atomics::add(&raw mut (*count).forked, -1) };
    }
}

/// Counts `delta` processes of `session` whose exit was seen and whose release record has
/// not gone ([`spacetime_common::SessionCount::ended`]): +1 when an exit marks its entry,
/// -1 when the record's removal takes it.
#[inline(always)]
pub fn ended(session: u16, delta: i64) {
    if let Some(count) = SESSIONS.get_ptr_mut(session as u32) {
        // SAFETY: as in `admit`.
        unsafe { atomics::add(&raw mut (*count).ended, delta) };
    }
}
