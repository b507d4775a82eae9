//! The Linux capabilities spacetime uses, by name, and which of them this process holds: every
//! message about a missing privilege names the capability, not just "root".

/// A capability spacetime needs for one thing or another.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Cap {
    /// Load the kernel programs and create their maps (or CAP_SYS_ADMIN).
    Bpf,
    /// Attach the programs to tracepoints and fentry, read kernel memory from them (or
    /// CAP_SYS_ADMIN).
    Perfmon,
    /// Register for the kernel's taskstats exit records; size their socket buffer.
    NetAdmin,
    /// Switch delay accounting (`kernel.task_delayacct`); covers CAP_BPF and CAP_PERFMON.
    SysAdmin,
    /// Read other users' processes' `/proc` entries that ptrace guards (exe, namespaces).
    SysPtrace,
    /// Ask a pidfd of another user's process whether it lives (`pidfd_send_signal` 0).
    Kill,
    /// Resolve the cgroup ids of `watch` to paths (`open_by_handle_at`).
    DacReadSearch,
}

impl Cap {
    /// Every capability spacetime uses, in the order a report lists them.
    pub const ALL: [Cap; 7] = [
        Cap::Bpf,
        Cap::Perfmon,
        Cap::NetAdmin,
        Cap::SysAdmin,
        Cap::SysPtrace,
        Cap::Kill,
        Cap::DacReadSearch,
    ];

    /// Its number (linux/capability.h).
    pub fn number(self) -> u32 {
        match self {
            Cap::DacReadSearch => 2,
            Cap::Kill => 5,
            Cap::NetAdmin => 12,
            Cap::SysPtrace => 19,
            Cap::SysAdmin => 21,
            Cap::Perfmon => 38,
            Cap::Bpf => 39,
        }
    }

    /// Its name as the kernel, systemd and setpriv spell it (upper case).
    pub fn name(self) -> &'static str {
        match self {
            Cap::Bpf => "CAP_BPF",
            Cap::Perfmon => "CAP_PERFMON",
            Cap::NetAdmin => "CAP_NET_ADMIN",
            Cap::SysAdmin => "CAP_SYS_ADMIN",
            Cap::SysPtrace => "CAP_SYS_PTRACE",
            Cap::Kill => "CAP_KILL",
            Cap::DacReadSearch => "CAP_DAC_READ_SEARCH",
        }
    }

    /// What spacetime does with it, for `doctor`.
    pub fn purpose(self) -> &'static str {
        match self {
            Cap::Bpf => "load the kernel programs",
            Cap::Perfmon => "attach them to the kernel's tracepoints",
            Cap::NetAdmin => "taskstats exit records (the cross-check)",
            Cap::SysAdmin => "--delayacct (kernel.task_delayacct)",
            Cap::SysPtrace => "trace -p of other users' processes; the agent's checks",
            Cap::Kill => "signals forwarded to traced processes of another user",
            Cap::DacReadSearch => "watch: cgroup paths",
        }
    }
}

/// A capability set, as /proc/PID/status prints it (one bit per capability number).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CapSet(pub u64);

impl CapSet {
    /// This process's effective set (None when /proc cannot be read).
    pub fn effective() -> Option<CapSet> {
        let status = super::proc_text::read_to_string("/proc/self/status").ok()?;
        Self::parse(&status, "CapEff:")
    }

    /// The set named `key` ("CapEff:"…) in a /proc/PID/status text.
    pub fn parse(status: &str, key: &str) -> Option<CapSet> {
        let hex = status.lines().find_map(|l| l.strip_prefix(key))?;
        u64::from_str_radix(hex.trim(), 16).ok().map(CapSet)
    }

    pub fn has(self, cap: Cap) -> bool {
        self.0 & (1 << cap.number()) != 0
    }

    /// Loading the kernel programs is allowed: CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN.
    pub fn can_load(self) -> bool {
        self.has(Cap::SysAdmin) || (self.has(Cap::Bpf) && self.has(Cap::Perfmon))
    }

    /// What loading the programs lacks (empty when [`CapSet::can_load`]).
    pub fn missing_for_load(self) -> Vec<Cap> {
        if self.can_load() {
            return Vec::new();
        }
        [Cap::Bpf, Cap::Perfmon]
            .into_iter()
            .filter(|&c| !self.has(c))
            .collect()
    }
}

/// "CAP_A and CAP_B" (or "CAP_A, CAP_B and CAP_C").
pub fn names(caps: &[Cap]) -> String {
    let names: Vec<&str> = caps.iter().map(|c| c.name()).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_and_names_what_loading_lacks() {
        let status = "Name:\tx\nCapEff:\t000000c000001000\nCapBnd:\t000001ffffffffff\n";
        let eff = CapSet::parse(status, "CapEff:").expect("CapEff");
        assert!(eff.has(Cap::Bpf) && eff.has(Cap::Perfmon) && eff.has(Cap::NetAdmin));
        assert!(!eff.has(Cap::SysAdmin) && eff.can_load());
        let only_bpf = CapSet(1 << 39);
        assert_eq!(only_bpf.missing_for_load(), vec![Cap::Perfmon]);
        assert_eq!(CapSet(0).missing_for_load(), vec![Cap::Bpf, Cap::Perfmon]);
        assert!(CapSet(1 << 21).can_load());
        assert_eq!(names(&[Cap::Bpf, Cap::Perfmon]), "CAP_BPF and CAP_PERFMON");
        assert_eq!(
            names(&[Cap::Bpf, Cap::Perfmon, Cap::Kill]),
            "CAP_BPF, CAP_PERFMON and CAP_KILL"
        );
    }
}
