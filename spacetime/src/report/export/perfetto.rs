//! `--perfetto FILE`: the trace as a Perfetto protobuf trace, for ui.perfetto.dev.
//!
//! One track per process, named by its pid and command and nested under the process that
//! forked it (beside it, a process track and a thread track carrying Perfetto's process and
//! thread descriptors, and a process tree packet with every pid's parent, so trace processor's
//! `process` and `thread` tables are filled); a slice per program image on it (argv, exe and peak RSS as arguments); RSS and
//! PSS counter tracks under each process; tree-wide RSS and PSS counters, and a track with the
//! whole trace and its peaks, at the top. Times are nanoseconds since the trace's t0, as in
//! the JSON report, on a clock of the trace's own that a clock snapshot ties to REALTIME and,
//! for a run (a saved report does not say them), BOOTTIME and MONOTONIC, so the file merges
//! with a system capture. Drawn from the report alone: a run's, or a saved one read back
//! (`spacetime report FILE.json --perfetto OUT`).
//!
//! The few messages needed are encoded by hand ([`super::protobuf`]); field numbers are those
//! of perfetto's `protos/perfetto/trace/` (trace.proto, trace_packet.proto,
//! track_event/track_descriptor.proto, track_event.proto, counter_descriptor.proto,
//! debug_annotation.proto, process_descriptor.proto, thread_descriptor.proto,
//! ps/process_tree.proto, clock_snapshot.proto, trace_packet_defaults.proto).

use std::io::{self, Write};

use super::protobuf::Msg;
use crate::{
    model::{
        cores::CpuSeries,
        timeline::{Point, RssSource, Timeline},
        tree::{Image, Process},
    },
    report::{ProcessReport, Report},
    util::units::bytes,
};

/// Field numbers.
pub mod field {
    pub const TRACE_PACKET: u32 = 1;

    pub const PACKET_PROCESS_TREE: u32 = 2;
    pub const PACKET_CLOCK_SNAPSHOT: u32 = 6;
    pub const PACKET_TIMESTAMP: u32 = 8;
    pub const PACKET_SEQUENCE_ID: u32 = 10;
    pub const PACKET_TRACK_EVENT: u32 = 11;
    pub const PACKET_SEQUENCE_FLAGS: u32 = 13;
    pub const PACKET_TIMESTAMP_CLOCK_ID: u32 = 58;
    pub const PACKET_DEFAULTS: u32 = 59;
    pub const PACKET_TRACK_DESCRIPTOR: u32 = 60;

    pub const CLOCKS: u32 = 1;
    pub const CLOCK_ID: u32 = 1;
    pub const CLOCK_TIMESTAMP: u32 = 2;

    pub const TREE_PROCESSES: u32 = 1;
    pub const TREE_PROCESS_PID: u32 = 1;
    pub const TREE_PROCESS_PPID: u32 = 2;
    pub const TREE_PROCESS_CMDLINE: u32 = 3;

    pub const PROCESS_PID: u32 = 1;
    pub const PROCESS_CMDLINE: u32 = 2;
    pub const PROCESS_NAME: u32 = 6;

    pub const THREAD_PID: u32 = 1;
    pub const THREAD_TID: u32 = 2;
    pub const THREAD_NAME: u32 = 5;

    pub const TRACK_UUID: u32 = 1;
    pub const TRACK_NAME: u32 = 2;
    pub const TRACK_PROCESS: u32 = 3;
    pub const TRACK_THREAD: u32 = 4;
    pub const TRACK_PARENT_UUID: u32 = 5;
    pub const TRACK_COUNTER: u32 = 8;
    pub const TRACK_CHILD_ORDERING: u32 = 11;
    pub const TRACK_SIBLING_ORDER_RANK: u32 = 12;

    pub const COUNTER_UNIT: u32 = 3;
    pub const COUNTER_UNIT_NAME: u32 = 6;

    pub const EVENT_DEBUG_ANNOTATIONS: u32 = 4;
    pub const EVENT_TYPE: u32 = 9;
    pub const EVENT_TRACK_UUID: u32 = 11;
    pub const EVENT_NAME: u32 = 23;
    pub const EVENT_COUNTER_VALUE: u32 = 30;
    pub const EVENT_DOUBLE_COUNTER_VALUE: u32 = 44;

