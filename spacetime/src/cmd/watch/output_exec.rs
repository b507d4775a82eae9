//! Exec lines (`--events exec`) and the identity every line carries: the host, this boot's id
//! for exec ids, RFC 3339 times beside the Unix nanoseconds.

use std::{fmt::Write as _, io, io::Write as _};

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::{command, serialize_names, Ancestry, Col, Output, WatchLayout};
use crate::{
    cmd::watch::exec::ExecView,
    model::identity,
    report::{lossless::Lossy, origin::rfc3339},
    util::term,
};

/// What identifies the lines of this watch: set once.
#[derive(Debug, Default, Clone)]
pub struct Origin {
    pub host: String,
    pub boot_id: String,
}

impl Output {
    /// The host's name and this boot's id, for every line.
    pub fn set_identity(&mut self, host: String, boot_id: String) {
        self.origin = Origin { host, boot_id };
    }

    /// The exec id of the image of `pid` that started at `image_start_ns`.
    pub(super) fn exec_id(&self, pid: u32, image_start_ns: u64) -> String {
        identity::exec_id(&self.origin.boot_id, pid, image_start_ns)
    }

    pub fn write_exec(&mut self, x: &ExecView) -> io::Result<()> {
        if self.json {
            let mut ser = serde_json::Serializer::new(&mut self.w);
            let id = identity::exec_id(&self.origin.boot_id, x.pid, x.ts_ns);
            let unix = x.ts_ns as i64 + self.wall_offset_ns;
            ExecJson {
                x,
                exec_id: &id,
                host: &self.origin.host,
                unix_ns: unix,
            }
            .serialize(&mut ser)
            .map_err(io::Error::from)?;
            self.w.write_all(b"\n")
        } else {
            self.exec_line(x);
            self.w.write_all(term::localize(&self.line).as_bytes())
        }
    }

    /// A table row for an exec: EXIT says `exec`, the figures a start has not got are `-`.
    pub(super) fn exec_line(&mut self, x: &ExecView) {
        let time = self.time_of_day(self.wall_ns(x.ts_ns));
        let mut l = std::mem::take(&mut self.line);
        l.clear();
        let lay = WatchLayout::for_width(self.width);
        let time = if lay.ms { time } else { time[..8].to_string() };
        let cells = lay.line(|c| match c {
            Col::Time => time.clone(),
            Col::Pid => x.pid.to_string(),
            Col::Ppid => x.ppid.map_or("?".into(), |p| p.to_string()),
            Col::Uid => x.uid.to_string(),
            Col::Exit => "exec".into(),
            _ => "-".into(),
        });
        l.push_str(&cells);
        if self.wide {
            let _ = write!(
                l,
                "{:<width$}  ",
                term::escape(x.cgroup.as_bytes()),
                width = super::CGROUP_WIDTH
            );
        }
        let indent = term::width(&l);
        let budget = self.width.map(|w| w.saturating_sub(indent).max(10));
        let comm = term::escape(x.image.comm.as_bytes());
        command(&mut l, x.image, &comm, budget);
        l.push('\n');
        if self.ancestry && !x.ancestry.is_empty() {
            super::ancestry_line(&mut l, x.ancestry, indent, budget);
        }
        if let Some(w) = self.width {
            l = term::fit_lines(&l, w);
        }
        self.line = l;
    }
}

struct ExecJson<'a, 'b> {
    x: &'a ExecView<'b>,
    exec_id: &'a str,
    host: &'a str,
    unix_ns: i64,
}

impl Serialize for ExecJson<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.x;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("schema_version", &super::SCHEMA_VERSION)?;
        m.serialize_entry("event", "exec")?;
        m.serialize_entry("exec_id", self.exec_id)?;
        m.serialize_entry("host", self.host)?;
        m.serialize_entry("pid", &x.pid)?;
        m.serialize_entry("ppid", &x.ppid)?;
        m.serialize_entry("comm", &Lossy(x.image.comm.as_bytes()))?;
        serialize_names(&mut m, x.image)?;
        m.serialize_entry("argv_complete", &x.image.argv_complete)?;
        m.serialize_entry("time_unix_ns", &self.unix_ns)?;
        m.serialize_entry("time", &rfc3339(self.unix_ns.max(0) as u64))?;
        m.serialize_entry("uid", &x.uid)?;
        m.serialize_entry("cgroup", x.cgroup)?;
        super::serialize_identity(&mut m, x.identity)?;
        m.serialize_entry("ancestry", &Ancestry(x.ancestry))?;
        m.end()
    }
}
