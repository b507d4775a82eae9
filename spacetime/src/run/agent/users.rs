//! Whose limits a client counts against. A person may run processes under more uids than
//! their own: the subordinate uids /etc/subuid gives them (for user namespaces, rootless
//! containers), each of which connects to the agent as a uid of its own. The agent counts
//! those uids against the person they were given to (the *principal*), so that subordinate
//! uids do not multiply anyone's connections, sessions, watches, queue or share of the
//! tracking map. A uid in no range is its own principal; root (0) is not limited.
//!
//! Only /etc/subuid is read (the ranges a person can actually switch into without root);
//! uids a person can reach otherwise (setuid helpers of their own, other ids the admin
//! gave them) are not known to the agent and count as other people.

use std::{
    path::PathBuf,
    time::{Duration, Instant, SystemTime},
};

/// A range of subordinate uids and the uid of the person it was given to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u32,
    count: u32,
    owner: u32,
}

/// Parses /etc/subuid (`NAME-OR-UID:START:COUNT` per line); `uid_of` resolves a name.
fn parse_subuid(text: &str, uid_of: impl Fn(&str) -> Option<u32>) -> Vec<Range> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut f = l.trim().split(':');
            let who = f.next()?;
            let start = f.next()?.parse().ok()?;
            let count = f.next()?.parse().ok()?;
            let owner = who.parse().ok().or_else(|| uid_of(who))?;
            Some(Range {
                start,
                count,
                owner,
            })
        })
        .collect()
}

/// How often /etc/subuid is looked at again (its modification time) at most.
const RECHECK: Duration = Duration::from_secs(2);

/// The principals.
pub(super) struct Users {
    path: PathBuf,
    ranges: Vec<Range>,
    modified: Option<SystemTime>,
    checked: Option<Instant>,
}

impl Users {
    pub fn new() -> Users {
        Users::from_file("/etc/subuid".into())
    }

    fn from_file(path: PathBuf) -> Users {
        Users {
            path,
            ranges: Vec::new(),
            modified: None,
            checked: None,
        }
    }

    /// The person `uid` counts as.
    pub fn principal(&mut self, uid: u32) -> u32 {
        if uid == 0 {
            return 0;
        }
        self.reload();
        self.ranges
            .iter()
            .find(|r| uid >= r.start && uid - r.start < r.count)
            .map_or(uid, |r| r.owner)
    }

    fn reload(&mut self) {
        if self.checked.is_some_and(|t| t.elapsed() < RECHECK) {
            return;
        }
        self.checked = Some(Instant::now());
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok();
        if modified == self.modified {
            return;
        }
        self.modified = modified;
        self.ranges = std::fs::read_to_string(&self.path)
            .map(|t| parse_subuid(&t, crate::util::nss::uid_of))
            .unwrap_or_default();
        log::debug!("{} subordinate uid ranges", self.ranges.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subordinate_uids_count_as_their_owner() {
        let dir = std::env::temp_dir().join(format!("spacetime-subuid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let file = dir.join("subuid");
        std::fs::write(&file, "1000:100000:65536\nroot:200000:10\n# c\nbad line\n").expect("write");
        let mut u = Users::from_file(file);
        assert_eq!(u.principal(100_000), 1000);
        assert_eq!(u.principal(165_535), 1000);
        assert_eq!(u.principal(165_536), 165_536, "past the range");
        assert_eq!(u.principal(200_005), 0, "a name, resolved");
        assert_eq!(u.principal(1000), 1000);
        assert_eq!(u.principal(0), 0);
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}
