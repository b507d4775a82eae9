//! Writing exits: an aligned table sized to the terminal, or JSON lines (one object per exit,
//! field names as in the trace report).

use std::{
    fmt::Write as _,
    fs::OpenOptions,
    io::{self, BufWriter, IsTerminal, Write},
    os::fd::{AsRawFd, RawFd},
    path::Path,
};

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

use super::{exit::ExitView, table::ImageInfo};
use crate::{report::Exit, tree::ExitStatus, units};

/// Where and how exits are written.
pub struct Output {
    w: BufWriter<Box<dyn Write>>,
    /// The descriptor, to ask a terminal for its width.
    fd: Option<RawFd>,
    json: bool,
    wide: bool,
    /// Characters per table line (None: unlimited).
    width: Option<usize>,
    /// CLOCK_REALTIME - CLOCK_MONOTONIC, ns.
    wall_offset_ns: i64,
    line: String,
    /// (second, "HH:MM:SS") of the last time formatted.
    clock: (i64, String),
}

/// Characters of the CGROUP column (`--wide`); longer paths push the command right.
const CGROUP_WIDTH: usize = 24;
const HEADER: &str =
    "TIME             PID    PPID   UID  EXIT      RUNTIME        CPU   PEAK RSS  THR  ";

impl Output {
    /// stdout, or FILE opened for appending.
    pub fn open(path: Option<&Path>, json: bool, wide: bool) -> io::Result<Output> {
        let (w, fd, tty): (Box<dyn Write>, Option<RawFd>, bool) = match path {
            Some(p) => {
                let f = OpenOptions::new().create(true).append(true).open(p)?;
                let fd = f.as_raw_fd();
                (Box::new(f), Some(fd), false)
            }
            None => {
                let out = io::stdout();
                let tty = out.is_terminal();
                (Box::new(out), Some(libc::STDOUT_FILENO), tty)
            }
        };
        let mut o = Output {
            w: BufWriter::with_capacity(64 << 10, w),
            fd: fd.filter(|_| tty),
            json,
            wide,
            width: None,
            wall_offset_ns: 0,
            line: String::with_capacity(512),
            clock: (i64::MIN, String::new()),
        };
        o.refresh_width();
        Ok(o)
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
        if let Some(fd) = self.fd {
            // SAFETY: TIOCGWINSZ fills a winsize.
            let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
            if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
                self.width = Some(ws.ws_col as usize);
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
        writeln!(self.w, "{HEADER}{cg}COMMAND")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    pub fn write(&mut self, x: &ExitView) -> io::Result<()> {
        if self.json {
            let mut ser = serde_json::Serializer::new(&mut self.w);
            Json {
                x,
                wall: self.wall_offset_ns,
            }
            .serialize(&mut ser)
            .map_err(io::Error::from)?;
            self.w.write_all(b"\n")
        } else {
            self.table_line(x);
            self.w.write_all(self.line.as_bytes())
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
            let t = secs as libc::time_t;
            // SAFETY: localtime_r fills tm from a valid time_t.
            let mut tm: libc::tm = unsafe { std::mem::zeroed() };
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
        let _ = write!(
            l,
            "{time} {pid:>7} {:>7} {:>5}  {:<7} {runtime:>9} {:>10} {peak:>10} {:>4}  ",
            if x.thread { x.pid } else { x.ppid },
            x.uid,
            exit_text(x.exit, x.thread),
            units::duration_ns(x.user_ns + x.sys_ns),
            x.threads,
        );
        if self.wide {
            let _ = write!(l, "{:<CGROUP_WIDTH$}  ", x.cgroup);
        }
        let indent = l.chars().count();
        let budget = self.width.map(|w| w.saturating_sub(indent).max(10));
        if x.thread {
            push_cut(&mut l, &format!("[thread {}] of ", x.comm), budget);
            let left = budget.map(|b| b.saturating_sub(x.comm.len() + 13));
            command(&mut l, x.image, x.comm, left);
        } else {
            command(&mut l, x.image, x.comm, budget);
        }
        l.push('\n');
        if !x.ancestry.is_empty() {
            l.extend(std::iter::repeat_n(' ', indent.saturating_sub(2)));
            let mut chain = String::from("↑ ");
            for (i, a) in x.ancestry.iter().enumerate() {
                if i > 0 {
                    chain.push_str(" ← ");
                }
                let name = if a.image.comm.is_empty() {
                    "?"
                } else {
                    &a.image.comm
                };
                let _ = write!(
                    chain,
                    "{name}({}){}",
                    a.pid,
                    if a.exited { "†" } else { "" }
                );
            }
            push_cut(&mut l, &chain, budget.map(|b| b + 2));
            l.push('\n');
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
                .map(|i| (&*i.image, i.peak_rss_pages.map(|p| p * page_size())))
                .chain(last)
            {
                let peak = peak.map_or("-".into(), units::bytes);
                let head = format!("· {peak:>10}  ");
                l.push_str(&pad);
                l.push_str(&head);
                command(&mut l, img, &img.comm, budget.map(|b| b.saturating_sub(12)));
                l.push('\n');
            }
        }
        self.line = l;
    }
}

pub fn page_size() -> u64 {
    // SAFETY: sysconf cannot fail for _SC_PAGESIZE.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}

/// Appends `s`, cut to `budget` characters with an ellipsis.
fn push_cut(l: &mut String, s: &str, budget: Option<usize>) {
    match budget {
        Some(b) if s.chars().count() > b => {
            l.extend(s.chars().take(b.saturating_sub(1)));
            l.push('…');
        }
        _ => l.push_str(s),
    }
}

/// argv joined by spaces (or `[comm]` when there is none, as ps shows kernel threads).
fn command(l: &mut String, img: &ImageInfo, comm: &str, budget: Option<usize>) {
    if img.args.is_empty() {
        push_cut(l, &format!("[{comm}]"), budget);
        return;
    }
    let mut s = String::with_capacity(img.args.len() + 4);
    for (i, a) in img.argv().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(&String::from_utf8_lossy(a));
    }
    if !img.argv_complete {
        s.push('…');
    }
    push_cut(l, &s, budget);
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
            signal_name(signal),
            if core_dumped { "*" } else { "" }
        ),
    }
}

pub fn signal_name(sig: i32) -> String {
    const NAMES: [&str; 32] = [
        "0",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    match NAMES.get(sig as usize) {
        Some(n) if sig > 0 => n.to_string(),
        _ => format!("SIG{sig}"),
    }
}

/// argv as a JSON array of strings (lossy UTF-8), without building a Vec.
struct Argv<'a>(&'a ImageInfo);

impl Serialize for Argv<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(None)?;
        for a in self.0.argv() {
            seq.serialize_element(&String::from_utf8_lossy(a))?;
        }
        seq.end()
    }
}

