//! Which exits are reported: `--comm`, `--exe`, `--uid`, `--cgroup`, `--min-rss`,
//! `--min-runtime`, `--pid-tree`, `--failed`. Options combine with AND; repeated values of one
//! option with OR.

use anyhow::{bail, Result};
use spacetime_common::{
    filter_flags, CgroupRef, KernelFilter, FILTER_MAX_CGROUPS, FILTER_MAX_UIDS,
};

use super::{args::WatchArgs, cgroup::cgroup2_mount};
use crate::model::exit_view::ExitView;
use crate::model::table::Names;
use crate::{model::tree::ExitStatus, util::units};

#[derive(Debug, Default)]
pub struct Filter {
    comm: Vec<Vec<u8>>,
    /// (pattern, match the file name only)
    exe: Vec<(Vec<u8>, bool)>,
    uids: Vec<u32>,
    /// (pattern, is a glob): a plain path matches itself and what is below it.
    cgroup: Vec<(String, bool)>,
    min_rss_bytes: Option<u64>,
    min_runtime_ns: Option<u64>,
    pid_tree: Option<u32>,
    failed: bool,
}

fn is_glob(p: &str) -> bool {
    p.contains(['*', '?', '['])
}

impl Filter {
    pub fn from_args(a: &WatchArgs) -> Result<Filter> {
        let mut uids = Vec::new();
        for u in &a.uid {
            uids.push(resolve_user(u)?);
        }
        let cgroup: Vec<(String, bool)> = a
            .cgroup
            .iter()
            .map(|c| {
                let c = c.trim_end_matches('/');
                let c = if c.starts_with('/') || c.starts_with('*') {
                    c.to_string()
                } else {
                    format!("/{c}")
                };
                (c.clone(), is_glob(&c))
            })
            .collect();
        for (path, glob) in &cgroup {
            if let Some(why) = missing_cgroup(path).filter(|_| !glob) {
                crate::errln!("spacetime: warning: --cgroup {path}: {why}");
            }
        }
        if let Some(pid) = a.pid_tree {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                bail!("--pid-tree {pid}: there is no process {pid}");
            }
        }
        Ok(Filter {
            comm: a.comm.iter().map(|c| c.as_bytes().to_vec()).collect(),
            exe: a
                .exe
                .iter()
                .map(|e| (e.as_bytes().to_vec(), !e.contains('/')))
                .collect(),
            uids,
            cgroup,
            min_rss_bytes: a.min_rss,
            min_runtime_ns: a.min_runtime.map(|d| d.as_nanos() as u64),
            pid_tree: a.pid_tree,
            failed: a.failed,
        })
    }

    /// What is selected, in words: `every exit on the system` or `process exits with comm
    /// make or cc, uid 1000 and peak RSS at least 100 MiB`.
    pub fn describe(&self, threads: bool) -> String {
        let what = if threads {
            "process and thread exits"
        } else {
            "process exits"
        };
        let or = |items: Vec<String>| items.join(" or ");
        let text = |v: &[Vec<u8>]| {
            v.iter()
                .map(|b| String::from_utf8_lossy(b).into())
                .collect()
        };
        let mut parts = Vec::new();
        if !self.comm.is_empty() {
            parts.push(format!("comm {}", or(text(&self.comm))));
        }
        if !self.exe.is_empty() {
            let exe: Vec<Vec<u8>> = self.exe.iter().map(|(p, _)| p.clone()).collect();
            parts.push(format!("exe {}", or(text(&exe))));
        }
        if !self.uids.is_empty() {
            parts.push(format!(
                "uid {}",
                or(self.uids.iter().map(u32::to_string).collect())
            ));
        }
        if !self.cgroup.is_empty() {
            let cg = self.cgroup.iter().map(|(p, glob)| {
                if *glob {
                    p.clone()
                } else {
                    format!("{p} (and below)")
                }
            });
            parts.push(format!("cgroup {}", or(cg.collect())));
        }
        if let Some(b) = self.min_rss_bytes {
            parts.push(format!("peak RSS at least {}", units::bytes(b)));
        }
        if let Some(ns) = self.min_runtime_ns {
            parts.push(format!("runtime at least {}", units::duration_ns(ns)));
        }
        if let Some(pid) = self.pid_tree {
            parts.push(format!("in the tree of pid {pid}"));
        }
        if self.failed {
            parts.push("a failure (non-zero exit or fatal signal)".into());
        }
        match parts.len() {
            0 if threads => "every exit on the system, threads included".into(),
            0 => "every exit on the system".into(),
            1 => format!("{what} with {}", parts[0]),
            n => format!(
                "{what} with {} and {}",
                parts[..n - 1].join(", "),
                parts[n - 1]
            ),
        }
    }

    /// The filter lets everything through.
    pub fn is_empty(&self) -> bool {
        self.comm.is_empty()
            && self.exe.is_empty()
            && self.uids.is_empty()
            && self.cgroup.is_empty()
            && self.min_rss_bytes.is_none()
            && self.min_runtime_ns.is_none()
            && self.pid_tree.is_none()
            && !self.failed
    }

    /// Whether the kernel tests uids (see [`Filter::kernel`]).
    pub fn kernel_uids(&self) -> bool {
        (1..=FILTER_MAX_UIDS).contains(&self.uids.len())
    }

    /// Whether the kernel would keep a process of `uid` out: one running already is found in
    /// /proc without its argv.
    pub fn uid_filtered_out(&self, uid: u32) -> bool {
        self.kernel_uids() && !self.uids.contains(&uid)
    }

    pub fn pid_tree(&self) -> Option<u32> {
        self.pid_tree
    }

    /// The part of the filter the kernel applies before anything is sent (see
    /// `spacetime-ebpf/src/filter.rs`): the uids, and the cgroups when each is a plain path
    /// that exists now (a glob, or a cgroup created later, is matched here only). `--pid-tree`
    /// is the kernel's tree mode, set by the caller. What stays here is said in `notes`.
    pub fn kernel(&self, notes: &mut Vec<String>) -> KernelFilter {
        let mut k = KernelFilter::default();
        if !self.uids.is_empty() {
            if self.uids.len() <= FILTER_MAX_UIDS {
                k.flags |= filter_flags::UID;
                k.n_uids = self.uids.len() as u32;
                k.uids[..self.uids.len()].copy_from_slice(&self.uids);
            } else {
                notes.push(format!(
                    "more than {FILTER_MAX_UIDS} --uid values: uids are filtered in userspace"
                ));
            }
        }
        if !self.cgroup.is_empty() {
            match kernel_cgroups(&self.cgroup) {
                Ok(refs) if refs.iter().any(|r| r.level == 0) => {}
                Ok(refs) => {
                    k.flags |= filter_flags::CGROUP;
                    k.n_cgroups = refs.len() as u32;
                    k.cgroups[..refs.len()].copy_from_slice(&refs);
                }
                Err(why) => notes.push(format!("--cgroup is filtered in userspace: {why}")),
            }
        }
        k
    }

    /// An exec line (`--events exec`): the options known when a program starts (comm, exe,
    /// uid, cgroup, tree); `--failed`, `--min-rss` and `--min-runtime` select exit lines only.
    pub fn matches_exec(&self, in_tree: bool, uid: u32, image: &Names, cgroup: &str) -> bool {
        if self.pid_tree.is_some() && !in_tree {
            return false;
        }
        if !self.uids.is_empty() && !self.uids.contains(&uid) {
            return false;
        }
        if !self.comm.is_empty() && !self.comm.iter().any(|p| glob(p, image.comm.as_bytes())) {
            return false;
        }
        if !self.exe.is_empty() && !self.exe_matches(&image.exe) {
            return false;
        }
        self.cgroup.is_empty() || self.cgroup.iter().any(|(p, g)| cgroup_match(p, *g, cgroup))
    }

    fn exe_matches(&self, exe: &[u8]) -> bool {
        let name = exe.rsplit(|&b| b == b'/').next().unwrap_or(exe);
        self.exe
            .iter()
            .any(|(p, base)| glob(p, if *base { name } else { exe }))
    }

    pub fn matches(&self, x: &ExitView) -> bool {
        if self.pid_tree.is_some() && !x.in_tree {
            return false;
        }
        if self.failed && x.exit == ExitStatus::Code(0) {
            return false;
        }
        if !self.uids.is_empty() && !self.uids.contains(&x.uid) {
            return false;
        }
        if let Some(min) = self.min_rss_bytes {
            if x.peak_rss_bytes.unwrap_or(0) < min {
                return false;
            }
        }
        if let Some(min) = self.min_runtime_ns {
            if x.runtime_ns().unwrap_or(0) < min {
                return false;
            }
        }
        if !self.comm.is_empty()
            && !self.comm.iter().any(|p| glob(p, x.comm))
            && !self.comm.iter().any(|p| glob(p, x.image.comm.as_bytes()))
        {
            return false;
        }
        if !self.exe.is_empty() && !self.exe_matches(&x.image.exe) {
            return false;
        }
        if !self.cgroup.is_empty()
            && !self
                .cgroup
                .iter()
                .any(|(p, g)| cgroup_match(p, *g, x.cgroup))
        {
            return false;
        }
        true
    }
}

