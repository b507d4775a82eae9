//! Tests against the running kernel (need root, CONFIG_TASKSTATS, CONFIG_TASK_XACCT).
//!
//! Children are made with `fork` and do only async-signal-safe work (raw syscalls on stack
//! buffers) before `_exit`, since the test harness is multi-threaded. Records are matched by
//! pid and by `ac_ppid == getpid()`, so other processes' exits do not disturb the tests.

use std::collections::HashSet;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::netlink::{ne_u16, ne_u32, NlAttrIter, NlMsgIter, GENL_HDRLEN};
use super::record::layout;
use super::tests_support::*;
use super::*;

/// Receives until `done` says the collected records suffice, or panics after `limit`.
fn collect_until(
    listener: &mut TaskstatsListener,
    all: &mut Vec<TaskstatsRecord>,
    limit: Duration,
    mut done: impl FnMut(&[TaskstatsRecord]) -> bool,
) {
    let deadline = Instant::now() + limit;
    while !done(all) {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "records did not arrive within {limit:?}");
        let mut batch = Vec::new();
        if listener.wait_readable(left) {
            listener.drain(&mut batch).expect("drain");
        }
        all.extend(
            batch
                .into_iter()
                .filter(|r| r.ac_ppid == my_pid() || r.kind == RecordKind::Tgid),
        );
    }
}

#[test]
fn taskstats_live_exit_record_fields_and_peak_rss() {
    let mut listener = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    let st = listener.stats();
    assert!(st.forced, "root should get SO_RCVBUFFORCE");
    assert!(st.rcvbuf_bytes >= DEFAULT_RCVBUF_BYTES, "{st:?}");

    const MIB: usize = 64;
    let (r, w) = pipe();
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let pid = fork_with(|| touch_and_report_hwm(MIB, w.as_fd()));
    drop(w); // our copy of the write end: EOF once the child's is closed
    let mut hwm = [0u8; 8];
    let n = rustix::io::read(&r, &mut hwm).unwrap_or(0);
    drop(r);
    let status = wait_status(pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 7,
        "status {status:#x}"
    );
    assert_eq!(n, 8, "child did not report VmHWM");
    let child_hwm_kib = u64::from_ne_bytes(hwm);

    let mut all = Vec::new();
    collect_until(&mut listener, &mut all, Duration::from_secs(10), |v| {
        v.iter()
            .any(|r| r.kind == RecordKind::Pid && r.id == pid as u32)
    });
    let rec = all
        .iter()
        .find(|r| r.kind == RecordKind::Pid && r.id == pid as u32)
        .unwrap();
    eprintln!("pid record: {rec:#?}");

    assert!(rec.version >= 12, "version {}", rec.version);
    assert_eq!(rec.ac_pid, pid as u32);
    assert_eq!(rec.ac_ppid, my_pid());
    assert_eq!(rec.ac_tgid, Some(pid as u32));
    assert_eq!(rec.ac_uid, rustix::process::getuid().as_raw());
    assert_eq!(rec.ac_gid, rustix::process::getgid().as_raw());
    // _exit(7): the kernel stores the wait status, 7 << 8.
    assert_eq!(rec.ac_exitcode, 7 << 8);
    assert_eq!(rec.exit_code(), Some(7));
    assert_eq!(rec.term_signal(), None);
    assert!(
        rec.ac_flag & flags::AFORK != 0,
        "forked without exec: {:#x}",
        rec.ac_flag
    );
    assert!(
        rec.ac_flag & flags::AGROUP != 0,
        "last thread of its group: {:#x}",
        rec.ac_flag
    );
    assert_eq!(rec.ac_flag & flags::AXSIG, 0);
    assert_eq!(rec.ac_comm, thread_comm());
    let btime = u64::from(rec.ac_btime);
    assert!(
        btime + 2 >= before && btime <= before + 60,
        "btime {btime} vs {before}"
    );
    assert_eq!(rec.ac_btime64, Some(btime));
    assert!(
        rec.ac_minflt >= (MIB as u64) * 256,
        "touched every page: {}",
        rec.ac_minflt
    );
    // Peak RSS: the child's own VmHWM, within the kernel's counting error. taskstats takes
    // max(mm->hiwater_rss, get_mm_rss(mm)), and get_mm_rss reads per-CPU counters without
    // folding in each CPU's pending delta (< percpu_counter_batch = 32 pages per CPU, per
    // counter: anon and file matter here), while VmHWM may be computed from exact sums.
    // Observed: 1 to 35 pages apart.
    // SAFETY: plain sysconf query.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as u64;
    let slack_kib = (2 * 32 * cpus + 8) * PAGE_KIB;
    let diff = rec.hiwater_rss_kib.abs_diff(child_hwm_kib);
    eprintln!(
        "hiwater_rss {} KiB, child VmHWM {child_hwm_kib} KiB: {} pages apart (allowed {})",
        rec.hiwater_rss_kib,
        diff / PAGE_KIB,
        slack_kib / PAGE_KIB
    );
    assert!(
        diff <= slack_kib,
        "taskstats {} KiB vs VmHWM {child_hwm_kib} KiB",
        rec.hiwater_rss_kib
    );
    assert!(rec.hiwater_rss_kib + slack_kib >= (MIB as u64) << 10);
    assert!(rec.hiwater_vm_kib >= rec.hiwater_rss_kib);
    assert!(rec.delay_extremes.is_some() || rec.version < 15);
    // Single-threaded child: no tgid record.
    assert!(!all
        .iter()
        .any(|r| r.kind == RecordKind::Tgid && r.id == pid as u32));
    drop(listener);
}

