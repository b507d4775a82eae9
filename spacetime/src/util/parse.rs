//! The one spelling of sizes and durations on every command line: `4096`, `64K`, `1.5M`,
//! `2GiB`, `1T` (powers of 1024, case-insensitive, `B`/`iB` optional); `250ms`, `2s`, `1.5m`,
//! `1h`, `100us`, `5ns` (a bare number is seconds). A leaf: it imports nothing of spacetime.

use std::time::Duration;

/// A size in bytes.
pub fn bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim().to_ascii_uppercase();
    let mult: f64 = match unit.strip_suffix("IB").unwrap_or(&unit) {
        "" | "B" => 1.0,
        "K" => (1u64 << 10) as f64,
        "M" => (1u64 << 20) as f64,
        "G" => (1u64 << 30) as f64,
        "T" => (1u64 << 40) as f64,
        _ => return Err(format!("unknown size unit in {s:?} (use K, M, G or T)")),
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a size"))?;
    if !(n >= 0.0 && n.is_finite()) {
        return Err(format!("{s:?} is not a size"));
    }
    Ok((n * mult) as u64)
}

/// A size in bytes from `min` to `max`.
pub fn size_between(s: &str, min: u64, max: u64) -> Result<u64, String> {
    let b = bytes(s)?;
    if b < min || b > max {
        return Err(format!(
            "{s:?} must be between {} and {}",
            crate::util::units::bytes(min),
            crate::util::units::bytes(max)
        ));
    }
    Ok(b)
}

/// A kernel buffer's size (ring buffer, socket buffer): 4 KiB to 1 GiB.
pub fn buffer_size(s: &str) -> Result<u32, String> {
    size_between(s, 4096, 1 << 30).map(|b| b as u32)
}

/// A duration: a number of seconds (`2`, `0.5`), one decimal number and its unit (`1.5m`,
/// `250ms`, `100µs`), or what humantime reads (`1h30m`, `2min 10s`, `1day`).
pub fn duration(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s.trim()) {
        Ok(d) => Ok(d),
        Err(_) => number_and_unit(s),
    }
}

/// One decimal number and its unit (humantime reads whole numbers only).
fn number_and_unit(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| c.is_ascii_alphabetic() || c == 'µ')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let secs: f64 = match unit.trim() {
        "" | "s" | "sec" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "ns" => 1e-9,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        u => {
            return Err(format!(
                "{s:?} is not a duration (e.g. 250ms, 30s, 1.5m, 1h30m; unknown unit {u:?})"
            ))
        }
    };
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration"))?;
    Duration::try_from_secs_f64(n * secs).map_err(|_| format!("{s:?} is not a duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(bytes("4096"), Ok(4096));
        assert_eq!(bytes("64K"), Ok(64 << 10));
        assert_eq!(bytes("64k"), Ok(64 << 10));
        assert_eq!(bytes("64KiB"), Ok(64 << 10));
        assert_eq!(bytes("1.5M"), Ok(3 << 19));
        assert_eq!(bytes("2GiB"), Ok(2 << 30));
        assert_eq!(bytes("1T"), Ok(1 << 40));
        assert_eq!(bytes(" 8 M "), Ok(8 << 20));
        assert_eq!(bytes("512B"), Ok(512));
        assert!(bytes("2X").is_err());
        assert!(bytes("-1").is_err());
        assert!(bytes("M").is_err());
        assert!(bytes("NaNK").is_err());
    }

    #[test]
    fn bounded_sizes() {
        assert_eq!(size_between("4M", 4096, 1 << 30), Ok(4 << 20));
        assert_eq!(size_between("4K", 4096, 1 << 30), Ok(4096));
        assert_eq!(size_between("1G", 4096, 1 << 30), Ok(1 << 30));
        let low = size_between("1", 4096, 1 << 30).unwrap_err();
        assert!(low.contains("between 4.0 KiB and 1.0 GiB"), "{low}");
        assert!(size_between("9G", 4096, 1 << 30).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(duration("100µs"), Ok(Duration::from_micros(100)));
        assert_eq!(duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(duration("1h 30m 15s"), Ok(Duration::from_secs(5415)));
        assert_eq!(duration("2min"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("0.5"), Ok(Duration::from_millis(500)));
        assert!(duration("3 fortnights").is_err());
        assert!(duration("1h30").is_err());
        assert!(duration("-1s").is_err());
    }

    /// Buffer sizes and filter sizes are spelt alike.
    #[test]
    fn buffer_sizes_are_sizes() {
        for s in ["64K", "64KiB", "1.5M", "8m", "1G"] {
            let buffer = buffer_size(s).map(u64::from);
            assert_eq!(buffer, bytes(s), "{s}");
        }
    }
}
