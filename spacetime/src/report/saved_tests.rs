//! A run's report read back from its JSON is the report the run made: every kind of process
//! the model keeps (exited by code or signal, still running, gone unseen, left at an exec,
//! a peak out of range, a vfork child, with and without taskstats) written, read back and
//! written again, byte for byte, and summarized line for line.

use rustc_hash::FxHashSet;
use spacetime_common::{flags, kind, EventHeader, ExitEvent, MemStats};

use super::{parse, Saved};
use crate::{
    kernel::{
        counters::KernelCounters,
        events::{records, Event},
    },
    model::{
        crosscheck::{Coverage, PerProcess, ProcessTaskstats},
        process::Key,
        timeline::{RssSource, Timeline},
        tree::Tree,
    },
    report::{
        lossless::Args, selfstats::OwnCost, text, MemoryMeta, Meta, Processes, Report,
        TaskstatsMeta,
    },
};

const PAGE: u64 = 4096;

fn p(pid: u32) -> (u32, u64) {
    (pid, u64::from(pid) * 10)
}

/// Process `pid` exits at `ts` with wait status `status`, its image's peak `pages` (exact or
/// not) and ru_maxrss `maxrss` pages.
fn exit(pid: u32, ts: u64, status: u32, pages: u64, exact: bool, maxrss: u64) -> Event {
    Event::Exit(ExitEvent {
        hdr: EventHeader {
            flags: flags::EXIT_GROUP_DEAD,
            ..records::hdr(kind::EXIT, p(pid), ts)
        },
        mem: MemStats {
            hiwater_rss_pages: pages,
            hiwater_vm_pages: pages * 3,
            flags: flags::MEM_VALID | if exact { flags::MEM_EXACT } else { 0 },
            ..MemStats::default()
        },
        exit_code: status,
        utime_ns: u64::from(pid) * 1000,
        stime_ns: 7,
        signal_maxrss_pages: maxrss,
        ..ExitEvent::default()
    })
}

fn exec(pid: u32, ts: u64, exe: &str, args: &[u8], flags: u32) -> Event {
    let mut e = records::exec(p(pid), ts, exe, args, args.len());
    e.hdr.flags = flags;
    Event::Exec(e)
}

/// A shell (100) and its children: exited (101), killed with a core (102), left at a setuid
/// exec (103), still running (104), gone unseen (105), a peak out of range (106), a vfork
/// child that exec'd (107), one that only forked (108); names not UTF-8 among them.
fn tree() -> Tree {
    let mut t = Tree::new(100, 1);
    t.apply(exec(100, 1_000, "/bin/sh", b"sh\0-c\0build \xff\0", 0));
    for (pid, f) in [
        (101, 0),
        (102, 0),
        (103, 0),
        (104, 0),
        (105, 0),
        (106, 0),
        (107, flags::FORK_SHARED_MM),
        (108, 0),
    ] {
        t.apply(records::fork_record(p(100), p(pid), u64::from(pid) * 10, f));
    }
    t.apply(exec(101, 1_100, "/bin/true", b"true\0", 0));
    t.apply(exit(101, 2_000, 0, 300, true, 310));
    t.apply(exec(102, 1_200, "/usr/bin/cc\x1b[31m", b"cc\0-c\0x.c\0", 0));
    t.apply(exit(102, 3_000, 11 | 0x80, 2_000, false, 2_100));
    t.apply(exec(
        103,
        1_300,
        "/usr/bin/sudo",
        b"sudo\0id\0",
        flags::EXEC_LEFT,
    ));
    t.apply(exec(104, 1_400, "/bin/sleep", b"sleep\x009\0", 0));
    t.apply(exec(105, 1_500, "/bin/lost", b"lost\0", 0));
    t.apply(exec(106, 1_600, "/bin/huge", b"huge\0", 0));
    t.apply(exit(106, 4_000, 1 << 8, 1 << 41, true, 5));
    t.apply(exec(107, 1_700, "/bin/echo", b"echo\0hi\0", 0));
    t.apply(exit(107, 1_800, 0, 50, true, 60));
    t.apply(exit(108, 1_900, 3 << 8, 40, true, 40));
    t.apply(exit(100, 5_000, 2 << 8, 1_000, true, 2_100));
    t
}

fn meta(end_ns: u64) -> Meta {
    Meta {
        command: Args(vec![b"sh".to_vec(), b"-c".to_vec(), b"build \xff".to_vec()]),
        root_exit: Some(crate::model::tree::ExitStatus::Code(2)),
        end_ns,
        counters: KernelCounters::default(),
        decode_errors: 0,
        ring_buffer_bytes: 4096,
        mechanisms: vec!["exact RSS".into()],
        attach_memory_followed: None,
        taskstats: TaskstatsMeta::Available {
            coverage: Coverage::default(),
            delayacct: true,
            rcvbuf_bytes: 1 << 20,
        },
        own_cost: OwnCost::default(),
        agent_gone: None,
        cgroup_peak: None,
        programs: crate::kernel::provenance::Provenance::Own,
    }
}

