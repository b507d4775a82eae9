//! `--cgroup-peak`: the traced tree's distinct-page memory peak, from a cgroup of its own.
//!
//! The tree-wide peak RSS sums each process's resident pages: a page shared after fork
//! (copy-on-write, not yet written) counts once per process, page cache not mapped counts
//! never. The memory controller charges each page once, to the cgroup that first touched it,
//! page cache and kernel memory included: cgroup v2 `memory.peak` (Linux 5.19+) or v1
//! `memory.max_usage_in_bytes` is then the figure cgmemtime reports.
//!
//! A fresh cgroup is made per run (so `bench` can take one per run), the held child is
//! placed in it before it execs, and the cgroup is removed at the end on every path (its
//! `Drop`). Processes still inside then (`--stop-on-root-exit`) are moved back to the cgroup
//! spacetime runs in first: the kernel refuses to remove a cgroup that holds processes.

use std::{
    io,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU32, Ordering},
};

/// Why no memory cgroup can be used: one sentence for the report.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("no memory controller can be used: {0}")]
    NoController(String),
    #[error("cannot create the cgroup {path}: {source}")]
    Create { path: String, source: io::Error },
    #[error("cannot place the traced command in {path}: {source}")]
    Place { path: String, source: io::Error },
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: io::Error },
}

/// Which memory controller the cgroup belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    /// The file holding the peak.
    pub fn peak_file(self) -> &'static str {
        match self {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        }
    }

    pub fn number(self) -> u8 {
        match self {
            Version::V1 => 1,
            Version::V2 => 2,
        }
    }
}

/// A cgroup made for one run; removed when dropped.
#[derive(Debug)]
pub struct CgroupPeak {
    dir: PathBuf,
    /// Where processes still inside at the end are moved: the cgroup spacetime runs in.
    home: PathBuf,
    pub version: Version,
    removed: bool,
}

/// How the removal went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Removal {
    /// Processes still running in the cgroup, moved to spacetime's own cgroup.
    pub moved: u64,
    /// The cgroup could not be removed (it is left in place, and said so on stderr).
    pub left_in_place: bool,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A `/proc/self/cgroup` line: (hierarchy id, controllers, path).
fn own_cgroups(text: &str) -> Vec<(String, Vec<String>, String)> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.splitn(3, ':');
            let id = f.next()?.to_string();
            let ctrl = f.next()?.split(',').filter(|c| !c.is_empty());
            let ctrl = ctrl.map(String::from).collect();
            Some((id, ctrl, f.next()?.to_string()))
        })
        .collect()
}

/// A cgroup mount from `/proc/self/mountinfo`: (root inside the hierarchy, mount point,
/// fstype, super options).
struct Mount {
    root: String,
    point: PathBuf,
    fstype: String,
    options: String,
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|o| o.iter().all(|c| (b'0'..=b'7').contains(c)));
        match oct {
            Some(o) if b[i] == b'\\' => {
                out.push(o.iter().fold(0u8, |a, c| a.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            _ => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn cgroup_mounts(mountinfo: &str) -> Vec<Mount> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            let f: Vec<&str> = pre.split(' ').collect();
            let mut p = post.split(' ');
            let fstype = p.next()?.to_string();
            let options = p.nth(1).unwrap_or("").to_string();
            if fstype != "cgroup" && fstype != "cgroup2" {
                return None;
            }
            Some(Mount {
                root: unescape_mount(f.get(3)?),
                point: PathBuf::from(unescape_mount(f.get(4)?)),
                fstype,
                options,
            })
        })
        .collect()
}

/// The directory of cgroup `path` under a mount whose root is `root`: None when the cgroup
/// lies outside what the mount shows.
fn under_mount(m: &Mount, path: &str) -> Option<PathBuf> {
    let rel = if m.root == "/" {
        path.strip_prefix('/').unwrap_or(path)
    } else {
        let rest = path.strip_prefix(m.root.as_str())?;
        if !rest.is_empty() && !rest.starts_with('/') {
            return None;
        }
        rest.strip_prefix('/').unwrap_or(rest)
    };
    Some(m.point.join(rel))
}

fn read_trim(p: &Path) -> io::Result<String> {
    Ok(std::fs::read_to_string(p)?.trim().to_string())
}

fn has_word(p: &Path, word: &str) -> bool {
    read_trim(p).is_ok_and(|s| s.split_whitespace().any(|w| w == word))
}

fn shown(p: &Path) -> String {
    crate::util::term::escape(p.as_os_str().as_encoded_bytes())
}

/// Where spacetime's cgroups can go: (parent of the new cgroup, spacetime's own cgroup,
/// version). v2 first; v1's memory hierarchy otherwise.
fn placement() -> Result<(PathBuf, PathBuf, Version), CgroupError> {
    let no = |s: String| CgroupError::NoController(s);
    let own = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| no(format!("/proc/self/cgroup: {e}")))?;
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| no(format!("/proc/self/mountinfo: {e}")))?;
    let own = own_cgroups(&own);
    let mounts = cgroup_mounts(&mountinfo);
    let mut why = Vec::new();
    if let Some((_, _, path)) = own.iter().find(|(id, c, _)| id == "0" && c.is_empty()) {
        match mounts.iter().find(|m| m.fstype == "cgroup2") {
            Some(m) => match under_mount(m, path) {
                Some(home) => match v2_parent(&home) {
                    Ok(parent) => return Ok((parent, home, Version::V2)),
                    Err(e) => why.push(e),
                },
                None => why.push("spacetime's cgroup v2 is not under the cgroup2 mount".into()),
            },
            None => why.push("cgroup2 is not mounted".into()),
        }
    }
    let v1 = own.iter().find(|(_, c, _)| c.iter().any(|c| c == "memory"));
    let m1 = mounts
        .iter()
        .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == "memory"));
    match (v1, m1) {
        (Some((_, _, path)), Some(m)) => match under_mount(m, path) {
            Some(home) if home.join("memory.max_usage_in_bytes").exists() => {
                return Ok((home.clone(), home, Version::V1))
            }
            _ => why.push("spacetime's v1 memory cgroup is not visible under its mount".into()),
        },
        _ => why.push("there is no cgroup v1 memory hierarchy".into()),
    }
    Err(no(why.join("; ")))
}

