//! The agent's routing: each ring record to the client of the session its header names (a
//! fork record teaches the child's tgid), each watch client's own records to it, and each
//! taskstats datagram to the client whose process it is about.

use std::collections::HashMap;

use super::{clients::Client, daemon::Agent};
use crate::kernel::remote::proto::Msg;
use crate::kernel::{
    loader::SessionId,
    taskstats::{ListenerStats, RecordKind},
};

impl Agent {
    /// Sends every waiting record and taskstats datagram to its session's client.
    pub(super) fn route(&mut self) {
        // taskstats first: a datagram read now has its process's fork in the ring (or
        // already routed), so its tgid is known when it is routed below.
        let mut datagrams = Vec::new();
        if let Some(t) = self.taskstats.as_mut() {
            if let Err(e) = t.drain_datagrams(&mut |d| datagrams.push(d.to_vec())) {
                log::warn!("spacetime agent: taskstats: {e}; no more exit records");
                self.taskstats = None;
            }
        }
        let Agent {
            ring,
            clients,
            tgids,
            ..
        } = self;
        while let Some(item) = ring.next() {
            route_record(&item, clients, tgids);
        }
        for c in clients.iter_mut() {
            if let Some(mut w) = c.watch.take() {
                w.drain(c);
                if let Some(counters) = w.counters_changed() {
                    c.control(&Msg::Counters(counters));
                }
                c.watch = Some(w);
            }
        }
        let mut records = Vec::new();
        for d in &datagrams {
            records.clear();
            crate::kernel::taskstats::parse_messages(
                d,
                &mut records,
                &mut ListenerStats::default(),
            );
            let session = records.iter().find_map(|r| tgids.get(&record_tgid(r)));
            if let Some(c) = session.and_then(|&s| client_of(clients, s)) {
                c.taskstats(d);
            }
            for c in clients.iter_mut() {
                if c.watch.as_ref().is_some_and(|w| w.may_see(&records)) {
                    c.taskstats(d);
                }
            }
        }
    }
}

/// The process a taskstats record is about.
fn record_tgid(r: &crate::kernel::taskstats::TaskstatsRecord) -> u32 {
    match (r.kind, r.ac_tgid) {
        (RecordKind::Tgid, _) => r.id,
        (_, Some(t)) if t != 0 => t,
        _ => r.ac_pid,
    }
}

fn client_of(clients: &mut [Client], s: SessionId) -> Option<&mut Client> {
    clients
        .iter_mut()
        .find(|c| c.session == Some(s) && c.run.is_some())
}

/// One ring record to its session's client; a fork teaches the child's tgid.
fn route_record(bytes: &[u8], clients: &mut [Client], tgids: &mut HashMap<u32, SessionId>) {
    let Some(head) = bytes.get(..4) else { return };
    let kind = u16::from_le_bytes([head[0], head[1]]);
    let session = u16::from_le_bytes([head[2], head[3]]);
    if session == 0 {
        return;
    }
    if kind == spacetime_common::kind::FORK {
        if let Ok(crate::kernel::events::Event::Fork(f)) = crate::kernel::events::decode(bytes) {
            tgids.insert(f.child_tgid, session);
        }
    }
    if let Some(c) = client_of(clients, session) {
        c.record(bytes);
    }
}
