//! The run loop and a run's end with a kernel side written here instead of the kernel's
//! programs: every operation of `KernelSource`, answered by the test. What the report says of
//! the records comes from the records the fake hands over (a peak, a decode error, a loss),
//! what it says of the process from the process itself (wait4's status), and a second run of
//! the session keeps nothing of the first. No program is loaded: this is the loop's own logic.
//!
//! One test in this file: a session blocks signals and makes the process a child subreaper.

use std::{cell::Cell, collections::VecDeque, ffi::OsString, path::Path, rc::Rc};

use spacetime::kernel::{
    attach::Attached,
    counters::{CounterSource, KernelCounters},
    loader::{KernelProgramStats, LearnedPid, LoadError},
    provenance::Provenance,
    source::{Capabilities, EndFigures, HeldChild, Io, KernelSource, Records, TaskstatsFeed},
    taskstats::{ListenerStats, Unavailable},
};
use spacetime::run::{RunOptions, Session, SessionOptions, Spawn, Start};
use spacetime_common::{
    flags, kind, EventHeader, ExecEvent, ExitEvent, MemStats, EXEC_EVENT_FIXED,
};

/// The root's peak as the fake's exit record says it, in pages.
const PEAK_PAGES: u64 = 4321;
/// Records the fake's end says the kernel dropped.
const LOST: u64 = 2;
const MECHANISM: &str = "a kernel side written by the test";
/// The runs' exit statuses.
const CODES: [u32; 2] = [3, 0];

/// Records handed over in order, then none; nothing to wait on (the loop's tick reads them).
#[derive(Default)]
struct Script(VecDeque<Vec<u8>>);

impl Records for Script {
    fn each_record(&mut self, each: &mut dyn FnMut(&[u8]) -> bool) {
        while let Some(r) = self.0.pop_front() {
            if !each(&r) {
                break;
            }
        }
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        None
    }
}

struct Fake {
    capabilities: Capabilities,
    script: Script,
    counters: Cell<KernelCounters>,
    /// Calls of each operation, to check the session asked for each in its turn.
    begins: Rc<Cell<u32>>,
    ends: Rc<Cell<u32>>,
    /// Each run's exit status in turn, as its records say it: its command is `sh -c "exit N"`.
    codes: VecDeque<u32>,
}

fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: the records are plain `repr(C)` data, read whole as bytes.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

fn header(kind: u16, flags: u32, pid: u32, start_ns: u64, ts_ns: u64) -> EventHeader {
    EventHeader {
        kind,
        session: 0,
        flags,
        ts_ns,
        tgid: pid,
        pid,
        leader_start_ns: start_ns,
    }
}

/// Process `pid`'s exec of `/bin/sh` with `argv`, as the exec program writes it (its argv
/// whole in the record).
fn exec_record(pid: u32, start_ns: u64, argv: &[u8]) -> Vec<u8> {
    // SAFETY: plain data, for which all-zero bytes are a value.
    let mut e: ExecEvent = unsafe { std::mem::zeroed() };
    e.hdr = header(kind::EXEC, 0, pid, start_ns, start_ns + 1_000);
    e.old_pid = pid;
    e.args_len = argv.len() as u32;
    e.args_here = argv.len() as u32;
    e.filename[..7].copy_from_slice(b"/bin/sh");
    e.comm[..2].copy_from_slice(b"sh");
    e.args[..argv.len()].copy_from_slice(argv);
    bytes_of(&e)[..EXEC_EVENT_FIXED + argv.len()].to_vec()
}

/// The end of process `pid` as the exit program writes it: the last thread, its image's peak,
/// the status `code`.
fn exit_record(pid: u32, start_ns: u64, code: u32) -> Vec<u8> {
    let x = ExitEvent {
        hdr: header(
            kind::EXIT,
            flags::EXIT_GROUP_DEAD,
            pid,
            start_ns,
            start_ns + 2_000,
        ),
        mem: MemStats {
            hiwater_rss_pages: PEAK_PAGES,
            rss_anon_pages: 10,
            flags: flags::MEM_VALID,
            ..MemStats::default()
        },
        exit_code: code << 8,
        ..ExitEvent::default()
    };
    bytes_of(&x)
}

impl KernelSource for Fake {
    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn taskstats_stats(&self) -> ListenerStats {
        ListenerStats::default()
    }

    fn counters(&self) -> Option<KernelCounters> {
        Some(self.counters.get())
    }

    fn program_stats(&self) -> KernelProgramStats {
        KernelProgramStats::default()
    }

    fn begin(&mut self) -> anyhow::Result<()> {
        self.begins.set(self.begins.get() + 1);
        self.script.0.clear();
        Ok(())
    }