/// The v2 cgroup to create the new one under, from spacetime's own (`home`): `home` itself
/// when its children get the memory controller (the root cgroup, typically), else its parent
/// when `home` has the controller (a cgroup holding processes cannot hand controllers down).
fn v2_parent(home: &Path) -> Result<PathBuf, String> {
    if has_word(&home.join("cgroup.subtree_control"), "memory") {
        return Ok(home.to_path_buf());
    }
    if home.join("memory.current").exists() {
        if let Some(parent) = home.parent() {
            return Ok(parent.to_path_buf());
        }
    }
    if has_word(&home.join("cgroup.controllers"), "memory") {
        return Err(format!(
            "the memory controller is not enabled for children of {} (cgroup.subtree_control)",
            shown(home)
        ));
    }
    Err("cgroup v2 has no memory controller here (it may be bound to a v1 hierarchy)".into())
}

impl CgroupPeak {
    /// Creates a fresh memory cgroup for one run.
    pub fn create() -> Result<CgroupPeak, CgroupError> {
        let (parent, home, version) = placement()?;
        let name = format!(
            "spacetime-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let dir = parent.join(name);
        std::fs::create_dir(&dir).map_err(|source| match source.raw_os_error() {
            Some(libc::EROFS) | Some(libc::EACCES) | Some(libc::EPERM) => {
                CgroupError::NoController(format!(
                    "cannot create a cgroup under {}: {source}",
                    shown(&parent)
                ))
            }
            _ => CgroupError::Create {
                path: shown(&dir),
                source,
            },
        })?;
        let cg = CgroupPeak {
            dir,
            home,
            version,
            removed: false,
        };
        if !cg.dir.join(version.peak_file()).exists() {
            // Dropped: removed again.
            return Err(CgroupError::NoController(format!(
                "the cgroup has no {} (cgroup v2 has it from Linux 5.19)",
                version.peak_file()
            )));
        }
        Ok(cg)
    }

    /// Moves `pid` (as spacetime's PID namespace numbers it) into the cgroup. Called while
    /// the child is held before its exec, so everything the command maps is charged here.
    pub fn add(&self, pid: libc::pid_t) -> Result<(), CgroupError> {
        let procs = self.dir.join("cgroup.procs");
        std::fs::write(&procs, pid.to_string()).map_err(|source| CgroupError::Place {
            path: shown(&self.dir),
            source,
        })
    }

    /// The peak so far, in bytes.
    pub fn peak_bytes(&self) -> Result<u64, CgroupError> {
        let file = self.dir.join(self.version.peak_file());
        let err = |source| CgroupError::Read {
            path: shown(&file),
            source,
        };
        let s = read_trim(&file).map_err(err)?;
        s.parse()
            .map_err(|_| err(io::Error::new(io::ErrorKind::InvalidData, s)))
    }

    /// Moves out what is still running and removes the cgroup.
    pub fn remove(mut self) -> Removal {
        self.remove_now()
    }

    fn remove_now(&mut self) -> Removal {
        if self.removed {
            return Removal::default();
        }
        self.removed = true;
        let mut r = Removal::default();
        // Bounded: a process forking as fast as it is moved keeps the cgroup busy.
        for _ in 0..8 {
            match std::fs::remove_dir(&self.dir) {
                Ok(()) => return r,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return r,
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    r.moved += self.move_out();
                    // An exiting task leaves its cgroup a moment after it is reaped.
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(e) => {
                    crate::errln!(
                        "spacetime: cannot remove the cgroup {}: {e}",
                        shown(&self.dir)
                    );
                    r.left_in_place = true;
                    return r;
                }
            }
        }
        crate::errln!(
            "spacetime: the cgroup {} still holds processes and is left in place",
            shown(&self.dir)
        );
        r.left_in_place = true;
        r
    }

    /// Moves every process still in the cgroup to spacetime's own; returns how many moved.
    /// A pid is moved only while pinned by a pidfd and proven to be in this cgroup, and the
    /// move counts only if it was still not reaped afterwards (so the pid was its own).
    fn move_out(&self) -> u64 {
        let Ok(list) = std::fs::read_to_string(self.dir.join("cgroup.procs")) else {
            return 0;
        };
        let mut moved = 0;
        for pid in list.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            let Ok(Some(pinned)) = crate::kernel::pidfd::Pinned::open(pid) else {
                continue;
            };
            if !self.holds(pid) {
                continue;
            }
            let home = self.home.join("cgroup.procs");
            if std::fs::write(&home, pid.to_string()).is_ok() && pinned.signal(0).is_ok() {
                moved += 1;
            }
        }
        moved
    }