fn options(width: usize) -> text::Options {
    text::Options {
        width: Some(width),
        top: 0,
        verbose: true,
        charts: true,
        chart_width: None,
        style: crate::report::chart::Style {
            color: false,
            unicode: true,
        },
    }
}

/// A trace report's JSON read back.
fn read_back(json: &str) -> Box<super::SavedReport> {
    match parse(json).expect("the run's JSON reads back") {
        Saved::Trace(doc) => doc,
        Saved::Bench(_) => panic!("read back as a bench report"),
    }
}

#[test]
fn a_report_read_back_writes_and_renders_as_the_run_did() {
    let tree = tree();
    let n = tree.processes().len();
    assert_eq!(n, 9, "the shell and its eight children");
    let sums = PerProcess::of_sums((0..n).map(|i| {
        (i % 2 == 0).then(|| {
            serde_json::from_value::<ProcessTaskstats>(serde_json::json!({
                "utime_us": i * 11, "minflt": 3, "hiwater_rss_kib": 4 * i,
                "coremem_mib_us": 17, "records": 1
            }))
            .expect("sums")
        })
    }));
    let gone: FxHashSet<Key> = [Key {
        tgid: 105,
        start_ns: 1_050,
    }]
    .into_iter()
    .collect();
    let timeline = Timeline::new(RssSource::Kernel);
    let live = Processes::new(&tree, &sums, &gone, 1_000, PAGE);
    let run = Report::build(&tree, &live, &meta(6_000), MemoryMeta::of(&timeline));
    let json = serde_json::to_string(&run).expect("the run's JSON");
    let doc = read_back(&json);
    let again = Report::from_saved(&doc);
    assert_eq!(
        serde_json::to_string(&again).expect("the JSON read back"),
        json,
        "written again, the report read back is the run's, byte for byte"
    );
    let states: Vec<_> = again.processes.iter().map(|p| p.state()).collect();
    use crate::report::State::*;
    assert_eq!(
        states,
        [Exited, Exited, Exited, Left, Running, Unknown, Exited, Exited, Exited],
        "every state the model keeps is in the test"
    );
    for width in [40, 80, 200] {
        assert_eq!(
            text::render(&again, &options(width)),
            text::render(&run, &options(width)),
            "the summary at {width} columns"
        );
    }
}

#[test]
fn figures_the_model_cannot_hold_are_refused_with_the_process_named() {
    let tree = tree();
    let (sums, gone) = (PerProcess::default(), FxHashSet::default());
    let timeline = Timeline::new(RssSource::Kernel);
    let live = Processes::new(&tree, &sums, &gone, 1_000, PAGE);
    let run = Report::build(&tree, &live, &meta(6_000), MemoryMeta::of(&timeline));
    let good = serde_json::to_value(&run).expect("JSON");
    let broken = |edit: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        edit(&mut v);
        match parse(&v.to_string()) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("read back: {v}"),
        }
    };
    let e = broken(&|v| v["processes"][1]["images"][1]["peak_rss_bytes"] = 4097.into());
    assert!(
        e.contains("process 101: peak_rss_bytes of 4097 bytes"),
        "{e}"
    );
    let e = broken(&|v| v["processes"][2]["exit"] = serde_json::json!({"code": 256}));
    assert!(e.contains("process 102:"), "{e}");
    let e = broken(&|v| v["processes"][2]["exit"] = serde_json::json!({"signal": 0}));
    assert!(e.contains("process 102:"), "{e}");
    let e = broken(&|v| v["kernel"]["page_size"] = 0.into());
    assert!(e.contains("page_size"), "{e}");
    let e = broken(&|v| v["timeline"]["rss_source"] = "guessed".into());
    assert!(e.contains("guessed"), "{e}");
}

/// Where the RSS came from reads back as written, under the one name serde gives it.
#[test]
fn the_rss_source_reads_back_as_written() {
    let tree = tree();
    let (sums, gone) = (PerProcess::default(), FxHashSet::default());
    for source in [RssSource::Kernel, RssSource::Statm] {
        let timeline = Timeline::new(source);
        let live = Processes::new(&tree, &sums, &gone, 1_000, PAGE);
        let run = Report::build(&tree, &live, &meta(6_000), MemoryMeta::of(&timeline));
        let doc = read_back(&serde_json::to_string(&run).expect("JSON"));
        assert_eq!(Report::from_saved(&doc).memory.source, source);
    }
}
