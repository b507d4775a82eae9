//! The per-process taskstats sums, each figure declared once: its name, what one thread's
//! record gives, how two sums combine. The struct, its JSON, merging and packing all follow
//! from that one line, so a figure cannot be packed in one place and read back in another.

use serde::{Deserialize, Serialize};

use super::packed::{How, Value};
use crate::kernel::taskstats::TaskstatsRecord;

/// Declares a struct of summed figures: `field: type = from the record r, How;` per figure.
/// Generates the struct, `of` (one record's figures), `merge` (two sums combined) and the
/// packing (the fields in declaration order, by name).
macro_rules! sums {
    (
        $(#[$m:meta])*
        pub struct $name:ident ($r:ident) {
            $( $(#[$fm:meta])* $field:ident : $ty:ty = $from:expr, $how:ident; )*
        }
    ) => {
        $(#[$m])*
        pub struct $name {
            $( $(#[$fm])* pub $field: $ty, )*
        }

        impl $name {
            /// One record's figures.
            pub(super) fn of($r: &TaskstatsRecord) -> $name {
                $name { $( $field: $from, )* }
            }

            /// Combines another sum into this one (sums add, peaks keep the larger).
            pub(super) fn merge(&mut self, o: &$name) {
                $( Value::combine(&mut self.$field, o.$field, How::$how); )*
            }

            /// Appends the figures to `out`.
            pub(super) fn pack_into(&self, out: &mut Vec<u8>) {
                $( Value::pack(self.$field, out); )*
            }

            /// The figures [`pack_into`](Self::pack_into) wrote.
            pub(super) fn unpack_from(from: &mut std::slice::Iter<'_, u8>) -> $name {
                $name { $( $field: Value::unpack(from), )* }
            }
        }
    };
}

sums! {
    /// Summed taskstats figures of one process (all its threads).
    #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct ProcessTaskstats(r) {
        utime_us: u64 = r.ac_utime_us, Add;
        stime_us: u64 = r.ac_stime_us, Add;
        minflt: u64 = r.ac_minflt, Add;
        majflt: u64 = r.ac_majflt, Add;
        nvcsw: u64 = r.nvcsw.unwrap_or(0), Add;
        nivcsw: u64 = r.nivcsw.unwrap_or(0), Add;
        read_char: u64 = r.read_char, Add;
        write_char: u64 = r.write_char, Add;
        read_syscalls: u64 = r.read_syscalls, Add;
        write_syscalls: u64 = r.write_syscalls, Add;
        read_bytes: u64 = r.read_bytes.unwrap_or(0), Add;
        write_bytes: u64 = r.write_bytes.unwrap_or(0), Add;
        /// Bytes written and then truncated away before reaching storage (what `getrusage`
        /// subtracts from the blocks written).
        cancelled_write_bytes: u64 = r.cancelled_write_bytes.unwrap_or(0), Add;
        /// `hiwater_rss` of the record of the group's last thread, KiB.
        hiwater_rss_kib: u64 = r.hiwater_rss_kib, Max;
        hiwater_vm_kib: u64 = r.hiwater_vm_kib, Max;
        /// RSS integrated over CPU time (`coremem`), MiB·µs; absent from reports written
        /// before it was kept.
        #[serde(skip_serializing_if = "Option::is_none")]
        coremem_mib_us: Option<u64> = Some(r.coremem), Add;
        delays: Delays = Delays::of(r), Add;
        /// Thread records summed.
        records: u32 = 1, Add;
    }
}

sums! {
    /// Delay-accounting totals in nanoseconds (zero when `kernel.task_delayacct` is off).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(default)]
    pub struct Delays(r) {
        cpu_ns: u64 = r.cpu_delay_total, Add;
        blkio_ns: u64 = r.blkio_delay_total, Add;
        swapin_ns: u64 = r.swapin_delay_total, Add;
        reclaim_ns: u64 = r.freepages_delay_total.unwrap_or(0), Add;
        thrashing_ns: u64 = r.thrashing_delay_total.unwrap_or(0), Add;
        compact_ns: u64 = r.compact_delay_total.unwrap_or(0), Add;
        wpcopy_ns: u64 = r.wpcopy_delay_total.unwrap_or(0), Add;
        irq_ns: u64 = r.irq_delay_total.unwrap_or(0), Add;
    }
}

/// Delays are one figure of a process's sums: each of theirs adds up.
impl Value for Delays {
    fn combine(&mut self, o: Delays, _: How) {
        self.merge(&o);
    }

    fn pack(self, out: &mut Vec<u8>) {
        self.pack_into(out);
    }

    fn unpack(from: &mut std::slice::Iter<'_, u8>) -> Delays {
        Delays::unpack_from(from)
    }
}