struct Json<'a, 'b> {
    x: &'a ExitView<'b>,
    wall: i64,
}

impl Serialize for Json<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.x;
        let mut m = s.serialize_map(None)?;
        if x.thread {
            m.serialize_entry("thread", &true)?;
            m.serialize_entry("tid", &x.tid)?;
        }
        m.serialize_entry("pid", &x.pid)?;
        m.serialize_entry("ppid", &x.ppid)?;
        if let Some(ns) = x.ns_pid {
            m.serialize_entry("ns_pid", &ns)?;
        }
        m.serialize_entry("comm", x.comm)?;
        m.serialize_entry("exe", &*x.image.exe)?;
        m.serialize_entry("argv", &Argv(x.image))?;
        m.serialize_entry("argv_complete", &x.image.argv_complete)?;
        m.serialize_entry("start_unix_ns", &x.start_ns.map(|s| s as i64 + self.wall))?;
        m.serialize_entry("end_unix_ns", &(x.end_ns as i64 + self.wall))?;
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
        if !x.known {
            m.serialize_entry("known", &false)?;
        }
        if !x.ancestry.is_empty() {
            m.serialize_entry("ancestry", &Ancestry(x))?;
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

struct Ancestry<'a, 'b>(&'a ExitView<'b>);

impl Serialize for Ancestry<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(self.0.ancestry.len()))?;
        for a in self.0.ancestry {
            seq.serialize_element(&AncestorJson(a))?;
        }
        seq.end()
    }
}

struct AncestorJson<'a>(&'a super::table::Ancestor);

impl Serialize for AncestorJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("pid", &self.0.pid)?;
        m.serialize_entry("comm", &*self.0.image.comm)?;
        m.serialize_entry("exe", &*self.0.image.exe)?;
        m.serialize_entry("exited", &self.0.exited)?;
        m.end()
    }
}

struct Images<'a, 'b>(&'a ExitView<'b>);

impl Serialize for Images<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let x = self.0;
        let page = page_size();
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
struct ImageJson<'a>(&'a ImageInfo, Option<u64>, bool);

impl Serialize for ImageJson<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("exe", &*self.0.exe)?;
        m.serialize_entry("argv", &Argv(self.0))?;
        m.serialize_entry("comm", &*self.0.comm)?;
        m.serialize_entry("peak_rss_bytes", &self.1)?;
        m.serialize_entry("argv_complete", &self.0.argv_complete)?;
        m.serialize_entry("shared_mm", &self.2)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn img(args: &[u8]) -> ImageInfo {
        ImageInfo {
            exe: "/bin/x".into(),
            comm: "x".into(),
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
        assert_eq!(signal_name(64), "SIG64");
    }
}