#[test]
fn taskstats_live_signal_exit() {
    let mut listener = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    // SAFETY: kill/getpid are async-signal-safe.
    let pid = fork_with(|| unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
        1
    });
    let status = wait_status(pid);
    assert!(libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL);
    let mut all = Vec::new();
    collect_until(&mut listener, &mut all, Duration::from_secs(10), |v| {
        v.iter()
            .any(|r| r.kind == RecordKind::Pid && r.id == pid as u32)
    });
    let rec = all
        .iter()
        .find(|r| r.kind == RecordKind::Pid && r.id == pid as u32)
        .unwrap();
    // Killed by a signal: the wait status is the bare signal number; AXSIG is set.
    assert_eq!(rec.ac_exitcode, libc::SIGKILL as u32);
    assert_eq!(rec.term_signal(), Some(libc::SIGKILL));
    assert_eq!(rec.exit_code(), None);
    assert!(!rec.core_dumped());
    assert!(rec.ac_flag & flags::AXSIG != 0, "flags {:#x}", rec.ac_flag);
}

#[test]
fn taskstats_live_thread_group_sends_tgid_record() {
    let mut listener = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    let (r, w) = pipe();
    // SAFETY: glibc makes pthread_create safe in a forked child (its allocator locks are
    // reset); thread_body_cpu only makes raw system calls.
    let pid = fork_with(|| unsafe {
        // An integer on glibc, a pointer on musl: zero is a value of either, and
        // pthread_create writes it before any use.
        let mut t: libc::pthread_t = std::mem::zeroed();
        let mut thread_ns = 0u64;
        let arg = std::ptr::addr_of_mut!(thread_ns).cast();
        if libc::pthread_create(&mut t, std::ptr::null(), thread_body_cpu, arg) != 0 {
            return 90;
        }
        libc::pthread_join(t, std::ptr::null_mut());
        let mut both = [0u8; 16];
        both[..8].copy_from_slice(&thread_ns.to_ne_bytes());
        both[8..].copy_from_slice(&crate::util::clock::thread_cpu_ns().to_ne_bytes());
        if rustix::io::write(&w, &both) != Ok(16) {
            return 91;
        }
        3
    });
    drop(w);
    let mut both = [0u8; 16];
    let n = rustix::io::read(&r, &mut both).unwrap_or(0);
    let status = wait_status(pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 3,
        "status {status:#x}"
    );
    assert_eq!(n, 16, "the child did not send its threads' CPU times");
    let thread_ns = u64::from_ne_bytes(both[..8].try_into().unwrap());
    let leader_ns = u64::from_ne_bytes(both[8..].try_into().unwrap());
    let mut all = Vec::new();
    collect_until(&mut listener, &mut all, Duration::from_secs(10), |v| {
        v.iter()
            .any(|r| r.kind == RecordKind::Tgid && r.id == pid as u32)
            && v.iter()
                .any(|r| r.kind == RecordKind::Pid && r.id == pid as u32)
    });
    let leader = all
        .iter()
        .find(|r| r.kind == RecordKind::Pid && r.id == pid as u32)
        .unwrap();
    let thread = all
        .iter()
        .find(|r| r.kind == RecordKind::Pid && r.ac_tgid == Some(pid as u32) && r.id != pid as u32)
        .expect("the thread's own pid record");
    let tgid = all
        .iter()
        .find(|r| r.kind == RecordKind::Tgid && r.id == pid as u32)
        .unwrap();
    eprintln!("tgid record: {tgid:#?}");
    assert_eq!(leader.ac_exitcode, 3 << 8);
    assert!(leader.ac_flag & flags::AGROUP != 0);
    assert_eq!(thread.ac_flag & flags::AGROUP, 0, "the thread exited first");
    assert_eq!(thread.ac_pid, thread.id);
    // The tgid record takes the layout of the pid record sent with it.
    assert_eq!(tgid.version, leader.version);
    // It sums each task's scheduling figures as taskstats_exit sampled them (fill_tgid_exit)
    // before it filled that task's pid record (fill_stats; it may sleep in between): at least
    // what each task read of its own CPU clock before it ended, at most the two pid records'.
    let run = |r: &TaskstatsRecord| r.cpu_run_virtual_total;
    assert!(
        (thread_ns + leader_ns..=run(thread) + run(leader)).contains(&run(tgid)),
        "group runtime {} ns: the threads read {thread_ns} + {leader_ns} ns, their records say \
         {} + {} ns",
        run(tgid),
        run(thread),
        run(leader)
    );
    assert!(
        (1..=thread.cpu_count + leader.cpu_count).contains(&tgid.cpu_count),
        "group ran {} times; its threads' records say {} + {}",
        tgid.cpu_count,
        thread.cpu_count,
        leader.cpu_count
    );
}

