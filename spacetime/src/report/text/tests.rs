//! The summary fed with hostile names: never a panic, never a control byte of theirs.

use spacetime_common::{kind, EventHeader, ExitEvent, ForkEvent};

use super::*;
use crate::kernel::taskstats::Unavailable;
use crate::{
    kernel::{
        counters::KernelCounters,
        events::{Comm, Event, Exec},
    },
    model::{
        crosscheck::PerProcess,
        timeline::{RssSource, Timeline},
        tree::Tree,
    },
    report::{selfstats::OwnCost, MemoryMeta, Meta, Processes, TaskstatsMeta},
    util::term::tests::{assert_terminal_safe, nasty_bytes},
};
use rustc_hash::FxHashSet;

/// A run's facts that these tests do not look at, ending at `end_ns`.
fn meta(end_ns: u64) -> Meta {
    Meta {
        command: crate::report::lossless::Args::default(),
        root_exit: Some(crate::model::tree::ExitStatus::Code(2)),
        end_ns,
        counters: KernelCounters::default(),
        decode_errors: 0,
        ring_buffer_bytes: 4096,
        mechanisms: Vec::new(),
        attach_memory_followed: None,
        taskstats: TaskstatsMeta::Unavailable(Unavailable::Open("test".into())),
        own_cost: OwnCost::default(),
        agent_gone: None,
        cgroup_peak: None,
        programs: crate::kernel::provenance::Provenance::Own,
    }
}

fn opts(width: Option<usize>, top: usize, verbose: bool) -> Options {
    Options {
        width,
        top,
        verbose,
        charts: true,
        chart_width: None,
        style: crate::report::chart::Style {
            color: false,
            unicode: true,
        },
    }
}

/// A header about process `tgid`, which started at `tgid` ns.
fn hdr(kind: u16, tgid: u32, ts: u64) -> EventHeader {
    crate::kernel::events::records::hdr(kind, (tgid, tgid as u64), ts)
}

/// A tree of `n` processes, each exec'ing a program whose path, argv and comm are `nasty`.
// Fork records may gain fields: the default fills them.
#[allow(clippy::needless_update)]
fn hostile_tree(seed: &mut u64, n: u32) -> Tree {
    let mut tree = Tree::new(100, 1);
    for i in 0..n {
        let pid = 100 + i;
        if i > 0 {
            tree.apply(Event::Fork(ForkEvent {
                hdr: hdr(kind::FORK, 100 + i / 2, pid as u64),
                child_pid: pid,
                child_tgid: pid,
                child_start_ns: pid as u64,
                ..ForkEvent::default()
            }));
        }
        let mut args = nasty_bytes(seed, (i as usize * 37) % 300);
        args.push(0);
        tree.apply(Event::Exec(Exec {
            hdr: hdr(kind::EXEC, pid, pid as u64 + 1),
            old_pid: pid,
            uid: 0,
            cgroup_id: 0,
            comm: Comm::new(&nasty_bytes(seed, 15)),
            filename: nasty_bytes(seed, 200 + i as usize % 90),
            args_len: args.len() as u32,
            args,
        }));
        if i % 3 != 0 {
            tree.apply(Event::Exit(ExitEvent {
                hdr: EventHeader {
                    flags: spacetime_common::flags::EXIT_GROUP_DEAD,
                    ..hdr(kind::EXIT, pid, pid as u64 + 10)
                },
                ..ExitEvent::default()
            }));
        }
    }
    tree
}

#[test]
fn hostile_names_render_safely_at_every_width() {
    let mut seed = 0x9E37_79B9_7F4A_7C15;
    let timeline = Timeline::new(RssSource::Kernel);
    let sums = PerProcess::default();
    let gone = FxHashSet::default();
    for round in 0..40u32 {
        let tree = hostile_tree(&mut seed, 1 + round % 13);
        let live = Processes::new(&tree, &sums, &gone, 0, 4096);
        let command = crate::report::lossless::Args(vec![nasty_bytes(&mut seed, 40)]);
        let report = Report::build(
            &tree,
            &live,
            &Meta {
                command,
                root_exit: None,
                ..meta(1000)
            },
            MemoryMeta::of(&timeline),
        );
        let width = 20 + (round as usize * 7) % 120;
        for top in [0, 3] {
            let text = render(&report, &opts(Some(width), top, round % 2 == 0));
            assert_terminal_safe(&text, true);
            for line in text.lines() {
                assert!(term::width(line) <= width, "{line:?} over {width}\n{text}");
            }
        }
    }
}