    pub const ANNOTATION_BOOL: u32 = 2;
    pub const ANNOTATION_UINT: u32 = 3;
    pub const ANNOTATION_INT: u32 = 4;
    pub const ANNOTATION_STRING: u32 = 6;
    pub const ANNOTATION_NAME: u32 = 10;
}

/// TrackEvent.Type.
pub const SLICE_BEGIN: u64 = 1;
pub const SLICE_END: u64 = 2;
pub const INSTANT: u64 = 3;
pub const COUNTER: u64 = 4;
/// CounterDescriptor.Unit.UNIT_SIZE_BYTES.
const UNIT_SIZE_BYTES: u64 = 3;
/// TracePacket.SequenceFlags.SEQ_INCREMENTAL_STATE_CLEARED.
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
/// TrackDescriptor.ChildTracksOrdering.EXPLICIT: children by sibling_order_rank.
const ORDER_EXPLICIT: u64 = 3;
const SEQUENCE_ID: u64 = 1;
/// The trace's own clock (a sequence-scoped id, 64–127): nanoseconds since t0.
pub const TRACE_CLOCK: u64 = 64;
/// BuiltinClock ids.
pub const CLOCK_REALTIME: u64 = 1;
pub const CLOCK_MONOTONIC: u64 = 3;
pub const CLOCK_BOOTTIME: u64 = 6;

/// Track uuids: fixed ones at the top, then eight per process (its track, RSS, PSS, its
/// process descriptor track, its main thread's descriptor track).
pub const TRACE_TRACK: u64 = 1;
pub const TREE_RSS_TRACK: u64 = 2;
pub const TREE_PSS_TRACK: u64 = 3;
pub const TREE_CPU_TRACK: u64 = 4;
const FIRST_PROCESS_TRACK: u64 = 16;
pub const PROCESS_DESCRIPTOR_OFFSET: u64 = 3;
pub const THREAD_DESCRIPTOR_OFFSET: u64 = 4;

fn process_track(i: usize) -> u64 {
    FIRST_PROCESS_TRACK + 8 * i as u64
}

/// What the export takes of the report besides its processes and timeline.
#[derive(Clone, Copy, Debug)]
struct Options<'a> {
    /// The command line, for the top track.
    title: &'a str,
    /// The start and the end on the clock of the model's times (CLOCK_MONOTONIC for a run,
    /// since the start for a saved report): times are written relative to t0, and what is
    /// still running ends at `end_ns`.
    t0_ns: u64,
    end_ns: u64,
    page_size: u64,
    /// CPU over time (the report's), drawn as a counter of cores in use.
    cpu: &'a CpuSeries,
    /// The start on CLOCK_MONOTONIC when known (a run's), and on REALTIME.
    monotonic_t0_ns: Option<u64>,
    start_unix_ns: u64,
}

/// Longest slice or track name; the full argv is in the slice's arguments.
const NAME_CHARS: usize = 120;
const ARGV_CHARS: usize = 8192;

fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        return s.to_string();
    }
    s.chars().take(n.saturating_sub(1)).collect::<String>() + "…"
}

fn image_command(img: &Image) -> String {
    img.title_lossy()
}

/// What a process ran: its last exec, else what it was forked running.
fn process_command(p: &Process) -> String {
    p.images
        .iter()
        .rev()
        .find(|i| !i.inherited)
        .or(p.images.first())
        .map(image_command)
        .unwrap_or_else(|| "?".into())
}

fn annotation_str(name: &str, v: &str) -> Msg {
    Msg::new()
        .string(field::ANNOTATION_NAME, name)
        .string(field::ANNOTATION_STRING, v)
}

fn annotation_uint(name: &str, v: u64) -> Msg {
    Msg::new()
        .string(field::ANNOTATION_NAME, name)
        .uint(field::ANNOTATION_UINT, v)
}