/// The cgroups of `--cgroup` as the kernel names them (id, level), when it can test them all.
fn kernel_cgroups(patterns: &[(String, bool)]) -> Result<Vec<CgroupRef>, String> {
    use std::os::unix::fs::MetadataExt;
    if patterns.len() > FILTER_MAX_CGROUPS {
        return Err(format!("more than {FILTER_MAX_CGROUPS} values"));
    }
    let mount = cgroup2_mount().ok_or("no cgroup2 mount")?;
    let mount = mount.trim_end_matches('/');
    // Levels count from the real root: a mount of a sub-tree (a cgroup namespace) would
    // shift them. The root cgroup's id is 1.
    match std::fs::metadata(format!("{mount}/")) {
        Ok(m) if m.ino() == 1 => {}
        _ => return Err(format!("{mount} is not the cgroup2 root")),
    }
    let mut refs = Vec::new();
    for (path, glob) in patterns {
        if *glob {
            return Err(format!("{path} is a glob"));
        }
        // The level is counted from the path's components: they must be plain names.
        if path.split('/').any(|c| c == "." || c == "..") {
            return Err(format!("{path} has . or .. in it"));
        }
        let meta =
            std::fs::metadata(format!("{mount}{path}")).map_err(|e| format!("{path}: {e}"))?;
        let level = path.split('/').filter(|c| !c.is_empty()).count() as u32;
        refs.push(CgroupRef {
            id: meta.ino(),
            level,
            _pad: 0,
        });
    }
    Ok(refs)
}

