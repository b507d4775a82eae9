//! The tests' view of /proc: which process descends from which, running what.

use std::collections::BTreeMap;

/// (ppid, argv) of every process in /proc.
fn proc_table() -> BTreeMap<i32, (i32, Vec<String>)> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // "pid (comm) state ppid …"; comm may contain spaces and parens.
        let Some(ppid) = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let argv = std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|s| !s.is_empty())
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        out.insert(pid, (ppid, argv));
    }
    out
}

/// The pid of a descendant of `ancestor` whose command line is exactly `argv` (it has exec'd
/// it), if one runs now.
pub(crate) fn find_descendant(ancestor: i32, argv: &[&str]) -> Option<i32> {
    let table = proc_table();
    table.iter().find_map(|(&pid, (_, args))| {
        if args.len() != argv.len() || args.iter().zip(argv).any(|(a, b)| a != b) {
            return None;
        }
        let mut p = pid;
        for _ in 0..64 {
            match table.get(&p) {
                Some(&(pp, _)) if pp == ancestor => return Some(pid),
                Some(&(pp, _)) if pp > 1 => p = pp,
                _ => break,
            }
        }
        None
    })
}
