//! watch's table fed with hostile names: never a panic, never a control byte of theirs.

use std::sync::Arc;

use super::*;
use crate::{
    cmd::watch::summary::{Final, Peaks},
    kernel::events::Comm,
    model::table::{Ancestor, EndedImage},
    report::metrics::Metrics,
    util::term::tests::{assert_terminal_safe, nasty_bytes},
};

fn output(width: Option<usize>, wide: bool) -> Output {
    Output {
        w: BufWriter::new(Box::new(io::sink())),
        path: None,
        tty: false,
        json: false,
        wide,
        width,
        wall_offset_ns: 0,
        line: String::new(),
        clock: (i64::MIN, String::new()),
        origin: super::exec_rows::Origin::default(),
        ancestry: true,
    }
}

fn image(seed: &mut u64, n: usize) -> Names {
    Names {
        exe: nasty_bytes(seed, n).into(),
        comm: Comm::new(&nasty_bytes(seed, 15)),
        args: nasty_bytes(seed, n * 2).into(),
        argv_complete: n.is_multiple_of(2),
    }
}

#[test]
fn hostile_names_render_safely() {
    let mut seed = 0x1234_5678_9abc_def1;
    let mut peaks = Peaks::default();
    let mut metrics = Metrics::new(false, crate::report::metrics::DEFAULT_COMM_LIMIT);
    for round in 0..300usize {
        let img = image(&mut seed, round % 120);
        let comm = nasty_bytes(&mut seed, 15);
        let cgroup = String::from_utf8_lossy(&nasty_bytes(&mut seed, 40)).into_owned();
        let ancestry = vec![Ancestor {
            pid: 1,
            image: Arc::new(image(&mut seed, 10)),
            exited: true,
        }];
        let images = vec![EndedImage {
            image: Arc::new(image(&mut seed, 50)),
            peak_rss_pages: Some(1),
            shared_mm: false,
        }];
        let x = ExitView {
            thread: round % 5 == 0,
            pid: 7,
            tid: 8,
            ppid: 1,
            ns_pid: None,
            comm: &comm,
            image: &img,
            start_ns: Some(1),
            image_start_ns: 1,
            end_ns: 2,
            user_ns: 0,
            sys_ns: 0,
            exit: ExitStatus::Code(0),
            peak_rss_bytes: Some(4096),
            ru_maxrss_bytes: None,
            last_image_peak_bytes: None,
            threads: 1,
            uid: 0,
            gid: 0,
            cgroup: &cgroup,
            identity: &crate::model::identity::Identity::of(&cgroup),
            in_tree: false,
            images: &images,
            images_dropped: 0,
            ancestry: &ancestry,
            known: true,
            cpu_final: true,
        };
        let width = [None, Some(20 + round % 100)][round % 2];
        let mut o = output(width, round % 3 == 0);
        o.table_line(&x);
        assert_terminal_safe(&o.line, true);
        if let Some(w) = width {
            for l in o.line.lines() {
                assert!(term::width(l) <= w, "{l:?} over {w}");
            }
        }
        // The exec row of the same image, with the same hostile names.
        let e = crate::cmd::watch::exec::ExecView {
            pid: 7,
            ppid: Some(1),
            uid: 0,
            image: &img,
            ts_ns: 1,
            cgroup: &cgroup,
            identity: x.identity,
            ancestry: &ancestry,
        };
        o.exec_line(&e);
        assert_terminal_safe(&o.line, true);
        if let Some(w) = width {
            for l in o.line.lines() {
                assert!(term::width(l) <= w, "{l:?} over {w}");
            }
        }
        peaks.observe(&x);
        metrics.observe(&x);
        let mut json = output(None, false);
        json.json = true;
        json.write(&x).expect("json to a sink");
        json.write_exec(&e).expect("json to a sink");
    }
    // The summary lists the top comms and the biggest peaks' commands.
    let fin = Final {
        elapsed: std::time::Duration::from_secs(1),
        metrics: &metrics,
        peaks: &peaks,
        table: Default::default(),
        filtered: false,
        taskstats_unavailable: None,
        coverage_note: None,
        agent_gone: None,
    };
    let text = super::super::summary::render(&fin);
    assert!(text.contains("biggest peaks:"), "{text}");
    assert_terminal_safe(&text, true);
    for w in [120, 80, 60, 40] {
        let text = super::super::summary::render_at(&fin, w);
        assert!(text.contains("biggest peaks:"), "{text}");
        for l in text.lines() {
            assert!(term::width(l) <= w, "{l:?} over {w}\n{text}");
        }
    }
}

#[test]
fn header_and_rows_agree_and_fit_80_60_40() {
    let full = WatchLayout::for_width(None);
    assert_eq!(full.cols, Col::ALL.to_vec(), "not a terminal: every column");
    for w in [200, 120, 80, 60, 40, 20] {
        let lay = WatchLayout::for_width(Some(w));
        let head = lay.header();
        let row = lay.line(|c| "9".repeat(c.spec(lay.ms).1));
        assert_eq!(head.len(), row.len(), "{w}: {head:?} / {row:?}");
        assert_eq!(lay.fixed(), head.len(), "{w}");
        // Every header name ends (right-aligned) or starts (left) where its figures do.
        for &c in &lay.cols {
            let (name, cw, right, _) = c.spec(lay.ms);
            let at = head.find(name).expect("name in header");
            let (a, b) = if right {
                (at + name.len() - cw, at + name.len())
            } else {
                (at, at + cw)
            };
            assert!(
                row[a..b].chars().all(|ch| ch == '9'),
                "{w} {name}: {head:?} / {row:?}"
            );
        }
        assert!(
            head.len() + (w / 3).max(16) <= w || lay.cols.len() == 3,
            "{w}: COMMAND left {} columns",
            w.saturating_sub(head.len())
        );
    }
    let at80 = WatchLayout::for_width(Some(80));
    assert!(
        at80.cols.contains(&Col::Ppid) && at80.cols.contains(&Col::Runtime),
        "{at80:?}"
    );
}
