//! A report read back from its JSON (`spacetime report FILE.json`, `spacetime diff`): the
//! figures as they were written, its processes read back into the model a trace builds
//! ([`Processes`]), so that [`super::Report::from_saved`] gives the same report and the same
//! renderers draw it. Reports by older versions lack the keys added since; what the report
//! derives ([`super::analysis`]) is derived again from the processes, by the same code.

use std::sync::Arc;

use base64::{engine::general_purpose::STANDARD, Engine};
use rustc_hash::FxHashSet;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::{
    view::{Processes, PEAK_OUT_OF_RANGE},
    CgroupPeakReport, Exit, KernelReport, State, Totals,
};
use crate::{
    kernel::{events::Comm, provenance::Provenance},
    model::{
        cores::CpuSeries,
        crosscheck::{Coverage, PerProcess, ProcessTaskstats},
        image_mem::ImageMem,
        opt_ns::OptNs,
        process::{Key, Names, OptExit, OptKey},
        timeline::Timeline,
        tree::{Image, Process},
    },
    report::selfstats::OwnCost,
};

/// A whole trace report, as saved.
#[derive(Debug, Deserialize)]
pub struct SavedReport {
    #[serde(default)]
    pub schema_version: u32,
    #[serde(default)]
    pub spacetime_version: String,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub kernel_release: String,
    #[serde(default)]
    pub start_unix_ns: u64,
    #[serde(default)]
    pub start_rfc3339: String,
    pub command: Vec<String>,
    #[serde(default)]
    pub command_b64: Option<Vec<String>>,
    pub exit: Option<Exit>,
    pub wall_ns: u64,
    pub user_ns: u64,
    pub sys_ns: u64,
    #[serde(default)]
    pub lost_events: u64,
    pub totals: Totals,
    /// The processes as the file spells them, until [`SavedReport::restore`] reads them back
    /// into `processes`.
    #[serde(rename = "processes")]
    written: Vec<SavedProcess>,
    /// The processes, in the report's order, read back into the model.
    #[serde(skip)]
    pub processes: Processes<'static>,
    pub kernel: KernelReport,
    pub taskstats: SavedTaskstats,
    #[serde(default)]
    pub spacetime: OwnCost,
    /// The timeline as the file spells it, until [`SavedReport::restore`] reads it back
    /// into `timeline` and `cpu` (a timeline that does not read so is refused).
    #[serde(rename = "timeline")]
    written_timeline: Option<Box<RawValue>>,
    /// Memory over time, read back into the model.
    #[serde(skip)]
    pub timeline: Timeline,
    /// CPU over time as written (`timeline.cpu`).
    #[serde(skip)]
    pub cpu: Option<CpuSeries>,
    #[serde(default)]
    pub cgroup_peak: Option<CgroupPeakReport>,
    #[serde(default)]
    pub programs: Option<Provenance>,
}

/// The taskstats cross-check, its reason as the sentence it was.
#[derive(Debug, Deserialize)]
pub struct SavedTaskstats {
    pub available: bool,
    #[serde(default)]
    pub unavailable_reason: Option<String>,
    #[serde(flatten)]
    pub coverage: Coverage,
    #[serde(default)]
    pub delayacct: bool,
    #[serde(default)]
    pub rcvbuf_bytes: u64,
}

/// `timeline.cpu`, beside the memory [`Timeline::restore`] reads.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TimelineCpu {
    cpu: Option<CpuSeries>,
}

#[derive(Debug, Deserialize)]
struct SavedProcess {
    pub pid: u32,
    pub ppid: u32,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    #[serde(default)]
    pub threads: u32,
    pub exit: Option<Exit>,
    pub state: State,
    /// Why `peak_rss_bytes` (the maximum over the images, derived again) was null.
    #[serde(default)]
    pub peak_rss_unknown_reason: Option<String>,
    #[serde(default)]
    pub user_ns: u64,
    #[serde(default)]
    pub sys_ns: u64,
    #[serde(default)]
    pub cpu_final: bool,
    #[serde(default)]
    pub ru_maxrss_bytes: Option<u64>,
    pub images: Vec<SavedImage>,
    #[serde(default)]
    pub taskstats: Option<ProcessTaskstats>,
}

/// An image, its names as exact bytes again (from `exe_b64`/`argv_b64` where present).
#[derive(Debug)]
struct SavedImage {
    pub names: Names,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    pub peak_vm_bytes: Option<u64>,
    pub inherited: bool,
    pub shared_mm: bool,
    pub exact: bool,
    pub read_at_attach: bool,
}

#[derive(Deserialize)]
struct ImageIn {
    exe: String,
    #[serde(default)]
    exe_b64: Option<String>,
    argv: Vec<String>,
    #[serde(default)]
    argv_b64: Option<Vec<String>>,
    #[serde(default)]
    comm: String,
    start_ns: u64,
    end_ns: Option<u64>,
    peak_rss_bytes: Option<u64>,
    #[serde(default)]
    peak_vm_bytes: Option<u64>,
    #[serde(default)]
    inherited: bool,
    #[serde(default)]
    shared_mm: bool,
    #[serde(default)]
    exact: bool,
    #[serde(default = "yes")]
    argv_complete: bool,
    #[serde(default)]
    read_at_attach: bool,
}

