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
    report::{selfstats::OwnCost, MemoryMeta, Meta, TaskstatsMeta},
    util::term::tests::{assert_terminal_safe, nasty_bytes},
};
use rustc_hash::FxHashSet;

fn hdr(kind: u16, tgid: u32, ts: u64) -> EventHeader {
    EventHeader {
        kind,
        session: 0,
        flags: 0,
        ts_ns: ts,
        tgid,
        pid: tgid,
        leader_start_ns: tgid as u64,
    }
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
        let command = crate::report::lossless::Args(vec![nasty_bytes(&mut seed, 40)]);
        let report = Report::build(
            &tree,
            &sums,
            Meta {
                command,
                root_exit: None,
                t0_ns: 0,
                end_ns: 1000,
                page_size: 4096,
                counters: KernelCounters::default(),
                decode_errors: 0,
                ring_buffer_bytes: 4096,
                mechanisms: Vec::new(),
                attach_memory_followed: None,
                taskstats: TaskstatsMeta::Unavailable(Unavailable::Open("test".into())),
                memory: MemoryMeta::of(&timeline),
                own_cost: OwnCost::default(),
                gone: &gone,
                agent_gone: None,
            },
        );
        let width = 20 + (round as usize * 7) % 120;
        for top in [0, 3] {
            let text = render(&report, Some(width), top, round % 2 == 0, None);
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
        let report = Report::build(
            &tree,
            &sums,
            Meta {
                command: crate::report::lossless::Args(vec![exe.to_vec(), b"x".repeat(200)]),
                root_exit: Some(crate::model::tree::ExitStatus::Code(0)),
                t0_ns: 0,
                end_ns: 123_456_000_000_000,
                page_size: 4096,
                counters: KernelCounters::default(),
                decode_errors: 0,
                ring_buffer_bytes: 4096,
                mechanisms: Vec::new(),
                attach_memory_followed: None,
                taskstats: TaskstatsMeta::Unavailable(Unavailable::Open(
                    "a reason long enough to need a wrap".into(),
                )),
                memory: MemoryMeta::of(&timeline),
                own_cost: OwnCost::default(),
                gone: &gone,
                agent_gone: None,
            },
        );
        for width in [80, 60, 40] {
            for (top, verbose) in [(0, false), (0, true), (5, false)] {
                let text = render(&report, Some(width), top, verbose, None);
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
        let one = render(&report, Some(80), 0, false, None);
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
        let wide = render(&report, None, 0, false, None);
        assert!(wide.contains(&"x".repeat(200)), "{wide}");
    }
}
