//! Writing exits: an aligned table sized to the terminal, or JSON lines (one object per exit,
//! field names as in the trace report).

use std::{
    fmt::Write as _,
    fs::OpenOptions,
    io::{self, BufWriter, IsTerminal, Write},
    path::Path,
};

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use crate::model::table::Names;
use crate::model::{exit_view::ExitView, identity::Identity};
use crate::{
    model::tree::ExitStatus,
    report::{
        lossless::{argv_b64, exe_b64, Argv, Lossy},
        origin::rfc3339,
        Exit,
    },
    util::{signals, term, units},
};

/// Where and how exits are written.
pub struct Output {
    w: BufWriter<Box<dyn Write>>,
    /// `-o FILE`: reopened on SIGHUP.
    path: Option<std::path::PathBuf>,
    /// stdout is a terminal (asked for its width).
    tty: bool,
    json: bool,
    wide: bool,
    /// Characters per table line (None: unlimited).
    width: Option<usize>,
    /// CLOCK_REALTIME - CLOCK_MONOTONIC, ns.
    wall_offset_ns: i64,
    line: String,
    /// (second, "HH:MM:SS") of the last time formatted.
    clock: (i64, String),
    /// Host and boot id, for every line.
    origin: exec_rows::Origin,
    /// `--ancestry`: exec rows show their parent chain too.
    pub ancestry: bool,
}

/// The layout of `--json` lines (docs/watch-line.schema.json): raised when a key is renamed or
/// removed or changes meaning. Lines from before it carried none (layout 1: an exit line's
/// instant only as `end_unix_ns`).
pub const SCHEMA_VERSION: u32 = 2;

/// Characters of the CGROUP column (`--wide`); longer paths push the command right.
const CGROUP_WIDTH: usize = 24;

#[path = "output_exec.rs"]
mod exec_rows;
#[path = "output_layout.rs"]
mod layout;
use layout::{Col, WatchLayout};

impl Output {
    /// stdout, or FILE opened for appending.
    pub fn open(path: Option<&Path>, json: bool, wide: bool) -> io::Result<Output> {
        let (w, tty): (Box<dyn Write>, bool) = match path {
            Some(p) => {
                let f = OpenOptions::new().create(true).append(true).open(p)?;
                (Box::new(f), false)
            }
            None => {
                let out = io::stdout();
                let tty = out.is_terminal();
                (Box::new(out), tty)
            }
        };
        let mut o = Output {
            w: BufWriter::with_capacity(64 << 10, w),
            path: path.map(Path::to_path_buf),
            tty,
            json,
            wide,
            width: None,
            wall_offset_ns: 0,
            line: String::with_capacity(512),
            clock: (i64::MIN, String::new()),
            origin: exec_rows::Origin::default(),
            ancestry: false,
        };
        o.refresh_width();
        Ok(o)
    }

    /// After a log rotation: what is buffered goes to the old file, the rest to FILE opened
    /// anew. False when the output is stdout (nothing to reopen).
    pub fn reopen(&mut self) -> io::Result<bool> {
        let Some(p) = &self.path else {
            return Ok(false);
        };
        self.w.flush()?;
        let f = OpenOptions::new().create(true).append(true).open(p)?;
        self.w = BufWriter::with_capacity(64 << 10, Box::new(f));
        Ok(true)
    }

    pub fn set_wall_offset(&mut self, ns: i64) {
        self.wall_offset_ns = ns;
    }

    /// Asks the terminal for its width again (after a resize).
    pub fn refresh_width(&mut self) {
        self.width = None;
        if self.wide {
            return;
        }
        if self.tty {
            if let Ok(ws) = rustix::termios::tcgetwinsize(io::stdout()) {
                self.width = (ws.ws_col > 0).then_some(ws.ws_col as usize);
            }
        }
    }

