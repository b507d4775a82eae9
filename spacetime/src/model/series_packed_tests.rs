use super::*;

/// The same updates on a packed series (against `base`) and a plain one give the same points.
fn same(updates: &[(bool, Point)], cap: usize, base: u64) -> PackedSeries {
    let mut packed = PackedSeries::default();
    let mut plain = Series::default();
    for &(insert, p) in updates {
        if insert {
            packed.insert(p, cap, base);
            plain.insert(p, cap);
        } else {
            packed.push(p, cap, base);
            plain.push(p, cap);
        }
        assert_eq!(packed.points(base).as_ref(), plain.points(), "after {p:?}");
        assert_eq!(packed.len(), plain.len());
        assert_eq!(packed.last(base), plain.last());
    }
    packed
}

/// A process's start, as the tests' times since boot have it.
const START: u64 = 5_000_000_000_000;

fn pt(ts_ns: u64, bytes: u64) -> Point {
    Point::new(ts_ns, bytes)
}

#[test]
fn a_short_series_stays_packed_and_reads_back_exactly() {
    let s = same(
        &[
            (true, pt(START + 3_205, 94_208)),
            (true, pt(START + 46_289, 516_096)),
            (false, pt(START + 60_000, 0)),
        ],
        16,
        START,
    );
    // Steps of 2 or 3 bytes from the start, not a time since boot's 7.
    assert!(
        matches!(s.0, Repr::Packed { len, .. } if len <= 13),
        "{s:?}"
    );
}

#[test]
fn odd_values_late_points_and_steps_back_in_time_follow_the_series_rules() {
    same(
        &[
            (false, pt(100, 4097)),
            (true, pt(300, 8192)),
            // Late: goes before the last point.
            (true, pt(200, 12_288)),
            // Earlier than the last: pushed just after it.
            (false, pt(50, 7)),
            // Same time, larger value: kept.
            (true, pt(200, 20_480)),
            (false, pt(u64::MAX - 1, u64::MAX)),
            (false, pt(u64::MAX, 0)),
        ],
        16,
        0,
    );
}

#[test]
fn a_point_before_the_base_leaves_the_packing_with_every_point_kept() {
    let s = same(
        &[
            (true, pt(START + 10, 4096)),
            (true, pt(START - 10, 8192)),
            (false, pt(START + 20, 0)),
        ],
        16,
        START,
    );
    assert!(matches!(s.0, Repr::Full(_)), "{s:?}");
}

#[test]
fn a_long_series_leaves_its_packing_and_is_compacted_like_a_plain_one() {
    let updates: Vec<(bool, Point)> = (0..200u64)
        .map(|i| (i % 3 == 0, pt(1_000 + i * 977, (i % 17 + 1) * 4096 * 1000)))
        .collect();
    let s = same(&updates, 16, 1_000);
    assert!(matches!(s.0, Repr::Full(_)), "{s:?}");
    let mut packed = PackedSeries::default();
    let mut plain = Series::default();
    for i in 0..6 {
        packed.push(pt(START + i, i * 4096), 16, START);
        plain.push(pt(START + i, i * 4096), 16);
    }
    packed.compact(START);
    plain.compact();
    assert_eq!(packed.points(START).as_ref(), plain.points());
}

#[test]
fn an_exec_sized_series_stays_packed_on_the_heap() {
    // A `/bin/true` exec's nine points, as a 100 000-exec storm recorded one (ns after the
    // process's start): past the room in place.
    let updates: Vec<(bool, Point)> = [
        (3_205, 98_304),
        (60_851, 524_288),
        (141_460, 12_288),
        (327_276, 217_088),
        (385_663, 315_392),
        (402_528, 430_080),
        (469_527, 978_944),
        (489_787, 1_155_072),
        (497_479, 0),
    ]
    .iter()
    .map(|&(t, b)| (true, pt(START + t, b)))
    .collect();
    // Against the process's start the nine take a 48-byte heap block; against boot (a first
    // time of 7 bytes) they took a 64-byte one.
    let s = same(&updates, 4096, START);
    assert!(matches!(&s.0, Repr::Heap(b) if b.len() <= 40), "{s:?}");
    // Past HEAP_POINTS: a plain series, the same points.
    let many: Vec<(bool, Point)> = (0..HEAP_POINTS as u64 + 1)
        .map(|i| (false, pt(1_000 + i * 1_000_000, (i + 1) * 4096)))
        .collect();
    assert!(matches!(same(&many, 4096, 0).0, Repr::Full(_)));
}
