//! Human units: bytes in binary multiples, durations in the unit that keeps 3 digits.

pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

pub fn duration_ns(ns: u64) -> String {
    let v = ns as f64;
    if ns >= 60_000_000_000 {
        let s = ns / 1_000_000_000;
        format!("{}m{:02}s", s / 60, s % 60)
    } else if ns >= 1_000_000_000 {
        format!("{:.2} s", v / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", v / 1e6)
    } else if ns >= 1_000 {
        format!("{:.0} µs", v / 1e3)
    } else {
        format!("{ns} ns")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formatting() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(300 << 20), "300 MiB");
        assert_eq!(duration_ns(1_234_000_000), "1.23 s");
        assert_eq!(duration_ns(45_600_000), "45.6 ms");
        assert_eq!(duration_ns(125_000_000_000), "2m05s");
        assert_eq!(duration_ns(900), "900 ns");
    }
}
