//! The Perfetto export, parsed back.

use std::collections::HashMap;

use spacetime_common::{flags, kind, ExitEvent, ImageEndEvent, MemStats};

use super::*;
use crate::kernel::events::records::{self, hdr};
use crate::{
    kernel::{counters::KernelCounters, events::Event},
    model::{
        crosscheck::{Coverage, PerProcess},
        tree::{Key, Tree},
    },
    report::{
        export::protobuf::{fields, Value},
        lossless::Args,
        saved::{self, Saved},
        selfstats::OwnCost,
        MemoryMeta, Meta, Processes, TaskstatsMeta,
    },
};

fn fork(parent: (u32, u64), child: (u32, u64)) -> Event {
    records::fork_record(parent, child, child.1, 0)
}

fn exec(p: (u32, u64), ts: u64, exe: &str, argv: &[&str]) -> Event {
    let args: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    Event::Exec(records::exec(p, ts, exe, &args, args.len()))
}

fn mem(pages: u64) -> MemStats {
    MemStats {
        hiwater_rss_pages: pages,
        rss_anon_pages: pages,
        flags: flags::MEM_VALID | flags::MEM_EXACT,
        ..MemStats::default()
    }
}

fn exit(p: (u32, u64), ts: u64, pages: u64) -> Event {
    let mut h = hdr(kind::EXIT, p, ts);
    h.flags = flags::EXIT_GROUP_DEAD;
    Event::Exit(ExitEvent {
        hdr: h,
        mem: mem(pages),
        ..ExitEvent::default()
    })
}

const T0: u64 = 1_000;
const ROOT: (u32, u64) = (100, 1_000);
const CC: (u32, u64) = (101, 2_000);
const CC1: (u32, u64) = (102, 4_000);
const BG: (u32, u64) = (103, 30_000);

fn key(p: (u32, u64)) -> Key {
    Key {
        tgid: p.0,
        start_ns: p.1,
    }
}

/// sh -c make → make; make forks cc, which forks cc1; a last child still runs at the end.
fn sample() -> (Tree, Timeline) {
    sample_in(Arrival::AsStarted)
}

/// The order the sample's events reach the model in.
#[derive(Clone, Copy)]
enum Arrival {
    AsStarted,
    /// The last child's fork first: two CPUs' records merged out of start order, so the
    /// model's list is not the report's.
    LastForkFirst,
}

fn sample_in(arrival: Arrival) -> (Tree, Timeline) {
    let mut t = Tree::new(100, 1);
    let mut events = vec![
        exec(ROOT, 1_000, "/bin/sh", &["sh", "-c", "make"]),
        fork(ROOT, CC),
        exec(CC, 3_000, "/usr/bin/cc", &["cc", "-c", "a.c"]),
        fork(CC, CC1),
        exec(
            CC1,
            4_500,
            "/usr/lib/gcc/cc1",
            &["/usr/lib/gcc/cc1", "-quiet"],
        ),
        Event::ImageEnd(ImageEndEvent {
            hdr: hdr(kind::IMAGE_END, ROOT, 5_000),
            mem: mem(100),
        }),
        exec(ROOT, 5_000, "/usr/bin/make", &["make", "-j2"]),
        exit(CC1, 15_000, 5_000),
        exit(CC, 20_000, 300),
        fork(ROOT, BG),
        exit(ROOT, 50_000, 200),
    ];
    if let Arrival::LastForkFirst = arrival {
        let bg = events.len() - 2;
        let late = events.remove(bg);
        events.insert(1, late);
    }
    for ev in events {
        t.apply(ev);
    }
    let mut tl = Timeline::new(RssSource::Kernel);
    for (ts, b) in [(2_000, 4096), (10_000, 1 << 20), (20_000, 0)] {
        tl.record_rss(key(CC), Point::new(ts, b));
    }
    let read = crate::model::proc_read::Usage {
        rss_bytes: 20 << 20,
        pss_bytes: 20 << 20,
        anon_bytes: 20 << 20,
        pss_anon_bytes: Some(20 << 20),
        faulted_bytes: None,
        read_faulted_bytes: None,
    };
    tl.record_pss_read(key(CC1), (8_000, 8_000), read);
    tl.pss_round_done(8_000);
    tl.process_exited(key(CC1), 15_000);
    for (ts, b) in [(1_000, 4096), (10_000, 30 << 20), (16_000, 2 << 20)] {
        tl.record_tree_rss(Point::new(ts, b));
    }
    tl.set_tree_peak(Point::new(12_000, 31 << 20));
    (t, tl)
}