    fn track_root(&mut self, held: HeldChild) -> anyhow::Result<LearnedPid> {
        let pid = held.pid as u32;
        let start_ns = spacetime_tests::clock::monotonic_ns() as u64;
        let code = self.codes.pop_front().expect("a status for each run");
        let argv = format!("sh\0-c\0exit {code}\0");
        self.script
            .0
            .push_back(exec_record(pid, start_ns, argv.as_bytes()));
        // Three bytes no record is: counted, not decoded.
        self.script.0.push_back(vec![1, 2, 3]);
        self.script.0.push_back(exit_record(pid, start_ns, code));
        Ok(LearnedPid {
            kernel_pid: pid,
            level: 0,
        })
    }

    fn track(&mut self, pid: u32) -> anyhow::Result<()> {
        anyhow::bail!("the fake tracks its roots only, not {pid}")
    }

    fn attach(&mut self, _pids: &[u32]) -> anyhow::Result<Attached> {
        anyhow::bail!("the fake attaches to nothing")
    }

    fn io(&mut self, sigfd: std::os::fd::RawFd) -> Io<'_> {
        Io {
            ring: &mut self.script,
            sigfd,
            logger: None,
            taskstats: None,
            counters: &self.counters as &dyn CounterSource,
        }
    }

    fn end_run(&mut self, baseline: &KernelCounters, _live: bool) -> EndFigures {
        self.ends.set(self.ends.get() + 1);
        let mut now = self.counters.get();
        now.ringbuf_lost += LOST;
        self.counters.set(now);
        EndFigures {
            counters: now.since(baseline),
            tree_rss: None,
            mms: Ok(Vec::new()),
            records_end: None,
        }
    }

    fn untrack_all(&mut self) -> Result<usize, LoadError> {
        Ok(0)
    }

    fn gone(&self) -> Option<String> {
        None
    }
}

#[test]
fn the_loop_reports_what_the_source_recorded_and_the_process_itself_did() {
    let (begins, ends) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
    let fake = Fake {
        capabilities: Capabilities {
            provenance: Provenance::Own,
            rss_tracking: false,
            cpu_ticks: false,
            cpu_at_release: false,
            ring_buffer_bytes: 4096,
            load_ms: 0.0,
            mechanisms: vec![MECHANISM.into()],
            taskstats: TaskstatsFeed::Unavailable(Unavailable::Disabled),
            own_pid_program: None,
            proc_has_kernel_pids: true,
            sees_only_uid: None,
        },
        script: Script::default(),
        counters: Cell::new(KernelCounters::default()),
        begins: begins.clone(),
        ends: ends.clone(),
        codes: CODES.into(),
    };
    let opts = SessionOptions {
        load: spacetime::kernel::loader::LoadOptions::default(),
        taskstats_buffer: 0,
        delayacct: false,
        delayacct_notice: false,
    };
    let mut session = Session::over(Box::new(fake), &opts).expect("a session over the fake");
    // SAFETY: a plain query.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).expect("page size");
    for (i, code) in CODES.into_iter().enumerate() {
        let argv: Vec<OsString> = ["sh", "-c", &format!("exit {code}")]
            .iter()
            .map(OsString::from)
            .collect();
        let start = Start::Spawn(Spawn {
            path: Path::new("/bin/sh"),
            argv: &argv,
            creds: None,
        });
        let run = session
            .run(start, &RunOptions::default())
            .unwrap_or_else(|e| panic!("run {i} over the fake: {e:#}"));
        assert_eq!(
            (begins.get(), ends.get()),
            (i as u32 + 1, i as u32 + 1),
            "run {i}: begun and ended once each"
        );
        assert_eq!(run.exit_code(), code as i32, "run {i}: wait4's status");
        assert_eq!(run.meta.decode_errors, 1, "run {i}: the bytes no record is");
        assert_eq!(run.meta.counters.lost(), LOST, "run {i}: its own loss only");
        let live = run.processes();
        let json = serde_json::to_value(run.report(&live)).expect("the report serializes");
        let processes = json["processes"].as_array().expect("processes");
        assert_eq!(processes.len(), 1, "run {i}: the root alone\n{json:#}");
        assert_eq!(
            processes[0]["peak_rss_bytes"].as_u64(),
            Some(PEAK_PAGES * page),
            "run {i}: the peak is the exit record's\n{json:#}"
        );
        assert_eq!(json["lost_events"].as_u64(), Some(LOST), "run {i}");
        assert_eq!(json["kernel"]["decode_errors"].as_u64(), Some(1), "run {i}");
        let mechanisms = json["kernel"]["mechanisms"].to_string();
        assert!(mechanisms.contains(MECHANISM), "run {i}: {mechanisms}");
        assert_eq!(
            json["command"][2].as_str(),
            Some(format!("exit {code}").as_str()),
            "run {i}: the command as given"
        );
    }
}