/// Raw datagrams as the kernel sends them, for the parser tests and for checking what the
/// decoder papers over (the tgid record's version).
#[test]
fn taskstats_live_raw_messages_sizes_and_versions() {
    let listener = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    // SAFETY: as in taskstats_live_thread_group_sends_tgid_record; thread_body makes no calls.
    let pid = fork_with(|| unsafe {
        // An integer on glibc, a pointer on musl: zero is a value of either, and
        // pthread_create writes it before any use.
        let mut t: libc::pthread_t = std::mem::zeroed();
        libc::pthread_create(&mut t, std::ptr::null(), thread_body, std::ptr::null_mut());
        libc::pthread_join(t, std::ptr::null_mut());
        0
    });
    wait_status(pid);
    let sock = &listener.sock;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; 65536];
    let mut seen_tgid = None;
    while seen_tgid.is_none() {
        assert!(sock.wait_readable(deadline).unwrap(), "no tgid message");
        let Ok(n) = sock.recv(&mut buf) else { continue };
        for msg in NlMsgIter::new(&buf[..n]).map_while(Result::ok) {
            let mut pid_version = None;
            let mut tgid_of_ours = None;
            for a in NlAttrIter::new(&msg.payload[GENL_HDRLEN..]).map_while(Result::ok) {
                let inner: Vec<_> = NlAttrIter::new(a.payload).map_while(Result::ok).collect();
                let id = inner
                    .iter()
                    .find(|x| x.ty == 1 || x.ty == 2)
                    .map(|x| ne_u32(x.payload, 0));
                let stats = inner.iter().find(|x| x.ty == 3);
                let (Some(stats), Some(Some(id))) = (stats, id) else {
                    continue;
                };
                let v = ne_u16(stats.payload, layout::VERSION).unwrap();
                if a.ty == 4 {
                    pid_version = Some((v, stats.payload.len()));
                } else if a.ty == 5 && id == pid as u32 {
                    tgid_of_ours = Some((v, stats.payload.len()));
                }
            }
            if let Some(t) = tgid_of_ours {
                eprintln!(
                    "message of {} bytes: pid stats (version, size) {pid_version:?}, tgid stats {t:?}",
                    msg.payload.len() + 16
                );
                seen_tgid = Some((pid_version.unwrap(), t, msg.payload.len() + 16));
            }
        }
    }
    let ((pid_v, pid_len), (tgid_v, tgid_len), total) = seen_tgid.unwrap();
    assert!(pid_v >= 2);
    assert_eq!(pid_len, tgid_len);
    // The kernel copies the group's accumulator, whose version it never sets.
    assert!(tgid_v == 0 || tgid_v == pid_v, "tgid version {tgid_v}");
    assert_eq!(total, 20 + 2 * (4 + 8 + 4 + pid_len));
}

