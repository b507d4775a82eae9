//! cgroup v2 ids (from the exit records) to paths: the path the kernel sent the first time
//! the cgroup was seen (a cgroup-name record), else resolved lazily, and cached.
//!
//! A cgroup v2 id is the kernfs node id of its directory; `open_by_handle_at` on the cgroup2
//! mount with a `FILEID_KERNFS` handle opens that directory directly, and the descriptor's
//! /proc/self/fd link names it. One lookup per new cgroup; cgroup ids are never reused, so a
//! cgroup already gone when first seen stays "#id".

use std::{
    ffi::CString,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    sync::Arc,
};

use crate::model::identity::Identity;
use rustc_hash::FxHashMap;

/// `FILEID_KERNFS` (include/linux/exportfs.h).
const FILEID_KERNFS: i32 = 0xfe;
/// Paths cached before the cache is emptied (cgroups come and go on busy machines).
const MAX_CACHED: usize = 8192;

#[repr(C)]
struct KernfsHandle {
    handle_bytes: u32,
    handle_type: i32,
    id: u64,
}

/// A cgroup as exits show it: its path and what the path says about its processes.
#[derive(Debug)]
pub struct Cgroup {
    pub path: Box<str>,
    pub identity: Identity,
}

pub struct Cgroups {
    /// The cgroup2 mount: its directory and its path.
    mount: Option<(OwnedFd, String)>,
    cache: FxHashMap<u64, Arc<Cgroup>>,
    /// Lookups that failed (cgroup gone, no cgroup2 mount).
    pub unresolved: u64,
}

/// Where cgroup2 is mounted, from /proc/self/mountinfo.
pub fn cgroup2_mount() -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        (post.split_whitespace().next()? == "cgroup2")
            .then(|| unescape(pre.split_whitespace().nth(4)?))
            .flatten()
    })
}

/// mountinfo escapes space, tab, newline and backslash as octal `\NNN`.
fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() {
            let oct = std::str::from_utf8(&b[i + 1..i + 4]).ok()?;
            out.push(u8::from_str_radix(oct, 8).ok()?);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl Cgroups {
    pub fn open() -> Cgroups {
        let mount = cgroup2_mount().and_then(|path| {
            let c = CString::new(path.clone()).ok()?;
            // SAFETY: valid C string; the descriptor is owned below.
            let fd = unsafe {
                libc::open(
                    c.as_ptr(),
                    libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
                )
            };
            // SAFETY: a fresh descriptor we own.
            (fd >= 0).then(|| (unsafe { OwnedFd::from_raw_fd(fd) }, path))
        });
        Cgroups {
            mount,
            cache: FxHashMap::default(),
            unresolved: 0,
        }
    }

    /// Whether cgroup paths can be resolved at all.
    pub fn available(&self) -> bool {
        self.mount.is_some()
    }

    /// Cgroup `id`: its path below the cgroup2 root (`/` is the root), or `#id`, and the
    /// identity the path gives (parsed once per cgroup).
    pub fn get(&mut self, id: u64) -> &Arc<Cgroup> {
        if !self.cache.contains_key(&id) {
            if self.cache.len() >= MAX_CACHED {
                self.cache.clear();
            }
            let path = self.resolve(id).unwrap_or_else(|| {
                self.unresolved += 1;
                format!("#{id}")
            });
            let identity = Identity::of(&path);
            let cg = Arc::new(Cgroup {
                path: path.into(),
                identity,
            });
            self.cache.insert(id, cg);
        }
        &self.cache[&id]
    }

    /// The path the kernel read for cgroup `id` while it existed: taken over whatever was
    /// resolved before (`#id` when it was already gone).
    pub fn named(&mut self, id: u64, path: &str) {
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        let cg = Arc::new(Cgroup {
            path: path.into(),
            identity: Identity::of(path),
        });
        self.cache.insert(id, cg);
    }

    fn resolve(&self, id: u64) -> Option<String> {
        let (mount, mount_path) = self.mount.as_ref()?;
        let mut h = KernfsHandle {
            handle_bytes: 8,
            handle_type: FILEID_KERNFS,
            id,
        };
        // SAFETY: the handle is a valid `struct file_handle` with 8 bytes of f_handle.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_by_handle_at,
                mount.as_raw_fd(),
                &mut h as *mut KernfsHandle,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        } as i32;
        if fd < 0 {
            return None;
        }
        // SAFETY: a fresh descriptor we own (closed on drop).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
        let link = link.to_string_lossy();
        let rel = link.strip_prefix(mount_path.as_str())?;
        Some(if rel.is_empty() {
            "/".to_string()
        } else {
            rel.to_string()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_unescape() {
        assert_eq!(unescape("/a\\040b").as_deref(), Some("/a b"));
        assert_eq!(unescape("/plain").as_deref(), Some("/plain"));
    }

    /// Our own cgroup, resolved from its id (the directory's inode number), matches
    /// /proc/self/cgroup.
    #[test]
    fn own_cgroup_resolves() {
        let mut cg = Cgroups::open();
        let Some((_, mount)) = cg.mount.as_ref() else {
            eprintln!("no cgroup2 mount: skipped");
            return;
        };
        let own = std::fs::read_to_string("/proc/self/cgroup").expect("read /proc/self/cgroup");
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup2 line")
            .to_string();
        let dir = format!("{mount}{}", if rel == "/" { "" } else { &rel });
        let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&dir).expect("stat"));
        if !rustix::process::geteuid().is_root() {
            eprintln!("not root (open_by_handle_at needs CAP_DAC_READ_SEARCH): skipped");
            return;
        }
        assert_eq!(&*cg.get(ino).path, rel.as_str());
        assert_eq!(&*cg.get(u64::MAX - 1).path, format!("#{}", u64::MAX - 1));
    }
}