#[derive(Debug, Default)]
struct Track {
    name: String,
    parent: Option<u64>,
    counter: bool,
    unit: Option<u64>,
}

#[derive(Debug)]
struct Ev {
    ts: u64,
    kind: u64,
    track: u64,
    name: Option<String>,
    counter: Option<i64>,
    args: HashMap<String, String>,
}

fn get<'a>(f: &[(u32, Value<'a>)], n: u32) -> Option<Value<'a>> {
    f.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone())
}

/// Reads the file back with the protobuf reader: tracks by uuid, and the timed events.
fn parse(data: &[u8]) -> (HashMap<u64, Track>, Vec<Ev>) {
    let mut tracks = HashMap::new();
    let mut events = Vec::new();
    for (n, packet) in fields(data).expect("trace") {
        assert_eq!(n, field::TRACE_PACKET);
        let pf = fields(packet.as_bytes().expect("packet")).expect("packet fields");
        assert_eq!(get(&pf, field::PACKET_SEQUENCE_ID), Some(Value::Varint(1)));
        if let Some(d) = get(&pf, field::PACKET_TRACK_DESCRIPTOR) {
            let d = fields(d.as_bytes().expect("descriptor")).expect("descriptor");
            let uuid = get(&d, field::TRACK_UUID)
                .and_then(|v| v.as_u64())
                .expect("uuid");
            let counter = get(&d, field::TRACK_COUNTER);
            let unit = counter.as_ref().and_then(|c| {
                let c = fields(c.as_bytes()?)?;
                get(&c, field::COUNTER_UNIT)?.as_u64()
            });
            let t = Track {
                name: get(&d, field::TRACK_NAME)
                    .and_then(|v| v.as_str().map(String::from))
                    .expect("name"),
                parent: get(&d, field::TRACK_PARENT_UUID).and_then(|v| v.as_u64()),
                counter: counter.is_some(),
                unit,
            };
            assert!(tracks.insert(uuid, t).is_none(), "uuid {uuid} used twice");
        }
        if let Some(e) = get(&pf, field::PACKET_TRACK_EVENT) {
            let e = fields(e.as_bytes().expect("event")).expect("event");
            let mut args = HashMap::new();
            for (k, a) in &e {
                if *k != field::EVENT_DEBUG_ANNOTATIONS {
                    continue;
                }
                let a = fields(a.as_bytes().expect("annotation")).expect("annotation");
                let name =
                    get(&a, field::ANNOTATION_NAME).and_then(|v| v.as_str().map(String::from));
                let value = a
                    .iter()
                    .find(|(k, _)| *k != field::ANNOTATION_NAME)
                    .map(|(_, v)| {
                        v.as_str()
                            .map(String::from)
                            .unwrap_or_else(|| format!("{}", v.as_u64().unwrap_or(0)))
                    });
                args.insert(
                    name.expect("annotation name"),
                    value.expect("annotation value"),
                );
            }
            events.push(Ev {
                ts: get(&pf, field::PACKET_TIMESTAMP)
                    .and_then(|v| v.as_u64())
                    .expect("timestamp"),
                kind: get(&e, field::EVENT_TYPE)
                    .and_then(|v| v.as_u64())
                    .expect("type"),
                track: get(&e, field::EVENT_TRACK_UUID)
                    .and_then(|v| v.as_u64())
                    .expect("track"),
                name: get(&e, field::EVENT_NAME).and_then(|v| v.as_str().map(String::from)),
                counter: get(&e, field::EVENT_COUNTER_VALUE)
                    .and_then(|v| v.as_u64())
                    .map(|v| v as i64),
                args,
            });
        }
    }
    (tracks, events)
}

fn meta() -> Meta {
    Meta {
        command: Args(vec![b"sh".to_vec(), b"-c".to_vec(), b"make".to_vec()]),
        root_exit: None,
        end_ns: 60_000,
        counters: KernelCounters::default(),
        decode_errors: 0,
        ring_buffer_bytes: 4096,
        mechanisms: Vec::new(),
        attach_memory_followed: None,
        taskstats: TaskstatsMeta::Available {
            coverage: Coverage::default(),
            delayacct: false,
            rcvbuf_bytes: 0,
        },
        own_cost: OwnCost::default(),
        agent_gone: None,
        cgroup_peak: None,
        programs: crate::kernel::provenance::Provenance::Own,
    }
}