/// The default buffer's capacity holds a 5000-exit burst, and no record is lost silently.
///
/// The buffer is shared with every other exit on the machine (other tests, a build beside
/// them), so whether *these* 5000 all fit depends on the machine, not on spacetime. What does
/// not: the capacity itself, measured as the kernel's own charge per queued record against the
/// socket's limit, and that any record of ours that never arrives is counted as a drop.
#[test]
fn taskstats_live_burst_of_5000_exits_fits_the_default_buffer() {
    const N: usize = 5000;
    let mut listener = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    let mut pids = HashSet::with_capacity(N);
    for _ in 0..N {
        let pid = fork_with(|| 0);
        wait_status(pid);
        pids.insert(pid as u32);
    }
    // Nothing waits on a timer here: the records are queued before fork_with returns (the
    // kernel sends them from do_exit, before the parent can reap), so the queue is read now.
    let (queued_bytes, _) = netlink_queue(&listener.sock).expect("our socket in /proc/net/netlink");
    let mut seen = HashSet::with_capacity(N);
    let mut batch = Vec::new();
    listener.drain(&mut batch).expect("drain");
    // One datagram per exit, each holding one Pid record (and a Tgid one when a group ends).
    let in_queue = batch.iter().filter(|r| r.kind == RecordKind::Pid).count();
    let mut drain_more = |batch: &mut Vec<TaskstatsRecord>| {
        for r in batch.drain(..) {
            if r.kind == RecordKind::Pid && r.ac_ppid == my_pid() && pids.contains(&r.id) {
                seen.insert(r.id);
            }
        }
    };
    drain_more(&mut batch);
    let st = listener.stats();
    let per_record = queued_bytes as usize / in_queue.max(1);
    eprintln!(
        "burst: {queued_bytes} bytes queued in {in_queue} datagrams ({per_record} each); \
         ours {} of {N}; stats {st:?}",
        seen.len()
    );
    assert!(in_queue > 0, "no record queued after {N} exits");
    assert!(
        per_record * N <= st.rcvbuf_bytes,
        "the default buffer ({} bytes) holds fewer than {N} datagrams of {per_record} bytes",
        st.rcvbuf_bytes
    );
    assert!(
        seen.len() == N || st.enobufs > 0,
        "{} of {N} records missing and no drop counted",
        N - seen.len()
    );
    assert_eq!(st.parse_errors, 0);
}

#[test]
fn taskstats_live_overflow_is_counted_not_fatal() {
    let opts = ListenerOptions {
        rcvbuf_bytes: 16 << 10,
        ..ListenerOptions::default()
    };
    let mut listener = TaskstatsListener::open(opts).expect("open");
    assert!(
        listener.stats().rcvbuf_bytes < 64 << 10,
        "{:?}",
        listener.stats()
    );
    for _ in 0..300 {
        wait_status(fork_with(|| 0));
    }
    let mut batch = Vec::new();
    // recv returns: records are there, and the kernel has reported the drop.
    assert!(
        listener.wait_readable(Duration::from_secs(10)),
        "records arrived"
    );
    listener.drain(&mut batch).expect("drain");
    let st = listener.stats();
    eprintln!("overflow: {} records kept, stats {st:?}", batch.len());
    assert!(st.enobufs >= 1, "{st:?}");
    assert!(batch.len() < 300);
    // Still delivering afterwards.
    let pid = fork_with(|| 5);
    wait_status(pid);
    let mut all = Vec::new();
    collect_until(&mut listener, &mut all, Duration::from_secs(10), |v| {
        v.iter()
            .any(|r| r.id == pid as u32 && r.ac_exitcode == 5 << 8)
    });
}

