//! Decoder tests on synthetic messages: version handling, malformed input, fuzzing.

use super::decode::{
    TASKSTATS_CMD_NEW, TASKSTATS_TYPE_AGGR_PID, TASKSTATS_TYPE_NULL, TASKSTATS_TYPE_PID,
    TASKSTATS_TYPE_STATS, TASKSTATS_TYPE_TGID,
};
use super::netlink::{GENL_ID_CTRL, NLMSG_ERROR};
use super::record::layout as off;
use super::tests_support::*;
use super::*;

fn parse_one_record(version: u16, size: usize) -> TaskstatsRecord {
    let msg = exit_msg(&[aggr(
        RecordKind::Pid,
        4242,
        &stats_image(version, size),
        false,
    )]);
    let (recs, st) = parse(&msg);
    assert_eq!(st.parse_errors, 0, "version {version} size {size}");
    assert_eq!(recs.len(), 1);
    recs.into_iter().next().unwrap()
}

fn assert_common_fields(r: &TaskstatsRecord) {
    assert_eq!(r.kind, RecordKind::Pid);
    assert_eq!(r.id, 4242);
    assert_eq!(r.ac_exitcode, 7 << 8);
    assert_eq!(r.exit_code(), Some(7));
    assert_eq!(r.ac_flag, flags::AFORK | flags::AGROUP);
    assert_eq!(r.ac_nice, -5);
    assert_eq!(r.ac_sched, 1);
    assert_eq!(r.ac_comm, "worker");
    assert_eq!(
        (r.ac_uid, r.ac_gid, r.ac_pid, r.ac_ppid),
        (1000, 100, 4242, 4000)
    );
    assert_eq!(r.ac_btime, 1_700_000_000);
    assert_eq!(r.cpu_count, tag(off::CPU_COUNT));
    assert_eq!(r.cpu_delay_total, tag(off::CPU_DELAY_TOTAL));
    assert_eq!(r.blkio_count, tag(off::BLKIO_COUNT));
    assert_eq!(r.blkio_delay_total, tag(off::BLKIO_DELAY_TOTAL));
    assert_eq!(r.swapin_count, tag(off::SWAPIN_COUNT));
    assert_eq!(r.swapin_delay_total, tag(off::SWAPIN_DELAY_TOTAL));
    assert_eq!(r.cpu_run_real_total, tag(off::CPU_RUN_REAL_TOTAL));
    assert_eq!(r.cpu_run_virtual_total, tag(off::CPU_RUN_VIRTUAL_TOTAL));
    assert_eq!(r.ac_etime_us, tag(off::AC_ETIME));
    assert_eq!(r.ac_utime_us, tag(off::AC_UTIME));
    assert_eq!(r.ac_stime_us, tag(off::AC_STIME));
    assert_eq!(r.ac_minflt, tag(off::AC_MINFLT));
    assert_eq!(r.ac_majflt, tag(off::AC_MAJFLT));
    assert_eq!(r.coremem, tag(off::COREMEM));
    assert_eq!(r.virtmem, tag(off::VIRTMEM));
    assert_eq!(r.hiwater_rss_kib, tag(off::HIWATER_RSS));
    assert_eq!(r.hiwater_vm_kib, tag(off::HIWATER_VM));
    assert_eq!(r.read_char, tag(off::READ_CHAR));
    assert_eq!(r.write_char, tag(off::WRITE_CHAR));
    assert_eq!(r.read_syscalls, tag(off::READ_SYSCALLS));
    assert_eq!(r.write_syscalls, tag(off::WRITE_SYSCALLS));
}

