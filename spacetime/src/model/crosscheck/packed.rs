//! Taskstats figures packed as LEB128 varints in one byte buffer. Most of a record's 24
//! figures are small or zero, so a record takes ~30 bytes instead of 192; a 100k-process
//! trace keeps one per exit until the cross-check, and one sum per process after it.

use super::{Delays, ProcessTaskstats};

const FIELDS: usize = 24;

fn fields(s: &ProcessTaskstats) -> [u64; FIELDS] {
    let d = &s.delays;
    [
        s.utime_us,
        s.stime_us,
        s.minflt,
        s.majflt,
        s.nvcsw,
        s.nivcsw,
        s.read_char,
        s.write_char,
        s.read_syscalls,
        s.write_syscalls,
        s.read_bytes,
        s.write_bytes,
        s.hiwater_rss_kib,
        s.hiwater_vm_kib,
        d.cpu_ns,
        d.blkio_ns,
        d.swapin_ns,
        d.reclaim_ns,
        d.thrashing_ns,
        d.compact_ns,
        d.wpcopy_ns,
        d.irq_ns,
        u64::from(s.records),
        s.cancelled_write_bytes,
    ]
}

fn from_fields(f: [u64; FIELDS]) -> ProcessTaskstats {
    ProcessTaskstats {
        utime_us: f[0],
        stime_us: f[1],
        minflt: f[2],
        majflt: f[3],
        nvcsw: f[4],
        nivcsw: f[5],
        read_char: f[6],
        write_char: f[7],
        read_syscalls: f[8],
        write_syscalls: f[9],
        read_bytes: f[10],
        write_bytes: f[11],
        hiwater_rss_kib: f[12],
        hiwater_vm_kib: f[13],
        delays: Delays {
            cpu_ns: f[14],
            blkio_ns: f[15],
            swapin_ns: f[16],
            reclaim_ns: f[17],
            thrashing_ns: f[18],
            compact_ns: f[19],
            wpcopy_ns: f[20],
            irq_ns: f[21],
        },
        records: f[22] as u32,
        cancelled_write_bytes: f[23],
    }
}

/// Appends `s` to `buf`; returns where it starts.
pub fn pack(buf: &mut Vec<u8>, s: &ProcessTaskstats) -> usize {
    let at = buf.len();
    for mut v in fields(s) {
        while v >= 0x80 {
            buf.push(v as u8 | 0x80);
            v >>= 7;
        }
        buf.push(v as u8);
    }
    at
}

/// The figures packed at `at` by [`pack`].
pub fn unpack(buf: &[u8], at: usize) -> ProcessTaskstats {
    let mut f = [0u64; FIELDS];
    let mut bytes = buf[at..].iter();
    for v in &mut f {
        let mut shift = 0;
        for &b in bytes.by_ref() {
            *v |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                break;
            }
        }
    }
    from_fields(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_keeps_every_figure() {
        let mut s = ProcessTaskstats {
            utime_us: u64::MAX,
            minflt: 87,
            read_char: 3072,
            hiwater_rss_kib: 1 << 40,
            records: u32::MAX,
            cancelled_write_bytes: 4096,
            ..ProcessTaskstats::default()
        };
        s.delays.irq_ns = 127;
        s.delays.cpu_ns = 128;
        let mut buf = vec![9];
        let a = pack(&mut buf, &ProcessTaskstats::default());
        let b = pack(&mut buf, &s);
        assert_eq!((a, b), (1, 1 + FIELDS));
        assert_eq!(unpack(&buf, a), ProcessTaskstats::default());
        assert_eq!(unpack(&buf, b), s);
    }
}