    /// Whether `/proc/PID/cgroup` names this cgroup.
    fn holds(&self, pid: u32) -> bool {
        let name = self
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        let Some(name) = name else { return false };
        std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|t| {
            own_cgroups(&t)
                .iter()
                .any(|(_, _, p)| p.rsplit('/').next() == Some(name.as_str()))
        })
    }
}

/// A run's cgroup from creation to report: `Err` holds the sentence saying why there is none.
pub type Run = Result<CgroupPeak, CgroupError>;

/// Creates the run's cgroup; says on stderr why there is none (unless `quiet`).
pub fn start(quiet: bool) -> Run {
    let run = CgroupPeak::create();
    if let (Err(e), false) = (&run, quiet) {
        crate::errln!("spacetime: --cgroup-peak: {e}");
    }
    run
}

/// Places the held child (`pid`) in the run's cgroup; on failure the cgroup is removed.
pub fn place(run: Run, pid: libc::pid_t, quiet: bool) -> Run {
    let placed = run.and_then(|c| c.add(pid).map(|()| c));
    if let (Err(e @ CgroupError::Place { .. }), false) = (&placed, quiet) {
        crate::errln!("spacetime: --cgroup-peak: {e}");
    }
    placed
}

/// Reads the peak, removes the cgroup, and says both for the report.
pub fn finish(run: Run) -> crate::report::CgroupPeakReport {
    let unavailable = |e: CgroupError| crate::report::CgroupPeakReport {
        available: false,
        peak_bytes: None,
        cgroup_version: None,
        source: None,
        moved_out: 0,
        unavailable_reason: Some(e.to_string()),
    };
    let cg = match run {
        Ok(c) => c,
        Err(e) => return unavailable(e),
    };
    let version = cg.version;
    let peak = cg.peak_bytes();
    let removal = cg.remove();
    match peak {
        Ok(b) => crate::report::CgroupPeakReport {
            available: true,
            peak_bytes: Some(b),
            cgroup_version: Some(version.number()),
            source: Some(version.peak_file().into()),
            moved_out: removal.moved,
            unavailable_reason: None,
        },
        Err(e) => crate::report::CgroupPeakReport {
            moved_out: removal.moved,
            ..unavailable(e)
        },
    }
}

impl Drop for CgroupPeak {
    fn drop(&mut self) {
        let _ = self.remove_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_own_cgroups_and_mounts() {
        let own = own_cgroups("4:memory:/a/b\n1:cpu,cpuacct:/\n0::/user.slice/x\n");
        assert_eq!(own.len(), 3);
        assert_eq!(own[0].1, ["memory"]);
        assert_eq!(own[2], ("0".into(), vec![], "/user.slice/x".into()));
        let mi =
            "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n\
                  31 25 0:27 /ctr /sys/fs/cgroup/uni\\040fied rw - cgroup2 cgroup2 rw\n\
                  32 25 0:28 / /proc rw - proc proc rw\n";
        let m = cgroup_mounts(mi);
        assert_eq!(m.len(), 2, "proc is not a cgroup mount");
        assert!(m[0].options.split(',').any(|o| o == "memory"));
        assert_eq!(m[1].point, Path::new("/sys/fs/cgroup/uni fied"));
        assert_eq!(
            under_mount(&m[1], "/ctr/job"),
            Some(PathBuf::from("/sys/fs/cgroup/uni fied/job"))
        );
        assert_eq!(under_mount(&m[1], "/ctrl"), None, "a sibling is not inside");
        assert_eq!(
            under_mount(&m[0], "/a/b"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/a/b"))
        );
    }
}
