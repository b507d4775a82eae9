//! Container, pod and systemd-unit identity in `watch --json`, from real cgroups made the way
//! the runtimes name them.

use std::process::Command;
use std::time::Duration;

use spacetime_tests::watch::{argv_of, run, token, TempCgroup, Watch};

const WL: &str = env!("CARGO_BIN_EXE_st-workload");

#[test]
fn container_pod_and_unit_come_from_the_cgroup() {
    let id = format!("{:0>64}", format!("{:x}", std::process::id()));
    let uid = "1a2b3c4d_5e6f_4a7b_8c9d_0e1f2a3b4c5d";
    let top = token("id");
    let cases = [
        (
            format!("/{top}/docker-{id}.scope"),
            ("docker", None, format!("docker-{id}.scope")),
        ),
        (
            format!("/{top}/kubepods-burstable-pod{uid}.slice/cri-containerd-{id}.scope"),
            (
                "containerd",
                Some(uid.replace('_', "-")),
                format!("cri-containerd-{id}.scope"),
            ),
        ),
    ];
    let w = Watch::new().flag("--json").start();
    let mut tokens = Vec::new();
    let mut groups = Vec::new();
    for (path, _) in &cases {
        let cg = TempCgroup::new(path);
        let t = token("id-exit");
        let mut c = Command::new(WL);
        c.args(["quiet-exit", "0", &t]);
        cg.join(&mut c);
        run(&mut c);
        tokens.push(t);
        groups.push(cg);
    }
    for t in &tokens {
        w.wait_for_stdout(t, Duration::from_secs(30));
    }
    let out = w.interrupt();
    out.assert_clean();
    for ((path, (runtime, pod, unit)), t) in cases.iter().zip(&tokens) {
        let v = out
            .json_lines()
            .into_iter()
            .find(|v| argv_of(v).iter().any(|a| a == t))
            .unwrap_or_else(|| panic!("no exit for {t}\n{}", out.context()));
        assert_eq!(v["cgroup"], *path, "{v}");
        assert_eq!(v["container_runtime"], *runtime, "{v}");
        assert_eq!(v["container_id"], id, "{v}");
        assert_eq!(v["pod_uid"].as_str(), pod.as_deref(), "{v}");
        assert_eq!(v["systemd_unit"], *unit, "{v}");
    }
    drop(groups);
}

/// A container's identity does not depend on when the row is written: the cgroup of each
/// process is removed the moment it exits (as a runtime removes a container's scope), before
/// the watch writes its exit row, and every row still names the container. The kernel sends
/// the cgroup's path the first time one of its processes execs.
#[test]
fn identity_survives_a_cgroup_removed_as_its_process_exits() {
    let top = token("gone");
    let w = Watch::new().flag("--json").start();
    let mut made = Vec::new();
    for i in 0..8 {
        let id = format!("{:0>64}", format!("{:x}{i:x}", std::process::id()));
        let path = format!("/{top}/docker-{id}.scope");
        let cg = TempCgroup::new(&path);
        let t = token("gone-exit");
        let mut c = Command::new(WL);
        c.args(["quiet-exit", "0", &t]);
        cg.join(&mut c);
        run(&mut c);
        // Removed at once: before the watch can have looked the cgroup up.
        drop(cg);
        made.push((t, path, id));
    }
    for (t, _, _) in &made {
        w.wait_for_stdout(t, Duration::from_secs(30));
    }
    let out = w.interrupt();
    out.assert_clean();
    for (t, path, id) in &made {
        let v = out
            .json_lines()
            .into_iter()
            .find(|v| argv_of(v).iter().any(|a| a == t))
            .unwrap_or_else(|| panic!("no exit for {t}\n{}", out.context()));
        assert_eq!(v["cgroup"], *path, "{v}");
        assert_eq!(v["container_runtime"], "docker", "{v}");
        assert_eq!(v["container_id"], *id, "{v}");
    }
}
