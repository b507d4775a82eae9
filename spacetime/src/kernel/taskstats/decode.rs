//! Netlink datagrams → [`TaskstatsRecord`]s. Pure: no socket, usable from tests and fuzzers.

use super::netlink::{
    ne_u32, Malformed, NlAttrIter, NlMsg, NlMsgIter, GENL_HDRLEN, GENL_ID_CTRL, NLMSG_ERROR,
    NLMSG_MIN_TYPE,
};
use super::record::{parse_stats, RecordKind, TaskstatsRecord};
use super::ListenerStats;

/// Requests (register/deregister, queries) from user space.
pub(crate) const TASKSTATS_CMD_GET: u8 = 1;
/// Exit records and query replies from the kernel.
pub(crate) const TASKSTATS_CMD_NEW: u8 = 2;

pub(crate) const TASKSTATS_TYPE_PID: u16 = 1;
pub(crate) const TASKSTATS_TYPE_TGID: u16 = 2;
pub(crate) const TASKSTATS_TYPE_STATS: u16 = 3;
pub(crate) const TASKSTATS_TYPE_AGGR_PID: u16 = 4;
pub(crate) const TASKSTATS_TYPE_AGGR_TGID: u16 = 5;
#[allow(dead_code)]
pub(crate) const TASKSTATS_TYPE_NULL: u16 = 6;

pub(crate) const TASKSTATS_CMD_ATTR_REGISTER_CPUMASK: u16 = 3;
pub(crate) const TASKSTATS_CMD_ATTR_DEREGISTER_CPUMASK: u16 = 4;

/// Decodes every taskstats record in `buf` (one or more netlink messages, as one `recv`
/// returns them) and appends them to `out`; returns how many were appended.
///
/// Counts into `stats`: `records` for each record appended, `parse_errors` once for each
/// message (or trailing garbage) that could not be decoded completely, `kernel_errors` for
/// each `NLMSG_ERROR` carrying a non-zero error. Records decoded before a defect in the same
/// message are kept. Netlink control messages, acks, the genetlink controller's messages and
/// attributes of unknown type are skipped. Never panics, whatever `buf` holds.
pub fn parse_messages(
    buf: &[u8],
    out: &mut Vec<TaskstatsRecord>,
    stats: &mut ListenerStats,
) -> usize {
    let start = out.len();
    for msg in NlMsgIter::new(buf) {
        match msg {
            Ok(msg) => parse_one(&msg, out, stats),
            Err(Malformed(why)) => {
                stats.parse_errors += 1;
                log::debug!("taskstats: malformed netlink data: {why}");
            }
        }
    }
    let appended = out.len() - start;
    stats.records += appended as u64;
    appended
}

/// Decodes one message into `out`, counting a defect as a parse error (but not records).
pub(crate) fn parse_one(
    msg: &NlMsg<'_>,
    out: &mut Vec<TaskstatsRecord>,
    stats: &mut ListenerStats,
) {
    if let Err(Malformed(why)) = parse_message(msg, out, stats) {
        stats.parse_errors += 1;
        log::debug!("taskstats: malformed taskstats message: {why}");
    }
}

fn parse_message(
    msg: &NlMsg<'_>,
    out: &mut Vec<TaskstatsRecord>,
    stats: &mut ListenerStats,
) -> Result<(), Malformed> {
    match msg.ty {
        NLMSG_ERROR => {
            let err = ne_u32(msg.payload, 0).ok_or(Malformed("NLMSG_ERROR without its error"))?;
            if err != 0 {
                stats.kernel_errors += 1;
                log::debug!("taskstats: kernel reported error {}", -(err as i32));
            }
            Ok(())
        }
        ty if ty < NLMSG_MIN_TYPE || ty == GENL_ID_CTRL => Ok(()),
        _ => parse_genl(msg.payload, out),
    }
}

fn parse_genl(payload: &[u8], out: &mut Vec<TaskstatsRecord>) -> Result<(), Malformed> {
    let (Some(&cmd), Some(attrs)) = (payload.first(), payload.get(GENL_HDRLEN..)) else {
        return Err(Malformed("message shorter than the genetlink header"));
    };
    if cmd != TASKSTATS_CMD_NEW {
        return Ok(());
    }
    // The kernel never sets the version of a tgid exit record; it is the pid record's.
    let mut pid_version = None;
    for attr in NlAttrIter::new(attrs) {
        let attr = attr?;
        match attr.ty {
            TASKSTATS_TYPE_AGGR_PID => {
                let rec = parse_aggr(RecordKind::Pid, attr.payload, None)?;
                pid_version = Some(rec.version);
                out.push(rec);
            }
            TASKSTATS_TYPE_AGGR_TGID => {
                out.push(parse_aggr(RecordKind::Tgid, attr.payload, pid_version)?);
            }
            // TASKSTATS_TYPE_NULL padding, and whatever a newer kernel adds.
            _ => {}
        }
    }
    Ok(())
}

fn parse_aggr(
    kind: RecordKind,
    nested: &[u8],
    version_hint: Option<u16>,
) -> Result<TaskstatsRecord, Malformed> {
    let id_type = match kind {
        RecordKind::Pid => TASKSTATS_TYPE_PID,
        RecordKind::Tgid => TASKSTATS_TYPE_TGID,
    };
    let mut id = None;
    let mut stats = None;
    for attr in NlAttrIter::new(nested) {
        let attr = attr?;
        if attr.ty == id_type {
            id = Some(ne_u32(attr.payload, 0).ok_or(Malformed("pid/tgid attribute too short"))?);
        } else if attr.ty == TASKSTATS_TYPE_STATS {
            stats = Some(attr.payload);
        }
    }
    let id = id.ok_or(Malformed("aggregate without its pid/tgid"))?;
    let stats = stats.ok_or(Malformed("aggregate without its stats"))?;
    parse_stats(kind, id, stats, version_hint)
}
