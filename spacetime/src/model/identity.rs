//! Who a process belongs to, read from its cgroup v2 path: the container (docker, containerd,
//! cri-o, podman) and its id, the Kubernetes pod's UID, the systemd unit. Parsed once per cgroup
//! (the path is resolved once per cgroup id), never per exit.
//!
//! The patterns are those the runtimes create under both cgroup drivers:
//! - systemd driver: `…/docker-<id>.scope`, `…/cri-containerd-<id>.scope`, `…/crio-<id>.scope`,
//!   `…/libpod-<id>.scope`, inside `kubepods-…-pod<uid with _>.slice` under Kubernetes;
//! - cgroupfs driver: `/docker/<id>`, `/kubepods/<qos>/pod<uid>/<id>`, `/libpod_parent/libpod-<id>`.
//!
//! An id is 64 hex digits. `libpod-conmon-<id>` is podman's monitor process, not the container.

/// What a cgroup path says about its processes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Identity {
    /// `docker`, `containerd`, `cri-o` or `podman`.
    pub container_runtime: Option<&'static str>,
    /// The full container id (64 hex digits).
    pub container_id: Option<String>,
    /// The Kubernetes pod's UID, with dashes.
    pub pod_uid: Option<String>,
    /// The innermost systemd unit (`*.service` or `*.scope`).
    pub systemd_unit: Option<String>,
}

/// This boot's id (/proc/sys/kernel/random/boot_id) as 32 hex digits; empty if unreadable.
pub fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().replace('-', ""))
        .unwrap_or_default()
}

/// A program image's unique id: the boot, the process and when the image started
/// (CLOCK_MONOTONIC ns: its exec, or the process's start when no exec was seen). The same
/// string in its exec line and its exit line; unique across processes, images and boots.
pub fn exec_id(boot_id: &str, pid: u32, image_start_ns: u64) -> String {
    format!("{boot_id}:{pid}:{image_start_ns}")
}

impl Identity {
    pub fn of(cgroup: &str) -> Identity {
        let mut id = Identity::default();
        let parts: Vec<&str> = cgroup.split('/').filter(|p| !p.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            if let Some(uid) = pod_uid(part) {
                id.pod_uid = Some(uid);
            }
            if part.ends_with(".service") || part.ends_with(".scope") {
                id.systemd_unit = Some((*part).to_string());
            }
            if let Some((runtime, cid)) = container(part, parts.get(i.wrapping_sub(1)).copied()) {
                id.container_runtime = Some(runtime);
                id.container_id = Some(cid.to_string());
            }
        }
        // cgroupfs driver under Kubernetes: a bare id below the pod; the runtime is unknown
        // from the path alone, so only the id is kept.
        if id.pod_uid.is_some() && id.container_id.is_none() {
            if let Some(last) = parts.last().filter(|p| is_id(p)) {
                id.container_id = Some((*last).to_string());
            }
        }
        id
    }
}

fn is_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A path component naming a container, with the one before it.
fn container<'a>(part: &'a str, parent: Option<&str>) -> Option<(&'static str, &'a str)> {
    const SCOPES: [(&str, &str); 5] = [
        ("docker-", "docker"),
        ("cri-containerd-", "containerd"),
        ("crio-", "cri-o"),
        ("libpod-", "podman"),
        ("nerdctl-", "containerd"),
    ];
    let bare = part.strip_suffix(".scope").unwrap_or(part);
    for (prefix, runtime) in SCOPES {
        if let Some(rest) = bare.strip_prefix(prefix) {
            // podman's monitor (`libpod-conmon-<id>`) is not inside the container.
            return is_id(rest).then_some((runtime, rest));
        }
    }
    match parent {
        Some("docker") if is_id(part) => Some(("docker", part)),
        _ => None,
    }
}

/// `pod<uid>` (cgroupfs) or `kubepods-<qos>-pod<uid_with_underscores>.slice` (systemd).
fn pod_uid(part: &str) -> Option<String> {
    // The last "pod": "kubepods" holds one too; a UID (hex and dashes) cannot.
    let at = part.rfind("pod")?;
    let before = &part[..at];
    if !(before.is_empty() || before.starts_with("kubepods")) {
        return None;
    }
    let uid = part[at + 3..]
        .strip_suffix(".slice")
        .unwrap_or(&part[at + 3..]);
    let uid = uid.replace('_', "-");
    let groups: Vec<usize> = uid.split('-').map(str::len).collect();
    let hex = uid.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit());
    (hex && groups == [8, 4, 4, 4, 12]).then_some(uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899";
    const UID: &str = "1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d";

    #[test]
    fn docker_both_drivers() {
        let a = Identity::of(&format!("/system.slice/docker-{ID}.scope"));
        assert_eq!(a.container_runtime, Some("docker"));
        assert_eq!(a.container_id.as_deref(), Some(ID));
        assert_eq!(a.systemd_unit, Some(format!("docker-{ID}.scope")));
        let b = Identity::of(&format!("/docker/{ID}"));
        assert_eq!(
            (b.container_runtime, b.container_id.as_deref()),
            (Some("docker"), Some(ID))
        );
    }

    #[test]
    fn kubernetes_with_containerd_and_crio() {
        let uid_ = UID.replace('-', "_");
        let p = format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{uid_}.slice/\
             cri-containerd-{ID}.scope"
        );
        let a = Identity::of(&p);
        assert_eq!(a.container_runtime, Some("containerd"));
        assert_eq!(a.container_id.as_deref(), Some(ID));
        assert_eq!(a.pod_uid.as_deref(), Some(UID));
        let b = Identity::of(&format!("/kubepods/besteffort/pod{UID}/crio-{ID}"));
        assert_eq!(b.container_runtime, Some("cri-o"));
        assert_eq!(b.pod_uid.as_deref(), Some(UID));
        let c = Identity::of(&format!("/kubepods/burstable/pod{UID}/{ID}"));
        assert_eq!(
            (c.container_runtime, c.container_id.as_deref()),
            (None, Some(ID))
        );
    }

    #[test]
    fn podman_but_not_its_monitor() {
        let p =
            format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope");
        let a = Identity::of(&p);
        assert_eq!(
            (a.container_runtime, a.container_id.as_deref()),
            (Some("podman"), Some(ID))
        );
        let m = Identity::of(&format!("/machine.slice/libpod-conmon-{ID}.scope"));
        assert_eq!(m.container_id, None);
        assert_eq!(m.systemd_unit, Some(format!("libpod-conmon-{ID}.scope")));
    }

    #[test]
    fn plain_units_and_nothing() {
        let a = Identity::of("/system.slice/cron.service");
        assert_eq!(a.systemd_unit.as_deref(), Some("cron.service"));
        assert_eq!(a.container_id, None);
        let s = Identity::of("/user.slice/user-1000.slice/session-3.scope");
        assert_eq!(s.systemd_unit.as_deref(), Some("session-3.scope"));
        assert_eq!(Identity::of("/"), Identity::default());
        assert_eq!(Identity::of(""), Identity::default());
        // Look-alikes: short ids, a "pod" that is not a UID, a docker dir without an id.
        assert_eq!(Identity::of("/docker-abc.scope").container_id, None);
        assert_eq!(Identity::of("/podcast.service").pod_uid, None);
        assert_eq!(Identity::of("/docker/notanid").container_id, None);
    }
}