fn descriptor(uuid: u64, parent: Option<u64>, name: &str, rank: Option<i64>) -> Msg {
    let mut d = Msg::new()
        .uint(field::TRACK_UUID, uuid)
        .string(field::TRACK_NAME, name);
    if let Some(p) = parent {
        d = d.uint(field::TRACK_PARENT_UUID, p);
    }
    if let Some(r) = rank {
        d = d.int(field::TRACK_SIBLING_ORDER_RANK, r);
    }
    d
}

fn counter_descriptor(uuid: u64, parent: Option<u64>, name: &str, rank: Option<i64>) -> Msg {
    descriptor(uuid, parent, name, rank).msg(
        field::TRACK_COUNTER,
        Msg::new().uint(field::COUNTER_UNIT, UNIT_SIZE_BYTES),
    )
}

/// The name the kernel gave the process's last image (its comm); protobuf strings are UTF-8,
/// so invalid bytes read U+FFFD here (the JSON report keeps them exact).
fn process_name(p: &Process) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(p.images.last().map_or(&[][..], |i| i.comm()))
}

/// What a process ran as argv: its last exec's, else what it was forked running.
fn process_argv(p: &Process) -> Vec<std::borrow::Cow<'_, str>> {
    p.images
        .iter()
        .rev()
        .find(|i| !i.inherited)
        .or(p.images.first())
        .map_or_else(Vec::new, |i| {
            i.argv().map(String::from_utf8_lossy).collect()
        })
}

/// The process track and the main-thread track that name `p` for trace processor (its
/// `process` and `thread` tables): pid, name, cmdline; tid = pid.
fn identity_descriptors(p: &Process, uuid: u64) -> [Msg; 2] {
    let name = process_name(p);
    let mut process = Msg::new()
        .int(field::PROCESS_PID, p.pid as i64)
        .string(field::PROCESS_NAME, &name);
    for a in process_argv(p) {
        process = process.string(field::PROCESS_CMDLINE, &cut(&a, ARGV_CHARS));
    }
    let thread = Msg::new()
        .int(field::THREAD_PID, p.pid as i64)
        .int(field::THREAD_TID, p.pid as i64)
        .string(field::THREAD_NAME, &name);
    let label = format!("{name} {}", p.pid);
    [
        Msg::new()
            .uint(field::TRACK_UUID, uuid + PROCESS_DESCRIPTOR_OFFSET)
            .string(field::TRACK_NAME, &label)
            .msg(field::TRACK_PROCESS, process),
        Msg::new()
            .uint(field::TRACK_UUID, uuid + THREAD_DESCRIPTOR_OFFSET)
            .string(field::TRACK_NAME, &label)
            .msg(field::TRACK_THREAD, thread),
    ]
}

/// Every process with its parent (who forked it), for trace processor's process table.
fn process_tree<'p>(procs: impl Iterator<Item = &'p Process>) -> Msg {
    let mut m = Msg::new();
    for p in procs {
        let mut entry = Msg::new()
            .int(field::TREE_PROCESS_PID, p.pid as i64)
            .int(field::TREE_PROCESS_PPID, p.ppid as i64);
        for a in process_argv(p) {
            entry = entry.string(field::TREE_PROCESS_CMDLINE, &cut(&a, ARGV_CHARS));
        }
        m = m.msg(field::TREE_PROCESSES, entry);
    }
    m
}

/// The trace clock's 0 on REALTIME and, when the start's CLOCK_MONOTONIC time is known, on
/// BOOTTIME and MONOTONIC: BOOTTIME's offset from MONOTONIC is read now.
fn clock_snapshot(opts: &Options) -> Msg {
    use crate::util::clock::{now_ns, ClockId};
    let mut clocks = vec![(TRACE_CLOCK, 0)];
    if let Some(t0) = opts.monotonic_t0_ns {
        let boot = t0 as i128 + now_ns(ClockId::Boottime) - now_ns(ClockId::Monotonic);
        clocks.extend([(CLOCK_BOOTTIME, boot.max(0) as u64), (CLOCK_MONOTONIC, t0)]);
    }
    clocks.push((CLOCK_REALTIME, opts.start_unix_ns));
    let mut m = Msg::new();
    for (id, ts) in clocks {
        let clock = Msg::new()
            .uint(field::CLOCK_ID, id)
            .uint(field::CLOCK_TIMESTAMP, ts);
        m = m.msg(field::CLOCKS, clock);
    }
    m
}

