//! Truth lines: what each workload process recorded about itself right before it exited.

use super::*;

/// One line of the workload's truth file.
#[derive(Debug, Clone)]
pub struct Truth(pub Value);

impl Truth {
    pub fn mode(&self) -> &str {
        self.0["mode"].as_str().unwrap_or("")
    }

    pub fn int(&self, key: &str) -> i64 {
        self.0[key]
            .as_i64()
            .unwrap_or_else(|| panic!("truth line has no integer {key:?}: {}", self.0))
    }

    pub fn pid(&self) -> i32 {
        self.int("pid") as i32
    }

    pub fn ppid(&self) -> i32 {
        self.int("ppid") as i32
    }

    pub fn str(&self, key: &str) -> &str {
        self.0[key]
            .as_str()
            .unwrap_or_else(|| panic!("truth line has no string {key:?}: {}", self.0))
    }

    pub fn ints(&self, key: &str) -> Vec<i64> {
        self.0[key]
            .as_array()
            .unwrap_or_else(|| panic!("truth line has no array {key:?}: {}", self.0))
            .iter()
            .map(|v| {
                v.as_i64()
                    .unwrap_or_else(|| panic!("truth {key:?} has a non-integer: {}", self.0))
            })
            .collect()
    }

    /// VmHWM in bytes, as the process read it right before exiting/exec'ing.
    pub fn vmhwm_bytes(&self) -> u64 {
        let kib = self.int("vmhwm_kib");
        assert!(kib > 0, "truth line has no VmHWM: {}", self.0);
        kib as u64 * 1024
    }
}

/// The truth lines a workload wrote to `path` (none if it is missing).
pub fn read_truth(path: &Path) -> Vec<Truth> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("read truth file {}: {e}", path.display()),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            Truth(serde_json::from_str(l).unwrap_or_else(|e| {
                panic!("malformed truth line (interleaved writes?): {e}: {l:?}")
            }))
        })
        .collect()
}