/// Why a plain `--cgroup` path can match nothing now, if it cannot: no cgroup2 mount, or no
/// such directory under it.
fn missing_cgroup(path: &str) -> Option<String> {
    let Some(mount) = cgroup2_mount() else {
        return Some("there is no cgroup2 mount, so it matches nothing".into());
    };
    let dir = format!("{}{}", mount.trim_end_matches('/'), path);
    (!std::path::Path::new(&dir).is_dir()).then(|| {
        format!("no such cgroup ({dir} does not exist); it matches nothing until it is created")
    })
}

fn cgroup_match(pattern: &str, is_glob: bool, path: &str) -> bool {
    if is_glob {
        return glob(pattern.as_bytes(), path.as_bytes());
    }
    match path.strip_prefix(pattern) {
        Some(rest) => rest.is_empty() || rest.starts_with('/') || pattern == "/",
        None => pattern == "/",
    }
}

/// A uid, or a user name looked up in the password database.
fn resolve_user(u: &str) -> Result<u32> {
    if let Ok(uid) = u.parse() {
        return Ok(uid);
    }
    match crate::util::nss::uid_of(u) {
        Some(uid) => Ok(uid),
        None => bail!("--uid {u:?}: no such user"),
    }
}

/// Shell-style glob: `*` (any run, '/' included), `?`, `[abc]`, `[a-z]`, `[!x]`, `\` escapes.
pub fn glob(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0, 0);
    // Where to resume after the last '*': (pattern index after it, string index).
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        let step = match pat.get(p) {
            Some(b'*') => {
                star = Some((p + 1, i));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => class(pat, p, s[i]),
            Some(b'\\') if p + 1 < pat.len() => (pat[p + 1] == s[i]).then_some(p + 2),
            Some(&c) => (c == s[i]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                i += 1;
            }
            (None, Some((sp, si))) => {
                p = sp;
                i = si + 1;
                star = Some((sp, si + 1));
            }
            (None, None) => return false,
        }
    }
    pat[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pat[p] == '['`; returns the index after it.
fn class(pat: &[u8], p: usize, c: u8) -> Option<usize> {
    let mut j = p + 1;
    let negate = matches!(pat.get(j), Some(b'!') | Some(b'^'));
    if negate {
        j += 1;
    }
    let mut hit = false;
    let mut first = true;
    while j < pat.len() && (first || pat[j] != b']') {
        first = false;
        let lo = pat[j];
        if pat.get(j + 1) == Some(&b'-') && j + 2 < pat.len() && pat[j + 2] != b']' {
            hit |= (lo..=pat[j + 2]).contains(&c);
            j += 3;
        } else {
            hit |= lo == c;
            j += 1;
        }
    }
    if j >= pat.len() {
        // No closing ']': a literal '['.
        return (c == b'[').then_some(p + 1);
    }
    (hit != negate).then_some(j + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn described_in_words() {
        assert_eq!(
            Filter::default().describe(false),
            "every exit on the system"
        );
        let f = Filter {
            comm: vec![b"make".to_vec(), b"cc".to_vec()],
            cgroup: vec![("/system.slice".into(), false)],
            min_rss_bytes: Some(100 << 20),
            failed: true,
            ..Filter::default()
        };
        assert_eq!(
            f.describe(true),
            "process and thread exits with comm make or cc, cgroup /system.slice (and below), \
             peak RSS at least 100 MiB and a failure (non-zero exit or fatal signal)"
        );
    }

    #[test]
    fn kernel_cgroups_are_ids_and_levels() {
        let root = kernel_cgroups(&[("/".into(), false)]).expect("the cgroup2 root");
        assert_eq!(
            (root[0].id, root[0].level),
            (1, 0),
            "the root cgroup is id 1, level 0"
        );
        let why = kernel_cgroups(&[("/a/../b".into(), false)]).expect_err(".. is refused");
        assert!(why.contains(".."), "{why}");
        let why = kernel_cgroups(&[("/*.slice".into(), true)]).expect_err("a glob");
        assert!(why.contains("glob"), "{why}");
    }

    #[test]
    fn missing_cgroups_are_named() {
        if cgroup2_mount().is_none() {
            assert!(missing_cgroup("/").is_some(), "no mount: nothing matches");
            return;
        }
        assert_eq!(missing_cgroup("/"), None, "the root cgroup exists");
        let why = missing_cgroup("/no-such-cgroup-here").expect("a missing cgroup is flagged");
        assert!(why.contains("does not exist"), "{why}");
    }

    #[test]
    fn ppid_zero_is_unknown_except_for_the_first_pids() {
        use crate::model::exit_view::known_parent;
        assert_eq!(known_parent(4242, 0), None);
        assert_eq!(known_parent(4242, 17), Some(17));
        assert_eq!(known_parent(1, 0), Some(0), "init has no parent");
        assert_eq!(known_parent(2, 0), Some(0), "nor has kthreadd");
    }

    fn g(p: &str, s: &str) -> bool {
        glob(p.as_bytes(), s.as_bytes())
    }

    #[test]
    fn globs() {
        assert!(g("*", ""));
        assert!(g("sh", "sh"));
        assert!(!g("sh", "bash"));
        assert!(g("*sh", "bash"));
        assert!(g("py*3*", "python3.11"));
        assert!(g("/usr/*/cc1", "/usr/lib/gcc/x86_64-linux-gnu/12/cc1"));
        assert!(!g("/usr/*/cc1", "/usr/lib/cc1plus"));
        assert!(g("a?c", "abc"));
        assert!(!g("a?c", "ac"));
        assert!(g("[a-c]x", "bx"));
        assert!(!g("[!a-c]x", "bx"));
        assert!(g("[]]", "]"));
        assert!(g("\\*", "*"));
        assert!(!g("\\*", "x"));
        assert!(g("*a*b*c", "xxaybzzc"));
        assert!(!g("*a*b*c", "xxaybzz"));
        assert!(g("[", "["));
    }

    #[test]
    fn cgroup_paths() {
        assert!(cgroup_match("/system.slice", false, "/system.slice"));
        assert!(cgroup_match(
            "/system.slice",
            false,
            "/system.slice/cron.service"
        ));
        assert!(!cgroup_match("/system.slice", false, "/system.slice2"));
        assert!(cgroup_match("/", false, "/user.slice"));
        assert!(cgroup_match(
            "/*/cron.service",
            true,
            "/system.slice/cron.service"
        ));
        assert!(!cgroup_match("/*.service", true, "/system.slice"));
    }

    #[test]
    fn users() {
        assert_eq!(resolve_user("0").expect("uid"), 0);
        assert_eq!(resolve_user("root").expect("root exists"), 0);
        assert!(resolve_user("no-such-user-spacetime").is_err());
    }
}
