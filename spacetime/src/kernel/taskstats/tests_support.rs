//! Helpers shared by the taskstats tests: message builders, a fuzzer, forked children.

use std::io;

use super::decode::{
    TASKSTATS_CMD_NEW, TASKSTATS_TYPE_AGGR_PID, TASKSTATS_TYPE_AGGR_TGID, TASKSTATS_TYPE_NULL,
    TASKSTATS_TYPE_PID, TASKSTATS_TYPE_STATS, TASKSTATS_TYPE_TGID,
};
use super::netlink::align4;
use super::record::layout as off;
use super::*;

// ---- synthetic messages ----

pub(super) const FAMILY: u16 = 0x1c;

/// A `struct taskstats` image of `size` bytes in the standard layout (or version 15's).
/// Every u64 field holds a value derived from its standard offset, so a field read from the
/// wrong place shows.
pub(super) fn stats_image(version: u16, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    let at = |o: usize| if version == 15 { off::v15_offset(o) } else { o };
    let mut put = |o: usize, bytes: &[u8]| {
        let o = at(o);
        if o + bytes.len() <= b.len() {
            b[o..o + bytes.len()].copy_from_slice(bytes);
        }
    };
    put(off::VERSION, &version.to_ne_bytes());
    put(off::EXITCODE, &(7u32 << 8).to_ne_bytes());
    put(off::FLAG, &[flags::AFORK | flags::AGROUP]);
    put(off::NICE, &[(-5i8) as u8]);
    put(off::AC_COMM, b"worker\0");
    put(off::AC_SCHED, &[1]);
    put(off::AC_UID, &1000u32.to_ne_bytes());
    put(off::AC_GID, &100u32.to_ne_bytes());
    put(off::AC_PID, &4242u32.to_ne_bytes());
    put(off::AC_PPID, &4000u32.to_ne_bytes());
    put(off::AC_BTIME, &1_700_000_000u32.to_ne_bytes());
    let u64_fields = [
        off::CPU_COUNT,
        off::CPU_DELAY_TOTAL,
        off::BLKIO_COUNT,
        off::BLKIO_DELAY_TOTAL,
        off::SWAPIN_COUNT,
        off::SWAPIN_DELAY_TOTAL,
        off::CPU_RUN_REAL_TOTAL,
        off::CPU_RUN_VIRTUAL_TOTAL,
        off::AC_ETIME,
        off::AC_UTIME,
        off::AC_STIME,
        off::AC_MINFLT,
        off::AC_MAJFLT,
        off::COREMEM,
        off::VIRTMEM,
        off::HIWATER_RSS,
        off::HIWATER_VM,
        off::READ_CHAR,
        off::WRITE_CHAR,
        off::READ_SYSCALLS,
        off::WRITE_SYSCALLS,
        off::READ_BYTES,
        off::WRITE_BYTES,
        off::CANCELLED_WRITE_BYTES,
        off::NVCSW,
        off::NIVCSW,
        off::AC_UTIMESCALED,
        off::AC_STIMESCALED,
        off::CPU_SCALED_RUN_REAL_TOTAL,
        off::FREEPAGES_COUNT,
        off::FREEPAGES_DELAY_TOTAL,
        off::THRASHING_COUNT,
        off::THRASHING_DELAY_TOTAL,
        off::AC_BTIME64,
        off::COMPACT_COUNT,
        off::COMPACT_DELAY_TOTAL,
        off::AC_TGETIME,
        off::AC_EXE_DEV,
        off::AC_EXE_INODE,
        off::WPCOPY_COUNT,
        off::WPCOPY_DELAY_TOTAL,
        off::IRQ_COUNT,
        off::IRQ_DELAY_TOTAL,
    ];
    for o in u64_fields {
        put(o, &tag(o).to_ne_bytes());
    }
    put(off::AC_TGID, &4242u32.to_ne_bytes());
    // max/min pairs: 0xE000 + 2*category (+1 for min)
    for cat in 0..8usize {
        let at = if version == 15 {
            off::DELAY_EXTREMES_V15[cat]
        } else {
            off::DELAY_EXTREMES_V16 + 16 * cat
        };
        for (k, v) in [(0, 0xE000 + 2 * cat as u64), (8, 0xE001 + 2 * cat as u64)] {
            if at + k + 8 <= b.len() {
                b[at + k..at + k + 8].copy_from_slice(&v.to_ne_bytes());
            }
        }
    }
    b
}

pub(super) fn tag(std_offset: usize) -> u64 {
    0x1_0000 + std_offset as u64
}

pub(super) fn nla(ty: u16, payload: &[u8]) -> Vec<u8> {
    let len = 4 + payload.len();
    let mut v = Vec::with_capacity(align4(len));
    v.extend_from_slice(&(len as u16).to_ne_bytes());
    v.extend_from_slice(&ty.to_ne_bytes());
    v.extend_from_slice(payload);
    v.resize(align4(len), 0);
    v
}