    pub fn header(&mut self) -> io::Result<()> {
        if self.json {
            return Ok(());
        }
        let cg = if self.wide {
            format!("{:<CGROUP_WIDTH$}  ", "CGROUP")
        } else {
            String::new()
        };
        let head = format!("{}{cg}COMMAND", WatchLayout::for_width(self.width).header());
        match self.width {
            Some(w) => writeln!(self.w, "{}", term::fit(&head, w)),
            None => writeln!(self.w, "{head}"),
        }
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    pub fn write(&mut self, x: &ExitView) -> io::Result<()> {
        if self.json {
            let exec_id = self.exec_id(x.pid, x.image_start_ns);
            let mut ser = serde_json::Serializer::new(&mut self.w);
            Json {
                x,
                wall: self.wall_offset_ns,
                exec_id,
                host: &self.origin.host,
            }
            .serialize(&mut ser)
            .map_err(io::Error::from)?;
            self.w.write_all(b"\n")
        } else {
            self.table_line(x);
            self.w.write_all(term::localize(&self.line).as_bytes())
        }
    }

    fn wall_ns(&self, mono: u64) -> i64 {
        mono as i64 + self.wall_offset_ns
    }

    /// "HH:MM:SS.mmm" in local time.
    fn time_of_day(&mut self, wall_ns: i64) -> String {
        let secs = wall_ns.div_euclid(1_000_000_000);
        let ms = wall_ns.rem_euclid(1_000_000_000) / 1_000_000;
        if self.clock.0 != secs {
            // time_t by inference: 64-bit on both glibc and musl.
            let t = secs as _;
            // SAFETY: libc::tm is plain C data (integers and a pointer): all-zero is a value.
            let mut tm: libc::tm = unsafe { std::mem::zeroed() };
            // SAFETY: localtime_r only writes the tm it is given, from a valid time_t.
            unsafe { libc::localtime_r(&t, &mut tm) };
            self.clock = (
                secs,
                format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec),
            );
        }
        format!("{}.{ms:03}", self.clock.1)
    }

    fn table_line(&mut self, x: &ExitView) {
        let time = self.time_of_day(self.wall_ns(x.end_ns));
        let mut l = std::mem::take(&mut self.line);
        l.clear();
        let pid = match x.ns_pid {
            Some(ns) if !x.thread => format!("{}/{ns}", x.pid),
            _ if x.thread => x.tid.to_string(),
            _ => x.pid.to_string(),
        };
        let runtime = x.runtime_ns().map_or("-".into(), units::duration_ns);
        let peak = if x.thread {
            "-".into()
        } else {
            x.peak_rss_bytes.map_or("-".into(), units::bytes)
        };
        let lay = WatchLayout::for_width(self.width);
        let time = if lay.ms { time } else { time[..8].to_string() };
        let cells = lay.line(|c| match c {
            Col::Time => time.clone(),
            Col::Pid => pid.clone(),
            Col::Ppid => match (x.thread, x.parent()) {
                (true, _) => x.pid.to_string(),
                (false, Some(ppid)) => ppid.to_string(),
                // The fork was not seen: say so rather than print 0.
                (false, None) => "?".into(),
            },
            Col::Uid => x.uid.to_string(),
            Col::Exit => exit_text(x.exit, x.thread),
            Col::Runtime => runtime.clone(),
            Col::Cpu => units::duration_ns(x.user_ns + x.sys_ns),
            Col::Peak => peak.clone(),
            Col::Thr => x.threads.to_string(),
        });
        l.push_str(&cells);
        if self.wide {
            let _ = write!(l, "{:<CGROUP_WIDTH$}  ", term::escape(x.cgroup.as_bytes()));
        }
        let indent = term::width(&l);
        let budget = self.width.map(|w| w.saturating_sub(indent).max(10));
        let comm = term::escape(x.comm);
        if x.thread {
            let head = format!("[thread {comm}] of ");
            push_cut(&mut l, &head, budget);
            let left = budget.map(|b| b.saturating_sub(term::width(&head)));
            command(&mut l, x.image, &comm, left);
        } else {
            command(&mut l, x.image, &comm, budget);
        }
        l.push('\n');
        if !x.ancestry.is_empty() {
            ancestry_line(&mut l, x.ancestry, indent, budget);
        }
        if !x.images.is_empty() || x.images_dropped > 0 {
            let pad = " ".repeat(indent.saturating_sub(2));
            if x.images_dropped > 0 {
                let _ = writeln!(l, "{pad}· ({} earlier images)", x.images_dropped);
            }
            let last = std::iter::once((x.image, x.last_image_peak_bytes));
            for (img, peak) in x
                .images
                .iter()
                .map(|i| {
                    (
                        &*i.image,
                        i.peak_rss_pages
                            .map(|p| p * crate::util::clock::page_size()),
                    )
                })
                .chain(last)
            {
                let peak = peak.map_or("-".into(), units::bytes);
                let head = format!("· {peak:>10}  ");
                l.push_str(&pad);
                l.push_str(&head);
                let comm = term::escape(img.comm.as_bytes());
                command(&mut l, img, &comm, budget.map(|b| b.saturating_sub(12)));
                l.push('\n');
            }
        }
        // A last guard: a line too long for a very narrow terminal is cut, never wrapped.
        if let Some(w) = self.width {
            l = term::fit_lines(&l, w);
        }
        self.line = l;
    }
}

