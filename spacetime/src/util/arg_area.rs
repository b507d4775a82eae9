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