/// The sample's trace, as the run writes it; and as its saved report's is.
fn sample_traces(arrival: Arrival) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let (tree, tl) = sample_in(arrival);
    let (sums, gone) = (PerProcess::default(), Default::default());
    let live = Processes::new(&tree, &sums, &gone, T0, 4096);
    let run = Report::build(&tree, &live, &meta(), MemoryMeta::of(&tl));
    let json = serde_json::to_string(&run).expect("the run's JSON");
    let doc = match saved::parse(&json).expect("the run's JSON reads back") {
        Saved::Trace(doc) => doc,
        Saved::Bench(_) => panic!("read back as a bench report"),
    };
    (encode(&run), encode(&Report::from_saved(&doc)))
}

/// The sample's trace as one file's bytes, as the run writes it.
fn write_sample() -> Vec<u8> {
    let (tree, tl) = sample();
    let (sums, gone) = (PerProcess::default(), Default::default());
    let live = Processes::new(&tree, &sums, &gone, T0, 4096);
    let run = Report::build(&tree, &live, &meta(), MemoryMeta::of(&tl));
    let mut data = Vec::new();
    write_to(&mut data, &run).expect("a trace in memory");
    data
}

fn track_named<'a>(tracks: &'a HashMap<u64, Track>, name: &str) -> (u64, &'a Track) {
    tracks
        .iter()
        .find(|(_, t)| t.name == name)
        .map(|(u, t)| (*u, t))
        .unwrap_or_else(|| panic!("no track {name:?} in {tracks:#?}"))
}

#[test]
fn every_process_is_a_track_nested_by_the_tree() {
    let (tracks, _) = parse(&write_sample());
    let (root, r) = track_named(&tracks, "100 make -j2");
    assert_eq!(r.parent, None);
    let (cc, c) = track_named(&tracks, "101 cc -c a.c");
    assert_eq!(c.parent, Some(root));
    let (_, c1) = track_named(&tracks, "102 /usr/lib/gcc/cc1 -quiet");
    assert_eq!(c1.parent, Some(cc));
    let (_, bg) = track_named(&tracks, "103 make -j2");
    assert_eq!(
        bg.parent,
        Some(root),
        "forked, never exec'd: named by what it runs"
    );
    let (_, top) = track_named(&tracks, "sh -c make");
    assert_eq!(top.parent, None);
}

#[test]
fn every_image_is_a_balanced_slice() {
    let (tracks, events) = parse(&write_sample());
    assert!(
        events.windows(2).all(|w| w[0].ts <= w[1].ts),
        "in time order"
    );
    let mut begins: HashMap<u64, Vec<(u64, String)>> = HashMap::new();
    let mut depth: HashMap<u64, i32> = HashMap::new();
    for e in &events {
        match e.kind {
            SLICE_BEGIN => {
                begins
                    .entry(e.track)
                    .or_default()
                    .push((e.ts, e.name.clone().expect("named")));
                *depth.entry(e.track).or_default() += 1;
            }
            SLICE_END => {
                let d = depth.entry(e.track).or_default();
                *d -= 1;
                assert!(*d >= 0, "end without begin on {}", tracks[&e.track].name);
            }
            _ => {}
        }
    }
    assert!(
        depth.values().all(|&d| d == 0),
        "every slice ends: {depth:?}"
    );
    let slices =
        |name: &str| -> Vec<(u64, String)> { begins[&track_named(&tracks, name).0].clone() };
    assert_eq!(
        slices("100 make -j2"),
        [(0, "sh -c make".into()), (4_000, "make -j2".into())]
    );
    assert_eq!(
        slices("101 cc -c a.c"),
        [
            (1_000, "(fork) sh -c make".into()),
            (2_000, "cc -c a.c".into())
        ]
    );
    assert_eq!(
        slices("102 /usr/lib/gcc/cc1 -quiet"),
        [
            (3_000, "(fork) cc -c a.c".into()),
            (3_500, "/usr/lib/gcc/cc1 -quiet".into())
        ]
    );
    assert_eq!(slices("103 make -j2"), [(29_000, "(fork) make -j2".into())]);
    // The still-running one ends with the trace; the slices carry their details.
    let bg = track_named(&tracks, "103 make -j2").0;
    let end = events
        .iter()
        .find(|e| e.track == bg && e.kind == SLICE_END)
        .expect("end");
    assert_eq!(end.ts, 59_000);
    let cc1 = events
        .iter()
        .find(|e| e.name.as_deref() == Some("/usr/lib/gcc/cc1 -quiet"))
        .expect("cc1");
    assert_eq!(cc1.args["exe"], "/usr/lib/gcc/cc1");
    assert_eq!(cc1.args["pid"], "102");
    assert_eq!(cc1.args["peak_rss_bytes"], (5_000 * 4096).to_string());
    assert_eq!(cc1.args["exit_status"], "0");
}

