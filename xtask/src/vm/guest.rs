//! The guest's root file system: the binaries and libraries it needs, and the /init that
//! runs every integration test binary and powers off.

use std::{
    ffi::OsString,
    fs,
    os::unix::fs::{symlink, PermissionsExt},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use super::{
    kernel::{debian_package, Debian},
    Built, APPLETS, GUEST_DOCTOR_TEST, GUEST_DOCTOR_WITH, GUEST_SPACETIME, GUEST_TESTS, MARKER,
};
use crate::arch::Arch;

/// The guest's own programs: a static busybox, util-linux's setpriv (the tests run clients as
/// `nobody` with it; busybox's lacks --reuid) and what it loads, as (source, guest path).
pub(super) struct Userland {
    busybox: PathBuf,
    setpriv: PathBuf,
    /// Libraries at their guest paths; empty when the host's `ldd` finds them.
    libs: Vec<(PathBuf, PathBuf)>,
}

/// The host's own busybox and setpriv for a guest of its architecture; for another, Debian's
/// builds of `release` for `arch`, downloaded once into `cache`.
pub(super) fn userland(arch: Arch, release: Debian, cache: &Path) -> Result<Userland> {
    if arch.is_host() {
        let setpriv = PathBuf::from("/usr/bin/setpriv");
        if !setpriv.is_file() {
            bail!("/usr/bin/setpriv is missing: install util-linux (the agent tests run clients as nobody)");
        }
        return Ok(Userland {
            busybox: PathBuf::from("/bin/busybox"),
            setpriv,
            libs: Vec::new(),
        });
    }
    let unpacked = |p: &str| debian_package(release, arch, cache, p);
    // A file of an unpacked package, where it is (Debian 13 ships /bin and /lib under /usr).
    let file = |tree: &Path, path: &str| {
        let merged = tree.join("usr").join(path);
        let found = [tree.join(path), merged.clone()]
            .into_iter()
            .find(|p| p.exists());
        found.with_context(|| format!("{} is missing from Debian's package", merged.display()))
    };
    let busybox = file(&unpacked("busybox-static")?, "bin/busybox")?;
    let setpriv = file(&unpacked("util-linux")?, "bin/setpriv")?;
    let (libc, capng) = (unpacked("libc6")?, unpacked("libcap-ng0")?);
    // The multiarch directory, and the dynamic loader binaries name (PT_INTERP).
    let (triplet, interp) = match arch {
        Arch::Arm64 => ("aarch64-linux-gnu", "/lib/ld-linux-aarch64.so.1"),
        Arch::Amd64 => ("x86_64-linux-gnu", "/lib64/ld-linux-x86-64.so.2"),
    };
    let lib = |tree: &Path, name: &str| -> Result<(PathBuf, PathBuf)> {
        let at = format!("lib/{triplet}/{name}");
        Ok((file(tree, &at)?, Path::new("/").join(at)))
    };
    let loader_name = Path::new(interp).file_name().context("loader name")?;
    let (loader, _) = lib(&libc, &loader_name.to_string_lossy())?;
    let libs = vec![
        lib(&libc, "libc.so.6")?,
        lib(&capng, "libcap-ng.so.0")?,
        (loader, PathBuf::from(interp)),
    ];
    Ok(Userland {
        busybox,
        setpriv,
        libs,
    })
}

/// Copies `src` (symlinks followed) to `root` + `guest_path`, executable bits kept.
fn install(root: &Path, src: &Path, guest_path: &Path) -> Result<()> {
    let dst = root.join(guest_path.strip_prefix("/").unwrap_or(guest_path));
    let parent = dst.parent().context("destination has a parent")?;
    make_dirs(root, parent)?;
    fs::copy(src, &dst)
        .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
    Ok(())
}

/// `mkdir -p` with mode 0755 on every directory created (the sudo test needs `st-workload`'s
/// directories searchable by `nobody`).
fn make_dirs(root: &Path, dir: &Path) -> Result<()> {
    let mut todo = Vec::new();
    let mut d = dir;
    while !d.exists() && d.starts_with(root) {
        todo.push(d.to_path_buf());
        d = d.parent().context("no parent")?;
    }
    for d in todo.into_iter().rev() {
        fs::create_dir(&d).with_context(|| format!("creating {}", d.display()))?;
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The shared libraries (and the dynamic loader) `ldd` names for `bin`.
fn shared_libraries(bin: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .with_context(|| format!("running ldd {}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // A static binary: nothing to copy.
        return Ok(Vec::new());
    }
    Ok(text
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(PathBuf::from)
        })
        .collect())
}

/// Quotes `s` for the guest's shell.
pub(super) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The longest one test binary may run in the guest (guest seconds). The slowest suites take
/// about 150 s under TCG; a hung one is stopped here, after the guest says what every task
/// was waiting in, and the suites after it still run.
const SUITE_LIMIT_S: u32 = 600;

/// `suite NAME CMD…`: runs CMD; past `$SUITE_LIMIT` s a watchdog prints every task's state,
/// wait channel, kernel stack and command line (and the kernel's list of blocked tasks), then
/// kills CMD and what it left behind, and CMD fails.
const WATCHDOG: &str = r#"dump_tasks() {
  echo "spacetime-vm: tasks (pid, state, ppid, wait channel, command):"
  for d in /proc/[0-9]*; do
    [ -r "$d/stat" ] || continue
    st=$(sed 's/.*) //' "$d/stat" | cut -d' ' -f1,2)
    cmd=$(tr '\0' ' ' < "$d/cmdline" | cut -c1-200)
    printf '  %s %s %s %s\n' "${d#/proc/}" "$st" "$(cat "$d/wchan" 2>/dev/null)" "$cmd"
    # Kernel threads (no command line) are left out of the stacks.
    [ -n "$cmd" ] || continue
    for t in "$d"/task/*; do
      echo "    thread ${t##*/} $(cat "$t/comm") in $(cat "$t/wchan" 2>/dev/null):"
      sed 's/^/      /' "$t/stack" 2>/dev/null
    done
  done
  echo w > /proc/sysrq-trigger
}
suite() {
  name=$1; shift
  ( sleep "$SUITE_LIMIT"
    echo "spacetime-vm: $name still running after $SUITE_LIMIT s"
    dump_tasks
    for d in /proc/[0-9]*; do
      [ "$(tr '\0' '\n' < "$d/cmdline" 2>/dev/null | head -n 1)" = "$1" ] && kill -9 "${d#/proc/}"
    done
    killall -9 spacetime st-workload st-agent-client 2>/dev/null ) &
  dog=$!
  # In the foreground: a command the shell runs in the background ignores SIGINT, and so
  # would everything the tests start.
  "$@"; rc=$?
  kill "$dog" 2>/dev/null
  return "$rc"
}
"#;