/// One aggregate: `AGGR_{PID,TGID}` { `{PID,TGID}`, [NULL], STATS }.
pub(super) fn aggr(kind: RecordKind, id: u32, stats: &[u8], null_pad: bool) -> Vec<u8> {
    let (aggr_ty, id_ty) = match kind {
        RecordKind::Pid => (TASKSTATS_TYPE_AGGR_PID, TASKSTATS_TYPE_PID),
        RecordKind::Tgid => (TASKSTATS_TYPE_AGGR_TGID, TASKSTATS_TYPE_TGID),
    };
    let mut inner = nla(id_ty, &id.to_ne_bytes());
    if null_pad {
        inner.extend(nla(TASKSTATS_TYPE_NULL, &[]));
    }
    inner.extend(nla(TASKSTATS_TYPE_STATS, stats));
    nla(aggr_ty, &inner)
}

pub(super) fn nlmsg(ty: u16, genl_cmd: Option<u8>, body: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    let len = 16 + genl_cmd.map_or(0, |_| 4) + body.len();
    v.extend_from_slice(&(len as u32).to_ne_bytes());
    v.extend_from_slice(&ty.to_ne_bytes());
    v.extend_from_slice(&0u16.to_ne_bytes());
    v.extend_from_slice(&9u32.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
    if let Some(cmd) = genl_cmd {
        v.extend_from_slice(&[cmd, 1, 0, 0]);
    }
    v.extend_from_slice(body);
    v.resize(align4(v.len()), 0);
    v
}

pub(super) fn exit_msg(aggrs: &[Vec<u8>]) -> Vec<u8> {
    nlmsg(FAMILY, Some(TASKSTATS_CMD_NEW), &aggrs.concat())
}

pub(super) fn parse(buf: &[u8]) -> (Vec<TaskstatsRecord>, ListenerStats) {
    let mut out = Vec::new();
    let mut stats = ListenerStats::default();
    let n = parse_messages(buf, &mut out, &mut stats);
    assert_eq!(n, out.len());
    assert_eq!(stats.records, out.len() as u64);
    (out, stats)
}

/// Every prefix of a two-record message: as a cut datagram (nlmsg_len too large) and as a
/// message whose nlmsg_len says it is that short.
pub(super) fn check_all_truncations(msg: &[u8]) {
    let pid_end = find_second_aggr(msg);
    for len in 0..=msg.len() {
        let (recs, st) = parse(&msg[..len]);
        if len == msg.len() {
            assert_eq!((recs.len(), st.parse_errors), (2, 0));
        } else {
            assert!(recs.is_empty());
            assert_eq!(st.parse_errors, u64::from(len > 0), "cut at {len}");
        }
        if len < 16 {
            continue;
        }
        let mut short = msg[..len].to_vec();
        short[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        let (recs, st) = parse(&short);
        let want_recs = usize::from(len >= pid_end) + usize::from(len == msg.len());
        let clean = len == 20 || len == pid_end || len == msg.len();
        assert_eq!(recs.len(), want_recs, "nlmsg_len {len}");
        assert_eq!(st.parse_errors, u64::from(!clean), "nlmsg_len {len}");
    }
}

/// Offset where the second top-level attribute starts (the end of the pid aggregate).
fn find_second_aggr(msg: &[u8]) -> usize {
    let first_len = u16::from_ne_bytes([msg[20], msg[21]]) as usize;
    20 + align4(first_len)
}

/// xorshift64*: fixed seed, no dependency.
pub(super) struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Random mutations of `seed_msg`: byte flips, overwritten lengths, cuts, splices. The
/// decoder must neither panic nor loop, nor make up records.
pub(super) fn fuzz_mutations(seed_msg: &[u8], rounds: usize, seed: u64) {
    let mut rng = XorShift(seed);
    let mut buf = Vec::new();
    for _ in 0..rounds {
        buf.clear();
        buf.extend_from_slice(seed_msg);
        for _ in 0..1 + rng.below(4) {
            match rng.below(5) {
                0 => {
                    let i = rng.below(buf.len());
                    buf[i] ^= 1 << rng.below(8);
                }
                1 if buf.len() >= 2 => {
                    // an nla_len/nlmsg_len-sized field set to something extreme
                    let i = rng.below(buf.len() - 1) & !1;
                    let v = [0u16, 1, 3, 4, 5, 0xffff, rng.next() as u16][rng.below(7)];
                    buf[i..i + 2].copy_from_slice(&v.to_ne_bytes());
                }
                2 => {
                    let cut = rng.below(buf.len() + 1);
                    buf.truncate(cut);
                }
                3 => {
                    let extra = rng.below(64);
                    buf.extend((0..extra).map(|_| rng.next() as u8));
                }
                _ => {
                    let dup = seed_msg[..rng.below(seed_msg.len())].to_vec();
                    buf.extend(dup);
                }
            }
            if buf.is_empty() {
                break;
            }
        }
        let (recs, _) = parse(&buf);
        // The smallest record is 4 + 8 + 4 + 248 bytes of attributes.
        assert!(recs.len() <= buf.len() / 264, "{} records", recs.len());
    }
}

// ---- forked children (async-signal-safe work only: the harness is multi-threaded) ----

pub(super) const PAGE_KIB: u64 = 4;

pub(super) fn my_pid() -> u32 {
    std::process::id()
}

/// Forks; the child runs `child` (which must not return through Rust code that allocates
/// or locks) and `_exit`s with its value.
pub(super) fn fork_with(child: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: the child only runs `child`, written to use raw syscalls, then `_exit`s.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        let code = child();
        // SAFETY: terminates the child without running Rust/atexit teardown.
        unsafe { libc::_exit(code) };
    }
    pid
}

pub(super) fn wait_status(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    loop {
        // SAFETY: plain syscall on our own child.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            return status;
        }
        assert!(
            io::Error::last_os_error().kind() == io::ErrorKind::Interrupted,
            "waitpid: {}",
            io::Error::last_os_error()
        );
    }
}