/// A timed event, kept for sorting: ends before counters before begins at the same time.
struct Timed {
    ts: u64,
    class: u8,
    event: Msg,
}

/// Builds the trace's packets in order.
struct Builder<'a> {
    opts: &'a Options<'a>,
    descriptors: Vec<Msg>,
    events: Vec<Timed>,
}

impl Builder<'_> {
    fn rel(&self, ts: u64) -> u64 {
        ts.saturating_sub(self.opts.t0_ns)
    }

    fn event(&mut self, ts: u64, kind: u64, track: u64, body: Msg) {
        let class = match kind {
            SLICE_END => 0,
            COUNTER => 1,
            _ => 2,
        };
        let event = body
            .uint(field::EVENT_TYPE, kind)
            .uint(field::EVENT_TRACK_UUID, track);
        self.events.push(Timed {
            ts: self.rel(ts),
            class,
            event,
        });
    }

    fn counter(&mut self, track: u64, series: &[Point]) {
        for p in series {
            let v = Msg::new().int(field::EVENT_COUNTER_VALUE, p.bytes as i64);
            self.event(p.ts_ns, COUNTER, track, v);
        }
    }

    /// The tree's cores in use: each bucket's CPU over its width, a step at each bucket
    /// whose value changes, back to 0 at the end.
    fn cpu_counter(&mut self, cpu: &CpuSeries) {
        let unit = Msg::new().string(field::COUNTER_UNIT_NAME, "cores");
        let name = format!("CPU (cores in use, {})", cpu.label());
        self.descriptors
            .push(descriptor(TREE_CPU_TRACK, None, &name, Some(3)).msg(field::TRACK_COUNTER, unit));
        let width = cpu.bucket_ns.max(1);
        let mut last = None;
        let at = |k: usize| self.opts.t0_ns + k as u64 * width;
        let mut points: Vec<(u64, f64)> = Vec::new();
        for (k, &ns) in cpu.cpu_ns.iter().enumerate() {
            let cores = ns as f64 / width as f64;
            if last != Some(cores) {
                points.push((at(k), cores));
                last = Some(cores);
            }
        }
        points.push((at(cpu.cpu_ns.len()), 0.0));
        for (ts, v) in points {
            let body = Msg::new().double(field::EVENT_DOUBLE_COUNTER_VALUE, v);
            self.event(ts, COUNTER, TREE_CPU_TRACK, body);
        }
    }

    /// The figures table's per-process figures that have a value, as annotations.
    fn figures(&self, mut begin: Msg, r: &ProcessReport) -> Msg {
        use crate::report::figures::{Place, Sums};
        let mut sums = Sums::default();
        sums.add(r.taskstats().as_ref());
        for (f, v) in sums.at(Place::Process) {
            if let Ok(v) = v {
                begin = begin.msg(field::EVENT_DEBUG_ANNOTATIONS, annotation_uint(f.key, v));
            }
        }
        begin
    }

    /// The process at `place` in the report's order; its tracks are numbered by that place,
    /// which the saved report keeps (the model's list is in the order the events came).
    fn process(&mut self, r: &ProcessReport, place: usize, parent: Option<u64>, tl: &Timeline) {
        let p = r.model();
        let uuid = process_track(place);
        // Under a process, its counters come first (ranks 0 and 1); at the top, after the
        // trace and the tree-wide counters (0 to 3).
        let rank = 4 + place as i64;
        let name = format!("{} {}", p.pid, cut(&process_command(p), NAME_CHARS));
        self.descriptors.push(
            descriptor(uuid, parent, &name, Some(rank))
                .uint(field::TRACK_CHILD_ORDERING, ORDER_EXPLICIT),
        );
        self.descriptors.extend(identity_descriptors(p, uuid));
        let end = p.end_ns.get().unwrap_or(self.opts.end_ns);
        let mut from = p.start_ns;
        for (k, img) in p.images.iter().enumerate() {
            let next = p.images.get(k + 1).map(|n| n.start_ns);
            let start = img.start_ns.max(from);
            let stop = img.end_ns.get().or(next).unwrap_or(end).max(start);
            from = stop;
            let command = image_command(img);
            let label = if img.inherited {
                format!("(fork) {}", cut(&command, NAME_CHARS))
            } else {
                cut(&command, NAME_CHARS)
            };
            let mut begin = Msg::new()
                .string(field::EVENT_NAME, &label)
                .msg(
                    field::EVENT_DEBUG_ANNOTATIONS,
                    annotation_uint("pid", p.pid as u64),
                )
                .msg(
                    field::EVENT_DEBUG_ANNOTATIONS,
                    annotation_str("exe", &String::from_utf8_lossy(img.exe())),
                )
                .msg(
                    field::EVENT_DEBUG_ANNOTATIONS,
                    annotation_str("argv", &cut(&command, ARGV_CHARS)),
                )
                .msg(
                    field::EVENT_DEBUG_ANNOTATIONS,
                    Msg::new()
                        .string(field::ANNOTATION_NAME, "inherited")
                        .boolean(field::ANNOTATION_BOOL, img.inherited),
                );
            if let Some(pages) = img.peak_rss_pages() {
                let peak = pages * self.opts.page_size;
                begin = begin.msg(
                    field::EVENT_DEBUG_ANNOTATIONS,
                    annotation_uint("peak_rss_bytes", peak),
                );
            }
            if k + 1 == p.images.len() {
                begin = self.figures(begin, r);
                if let Some(exit) = p.exit.get() {
                    begin = begin.msg(
                        field::EVENT_DEBUG_ANNOTATIONS,
                        Msg::new()
                            .string(field::ANNOTATION_NAME, "exit_status")
                            .int(field::ANNOTATION_INT, exit.shell_code() as i64),
                    );
                }
            }
            self.event(start, SLICE_BEGIN, uuid, begin);
            self.event(stop, SLICE_END, uuid, Msg::new());
        }
        if p.images.is_empty() {
            let name = Msg::new().string(field::EVENT_NAME, &format!("pid {}", p.pid));
            self.event(p.start_ns, SLICE_BEGIN, uuid, name);
            self.event(end.max(p.start_ns), SLICE_END, uuid, Msg::new());
        }
        let Some((key, series)) = p.key.get().and_then(|k| Some((k, tl.process(&k)?))) else {
            return;
        };
        if !series.rss.is_empty() {
            let name = format!("RSS {}", p.pid);
            self.descriptors
                .push(counter_descriptor(uuid + 1, Some(uuid), &name, Some(0)));
            self.counter(uuid + 1, &series.rss.points(key.start_ns));
        }
        if !series.pss().is_empty() {
            let name = format!("PSS {} (sampled)", p.pid);
            self.descriptors
                .push(counter_descriptor(uuid + 2, Some(uuid), &name, Some(1)));
            self.counter(uuid + 2, series.pss().points());
        }
    }
}

