//! `spacetime doctor`: one screen that says what works on this machine and why not — the
//! kernel and its BTF, each capability, the kernel hooks spacetime will use, taskstats, delay
//! accounting, cgroups for `--cgroup-peak`, the agent, the PID namespace — and whether
//! `trace` can work here (its exit status: 0 yes, 1 no). What can be tried is tried (the
//! programs loaded, a taskstats record heard, a cgroup created, a session with the agent
//! opened) and undone at once.

mod checks;
mod live;
mod render;

use crate::run::outputs::Dest;
use crate::util::caps::{Cap, CapSet};

/// `spacetime doctor [--json [FILE]]`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// The report as one JSON object (checks, capabilities, verdict): on stdout instead of the
    /// table, or written to FILE with the table on stdout (both from the same examination)
    #[arg(long, value_name = "FILE", num_args = 0..=1, default_missing_value = "-")]
    pub json: Option<std::path::PathBuf>,
}

/// How one thing stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Works.
    Ok,
    /// Works with less (a fallback the kernel forces, a figure read less exactly).
    Limited,
    /// Does not work here.
    No,
    /// Off, and can be switched on.
    Off,
    /// Not tried: not needed, or not allowed to this user.
    Skipped,
}

impl Status {
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Limited => "limited",
            Status::No => "no",
            Status::Off => "off",
            Status::Skipped => "--",
        }
    }
}

/// One line of the report.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Check {
    pub id: &'static str,
    pub status: Status,
    pub summary: String,
}

impl Check {
    pub fn new(id: &'static str, status: Status, summary: String) -> Check {
        Check {
            id,
            status,
            summary,
        }
    }
}

/// Whose programs a trace would use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    /// Loaded by the command itself.
    Own,
    /// A `spacetime agent`'s.
    Agent,
}

/// Whether `spacetime trace` (and `bench`, `watch`) can work here.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    pub works: bool,
    pub via: Option<Via>,
    pub summary: String,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct CapState {
    pub name: &'static str,
    pub held: bool,
    pub purpose: &'static str,
}

/// Everything the doctor found (`--json` prints it as is).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub spacetime_version: &'static str,
    pub kernel_release: String,
    pub uid: u32,
    pub capabilities: Vec<CapState>,
    pub checks: Vec<Check>,
    pub trace: Verdict,
}

/// Entry point: prints the report; 0 when `trace` can work here, 1 when it cannot.
pub fn main(args: DoctorArgs) -> i32 {
    // A file that cannot be written is said before anything is tried.
    let mut json = match args.json.as_deref().map(|p| Dest::open(p, false, true)) {
        None => None,
        Some(Ok(dest)) => Some(dest),
        Some(Err(e)) => {
            crate::errln!("spacetime doctor: {e}");
            return crate::util::exit_code::EXIT_OWN_FAILURE;
        }
    };
    let report = examine();
    let written = match &mut json {
        Some(Dest::Stdout) => render::json(&report, &mut std::io::stdout().lock()),
        Some(file) => render::text(&report, &mut std::io::stdout().lock())
            .and_then(|()| file.write_with(|w| render::json(&report, w))),
        None => render::text(&report, &mut std::io::stdout().lock()),
    };
    if let Err(e) = written {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            crate::errln!("spacetime doctor: writing the report: {e}");
            return crate::util::exit_code::EXIT_OWN_FAILURE;
        }
    }
    if report.trace.works {
        0
    } else {
        1
    }
}

/// Runs every check.
pub fn examine() -> Report {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "(unknown release)".into());
    let uid = rustix::process::getuid().as_raw();
    let eff = CapSet::effective().unwrap_or_default();
    let mut checks = vec![checks::kernel(&release), checks::capabilities(uid, eff)];
    checks.extend(checks::lockdown());
    // Loaded first: an fentry hook the BTF offers may still be refused when attached.
    let loaded = live::load(eff.can_load());
    checks.extend(checks::hooks(&loaded.refused));
    checks.push(loaded.check);
    let own = loaded.own;
    checks.push(live::taskstats(eff.has(Cap::NetAdmin)));
    checks.push(checks::delayacct(eff));
    checks.push(live::cgroup());
    let socket = crate::kernel::remote::socket_path();
    let (agent, through_agent) = live::agent(&socket, !own);
    checks.push(agent);
    checks.push(checks::pid_namespace());
    let trace = verdict(&checks, own, through_agent);
    Report {
        spacetime_version: env!("CARGO_PKG_VERSION"),
        kernel_release: release,
        uid,
        capabilities: Cap::ALL
            .iter()
            .map(|&c| CapState {
                name: c.name(),
                held: eff.has(c),
                purpose: c.purpose(),
            })
            .collect(),
        checks,
        trace,
    }
}

/// What `trace` would do here: like `trace` itself (`Programs::AgentElseOwn`), through an agent
/// that answers, else with programs of its own.
fn verdict(checks: &[Check], own: bool, through_agent: bool) -> Verdict {
    if through_agent {
        let summary = if own {
            "works here, through the agent (with --no-agent, with programs it loads itself)"
        } else {
            "works here, through the agent"
        };
        return Verdict {
            works: true,
            via: Some(Via::Agent),
            summary: summary.into(),
        };
    }
    if own {
        return Verdict {
            works: true,
            via: Some(Via::Own),
            summary: "works here, with programs it loads itself".into(),
        };
    }
    let failed = |id: &str| checks.iter().any(|c| c.id == id && c.status == Status::No);
    let own_part = if failed("kernel") {
        "the kernel has no BTF (kernel)"
    } else if failed("capabilities") {
        "this user may not load the programs (capabilities)"
    } else {
        "the programs did not load (programs)"
    };
    let why = format!("{own_part}, and no agent serves it (agent)");
    Verdict {
        works: false,
        via: None,
        summary: format!("cannot work here: {why}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &'static str, status: Status) -> Check {
        Check::new(id, status, String::new())
    }

    #[test]
    fn the_verdict_is_traces_choice_and_says_why_not() {
        let checks = [c("capabilities", Status::No), c("agent", Status::No)];
        // As root with an agent answering, trace goes through the agent, as doctor says.
        let v = verdict(&checks, true, true);
        assert_eq!((v.works, v.via), (true, Some(Via::Agent)));
        assert!(v.summary.contains("--no-agent"), "{}", v.summary);
        let v = verdict(&checks, true, false);
        assert_eq!((v.works, v.via), (true, Some(Via::Own)));
        let v = verdict(&checks, false, true);
        assert_eq!((v.works, v.via), (true, Some(Via::Agent)));
        let v = verdict(&checks, false, false);
        assert!(!v.works && v.via.is_none());
        assert!(
            v.summary
                .contains("may not load the programs (capabilities)")
                && v.summary.contains("no agent serves it"),
            "{}",
            v.summary
        );
        let v = verdict(&[c("kernel", Status::No)], false, false);
        assert!(v.summary.contains("no BTF"), "{}", v.summary);
    }
}