#[test]
fn taskstats_parse_v16_every_field_at_its_offset() {
    for version in [16, 15] {
        let r = parse_one_record(version, 560);
        assert_eq!(r.version, version);
        assert_common_fields(&r);
        assert_eq!(r.read_bytes, Some(tag(off::READ_BYTES)));
        assert_eq!(r.write_bytes, Some(tag(off::WRITE_BYTES)));
        assert_eq!(
            r.cancelled_write_bytes,
            Some(tag(off::CANCELLED_WRITE_BYTES))
        );
        assert_eq!(r.nvcsw, Some(tag(off::NVCSW)));
        assert_eq!(r.nivcsw, Some(tag(off::NIVCSW)));
        assert_eq!(r.ac_utimescaled, Some(tag(off::AC_UTIMESCALED)));
        assert_eq!(r.ac_stimescaled, Some(tag(off::AC_STIMESCALED)));
        assert_eq!(
            r.cpu_scaled_run_real_total,
            Some(tag(off::CPU_SCALED_RUN_REAL_TOTAL))
        );
        assert_eq!(r.freepages_count, Some(tag(off::FREEPAGES_COUNT)));
        assert_eq!(
            r.freepages_delay_total,
            Some(tag(off::FREEPAGES_DELAY_TOTAL))
        );
        assert_eq!(r.thrashing_count, Some(tag(off::THRASHING_COUNT)));
        assert_eq!(
            r.thrashing_delay_total,
            Some(tag(off::THRASHING_DELAY_TOTAL))
        );
        assert_eq!(r.ac_btime64, Some(tag(off::AC_BTIME64)));
        assert_eq!(r.compact_count, Some(tag(off::COMPACT_COUNT)));
        assert_eq!(r.compact_delay_total, Some(tag(off::COMPACT_DELAY_TOTAL)));
        assert_eq!(r.ac_tgid, Some(4242));
        assert_eq!(r.ac_tgetime, Some(tag(off::AC_TGETIME)));
        assert_eq!(r.ac_exe_dev, Some(tag(off::AC_EXE_DEV)));
        assert_eq!(r.ac_exe_inode, Some(tag(off::AC_EXE_INODE)));
        assert_eq!(r.wpcopy_count, Some(tag(off::WPCOPY_COUNT)));
        assert_eq!(r.wpcopy_delay_total, Some(tag(off::WPCOPY_DELAY_TOTAL)));
        assert_eq!(r.irq_count, Some(tag(off::IRQ_COUNT)));
        assert_eq!(r.irq_delay_total, Some(tag(off::IRQ_DELAY_TOTAL)));
        let x = r.delay_extremes.expect("max/min since version 15");
        assert_eq!((x.cpu_delay_max, x.cpu_delay_min), (0xE000, 0xE001));
        assert_eq!((x.blkio_delay_max, x.blkio_delay_min), (0xE002, 0xE003));
        assert_eq!((x.swapin_delay_max, x.swapin_delay_min), (0xE004, 0xE005));
        assert_eq!(
            (x.freepages_delay_max, x.freepages_delay_min),
            (0xE006, 0xE007)
        );
        assert_eq!(
            (x.thrashing_delay_max, x.thrashing_delay_min),
            (0xE008, 0xE009)
        );
        assert_eq!((x.compact_delay_max, x.compact_delay_min), (0xE00A, 0xE00B));
        assert_eq!((x.wpcopy_delay_max, x.wpcopy_delay_min), (0xE00C, 0xE00D));
        assert_eq!((x.irq_delay_max, x.irq_delay_min), (0xE00E, 0xE00F));
    }
}

#[test]
fn taskstats_parse_v8_record_has_none_for_newer_fields() {
    let r = parse_one_record(8, 328);
    assert_eq!(r.version, 8);
    assert_common_fields(&r);
    assert_eq!(r.read_bytes, Some(tag(off::READ_BYTES)));
    assert_eq!(r.nvcsw, Some(tag(off::NVCSW)));
    assert_eq!(
        r.cpu_scaled_run_real_total,
        Some(tag(off::CPU_SCALED_RUN_REAL_TOTAL))
    );
    assert_eq!(r.freepages_count, Some(tag(off::FREEPAGES_COUNT)));
    assert_eq!(
        r.freepages_delay_total,
        Some(tag(off::FREEPAGES_DELAY_TOTAL))
    );
    assert_eq!(r.thrashing_count, None);
    assert_eq!(r.thrashing_delay_total, None);
    assert_eq!(r.ac_btime64, None);
    assert_eq!(r.compact_count, None);
    assert_eq!(r.ac_tgid, None);
    assert_eq!(r.ac_tgetime, None);
    assert_eq!(r.ac_exe_dev, None);
    assert_eq!(r.ac_exe_inode, None);
    assert_eq!(r.wpcopy_count, None);
    assert_eq!(r.irq_count, None);
    assert_eq!(r.delay_extremes, None);
}