#[test]
fn counters_for_processes_and_the_tree() {
    let (tracks, events) = parse(&write_sample());
    let values = |uuid: u64| -> Vec<(u64, i64)> {
        events
            .iter()
            .filter(|e| e.track == uuid)
            .map(|e| {
                assert_eq!(e.kind, COUNTER);
                (e.ts, e.counter.expect("value"))
            })
            .collect()
    };
    let (cc, _) = track_named(&tracks, "101 cc -c a.c");
    let (rss, t) = track_named(&tracks, "RSS 101");
    assert!(t.counter && t.parent == Some(cc));
    assert_eq!(t.unit, Some(3), "bytes");
    assert_eq!(values(rss), [(1_000, 4096), (9_000, 1 << 20), (19_000, 0)]);
    let (pss, t) = track_named(&tracks, "PSS 102 (sampled)");
    assert!(t.counter);
    assert_eq!(values(pss), [(7_000, 20 << 20), (14_000, 0)]);
    let (tree, t) = track_named(&tracks, "tree RSS");
    assert!(t.counter && t.parent.is_none());
    assert_eq!(
        values(tree),
        [
            (0, 4096),
            (9_000, 30 << 20),
            (11_000, 31 << 20),
            (15_000, 2 << 20)
        ]
    );
    let (tree_pss, _) = track_named(&tracks, "tree PSS (estimated)");
    assert_eq!(values(tree_pss), [(7_000, 20 << 20), (14_000, 0)]);
    // The exact peak is marked on the top track.
    let peak = events
        .iter()
        .find(|e| {
            e.kind == INSTANT
                && e.name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("tree RSS peak"))
        })
        .expect("peak marker");
    assert_eq!((peak.ts, peak.args["bytes"].as_str()), (11_000, "32505856"));
    // Processes without series have no counter tracks: two processes', the tree's RSS, PSS
    // and CPU.
    assert_eq!(tracks.values().filter(|t| t.counter).count(), 5);
}

/// A saved report's trace is the run's: every packet the same but the clocks, which a saved
/// report ties to REALTIME only (it does not say the start's MONOTONIC time).
#[test]
fn a_saved_reports_trace_is_the_runs() {
    let (run, saved) = sample_traces(Arrival::AsStarted);
    assert_eq!(run.len(), saved.len());
    assert_eq!(run[1..], saved[1..], "every packet but the clock snapshot");
    let clocks = |packet: &[u8]| -> Vec<(u64, u64)> {
        let pf = fields(packet).expect("packet");
        let snapshot = get(&pf, field::PACKET_CLOCK_SNAPSHOT).expect("clocks");
        let snapshot = fields(snapshot.as_bytes().expect("a message")).expect("clocks");
        snapshot
            .iter()
            .filter(|(n, _)| *n == field::CLOCKS)
            .map(|(_, c)| {
                let f = fields(c.as_bytes().expect("a message")).expect("a clock");
                let int = |n| get(&f, n).and_then(|v| v.as_u64()).expect("a clock field");
                (int(field::CLOCK_ID), int(field::CLOCK_TIMESTAMP))
            })
            .collect()
    };
    let (run, saved) = (clocks(&run[0]), clocks(&saved[0]));
    let ids = |c: &[(u64, u64)]| c.iter().map(|&(id, _)| id).collect::<Vec<_>>();
    assert_eq!(
        ids(&run),
        [TRACE_CLOCK, CLOCK_BOOTTIME, CLOCK_MONOTONIC, CLOCK_REALTIME]
    );
    assert_eq!(ids(&saved), [TRACE_CLOCK, CLOCK_REALTIME]);
    assert_eq!(run[2].1, T0, "the run's start on MONOTONIC");
    assert_eq!(
        run[3], saved[1],
        "the start on REALTIME, as the report says it"
    );
}

/// The saved report lists its processes in the report's order, not in the order their
/// records came: a run whose records came out of start order draws the same trace as its
/// saved report.
#[test]
fn a_saved_reports_trace_is_the_runs_whatever_order_the_records_came_in() {
    let (run, saved) = sample_traces(Arrival::LastForkFirst);
    assert_eq!(run[1..], saved[1..], "every packet but the clock snapshot");
}
