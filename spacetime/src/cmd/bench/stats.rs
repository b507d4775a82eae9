//! Summary statistics and Welch's t-test, shared with `cargo xtask bench`
//! (the `spacetime-stats` crate).

pub use spacetime_stats::{modified_zscores, ratio, welch_p, Stats};