fn yes() -> bool {
    true
}

/// The exact bytes: the base64 form when there is one (and it decodes), else the string's.
pub fn exact(text: &str, b64: Option<&str>) -> Vec<u8> {
    b64.and_then(|b| STANDARD.decode(b).ok())
        .unwrap_or_else(|| text.as_bytes().to_vec())
}

/// Each argument's exact bytes ([`exact`]).
pub fn exact_args(args: &[String], b64: Option<&[String]>) -> Vec<Vec<u8>> {
    match b64.filter(|b| b.len() == args.len()) {
        Some(b) => args.iter().zip(b).map(|(a, b)| exact(a, Some(b))).collect(),
        None => args.iter().map(|a| a.as_bytes().to_vec()).collect(),
    }
}

impl<'de> Deserialize<'de> for SavedImage {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<SavedImage, D::Error> {
        let i = ImageIn::deserialize(d)?;
        // The argument area as the kernel has it: each argument NUL-terminated.
        let mut area = Vec::new();
        for a in exact_args(&i.argv, i.argv_b64.as_deref()) {
            area.extend_from_slice(&a);
            area.push(0);
        }
        let exe = exact(&i.exe, i.exe_b64.as_deref());
        Ok(SavedImage {
            names: Names::from_area(
                exe.into(),
                Comm::new(i.comm.as_bytes()),
                &area,
                i.argv_complete,
            ),
            start_ns: i.start_ns,
            end_ns: i.end_ns,
            peak_rss_bytes: i.peak_rss_bytes,
            peak_vm_bytes: i.peak_vm_bytes,
            inherited: i.inherited,
            shared_mm: i.shared_mm,
            exact: i.exact,
            read_at_attach: i.read_at_attach,
        })
    }
}

impl SavedReport {
    /// Reads the processes as written back into the model: the figures in pages of the
    /// report's page size, which each must be a whole number of.
    fn restore(&mut self) -> Result<(), String> {
        let page = self.kernel.page_size;
        if page == 0 {
            return Err("kernel.page_size is 0: a report's memory figures are pages of it".into());
        }
        let written = std::mem::take(&mut self.written);
        let mut procs = Vec::with_capacity(written.len());
        let mut sums = Vec::with_capacity(written.len());
        let mut gone = FxHashSet::default();
        for w in written {
            let unknown = w.state == State::Unknown;
            let (p, taskstats) = w.restore(page)?;
            if let Some(key) = p.key.get().filter(|_| unknown) {
                gone.insert(key);
            }
            procs.push(p);
            sums.push(taskstats);
        }
        self.processes = Processes::owned(procs, PerProcess::of_sums(sums), gone, page);
        let written = self.written_timeline.take().ok_or("no timeline")?;
        self.timeline = Timeline::restore(written.get()).map_err(|e| format!("timeline: {e}"))?;
        let cpu: TimelineCpu =
            serde_json::from_str(written.get()).map_err(|e| format!("timeline: {e}"))?;
        self.cpu = cpu.cpu;
        Ok(())
    }
}

impl SavedProcess {
    /// The process as the model keeps it, and its taskstats sums; keyed by its pid and start
    /// (keys only tell the report's processes apart).
    fn restore(self, page: u64) -> Result<(Process, Option<ProcessTaskstats>), String> {
        let pid = self.pid;
        let pages = |what: &str, bytes: u64| {
            match bytes % page {
            0 => Ok(bytes / page),
            _ => Err(format!(
                "process {pid}: {what} of {bytes} bytes is not a whole number of the report's {page}-byte pages"
            )),
        }
        };
        let opt_pages = |what: &str, bytes: Option<u64>| bytes.map(|b| pages(what, b)).transpose();
        // Which image was out of range is not written: each without a peak is read back so.
        let out_of_range = self.peak_rss_unknown_reason.as_deref() == Some(PEAK_OUT_OF_RANGE);
        let mut images = smallvec::SmallVec::with_capacity(self.images.len());
        for i in self.images {
            images.push(Image {
                mem: ImageMem::restored(
                    opt_pages("peak_rss_bytes", i.peak_rss_bytes)?,
                    opt_pages("peak_vm_bytes", i.peak_vm_bytes)?,
                    i.exact,
                    out_of_range && i.peak_rss_bytes.is_none(),
                ),
                names: Arc::new(i.names),
                start_ns: i.start_ns,
                end_ns: i.end_ns.map_or(OptNs::NONE, OptNs::some),
                inherited: i.inherited,
                shared_mm: i.shared_mm,
                read_at_attach: i.read_at_attach,
            });
        }
        let exit = match self.exit {
            None => OptExit::NONE,
            Some(Exit(e)) => OptExit::of(e)
                .ok_or_else(|| format!("process {pid}: {e:?} is no exit status a process has"))?,
        };
        let maxrss = opt_pages("ru_maxrss_bytes", self.ru_maxrss_bytes)?.unwrap_or(0);
        // Field by field: the model's fields only tracing needs stay as a new process has them.
        let mut p = Process::default();
        p.key = OptKey::from(Some(Key {
            tgid: pid,
            start_ns: self.start_ns,
        }));
        p.pid = pid;
        p.ppid = self.ppid;
        p.start_ns = self.start_ns;
        p.end_ns = self.end_ns.map_or(OptNs::NONE, OptNs::some);
        p.threads = self.threads;
        p.exit = exit;
        p.images = images;
        p.user_ns = self.user_ns;
        p.sys_ns = self.sys_ns;
        p.cpu_final = self.cpu_final;
        p.signal_maxrss_pages = u32::try_from(maxrss)
            .map_err(|_| format!("process {pid}: ru_maxrss_bytes is more than a process has"))?;
        if self.state == State::Left {
            p.set_left();
        }
        Ok((p, self.taskstats))
    }
}

