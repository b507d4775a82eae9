//! Start-up of the kernel side: aya's loader is built in a thread confined to a root where the
//! kernel's BTF is not visible (so aya skips its parse), and that confinement stays in that
//! thread: after loading, the process's root and cwd are as before and relative paths work.
//! Without the capability to chroot, aya parses the BTF as before and tracing still works.

use std::os::unix::{fs::MetadataExt, process::CommandExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use spacetime::kernel::loader::{LoadOptions, Probes};

fn link(path: &str) -> PathBuf {
    std::fs::read_link(path).unwrap_or_else(|e| panic!("readlink {path}: {e}"))
}

/// (device, inode) of a directory, to tell it is the same one.
fn ids(path: impl AsRef<Path>) -> (u64, u64) {
    let path = path.as_ref();
    let m = std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    (m.dev(), m.ino())
}

/// The main thread's (the thread-group leader's) and this thread's root and cwd.
fn roots_and_cwds() -> [PathBuf; 4] {
    [
        link("/proc/self/root"),
        link("/proc/self/cwd"),
        link("/proc/thread-self/root"),
        link("/proc/thread-self/cwd"),
    ]
}

#[test]
fn load_skips_aya_btf_and_keeps_root_and_cwd() {
    let before = roots_and_cwds();
    let probes = Probes::load(&LoadOptions {
        track_rss: true,
        ..LoadOptions::default()
    })
    .unwrap_or_else(|e| panic!("the programs load: {e}"));
    assert!(
        !probes.aya_btf_parsed,
        "as root on a kernel with BTF, aya's loader must be built without parsing it"
    );
    let stats = probes.program_stats();
    let exit = stats
        .programs
        .iter()
        .find(|p| p.name == "sched_process_exit")
        .expect("the exit program is loaded");
    assert!(
        exit.load_us.is_some_and(|us| us > 0) && exit.verified_insns.is_some_and(|n| n > 0),
        "the exit program was verified and its load timed: {:?} µs, {:?} instructions",
        exit.load_us,
        exit.verified_insns
    );
    assert_eq!(
        before,
        roots_and_cwds(),
        "loading changed the process's root or cwd"
    );
    // Relative paths and "/" resolve where they did: the same directories as before loading.
    assert_eq!(
        ids("."),
        ids(&before[1]),
        "\".\" is not the directory cwd was before loading"
    );
    assert_eq!(ids("/"), ids(&before[0]), "\"/\" is not the root it was");
    assert!(
        Path::new("/sys/kernel/btf/vmlinux").exists(),
        "the kernel's BTF is no longer visible after loading"
    );
}

/// Without CAP_SYS_CHROOT (as in some containers) the loader thread cannot hide the BTF: aya
/// parses it as it always did, says so at -vv, and the programs load and trace all the same.
#[test]
fn without_cap_sys_chroot_aya_parses_and_tracing_works() {
    const CAP_SYS_CHROOT: libc::c_ulong = 18;
    let mut cmd = Command::new(spacetime_tests::spacetime_bin());
    cmd.args(["-vv", "trace", "-q", "--", "true"]);
    // SAFETY: only prctl between fork and exec; it drops the capability from the child's
    // bounding set, so the spacetime it execs runs without it.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_CHROOT, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd
        .output()
        .expect("running spacetime without CAP_SYS_CHROOT");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("spacetime::kernel::loader"))
        .collect();
    assert!(
        out.status.success(),
        "spacetime without CAP_SYS_CHROOT exited {:?}: {ours:#?}",
        out.status
    );
    assert!(
        ours.iter()
            .any(|l| l.contains("aya's loader parsed the kernel's BTF (chroot")),
        "no line saying the loader fell back to aya's parse: {ours:#?}"
    );
}