/// Child body: map and touch `mib` MiB, read its own VmHWM (KiB) and write it to `wfd`.
/// Stack buffers and plain system calls only. VmHWM is read twice and the second value sent: the
/// first pass faults in the code that reads, parses and sends it. Otherwise those faults come
/// after the value is taken (in a debug build each is a function of its own, and each file
/// fault maps up to 16 pages around it: 176 pages in all were seen), and the peak the kernel
/// reports at exit is that much above the value sent.
pub(super) fn touch_and_report_hwm(mib: usize, wfd: std::os::fd::BorrowedFd<'_>) -> i32 {
    let len = mib << 20;
    // SAFETY: raw syscalls on memory we map ourselves.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return 100;
        }
        let p = p.cast::<u8>();
        let mut off = 0;
        while off < len {
            std::ptr::write_volatile(p.add(off), 1);
            off += 4096;
        }
    }
    // The first pass, with an empty write: every path that runs after the value is taken.
    if let Err(code) = own_hwm_kib() {
        return code;
    }
    if rustix::io::write(wfd, &[]).is_err() {
        return 103;
    }
    let kib = match own_hwm_kib() {
        Ok(kib) => kib,
        Err(code) => return code,
    };
    if rustix::io::write(wfd, &kib.to_ne_bytes()) != Ok(8) {
        return 103;
    }
    7
}

/// The calling process's VmHWM (KiB) from /proc/self/status, read into a stack buffer (plain
/// system calls, no allocation: it runs in a forked child); `Err` holds the child's exit code
/// for what failed.
fn own_hwm_kib() -> Result<u64, i32> {
    use rustix::fs::{open, Mode, OFlags};
    let mut buf = [0u8; 8192];
    let mut used = 0;
    let Ok(fd) = open(c"/proc/self/status", OFlags::RDONLY, Mode::empty()) else {
        return Err(101);
    };
    while let Ok(n @ 1..) = rustix::io::read(&fd, &mut buf[used..]) {
        used += n;
    }
    drop(fd);
    let text = &buf[..used];
    let key = b"VmHWM:";
    let Some(at) = text.windows(key.len()).position(|w| w == key) else {
        return Err(102);
    };
    let mut kib: u64 = 0;
    for &c in &text[at + key.len()..] {
        match c {
            b' ' | b'\t' if kib == 0 => {}
            b'0'..=b'9' => kib = kib * 10 + u64::from(c - b'0'),
            _ => break,
        }
    }
    Ok(kib)
}

pub(super) fn pipe() -> (std::os::fd::OwnedFd, std::os::fd::OwnedFd) {
    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe2")
}

/// Bytes queued on a netlink socket and its drop count, from /proc/net/netlink (matched by
/// inode).
pub(super) fn netlink_queue(fd: impl std::os::fd::AsFd) -> Option<(u64, u64)> {
    let ino = rustix::fs::fstat(fd).ok()?.st_ino;
    let table = std::fs::read_to_string("/proc/net/netlink").ok()?;
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        (cols.get(9)?.parse::<u64>().ok()? == ino)
            .then(|| Some((cols.get(4)?.parse().ok()?, cols.get(8)?.parse().ok()?)))?
    })
}

pub(super) fn thread_comm() -> String {
    std::fs::read_to_string("/proc/thread-self/comm")
        .expect("comm")
        .trim_end()
        .to_owned()
}

pub(super) extern "C" fn thread_body(_: *mut libc::c_void) -> *mut libc::c_void {
    std::ptr::null_mut()
}

/// Thread body that stores its CPU time, as the last thing it does, in the `u64` that `arg`
/// points to.
pub(super) extern "C" fn thread_body_cpu(arg: *mut libc::c_void) -> *mut libc::c_void {
    let ns = crate::util::clock::thread_cpu_ns();
    // SAFETY: the creator passes a `u64` it keeps alive until it has joined this thread.
    unsafe { arg.cast::<u64>().write(ns) };
    std::ptr::null_mut()
}
