//! Which raw-tracepoint programs a load verifies, and what becomes of each: attached to its
//! tracepoint, in an order that loses no process, or put in the `TAILS` program array (never
//! attached: reached by tail calls).

use aya::{
    maps::ProgramArray,
    programs::{raw_trace_point::RawTracePointLinkId, RawTracePoint},
    Ebpf,
};
use spacetime_common::tail;

use super::{Atomics, LoadError};
use crate::kernel::offsets::Resolved;

/// What the loader does with a verified program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    /// Attached to this raw tracepoint.
    Attach(&'static str),
    /// Put in this slot of `TAILS`; it serves the named tracepoint's program.
    Tail { slot: u32, serves: &'static str },
}

impl Role {
    /// The tracepoint the program runs under, for error messages.
    fn tracepoint(self) -> &'static str {
        match self {
            Role::Attach(t) | Role::Tail { serves: t, .. } => t,
        }
    }
}

/// The programs of one load, in attach order.
pub(super) struct Plan {
    programs: Vec<(&'static str, Role)>,
    /// The kmem:rss_stat programs are part of it.
    pub rss: bool,
    /// Release records come (sched_process_free).
    pub cpu_at_release: bool,
    /// ... and at a dead task's last switch (sched_switch).
    pub dead_switch: bool,
    /// `watch`'s cgroup paths are read in the kernel (cgroup_exec).
    pub cgroup_names: bool,
    /// Which build of each program (the fentry programs too).
    pub atomics: Atomics,
}

impl Plan {
    /// Attach order: free and the last switch first, then exit, fork last: a process seen
    /// forking is then always seen exiting (the other order leaves a window where one starts
    /// and ends between two attaches). rss_exit before the exit record's program: a
    /// tracepoint runs its programs in attach order, and the RSS records of a process's end
    /// come before its exit record; likewise cgroup_exec before the exec record (a cgroup's
    /// path comes before the exec record that names it).
    /// Each program is the build for the kernel's atomics (probed here, see [`Atomics`]).
    pub fn new(resolved: &Resolved, rss: bool, cgroup_names: bool) -> Plan {
        let atomics = Atomics::probe();
        let cpu_at_release = resolved.off.signal_prev_utime != 0;
        let dead_switch = cpu_at_release && resolved.off.task_state != 0;
        let mut programs = Vec::with_capacity(12);
        let mut attach = |name, tracepoint| {
            programs.push((atomics.program(name), Role::Attach(tracepoint)));
        };
        if cpu_at_release {
            attach("sched_process_free", "sched_process_free");
        }
        if dead_switch {
            attach("dead_switch", "sched_switch");
        }
        if rss {
            attach("rss_exit", "sched_process_exit");
        }
        if cgroup_names {
            attach("cgroup_exec", "sched_process_exec");
        }
        attach("sched_process_exit", "sched_process_exit");
        attach("sched_process_exec", "sched_process_exec");
        attach("sched_process_fork", "sched_process_fork");
        if resolved.has_prepare_exec {
            attach("sched_prepare_exec", "sched_prepare_exec");
        }
        if rss {
            attach("rss_stat", "rss_stat");
            attach("rss_exec", "sched_process_exec");
        }
        programs.push((
            "exec_args",
            Role::Tail {
                slot: tail::EXEC_ARGS,
                serves: "sched_process_exec",
            },
        ));
        Plan {
            programs,
            rss,
            cpu_at_release,
            dead_switch,
            cgroup_names,
            atomics,
        }
    }

    /// (program, tracepoint) of every program to verify.
    pub fn to_verify(&self) -> Vec<(&'static str, &'static str)> {
        self.programs
            .iter()
            .map(|&(name, role)| (name, role.tracepoint()))
            .collect()
    }

    /// Fills `TAILS`, then attaches in plan order (a tail is in place before the program
    /// that calls it runs). Returns rss_stat's link (the only one ever detached).
    pub fn attach(&self, ebpf: &mut Ebpf) -> Result<Option<RawTracePointLinkId>, LoadError> {
        self.fill_tails(ebpf)?;
        let mut rss_link = None;
        for &(name, role) in &self.programs {
            if let Role::Attach(tracepoint) = role {
                let link = attach_raw(ebpf, name, tracepoint)?;
                if tracepoint == "rss_stat" {
                    rss_link = Some(link);
                }
            }
        }
        Ok(rss_link)
    }

    fn fill_tails(&self, ebpf: &mut Ebpf) -> Result<(), LoadError> {
        const TAILS: &str = "TAILS";
        let mut fds = Vec::new();
        for &(name, role) in &self.programs {
            let Role::Tail { slot, serves } = role else {
                continue;
            };
            let err = |source| LoadError::Attach {
                tracepoint: serves,
                source,
            };
            let prog: &RawTracePoint = ebpf
                .program(name)
                .ok_or(LoadError::MissingProgram(name))?
                .try_into()
                .map_err(err)?;
            // A second descriptor of the program: the map is borrowed from `ebpf` below.
            let fd = prog.fd().map_err(err)?.try_clone();
            fds.push((slot, fd.map_err(|e| err(e.into()))?));
        }
        let map = |source| LoadError::Map {
            name: TAILS,
            source,
        };
        let mut tails =
            ProgramArray::try_from(ebpf.map_mut(TAILS).ok_or(LoadError::MissingMap(TAILS))?)
                .map_err(map)?;
        for (slot, fd) in &fds {
            tails.set(*slot, fd, 0).map_err(map)?;
        }
        Ok(())
    }
}

/// Attaches the loaded raw-tracepoint program `name` to `tracepoint`.
pub(super) fn attach_raw(
    ebpf: &mut Ebpf,
    name: &'static str,
    tracepoint: &'static str,
) -> Result<RawTracePointLinkId, LoadError> {
    let err = |source| LoadError::Attach { tracepoint, source };
    let prog: &mut RawTracePoint = ebpf
        .program_mut(name)
        .ok_or(LoadError::MissingProgram(name))?
        .try_into()
        .map_err(err)?;
    prog.attach(tracepoint).map_err(err)
}
