//! The measured runs: each a full trace through one [`Session`], the kernel programs loaded
//! once for the whole bench, its figures taken from the run's report (the same figures
//! `spacetime trace` reports).

use crate::kernel::provenance::Provenance;
use std::{ffi::OsString, path::Path};

use super::{driver::Tracer, model::RunFigures};
use crate::{
    kernel::loader::LoadOptions,
    run::{
        launch::{Credentials, Stdio},
        Programs, RunError, RunOptions, Session, SessionOptions, Spawn, Start,
    },
};

pub struct SessionTracer {
    session: Session,
    creds: Option<Credentials>,
    /// The last run saw a stop signal.
    signalled: bool,
    /// Every run in a memory cgroup of its own (`--cgroup-peak`).
    cgroup_peak: bool,
    /// Why there is no cgroup peak, said once.
    cgroup_note_said: bool,
}

impl SessionTracer {
    /// Loads the programs; where each run's streams go is said before it ([`Tracer::streams`]).
    pub fn open(
        verbose: u8,
        creds: Option<Credentials>,
        cgroup_peak: bool,
        programs: Programs,
    ) -> anyhow::Result<SessionTracer> {
        let opts = SessionOptions {
            load: LoadOptions {
                track_rss: true,
                ..LoadOptions::default()
            },
            taskstats_buffer: 8 << 20,
            delayacct: false,
            delayacct_notice: false,
        };
        let session = Session::open_any(&opts, programs, None)?;
        if verbose > 0 {
            session.tell_loaded();
        }
        Ok(SessionTracer {
            session,
            creds,
            signalled: false,
            cgroup_peak,
            cgroup_note_said: false,
        })
    }
}

impl Tracer for SessionTracer {
    fn programs(&self) -> Provenance {
        self.session.programs()
    }

    fn streams(&mut self, stdio: Stdio) {
        self.session.detach_stdio(stdio);
    }

    fn interrupted(&self) -> bool {
        self.signalled || super::driver::stop_signal_pending()
    }

    fn run(&mut self, path: &Path, argv: &[OsString]) -> anyhow::Result<RunFigures> {
        let start = Start::Spawn(Spawn {
            path,
            argv,
            creds: self.creds.as_ref(),
        });
        let opts = RunOptions {
            stop_on_root_exit: false,
            // PSS is sampled, not exact: a bench reports the exact figures only.
            pss_interval_ns: 0,
            pss_cpu_budget: None,
            // Where the kernel does not follow RSS, /proc's samples give the runs' peaks.
            memory_over_time: true,
            quiet: true,
            cgroup_peak: self.cgroup_peak,
        };
        let run = self.session.run(start, &opts).map_err(|e| match e {
            // Kept as itself: its exit status (127 not found, 126 not executable) is the bench's.
            RunError::Launch(l) => anyhow::Error::new(l),
            RunError::Other(e) => e,
        })?;
        self.signalled |= run.stop_signal.is_some();
        let cgroup_peak_bytes = self.cgroup_peak_of(&run);
        let live = run.processes();
        let report = run.report(&live);
        Ok(RunFigures {
            wall_ns: report.wall_ns,
            user_ns: report.user_ns,
            sys_ns: report.sys_ns,
            peak_rss_bytes: report.totals.peak_rss_bytes,
            tree_peak_rss_bytes: report.totals.tree_peak_rss_bytes,
            processes: report.totals.processes,
            exit_code: run.exit_code(),
            lost_events: report.lost_events + report.kernel.decode_errors + report.kernel.args_gaps,
            cgroup_peak_bytes,
        })
    }
}

impl SessionTracer {
    /// The run's distinct-page peak; when there is none, the reason is said once (the runs are
    /// quiet).
    fn cgroup_peak_of(&mut self, run: &crate::run::Run) -> Option<u64> {
        let c = run.meta.cgroup_peak.as_ref()?;
        if let (None, Some(why), false) =
            (c.peak_bytes, &c.unavailable_reason, self.cgroup_note_said)
        {
            crate::errln!("spacetime: no cgroup peak: {why}");
            self.cgroup_note_said = true;
        }
        c.peak_bytes
    }
}
