//! An argument area (argv as the kernel lays it out: each argument followed by a NUL), kept
//! without its final NUL: the kernel's exec records and /proc/PID/cmdline both give one.

/// The arguments of an argument area kept without its final NUL.
pub fn argv_of(args: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    let n = if args.is_empty() { 0 } else { usize::MAX };
    args.split(|&b| b == 0).take(n)
}

/// An argument area without its final NUL, moved rather than copied.
pub fn area_into_args(mut area: Vec<u8>) -> Box<[u8]> {
    if area.last() == Some(&0) {
        area.pop();
    }
    area.into_boxed_slice()
}

/// An argument area without its final NUL, if any.
pub fn without_final_nul(area: &[u8]) -> &[u8] {
    area.strip_suffix(&[0]).unwrap_or(area)
}

#[cfg(test)]
mod tests {
    fn argv(area: &[u8]) -> Vec<&[u8]> {
        super::argv_of(super::without_final_nul(area)).collect()
    }

    #[test]
    fn argv_splitting() {
        assert_eq!(argv(b"a\0bc\0"), [b"a".as_slice(), b"bc"]);
        assert_eq!(argv(b"a\0\0c\0"), [b"a".as_slice(), b"", b"c"]);
        // An area cut short keeps its last partial argument.
        assert_eq!(argv(b"a\0partial"), [b"a".as_slice(), b"partial"]);
        assert!(argv(b"").is_empty());
        // Bytes that are not UTF-8 stay exact.
        assert_eq!(argv(b"\xff\x9b\0x\0"), [b"\xff\x9b".as_slice(), b"x"]);
    }
}