/// A tree of `n` processes running one long, non-ASCII program path with many arguments.
#[allow(clippy::needless_update)]
fn long_path_tree(n: u32, exe: &[u8]) -> Tree {
    let mut tree = Tree::new(100, 1);
    for i in 0..n {
        let pid = 100 + i;
        if i > 0 {
            tree.apply(Event::Fork(ForkEvent {
                hdr: hdr(kind::FORK, 100 + (i - 1), pid as u64),
                child_pid: pid,
                child_tgid: pid,
                child_start_ns: pid as u64,
                ..ForkEvent::default()
            }));
        }
        // Some only fork (shown "(fork) …"), some exec twice ("[2 execs] …"): prefixes that
        // must count in the width. The root execs.
        let execs = match i % 5 {
            _ if i == 0 => 1,
            4 => 0,
            1 | 3 => 2,
            _ => 1,
        };
        for e in 0..execs {
            let mut args = exe.to_vec();
            args.extend_from_slice(b"\0-quiet\0-imultiarch\0x86_64-linux-gnu\0-O2\0");
            tree.apply(Event::Exec(Exec {
                hdr: hdr(kind::EXEC, pid, pid as u64 + 1 + e),
                old_pid: pid,
                uid: 0,
                cgroup_id: 0,
                comm: Comm::new(b"cc1"),
                filename: exe.to_vec(),
                args_len: args.len() as u32,
                args,
            }));
        }
    }
    tree
}

#[test]
fn every_line_fits_80_60_40_and_the_program_name_stays() {
    let exe = "/usr/lib/gcc/x86_64-linux-gnu/12/plugin/ünïcødé-ディレクトリ/libexec/cc1-ＷＩＤＥ"
        .as_bytes();
    let timeline = Timeline::new(RssSource::Kernel);
    let sums = PerProcess::default();
    let gone = FxHashSet::default();
    for n in [1, 12, 60] {
        let tree = long_path_tree(n, exe);
        let live = Processes::new(&tree, &sums, &gone, 0, 4096);
        let report = Report::build(
            &tree,
            &live,
            &Meta {
                command: crate::report::lossless::Args(vec![exe.to_vec(), b"x".repeat(200)]),
                root_exit: Some(crate::model::tree::ExitStatus::Code(0)),
                taskstats: TaskstatsMeta::Unavailable(Unavailable::Open(
                    "a reason long enough to need a wrap".into(),
                )),
                ..meta(123_456_000_000_000)
            },
            MemoryMeta::of(&timeline),
        );
        for width in [80, 60, 40] {
            for (top, verbose) in [(0, false), (0, true), (5, false)] {
                let text = render(&report, &opts(Some(width), top, verbose));
                for line in text.lines() {
                    assert!(term::width(line) <= width, "{line:?} over {width}\n{text}");
                }
                let rows = text
                    .lines()
                    .filter(|l| l.contains('/') && !l.starts_with("spacetime"));
                for l in rows {
                    assert!(
                        l.contains("cc1-ＷＩＤＥ"),
                        "name lost at {width}: {l:?}\n{text}"
                    );
                }
            }
        }
        let one = render(&report, &opts(Some(80), 0, false));
        if n == 1 {
            assert!(one.contains("1 process, 1 thread, 1 exec"), "{one}");
        } else {
            assert!(
                one.contains(&format!("{n} processes, {n} threads,")),
                "{one}"
            );
            assert!(
                one.contains("[2 execs] ") && one.contains("(fork) "),
                "{one}"
            );
        }
        // The wide form cuts nothing.
        let wide = render(&report, &opts(None, 0, false));
        assert!(wide.contains(&"x".repeat(200)), "{wide}");
    }
}