/// Appends `s` (escaped or own text), cut to `budget` columns with an ellipsis.
/// The line under a row naming its ancestors, nearest first (`†`: already exited), indented
/// under the command and cut to the row's budget.
fn ancestry_line(
    l: &mut String,
    ancestry: &[crate::model::table::Ancestor],
    indent: usize,
    budget: Option<usize>,
) {
    l.extend(std::iter::repeat_n(' ', indent.saturating_sub(2)));
    let mut chain = String::from("↑ ");
    for (i, a) in ancestry.iter().enumerate() {
        if i > 0 {
            chain.push_str(" ← ");
        }
        let name = match a.image.comm.as_bytes() {
            [] => "?".into(),
            c => term::escape(c),
        };
        let _ = write!(
            chain,
            "{name}({}){}",
            a.pid,
            if a.exited { "†" } else { "" }
        );
    }
    push_cut(l, &chain, budget.map(|b| b + 2));
    l.push('\n');
}

fn push_cut(l: &mut String, s: &str, budget: Option<usize>) {
    match budget {
        Some(b) => l.push_str(&term::fit(s, b)),
        None => l.push_str(s),
    }
}

/// argv joined by spaces and escaped (or `[comm]` when there is none, as ps shows kernel
/// threads); `comm` is already escaped. A long program path is cut in the middle.
fn command(l: &mut String, img: &Names, comm: &str, budget: Option<usize>) {
    if img.args.is_empty() {
        push_cut(l, &format!("[{comm}]"), budget);
        return;
    }
    let mut s = term::join(img.argv());
    if !img.argv_complete {
        s.push_str(if term::ascii() { "..." } else { "…" });
    }
    match budget {
        Some(b) => l.push_str(&term::fit_command(&s, b)),
        None => l.push_str(&s),
    }
}

/// "0", "3", "SIGKILL", "SIGSEGV*" (dumped core); "-" for a thread that just ended.
fn exit_text(e: ExitStatus, thread: bool) -> String {
    match e {
        ExitStatus::Code(0) if thread => "-".into(),
        ExitStatus::Code(c) => c.to_string(),
        ExitStatus::Signal {
            signal,
            core_dumped,
        } => format!(
            "{}{}",
            signals::name(signal),
            if core_dumped { "*" } else { "" }
        ),
    }
}

/// `exe`, `exe_b64`, `argv`, `argv_b64` of an image: strings exact when UTF-8, base64 of
/// the exact bytes besides when not (as in the trace report).
fn serialize_names<M: SerializeMap>(m: &mut M, img: &Names) -> Result<(), M::Error> {
    m.serialize_entry("exe", &Lossy(&img.exe))?;
    if let Some(b) = exe_b64(&img.exe) {
        m.serialize_entry("exe_b64", &b)?;
    }
    m.serialize_entry("argv", &Argv(img.argv()))?;
    if let Some(b) = argv_b64(img.argv()) {
        m.serialize_entry("argv_b64", &b)?;
    }
    Ok(())
}

struct Json<'a, 'b> {
    x: &'a ExitView<'b>,
    wall: i64,
    exec_id: String,
    host: &'a str,
}

impl Serialize for Json<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.x;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("schema_version", &SCHEMA_VERSION)?;
        m.serialize_entry("event", "exit")?;
        m.serialize_entry("exec_id", &self.exec_id)?;
        m.serialize_entry("host", self.host)?;
        if x.thread {
            m.serialize_entry("thread", &true)?;
            m.serialize_entry("tid", &x.tid)?;
        }
        m.serialize_entry("pid", &x.pid)?;
        m.serialize_entry("ppid", &x.parent())?;
        if let Some(ns) = x.ns_pid {
            m.serialize_entry("ns_pid", &ns)?;
        }
        m.serialize_entry("comm", &Lossy(x.comm))?;
        serialize_names(&mut m, x.image)?;
        m.serialize_entry("argv_complete", &x.image.argv_complete)?;
        let start = x.start_ns.map(|s| s as i64 + self.wall);
        let end = x.end_ns as i64 + self.wall;
        // Every line's instant under one name (an exit's is its end), for log pipelines.
        m.serialize_entry("time_unix_ns", &end)?;
        m.serialize_entry("time", &rfc3339(end.max(0) as u64))?;
        m.serialize_entry("start_unix_ns", &start)?;
        m.serialize_entry("start_time", &start.map(|s| rfc3339(s.max(0) as u64)))?;
        m.serialize_entry("end_unix_ns", &end)?;
        m.serialize_entry("end_time", &rfc3339(end.max(0) as u64))?;
        m.serialize_entry("runtime_ns", &x.runtime_ns())?;
        m.serialize_entry("user_ns", &x.user_ns)?;
        m.serialize_entry("sys_ns", &x.sys_ns)?;
        m.serialize_entry("exit", &Exit(x.exit))?;
        if !x.thread {
            m.serialize_entry("peak_rss_bytes", &x.peak_rss_bytes)?;
            m.serialize_entry("ru_maxrss_bytes", &x.ru_maxrss_bytes)?;
            m.serialize_entry("threads", &x.threads)?;
            m.serialize_entry("cpu_final", &x.cpu_final)?;
        }
        m.serialize_entry("uid", &x.uid)?;
        m.serialize_entry("gid", &x.gid)?;
        m.serialize_entry("cgroup", x.cgroup)?;
        serialize_identity(&mut m, x.identity)?;
        if !x.known {
            m.serialize_entry("known", &false)?;
        }
        if !x.ancestry.is_empty() {
            m.serialize_entry("ancestry", &Ancestry(x.ancestry))?;
        }
        if !x.images.is_empty() || x.images_dropped > 0 {
            m.serialize_entry("images", &Images(x))?;
            if x.images_dropped > 0 {
                m.serialize_entry("images_dropped", &x.images_dropped)?;
            }
        }
        m.end()
    }
}