#[test]
fn taskstats_parse_each_version_at_its_minimum_size() {
    for version in 2..=20u16 {
        let size = min_size(version).unwrap();
        let r = parse_one_record(version, size);
        assert_common_fields(&r);
        assert_eq!(r.read_bytes.is_some(), version >= 3);
        assert_eq!(r.nvcsw.is_some(), version >= 4);
        assert_eq!(r.ac_utimescaled.is_some(), version >= 5);
        assert_eq!(r.cpu_scaled_run_real_total.is_some(), version >= 6);
        assert_eq!(r.freepages_count.is_some(), version >= 7);
        assert_eq!(r.thrashing_count.is_some(), version >= 9);
        assert_eq!(r.ac_btime64.is_some(), version >= 10);
        assert_eq!(r.compact_count.is_some(), version >= 11);
        assert_eq!(r.ac_exe_inode.is_some(), version >= 12);
        assert_eq!(r.wpcopy_count.is_some(), version >= 13);
        assert_eq!(r.irq_count.is_some(), version >= 14);
        assert_eq!(r.delay_extremes.is_some(), version >= 15);
        // One byte short of what the version requires: rejected and counted.
        let msg = exit_msg(&[aggr(
            RecordKind::Pid,
            1,
            &stats_image(version, size - 1),
            false,
        )]);
        let (recs, st) = parse(&msg);
        assert!(recs.is_empty(), "version {version}");
        assert_eq!(st.parse_errors, 1);
    }
}

#[test]
fn taskstats_parse_ignores_trailing_bytes_of_newer_kernels() {
    let plain = parse_one_record(16, 560);
    let longer = parse_one_record(16, 560 + 72);
    assert_eq!(plain, longer);
    // A future version: decoded with the newest layout known, version kept as reported.
    let future = parse_one_record(19, 640);
    assert_eq!(future.version, 19);
    assert_eq!(
        TaskstatsRecord {
            version: 16,
            ..future
        },
        plain
    );
}

#[test]
fn taskstats_parse_rejects_version_one_and_zero_without_a_hint() {
    for (version, size) in [(1u16, 560), (0, 300)] {
        let msg = exit_msg(&[aggr(RecordKind::Pid, 1, &stats_image(version, size), false)]);
        let (recs, st) = parse(&msg);
        assert!(recs.is_empty());
        assert_eq!(st.parse_errors, 1, "version {version}");
    }
}

#[test]
fn taskstats_parse_tgid_record_without_version_takes_the_pid_records() {
    let pid = aggr(RecordKind::Pid, 10, &stats_image(14, 432), true);
    let tgid = aggr(RecordKind::Tgid, 9, &stats_image(0, 432), true);
    let (recs, st) = parse(&exit_msg(&[pid, tgid.clone()]));
    assert_eq!(st.parse_errors, 0);
    assert_eq!(recs.len(), 2);
    assert_eq!(
        (recs[1].kind, recs[1].id, recs[1].version),
        (RecordKind::Tgid, 9, 14)
    );
    assert_eq!(recs[1].irq_count, Some(tag(off::IRQ_COUNT)));
    // Alone, the size tells the version.
    let (recs, _) = parse(&exit_msg(&[tgid]));
    assert_eq!(recs[0].version, 14);
    let (recs, _) = parse(&exit_msg(&[aggr(
        RecordKind::Tgid,
        9,
        &stats_image(0, 560),
        false,
    )]));
    assert_eq!(recs[0].version, 16);
}

#[test]
fn taskstats_parse_skips_padding_acks_and_foreign_messages() {
    let mut dgram = Vec::new();
    dgram.extend(nlmsg(NLMSG_ERROR, None, &[0u8; 20])); // an ack
    dgram.extend(nlmsg(GENL_ID_CTRL, Some(1), &nla(1, &FAMILY.to_ne_bytes())));
    dgram.extend(nlmsg(3, None, &[])); // NLMSG_DONE
    let mut body = nla(TASKSTATS_TYPE_NULL, &[]);
    body.extend(aggr(RecordKind::Pid, 5, &stats_image(16, 560), true));
    body.extend(nla(0x77, b"future attribute"));
    body.extend(aggr(RecordKind::Tgid, 5, &stats_image(16, 560), true));
    dgram.extend(nlmsg(FAMILY, Some(TASKSTATS_CMD_NEW), &body));
    dgram.extend(nlmsg(
        FAMILY,
        Some(9),
        &aggr(RecordKind::Pid, 6, &stats_image(16, 560), false),
    ));
    let (recs, st) = parse(&dgram);
    assert_eq!(st.parse_errors, 0);
    assert_eq!(st.kernel_errors, 0);
    assert_eq!(
        recs.iter().map(|r| (r.kind, r.id)).collect::<Vec<_>>(),
        [(RecordKind::Pid, 5), (RecordKind::Tgid, 5)]
    );
    // A real error is counted, not decoded.
    let (recs, st) = parse(&nlmsg(NLMSG_ERROR, None, &(-libc::EPERM).to_ne_bytes()));
    assert!(recs.is_empty());
    assert_eq!((st.kernel_errors, st.parse_errors), (1, 0));
}