fn init_script(built: &Built, test_args: &[OsString]) -> String {
    let args: Vec<String> = test_args
        .iter()
        .map(|a| sh_quote(&a.to_string_lossy()))
        .collect();
    let mut s = String::from(
        r#"#!/bin/sh
# spacetime's VM test: mount the basics, run every integration test binary, power off.
/bin/busybox --install -s 2>/dev/null
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# The archive's /tmp holds st-workload at its build path: move it onto the tmpfs.
mv /tmp /tmp.initramfs
mkdir -m 1777 /tmp
mount -t tmpfs -o mode=1777 tmp /tmp
cp -a /tmp.initramfs/. /tmp/
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
# cgroup v2, as on the host: watch's --cgroup filter test needs one to create a group in.
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
# The memory controller for the root's children, as systemd enables it: --cgroup-peak's tests.
echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
ip link set lo up
# Debian's kernel defaults to THP "always"; the CI host (and the taskstats test, which counts
# one fault per touched page) has "madvise".
echo madvise > /sys/kernel/mm/transparent_hugepage/enabled
# A task blocked in the kernel for a minute is reported on the console.
echo 60 > /proc/sys/kernel/hung_task_timeout_secs 2>/dev/null
echo "spacetime-vm: kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPUs, THP $(cat /sys/kernel/mm/transparent_hugepage/enabled), clock $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
"#,
    );
    s += &format!("export SPACETIME_BIN={GUEST_SPACETIME}\n");
    // The tests' loops that hunt rare defects repeat less on an emulated CPU.
    s += "export ST_EMULATED=1\n";
    s += &format!("SUITE_LIMIT={SUITE_LIMIT_S}\n");
    s += WATCHDOG;
    s += "failed=''\n";
    for (name, _) in &built.tests {
        let path = format!("{GUEST_TESTS}/{name}");
        s += &format!("echo 'spacetime-vm: running {name}'\n");
        // The attack suite cycles the pid counter (pid_max - 768 forks): 32 000 take minutes
        // under an emulated CPU, 3 300 about 90 s, 256 a few.
        let pid_max = name == "agent_attack";
        if pid_max {
            s += "echo 1024 > /proc/sys/kernel/pid_max\n";
        }
        s += &format!(
            "suite {name} {path} --test-threads=1 {} || failed=\"$failed {name}\"\n",
            args.join(" ")
        );
        if pid_max {
            s += "echo 32768 > /proc/sys/kernel/pid_max\n";
        }
    }
    if built.doctor_with.is_some() {
        s += &format!(
            "echo 'spacetime-vm: running doctor with {GUEST_DOCTOR_WITH}'\n\
             SPACETIME_BIN={GUEST_DOCTOR_WITH} suite doctor-with {GUEST_DOCTOR_TEST} \
             --test-threads=1 {} || failed=\"$failed doctor-with\"\n",
            args.join(" ")
        );
    }
    // What the kernel offers and what a trace says there, for the log of a failed run only:
    // each loads the programs (2-3 s of an emulated x86-64, 11-19 s of an arm64).
    s += r#"if [ -n "$failed" ]; then
  echo 'spacetime-vm: spacetime trace -v -- true'
  $SPACETIME_BIN trace -v -- true 2>&1
  echo 'spacetime-vm: spacetime doctor'
  $SPACETIME_BIN doctor 2>&1
fi
"#;
    s += &format!(
        r#"if [ -z "$failed" ]; then echo "{MARKER} PASS"; else echo "{MARKER} FAIL:$failed"; fi
poweroff -f
"#
    );
    s
}