#[test]
fn taskstats_live_unprivileged_open_is_not_permitted() {
    // The child drops root, then tries; its exit code reports what happened.
    let pid = fork_with(|| {
        // SAFETY: plain credential syscalls in the child.
        unsafe {
            if libc::setgroups(0, std::ptr::null()) != 0
                || libc::setgid(65534) != 0
                || libc::setuid(65534) != 0
            {
                return 50;
            }
        }
        // SO_RCVBUFFORCE needs CAP_NET_ADMIN: the listener falls back to SO_RCVBUF.
        let Ok(sock) = NetlinkSocket::open() else {
            return 51;
        };
        match sock.set_rcvbuf(1 << 20, true) {
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {}
            _ => return 52,
        }
        match TaskstatsListener::open(ListenerOptions::default()) {
            Err(TaskstatsError::NotPermitted) => 0,
            Err(_) => 53,
            Ok(_) => 54,
        }
    });
    let status = wait_status(pid);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    assert_eq!(libc::WEXITSTATUS(status), 0, "see the child's exit codes");
    assert_eq!(
        TaskstatsError::NotPermitted.to_string(),
        "registering for taskstats exit records needs CAP_NET_ADMIN (run as root)"
    );
}

#[test]
fn taskstats_live_bad_cpumask_is_rejected() {
    let opts = ListenerOptions {
        cpumask: Some("0-100000".into()),
        ..ListenerOptions::default()
    };
    match TaskstatsListener::open(opts) {
        Err(TaskstatsError::Rejected { cpumask, .. }) => assert_eq!(cpumask, "0-100000"),
        other => panic!("expected Rejected, got {other:?}"),
    }
}

#[test]
fn taskstats_live_drain_without_runtime() {
    let mut listener = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    assert!(listener.family_id() >= 0x10);
    assert_eq!(
        listener.cpumask(),
        std::fs::read_to_string("/sys/devices/system/cpu/possible")
            .unwrap()
            .trim()
    );
    let pid = fork_with(|| 0);
    wait_status(pid);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = Vec::new();
    while !out.iter().any(|r: &TaskstatsRecord| r.id == pid as u32) {
        assert!(Instant::now() < deadline, "no record");
        listener.drain(&mut out).expect("drain");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn taskstats_live_delayacct_sysctl_roundtrip() {
    let old = delayacct_enabled().expect("read sysctl");
    assert_eq!(set_delayacct(!old).expect("write sysctl"), old);
    let flipped = delayacct_enabled().unwrap();
    assert_eq!(set_delayacct(old).expect("restore sysctl"), !old);
    assert_eq!(flipped, !old);
    assert_eq!(delayacct_enabled().unwrap(), old);
}

#[test]
fn taskstats_live_truncations_and_mutations_of_captured_messages() {
    let listener = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    // SAFETY: as in taskstats_live_thread_group_sends_tgid_record; thread_body makes no calls.
    let pid = fork_with(|| unsafe {
        // An integer on glibc, a pointer on musl: zero is a value of either, and
        // pthread_create writes it before any use.
        let mut t: libc::pthread_t = std::mem::zeroed();
        libc::pthread_create(&mut t, std::ptr::null(), thread_body, std::ptr::null_mut());
        libc::pthread_join(t, std::ptr::null_mut());
        0
    });
    wait_status(pid);
    let sock = &listener.sock;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = vec![0u8; 65536];
    let captured = loop {
        assert!(
            sock.wait_readable(deadline).unwrap(),
            "no message with a tgid record"
        );
        let Ok(n) = sock.recv(&mut buf) else { continue };
        let (recs, _) = {
            let mut out = Vec::new();
            let mut st = ListenerStats::default();
            parse_messages(&buf[..n], &mut out, &mut st);
            (out, st)
        };
        if recs
            .iter()
            .any(|r| r.kind == RecordKind::Tgid && r.id == pid as u32)
        {
            break buf[..n].to_vec();
        }
    };
    eprintln!("captured a {}-byte pid+tgid message", captured.len());
    check_all_truncations(&captured);
    fuzz_mutations(&captured, 20_000, 7);
}

#[test]
fn taskstats_live_deregister_stops_records() {
    let mut gone = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    let mut witness = TaskstatsListener::open(ListenerOptions::default()).expect("open");
    gone.deregister().expect("deregister");
    let mut stale = Vec::new();
    gone.drain(&mut stale).expect("drain");
    let pid = fork_with(|| 0);
    wait_status(pid);
    let mut all = Vec::new();
    collect_until(&mut witness, &mut all, Duration::from_secs(10), |v| {
        v.iter().any(|r| r.id == pid as u32)
    });
    // The witness got it, so the kernel has sent it (to registered listeners) already.
    let mut after = Vec::new();
    gone.drain(&mut after).expect("drain");
    assert!(
        !after.iter().any(|r| r.id == pid as u32),
        "deregistered but still sent"
    );
}