/// Encodes the trace of `report`: every packet, in order.
pub fn encode(report: &Report) -> Vec<Vec<u8>> {
    let timeline = report.timeline.timeline();
    let title = report.command.lossy_line();
    let opts = &Options {
        title: &title,
        t0_ns: report.base_ns,
        end_ns: report.base_ns + report.wall_ns,
        page_size: report.kernel.page_size,
        cpu: &report.analysis.cpu,
        monotonic_t0_ns: report.monotonic_t0_ns,
        start_unix_ns: report.origin.start_unix_ns,
    };
    let mut b = Builder {
        opts,
        descriptors: Vec::new(),
        events: Vec::new(),
    };
    // The top: the trace itself, then the tree-wide counters.
    b.descriptors.push(
        descriptor(TRACE_TRACK, None, &cut(opts.title, NAME_CHARS), Some(0))
            .uint(field::TRACK_CHILD_ORDERING, ORDER_EXPLICIT),
    );
    let trace = Msg::new().string(field::EVENT_NAME, &cut(opts.title, NAME_CHARS));
    b.event(opts.t0_ns, SLICE_BEGIN, TRACE_TRACK, trace);
    b.event(
        opts.end_ns.max(opts.t0_ns),
        SLICE_END,
        TRACE_TRACK,
        Msg::new(),
    );
    let max_pss = match timeline.max_pss() {
        crate::model::pss_sum::MaxPssFigure::Trusted(m) => Some(Point::new(m.ts_ns, m.bytes)),
        _ => None,
    };
    for (what, peak) in [
        ("tree RSS peak", timeline.tree_peak()),
        ("max tree PSS", max_pss),
    ] {
        if let Some(p) = peak {
            let name = format!("{what} {}", bytes(p.bytes));
            let body = Msg::new().string(field::EVENT_NAME, &name).msg(
                field::EVENT_DEBUG_ANNOTATIONS,
                annotation_uint("bytes", p.bytes),
            );
            b.event(p.ts_ns, INSTANT, TRACE_TRACK, body);
        }
    }
    let rss_name = match timeline.rss_source {
        RssSource::Kernel => "tree RSS",
        RssSource::Statm => "tree RSS (statm, sampled)",
    };
    b.descriptors
        .push(counter_descriptor(TREE_RSS_TRACK, None, rss_name, Some(1)));
    b.counter(TREE_RSS_TRACK, timeline.tree_rss().points());
    b.descriptors.push(counter_descriptor(
        TREE_PSS_TRACK,
        None,
        "tree PSS (estimated)",
        Some(2),
    ));
    b.counter(TREE_PSS_TRACK, timeline.tree_pss().points());
    b.cpu_counter(opts.cpu);

    // Processes, nested as the report nests them (who forked whom: the summary's tree);
    // siblings (and the top ones) in the report's order, of start then pid. A process's
    // tracks are numbered by its place in that order.
    for (place, r) in report.processes.iter().enumerate() {
        let parent = report.analysis.parents[place].map(process_track);
        b.process(r, place, parent, timeline);
    }

    let mut events = std::mem::take(&mut b.events);
    events.sort_by_key(|e| (e.ts, e.class));
    let packet = |body: Msg| {
        Msg::new()
            .uint(field::PACKET_SEQUENCE_ID, SEQUENCE_ID)
            .merge(body)
    };
    let mut out = Vec::with_capacity(b.descriptors.len() + events.len() + 2);
    // First the clocks: every later timestamp of the sequence is on the trace clock.
    let defaults = Msg::new().uint(field::PACKET_TIMESTAMP_CLOCK_ID, TRACE_CLOCK);
    let clocks = packet(
        Msg::new()
            .msg(field::PACKET_CLOCK_SNAPSHOT, clock_snapshot(opts))
            .uint(field::PACKET_SEQUENCE_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED)
            .msg(field::PACKET_DEFAULTS, defaults),
    );
    out.push(clocks.into_bytes());
    let tree_packet = Msg::new().uint(field::PACKET_TIMESTAMP, 0).msg(
        field::PACKET_PROCESS_TREE,
        process_tree(report.processes.iter().map(|r| r.model())),
    );
    out.push(packet(tree_packet).into_bytes());
    for d in b.descriptors {
        out.push(packet(Msg::new().msg(field::PACKET_TRACK_DESCRIPTOR, d)).into_bytes());
    }
    for e in events {
        let body = Msg::new()
            .uint(field::PACKET_TIMESTAMP, e.ts)
            .msg(field::PACKET_TRACK_EVENT, e.event);
        out.push(packet(body).into_bytes());
    }
    out
}

/// Writes the trace of `report` to `w`: a `Trace` message is its packets one after another.
pub fn write_to(w: &mut (impl Write + ?Sized), report: &Report) -> io::Result<()> {
    for p in encode(report) {
        w.write_all(&framed(&p))?;
    }
    Ok(())
}

/// The trace of `report`, whole.
pub fn whole(report: &Report) -> Vec<u8> {
    encode(report).iter().flat_map(|p| framed(p)).collect()
}

fn framed(packet: &[u8]) -> Vec<u8> {
    Msg::new().bytes(field::TRACE_PACKET, packet).into_bytes()
}

#[cfg(test)]
#[path = "perfetto_tests.rs"]
mod tests;