/// A root running `n` compilers of one program, each on its own file; the one of `f{bad}.c`
/// exits 1, so does the root.
#[allow(clippy::needless_update)]
fn build_tree(n: u32, bad: u32) -> Tree {
    let mut tree = Tree::new(100, 1);
    let exec = |tree: &mut Tree, pid: u32, argv: &str| {
        let mut args: Vec<u8> = argv.replace(' ', "\0").into_bytes();
        args.push(0);
        let exe = argv
            .split(' ')
            .next()
            .unwrap_or_default()
            .as_bytes()
            .to_vec();
        tree.apply(Event::Exec(Exec {
            hdr: hdr(kind::EXEC, pid, pid as u64 * 10 + 1),
            old_pid: pid,
            uid: 0,
            cgroup_id: 0,
            comm: Comm::new(b"x"),
            filename: exe,
            args_len: args.len() as u32,
            args,
        }));
    };
    let exit = |tree: &mut Tree, pid: u32, code: u32, at: u64| {
        tree.apply(Event::Exit(ExitEvent {
            hdr: EventHeader {
                flags: spacetime_common::flags::EXIT_GROUP_DEAD,
                ..hdr(kind::EXIT, pid, at)
            },
            exit_code: code << 8,
            ..ExitEvent::default()
        }));
    };
    exec(&mut tree, 100, "/usr/bin/make -j2");
    for i in 1..=n {
        let pid = 100 + i;
        tree.apply(Event::Fork(ForkEvent {
            hdr: hdr(kind::FORK, 100, pid as u64 * 10),
            child_pid: pid,
            child_tgid: pid,
            // Records name a process by its leader's start: hdr() uses the pid.
            child_start_ns: pid as u64,
            ..ForkEvent::default()
        }));
        exec(
            &mut tree,
            pid,
            &format!("/usr/lib/gcc/cc1 -quiet -O2 f{i}.c -o /tmp/cc{i}.s"),
        );
        exit(&mut tree, pid, u32::from(i == bad), pid as u64 * 10 + 8);
    }
    exit(&mut tree, 100, 2, 100_000);
    tree
}

#[test]
fn a_large_build_is_grouped_with_its_failure_first_and_its_recap_last() {
    let timeline = Timeline::new(RssSource::Kernel);
    let sums = PerProcess::default();
    let gone = FxHashSet::default();
    let tree = build_tree(60, 17);
    let live = Processes::new(&tree, &sums, &gone, 0, 4096);
    let report = Report::build(
        &tree,
        &live,
        &Meta {
            command: crate::report::lossless::Args(vec![b"make".to_vec(), b"-j2".to_vec()]),
            ..meta(100_000)
        },
        MemoryMeta::of(&timeline),
    );
    let text = render(&report, &opts(Some(80), 40, false));
    let failed = text
        .find("FAILED: 2 processes of 61")
        .unwrap_or_else(|| panic!("no failed section\n{text}"));
    assert!(failed < text.find("PEAK RSS").expect("table"), "{text}");
    assert!(
        text.contains("cc1 … f17.c -o"),
        "the failed compiler by its file\n{text}"
    );
    assert!(text.contains("cc1 ×60"), "{text}");
    let last = text.lines().last().expect("lines");
    assert!(
        last.starts_with("exit 2 · wall ") && last.ends_with("2 failed"),
        "{last}"
    );
    for l in text.lines() {
        assert!(term::width(l) <= 80, "{l:?}\n{text}");
    }
    // Wide (`-w`), grouped: uncut, the top lists side by side (padding to half of an unbounded
    // width aborted on the allocation).
    let wide = render(&report, &opts(None, 40, false));
    let head = wide
        .lines()
        .find(|l| l.starts_with("top by CPU"))
        .unwrap_or_else(|| panic!("no top lists\n{wide}"));
    assert!(head.ends_with("  top by peak RSS"), "{head:?}");
    // Every process listed with --top 0, each compiler by its file.
    let all = render(&report, &opts(Some(80), 0, false));
    for i in 1..=60 {
        assert!(all.contains(&format!("cc1 … f{i}.c -o")), "f{i}.c\n{all}");
    }
}

#[test]
fn a_single_short_process_gets_no_chart_and_a_longer_one_does() {
    let mut timeline = Timeline::new(RssSource::Kernel);
    for (t, b) in [(10, 1 << 20), (500, 3 << 20), (900, 0)] {
        timeline.record_tree_rss(crate::model::timeline::Point::new(t, b));
    }
    let sums = PerProcess::default();
    let gone = FxHashSet::default();
    let tree = build_tree(0, 0);
    let live = Processes::new(&tree, &sums, &gone, 0, 4096);
    let make = |end_ns: u64| Meta {
        command: crate::report::lossless::Args(vec![b"make".to_vec()]),
        ..meta(end_ns)
    };
    let short = Report::build(&tree, &live, &make(100_000), MemoryMeta::of(&timeline));
    let text = render(&short, &opts(Some(80), 40, false));
    assert!(!text.contains("memory (tree RSS)"), "{text}");
    assert!(
        text.lines().last().is_some_and(|l| l.starts_with("exit 2")),
        "{text}"
    );
    let long = Report::build(
        &tree,
        &live,
        &make(2_000_000_000),
        MemoryMeta::of(&timeline),
    );
    let text = render(&long, &opts(Some(80), 40, false));
    assert!(text.contains("memory (tree RSS)"), "{text}");
    // One process: its CPU over time would be a flat line.
    assert!(!text.contains("CPU in cores"), "{text}");
}
