//! Users and groups by name, from the system's user database: every source it is configured
//! with (files, LDAP, SSSD, systemd's), not only /etc/passwd and /etc/group.
//!
//! The release binary is linked against musl, whose lookups read those two files alone (and
//! nscd). Where the system's glibc is installed, its `getent` answers from every source in
//! nsswitch.conf; musl's own lookup answers where there is no glibc (a musl system, whose
//! database is those files). A glibc build asks its own NSS.

use std::{ffi::CString, path::Path, process::Command};

/// glibc's command-line view of the databases (Debian: libc-bin, Essential).
const GETENT: &str = "/usr/bin/getent";

/// Whether lookups go through `getent`: a musl build on a system that has it.
fn through_getent() -> bool {
    cfg!(target_env = "musl") && Path::new(GETENT).exists()
}

/// What `getent DATABASE KEY` prints, when it found KEY (exit status 0). The key is one
/// argument: no shell sees it.
fn getent(database: &str, key: &str) -> Option<String> {
    let out = Command::new(GETENT)
        .args([database, "--", key])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The uid of user `name`, if the database has one.
pub fn uid_of(name: &str) -> Option<u32> {
    match through_getent() {
        true => getent_uid_of(name),
        false => libc_uid_of(name),
    }
}

fn getent_uid_of(name: &str) -> Option<u32> {
    getent("passwd", name).and_then(|line| passwd_uid(&line, name))
}

/// The uid field of the `getent passwd` line for `name`.
fn passwd_uid(text: &str, name: &str) -> Option<u32> {
    let line = text.lines().next()?;
    let mut f = line.split(':');
    (f.next()? == name).then_some(())?;
    f.nth(1)?.parse().ok()
}

fn libc_uid_of(name: &str) -> Option<u32> {
    let name = CString::new(name).ok()?;
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    // SAFETY: passwd is plain C data (integers and pointers): all-zero is a value.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the buffer outlives the result's use.
    let r = unsafe {
        libc::getpwnam_r(
            name.as_ptr(),
            &mut pw,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    (r == 0 && !found.is_null()).then_some(pw.pw_uid)
}

/// User `name`'s groups: `gid` first, then the supplementary groups the database gives them
/// (what `initgroups` would set). An unknown user has `gid` alone.
pub fn groups_of(name: &str, gid: u32) -> Vec<u32> {
    let extra = match through_getent() {
        true => getent_groups(name),
        false => libc_group_list(name, gid),
    };
    let mut groups = vec![gid];
    groups.extend(extra.into_iter().filter(|&g| g != gid));
    groups
}

fn getent_groups(name: &str) -> Vec<u32> {
    getent("initgroups", name)
        .map(|t| initgroups_gids(&t))
        .unwrap_or_default()
}

/// The gids of a `getent initgroups` line: the name, then the supplementary gids.
fn initgroups_gids(text: &str) -> Vec<u32> {
    let line = text.lines().next().unwrap_or("");
    line.split_whitespace()
        .skip(1)
        .filter_map(|g| g.parse().ok())
        .collect()
}

fn libc_group_list(name: &str, gid: u32) -> Vec<u32> {
    let Ok(name) = CString::new(name) else {
        return Vec::new();
    };
    let mut n: libc::c_int = 64;
    loop {
        let mut groups = vec![0 as libc::gid_t; n as usize];
        let mut count = n;
        // SAFETY: buffer of `count` gids; getgrouplist updates count.
        let r = unsafe { libc::getgrouplist(name.as_ptr(), gid, groups.as_mut_ptr(), &mut count) };
        if r >= 0 {
            groups.truncate(count.max(0) as usize);
            return groups;
        }
        if count <= n || count > 65536 {
            return Vec::new();
        }
        n = count;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getent_lines() {
        let line = "alice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\n";
        assert_eq!(passwd_uid(line, "alice"), Some(1000));
        assert_eq!(passwd_uid(line, "alic"), None, "another user's line");
        assert_eq!(passwd_uid("", "alice"), None);
        assert_eq!(passwd_uid("alice:x:notanumber:1", "alice"), None);
        assert_eq!(
            initgroups_gids("alice                 27 100 1001\n"),
            vec![27, 100, 1001]
        );
        assert_eq!(
            initgroups_gids("root                 \n"),
            Vec::<u32>::new()
        );
    }

    /// Against the system's own answer, both ways (each is called directly too, whichever
    /// libc the test is built with): root is uid 0 and in group 0; a name no system has is no
    /// one, with its primary group alone.
    #[test]
    fn the_database_answers() {
        assert_eq!(uid_of("root"), Some(0));
        assert_eq!(libc_uid_of("root"), Some(0));
        assert_eq!(uid_of("no-such-user-spacetime"), None);
        assert_eq!(libc_uid_of("no-such-user-spacetime"), None);
        assert_eq!(groups_of("root", 0)[0], 0);
        assert_eq!(groups_of("no-such-user-spacetime", 4242), vec![4242]);
        if Path::new(GETENT).exists() {
            assert_eq!(getent_uid_of("root"), Some(0));
            assert_eq!(getent_uid_of("no-such-user-spacetime"), None);
            assert_eq!(getent_groups("no-such-user-spacetime"), Vec::<u32>::new());
        }
    }

    /// Both ways agree with `id -G` (coreutils on glibc: every NSS source) for the users of
    /// this machine.
    #[test]
    fn groups_match_id() {
        let Ok(passwd) = std::fs::read_to_string("/etc/passwd") else {
            return;
        };
        for line in passwd.lines().take(40) {
            let f: Vec<&str> = line.split(':').collect();
            let (Some(name), Some(gid)) = (f.first(), f.get(3).and_then(|g| g.parse().ok())) else {
                continue;
            };
            let Ok(out) = Command::new("id").args(["-G", "--", name]).output() else {
                return;
            };
            if !out.status.success() {
                continue;
            }
            let mut want: Vec<u32> = String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect();
            want.sort_unstable();
            want.dedup();
            let mut ways = vec![("libc", libc_group_list(name, gid))];
            if Path::new(GETENT).exists() {
                let mut g = vec![gid];
                g.extend(getent_groups(name));
                ways.push(("getent", g));
            }
            for (way, mut got) in ways {
                got.sort_unstable();
                got.dedup();
                assert_eq!(got, want, "the groups of {name} ({way})");
            }
        }
    }
}
