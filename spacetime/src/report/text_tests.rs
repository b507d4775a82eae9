//! The summary fed with hostile names: never a panic, never a control byte of theirs.

use spacetime_common::{kind, EventHeader, ExitEvent, ForkEvent};

use super::*;
use crate::{
    crosscheck::PerProcess,
    events::{Comm, Event, Exec},
    loader::KernelCounters,
    report::{MemoryMeta, Meta, TaskstatsMeta},
    selfstats::OwnCost,
    term::tests::{assert_terminal_safe, nasty_bytes},
    timeline::{RssSource, Timeline},
    tree::Tree,
};

fn hdr(kind: u32, tgid: u32, ts: u64) -> EventHeader {
    EventHeader {
        kind,
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
    let gone = crate::idhash::IdSet::default();
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
                taskstats: TaskstatsMeta::Unavailable("test".into()),
                memory: MemoryMeta::of(&timeline),
                own_cost: OwnCost::default(),
                gone: &gone,
            },
        );
        let width = 20 + (round as usize * 7) % 120;
        for top in [0, 3] {
            let text = render(&report, width, top, round % 2 == 0, None);
            assert_terminal_safe(&text, true);
            // Each process row: 44 columns of figures, then the command cut to what is left
            // (at least 20 columns).
            for line in text.lines().filter(|l| l.starts_with("    1")) {
                let limit = width.max(64) + 13 * 3;
                assert!(term::width(line) <= limit, "{line:?} over {limit}");
            }
        }
    }
}
