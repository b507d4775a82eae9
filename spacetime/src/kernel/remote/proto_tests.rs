use super::*;

/// A small deterministic generator: the same inputs on every run, so a failure reproduces.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn samples() -> Vec<Msg> {
    let mm = spacetime_common::MmState {
        tgid: 42,
        peak_pages: 7,
        ..Default::default()
    };
    vec![
        Msg::Hello {
            version: VERSION,
            want: want::TRACE,
            max_processes: 65536,
        },
        Msg::Track,
        Msg::Flush { seq: 9 },
        Msg::Finish { wait_release: true },
        Msg::Finish {
            wait_release: false,
        },
        Msg::Attach {
            pids: vec![1, 4242],
        },
        Msg::Attached {
            pids: vec![4242, 4243],
            attach_ns: 123,
            memory_followed: true,
        },
        Msg::Welcome(Welcome {
            session: 3,
            rss_tracking: true,
            cpu_at_release: true,
            ring_buffer_bytes: 1 << 22,
            load_us: 81_000,
            taskstats_rcvbuf_bytes: 1 << 24,
            taskstats: super::TaskstatsState::Failed,
            taskstats_error: b"no netlink".to_vec(),
            mechanisms: vec![b"raw tracepoints".to_vec(), b"\x1b[31mx\xff".to_vec()],
            sees_uid: 1000,
            cpu_clock: super::CpuClockState::Failed(b"no perf events".to_vec()),
        }),
        Msg::Welcome(Welcome {
            session: 4,
            cpu_clock: super::CpuClockState::Ticking { cpus: 64 },
            ..Welcome::default()
        }),
        Msg::Refused {
            code: super::Refusal::NotProven,
            reason: b"the process is not your child".to_vec(),
        },
        Msg::Tracked {
            kernel_pid: 4242,
            level: 1,
        },
        Msg::Records(vec![vec![1, 2, 3], Vec::new(), vec![0xff; 300]]),
        Msg::Taskstats(vec![vec![7; 600], Vec::new(), vec![1; 40]]),
        Msg::Flushed { seq: 9 },
        Msg::Mms(vec![mm, mm]),
        Msg::End(End {
            counters: KernelCounters {
                ringbuf_lost: 1,
                track_full: 2,
                read_failures: 3,
                filtered: 4,
                reap_full: 5,
                recursion_misses: 6,
                session_limit: 10,
                agent_queue_full: 11,
                stale_cleared: 12,
                agent_gone: 0,
            },
            dropped_records: 7,
            dropped_taskstats: 8,
            taskstats_enobufs: 9,
            tree_rss: spacetime_common::TreeRss {
                peak_pages: 100,
                peak_ts_ns: 5,
                ..Default::default()
            },
        }),
        Msg::Counters(KernelCounters {
            ringbuf_lost: 3,
            filtered: 9,
            ..Default::default()
        }),
        Msg::Shutdown {
            reason: b"stopping".to_vec(),
        },
    ]
}

#[test]
fn every_message_survives_the_trip() {
    for m in samples() {
        let bytes = m.encode();
        assert!(bytes.len() <= MAX_MESSAGE, "{m:?} too large");
        assert_eq!(Msg::parse(&bytes), Ok(m.clone()), "round trip of {m:?}");
    }
}

#[test]
fn truncated_and_extended_messages_are_errors() {
    for m in samples() {
        let bytes = m.encode();
        for cut in 0..bytes.len() {
            assert!(
                Msg::parse(&bytes[..cut]).is_err(),
                "{m:?} cut to {cut} bytes parsed"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            Msg::parse(&longer).is_err(),
            "{m:?} with a byte more parsed"
        );
    }
}

#[test]
fn lying_counts_allocate_nothing() {
    // A records message claiming 2^32-1 records in 9 bytes; mms likewise.
    let mut b = vec![ty::RECORDS];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(&[0; 4]);
    assert!(matches!(Msg::parse(&b), Err(ProtoError::Invalid { .. })));
    let mut b = vec![ty::MMS];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(Msg::parse(&b), Err(ProtoError::Invalid { .. })));
    let mut b = vec![ty::TASKSTATS];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(Msg::parse(&b).is_err());
    assert_eq!(
        Msg::parse(&vec![ty::TRACK; MAX_MESSAGE + 1]),
        Err(ProtoError::TooLarge(MAX_MESSAGE + 1))
    );
    assert_eq!(Msg::parse(&[]), Err(ProtoError::Empty));
    assert_eq!(Msg::parse(&[200]), Err(ProtoError::UnknownType(200)));
}

/// Random bytes, and valid messages with bits flipped, lengths overwritten, cut or
/// extended: the parser returns (a message or an error) for each, and what it returns
/// re-encodes to a message that parses the same.
#[test]
fn fuzzed_messages_never_panic() {
    let mut rng = XorShift(0x5eed_a6e7_0000_0001);
    let valid: Vec<Vec<u8>> = samples().iter().map(Msg::encode).collect();
    let mut parsed = 0;
    for round in 0..200_000 {
        let mut buf = if round % 4 == 0 {
            let n = rng.below(96);
            (0..n).map(|_| rng.next() as u8).collect()
        } else {
            valid[rng.below(valid.len())].clone()
        };
        for _ in 0..1 + rng.below(3) {
            if buf.is_empty() {
                break;
            }
            match rng.below(4) {
                0 => {
                    let i = rng.below(buf.len());
                    buf[i] ^= 1 << rng.below(8);
                }
                1 => {
                    let i = rng.below(buf.len());
                    let v = [0u32, 1, 4, 0xffff, u32::MAX, rng.next() as u32][rng.below(6)];
                    for (k, b) in v.to_le_bytes().iter().enumerate() {
                        if let Some(slot) = buf.get_mut(i + k) {
                            *slot = *b;
                        }
                    }
                }
                2 => buf.truncate(rng.below(buf.len() + 1)),
                _ => buf.extend((0..rng.below(16)).map(|_| rng.next() as u8)),
            }
        }
        if let Ok(m) = Msg::parse(&buf) {
            parsed += 1;
            let again = m.encode();
            assert_eq!(Msg::parse(&again), Ok(m), "re-encoding {buf:?}");
        }
    }
    // The mutations must leave some messages valid, or the test only saw errors.
    assert!(parsed > 1000, "only {parsed} fuzzed messages parsed");
}

/// A batch filled until it refuses an item is one message the other side takes whole, with
/// every item in order.
#[test]
fn a_full_batch_is_one_valid_message() {
    for (mut b, taskstats) in [(Batch::records(), false), (Batch::taskstats(), true)] {
        let mut items = Vec::new();
        let mut rng = XorShift(7);
        loop {
            let item: Vec<u8> = (0..rng.below(700)).map(|_| rng.next() as u8).collect();
            if !b.fits(item.len()) {
                break;
            }
            b.push(&item);
            items.push(item);
        }
        assert_eq!(b.len(), items.len());
        let bytes = b.finish();
        assert!(bytes.len() <= MAX_MESSAGE);
        assert!(
            bytes.len() + 4 + 700 > MAX_MESSAGE,
            "refused while room was left"
        );
        let want = match taskstats {
            true => Msg::Taskstats(items),
            false => Msg::Records(items),
        };
        assert_eq!(Msg::parse(&bytes), Ok(want));
    }
}