/// What a saved JSON file holds.
pub enum Saved {
    Trace(Box<SavedReport>),
    /// A `bench --json` report: kept as parsed, for its renderers.
    Bench(serde_json::Value),
}

/// The most of a file `report` and `diff` read unless told more (`--max-input`): what is
/// larger is refused before it is read, and a stream that goes on past it (a device, a pipe)
/// is stopped there.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// Why a saved report cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    // The suggestion is in bytes: a rounded size (95.4 MiB) could fall short of the file.
    #[error(
        "{} is more than the {} read without --max-input (a larger report: --max-input {size})",
        crate::util::units::bytes(*.size),
        crate::util::units::bytes(*.limit)
    )]
    TooLarge { size: u64, limit: u64 },
    #[error(
        "goes on past the {} read without --max-input (a larger report: --max-input SIZE)",
        crate::util::units::bytes(*.0)
    )]
    Endless(u64),
    #[error("not a spacetime report: a report is a JSON object, and this starts with {0}")]
    NotAnObject(String),
    #[error(
        "written by a newer spacetime (schema version {0}; this one reads up to {known})",
        known = super::SCHEMA_VERSION
    )]
    Newer(u32),
    #[error("not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("neither a trace report (`processes`) nor a bench report (`results`)")]
    Unknown,
    #[error("not a trace report spacetime can read: {0}")]
    Shape(serde_json::Error),
    #[error("not a trace report spacetime can read: {0}")]
    Figures(String),
}

/// Reads a trace or bench report from its JSON text.
pub fn parse(text: &str) -> Result<Saved, ReadError> {
    use serde::de::IgnoredAny;
    // Which kind, without building the document: a trace's 100 000 processes are read once.
    #[derive(Deserialize)]
    struct Kind {
        processes: Option<IgnoredAny>,
        results: Option<IgnoredAny>,
        schema_version: Option<u32>,
    }
    let kind: Kind = serde_json::from_str(text)?;
    if kind.processes.is_some() {
        if let Some(v) = kind.schema_version.filter(|&v| v > super::SCHEMA_VERSION) {
            return Err(ReadError::Newer(v));
        }
        let mut r: SavedReport = serde_json::from_str(text).map_err(ReadError::Shape)?;
        r.restore().map_err(ReadError::Figures)?;
        Ok(Saved::Trace(Box::new(r)))
    } else if kind.results.is_some() {
        Ok(Saved::Bench(serde_json::from_str(text)?))
    } else {
        Err(ReadError::Unknown)
    }
}

/// Reads the report in `path`, at most `limit` bytes of it.
pub fn read(path: &std::path::Path, limit: u64) -> Result<Saved, ReadError> {
    parse(&read_bounded(path, limit)?)
}

/// The text of `path`: refused when a file is larger than `limit`, stopped when a stream goes
/// on past it, and given up at its first byte that cannot start a report (`/dev/zero`,
/// `/dev/urandom`: at once, not after gigabytes).
fn read_bounded(path: &std::path::Path, limit: u64) -> Result<String, ReadError> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() && meta.len() > limit {
        return Err(ReadError::TooLarge {
            size: meta.len(),
            limit,
        });
    }
    let mut text = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut from = file.take(limit.saturating_add(1));
    let mut started = false;
    loop {
        let n = match from.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        if !started {
            if let Some(&b) = chunk[..n].iter().find(|b| !b.is_ascii_whitespace()) {
                if b != b'{' {
                    return Err(ReadError::NotAnObject(first_byte(b)));
                }
                started = true;
            }
        }
        text.extend_from_slice(&chunk[..n]);
        if text.len() as u64 > limit {
            return Err(ReadError::Endless(limit));
        }
    }
    String::from_utf8(text).map_err(|e| {
        ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not UTF-8 text (at byte {})", e.utf8_error().valid_up_to()),
        ))
    })
}

/// A byte as a person reads it: the character if printable, else its value.
fn first_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("{:?}", b as char)
    } else {
        format!("the byte 0x{b:02x}")
    }
}

#[cfg(test)]
#[path = "saved_tests.rs"]
mod tests;
