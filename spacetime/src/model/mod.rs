//! What the records mean: processes and their images ([`process`], [`argv`]), the one store
//! both `trace` and `watch` build from the records ([`reduce`], seen as `trace`'s [`tree`] and
//! `watch`'s [`table`]), CPU as the kernel splits it ([`cputime`]), memory over time
//! ([`memory`], [`timeline`], [`pss`], [`pss_sum`], [`statm`], [`proc_read`]), and every exit matched with its taskstats record
//! ([`matcher`], [`crosscheck`]).

pub(crate) mod argv;
pub(crate) mod children;
pub(crate) mod cores;
pub(crate) mod cpu_segments;
pub(crate) mod cpu_ticks;
pub(crate) mod cputime;
pub(crate) mod critical_path;
pub(crate) mod crosscheck;
pub(crate) mod exit_view;
pub(crate) mod identity;
pub(crate) mod image_mem;
pub(crate) mod key_index;
pub(crate) mod labels;
pub(crate) mod matcher;
pub(crate) mod memory;
pub(crate) mod opt_ns;
pub(crate) mod proc_read;
pub(crate) mod process;
pub(crate) mod pss;
pub(crate) mod pss_sum;
pub(crate) mod reduce;
pub(crate) mod series;
pub(crate) mod series_packed;
pub(crate) mod statm;
pub(crate) mod table;
#[cfg(test)]
mod table_tests;
pub(crate) mod timeline;
pub(crate) mod tree;
mod varint;