/// Builds the guest's root file system in `root` and archives it (newc cpio) into `out`.
pub(super) fn make_initramfs(
    root: &Path,
    out: &Path,
    built: &Built,
    test_args: &[OsString],
) -> Result<()> {
    eprintln!("xtask: building the initramfs in {}", root.display());
    if root.exists() {
        fs::remove_dir_all(root).with_context(|| format!("removing {}", root.display()))?;
    }
    make_dirs(root.parent().context("root has a parent")?, root)?;
    for d in [
        "proc", "sys", "dev", "tmp", "etc", "root", "bin", "sbin", "usr/bin", "usr/sbin",
    ] {
        make_dirs(root, &root.join(d))?;
    }
    fs::set_permissions(root.join("tmp"), fs::Permissions::from_mode(0o1777))?;

    install(root, &built.userland.busybox, Path::new("/bin/busybox"))?;
    for applet in APPLETS {
        symlink("busybox", root.join("bin").join(applet))?;
    }

    let mut binaries = vec![(built.spacetime.clone(), PathBuf::from(GUEST_SPACETIME))];
    if let Some((bin, test)) = &built.doctor_with {
        binaries.push((bin.clone(), PathBuf::from(GUEST_DOCTOR_WITH)));
        binaries.push((test.clone(), PathBuf::from(GUEST_DOCTOR_TEST)));
    }
    binaries.push((built.workload.clone(), built.workload.clone()));
    binaries.push((built.agent_client.clone(), built.agent_client.clone()));
    // In /bin, ahead of busybox's applet of that name (`--install` keeps existing files).
    binaries.push((
        built.userland.setpriv.clone(),
        PathBuf::from("/bin/setpriv"),
    ));
    for (name, path) in &built.tests {
        binaries.push((path.clone(), Path::new(GUEST_TESTS).join(name)));
    }
    let mut libs = Vec::new();
    for (src, dst) in &binaries {
        install(root, src, dst)?;
        for lib in shared_libraries(src)? {
            if !libs.contains(&lib) {
                libs.push(lib);
            }
        }
    }
    for lib in &libs {
        install(root, lib, lib)?;
    }
    for (src, at) in &built.userland.libs {
        install(root, src, at)?;
    }

    // root and nobody: the sudo test drops to nobody and compares with `id -G nobody`.
    let etc = root.join("etc");
    fs::write(
        etc.join("passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    )?;
    fs::write(etc.join("group"), "root:x:0:\nnogroup:x:65534:\n")?;
    fs::write(etc.join("nsswitch.conf"), "passwd: files\ngroup: files\n")?;

    let init = root.join("init");
    fs::write(&init, init_script(built, test_args))?;
    fs::set_permissions(&init, fs::Permissions::from_mode(0o755))?;

    // newc archive of everything under root, by relative path.
    let file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut cpio = Command::new("sh")
        .current_dir(root)
        .args(["-c", "find . -print | cpio -o -H newc --quiet"])
        .stdout(file)
        .spawn()
        .context("running cpio")?;
    let status = cpio.wait()?;
    if !status.success() {
        bail!("cpio failed with {status}");
    }
    let size = fs::metadata(out)?.len();
    eprintln!(
        "xtask: initramfs {} ({:.0} MiB, {} test binaries, {} shared libraries)",
        out.display(),
        size as f64 / (1 << 20) as f64,
        built.tests.len(),
        libs.len()
    );
    Ok(())
}