#[test]
fn taskstats_parse_malformed_attributes_are_counted() {
    let good = aggr(RecordKind::Pid, 1, &stats_image(16, 560), false);
    // nla_len 0 and 3 at top level, after a good record: record kept, one error.
    for bad_len in [0u16, 3] {
        let mut body = good.clone();
        body.extend_from_slice(&bad_len.to_ne_bytes());
        body.extend_from_slice(&TASKSTATS_TYPE_AGGR_PID.to_ne_bytes());
        let (recs, st) = parse(&exit_msg(&[body]));
        assert_eq!((recs.len(), st.parse_errors), (1, 1), "nla_len {bad_len}");
    }
    // Nested: pid attribute of 2 bytes; missing stats; missing pid.
    let short_pid = nla(
        TASKSTATS_TYPE_AGGR_PID,
        &[
            nla(TASKSTATS_TYPE_PID, &[1, 0]),
            nla(TASKSTATS_TYPE_STATS, &stats_image(16, 560)),
        ]
        .concat(),
    );
    let no_stats = nla(
        TASKSTATS_TYPE_AGGR_PID,
        &nla(TASKSTATS_TYPE_PID, &1u32.to_ne_bytes()),
    );
    let no_pid = nla(
        TASKSTATS_TYPE_AGGR_PID,
        &nla(TASKSTATS_TYPE_STATS, &stats_image(16, 560)),
    );
    let wrong_id = nla(
        TASKSTATS_TYPE_AGGR_PID,
        &[
            nla(TASKSTATS_TYPE_TGID, &1u32.to_ne_bytes()),
            nla(TASKSTATS_TYPE_STATS, &stats_image(16, 560)),
        ]
        .concat(),
    );
    for body in [short_pid, no_stats, no_pid, wrong_id] {
        let (recs, st) = parse(&exit_msg(&[body]));
        assert_eq!((recs.len(), st.parse_errors), (0, 1));
    }
    // Message shorter than its genetlink header.
    let (recs, st) = parse(&nlmsg(FAMILY, None, &[2, 1]));
    assert_eq!((recs.len(), st.parse_errors), (0, 1));
}

#[test]
fn taskstats_parse_every_truncation_of_a_message() {
    let msg = exit_msg(&[
        aggr(RecordKind::Pid, 77, &stats_image(16, 560), false),
        aggr(RecordKind::Tgid, 77, &stats_image(16, 560), false),
    ]);
    assert_eq!(msg.len(), 1172, "the size the kernel sends for pid + tgid");
    check_all_truncations(&msg);
}

#[test]
fn taskstats_parse_fuzz_random_bytes_never_panic() {
    let mut rng = XorShift(0x5EED_1234_ABCD_0001);
    let mut errors = 0;
    for _ in 0..20_000 {
        let len = rng.below(1400);
        let mut buf: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        // Half the time make the headers plausible so the walk gets deeper.
        if len >= 24 && rng.below(2) == 0 {
            buf[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
            buf[4..6].copy_from_slice(&FAMILY.to_ne_bytes());
            buf[16] = TASKSTATS_CMD_NEW;
        }
        let (_, st) = parse(&buf);
        errors += st.parse_errors;
    }
    assert!(
        errors > 5_000,
        "random bytes should mostly be rejected: {errors}"
    );
}

#[test]
fn taskstats_parse_fuzz_mutated_messages_never_panic() {
    let msg = exit_msg(&[
        aggr(RecordKind::Pid, 77, &stats_image(16, 560), true),
        aggr(RecordKind::Tgid, 77, &stats_image(0, 560), true),
    ]);
    fuzz_mutations(&msg, 30_000, 0xC0FF_EE00_D15E_A5E5);
    let v8 = exit_msg(&[aggr(RecordKind::Pid, 1, &stats_image(8, 328), false)]);
    fuzz_mutations(&v8, 10_000, 42);
}

#[test]
fn taskstats_record_exit_status_helpers() {
    let mut r = parse_one_record(16, 560);
    r.ac_exitcode = 0x8b; // SIGSEGV with core
    assert_eq!(
        (r.exit_code(), r.term_signal(), r.core_dumped()),
        (None, Some(11), true)
    );
    r.ac_exitcode = 0;
    assert_eq!(
        (r.exit_code(), r.term_signal(), r.core_dumped()),
        (Some(0), None, false)
    );
    r.ac_exitcode = 255 << 8;
    assert_eq!(r.exit_code(), Some(255));
}