/// Container, pod and unit, when the cgroup path names them.
fn serialize_identity<M: SerializeMap>(m: &mut M, id: &Identity) -> Result<(), M::Error> {
    if let Some(r) = id.container_runtime {
        m.serialize_entry("container_runtime", r)?;
    }
    if let Some(c) = &id.container_id {
        m.serialize_entry("container_id", c)?;
    }
    if let Some(p) = &id.pod_uid {
        m.serialize_entry("pod_uid", p)?;
    }
    if let Some(u) = &id.systemd_unit {
        m.serialize_entry("systemd_unit", u)?;
    }
    Ok(())
}

struct Ancestry<'a>(&'a [crate::model::table::Ancestor]);

impl Serialize for Ancestry<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.len()))?;
        for a in self.0 {
            seq.serialize_element(&AncestorJson(a))?;
        }
        seq.end()
    }
}

struct AncestorJson<'a>(&'a crate::model::table::Ancestor);

impl Serialize for AncestorJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("pid", &self.0.pid)?;
        m.serialize_entry("comm", &Lossy(self.0.image.comm.as_bytes()))?;
        m.serialize_entry("exe", &Lossy(&self.0.image.exe))?;
        if let Some(b) = exe_b64(&self.0.image.exe) {
            m.serialize_entry("exe_b64", &b)?;
        }
        m.serialize_entry("exited", &self.0.exited)?;
        m.end()
    }
}

struct Images<'a, 'b>(&'a ExitView<'b>);

impl Serialize for Images<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.0;
        let page = crate::util::clock::page_size();
        let mut seq = s.serialize_seq(Some(x.images.len() + 1))?;
        for i in x.images {
            seq.serialize_element(&ImageJson(
                &i.image,
                i.peak_rss_pages.map(|p| p * page),
                i.shared_mm,
            ))?;
        }
        seq.serialize_element(&ImageJson(x.image, x.last_image_peak_bytes, false))?;
        seq.end()
    }
}

/// (image, peak bytes, ran on the parent's address space)
struct ImageJson<'a>(&'a Names, Option<u64>, bool);

impl Serialize for ImageJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        serialize_names(&mut m, self.0)?;
        m.serialize_entry("comm", &Lossy(self.0.comm.as_bytes()))?;
        m.serialize_entry("peak_rss_bytes", &self.1)?;
        m.serialize_entry("argv_complete", &self.0.argv_complete)?;
        m.serialize_entry("shared_mm", &self.2)?;
        m.end()
    }
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod hostile;

#[cfg(test)]
mod tests {
    use super::*;

    fn img(args: &[u8]) -> Names {
        Names {
            exe: b"/bin/x".as_slice().into(),
            comm: crate::kernel::events::Comm::new(b"x"),
            args: args.into(),
            argv_complete: true,
        }
    }

    #[test]
    fn commands_are_cut_to_width() {
        let i = img(b"cc\0-O2\0-c\0main.c");
        let mut l = String::new();
        command(&mut l, &i, "cc", None);
        assert_eq!(l, "cc -O2 -c main.c");
        l.clear();
        command(&mut l, &i, "cc", Some(9));
        assert_eq!(l, "cc -O2 -…");
        assert!(l.chars().count() <= 9);
        l.clear();
        command(&mut l, &img(b""), "kworker/0:1", None);
        assert_eq!(l, "[kworker/0:1]");
    }

    #[test]
    fn exits() {
        assert_eq!(exit_text(ExitStatus::Code(3), false), "3");
        assert_eq!(
            exit_text(
                ExitStatus::Signal {
                    signal: 11,
                    core_dumped: true
                },
                false
            ),
            "SIGSEGV*"
        );
    }
}
