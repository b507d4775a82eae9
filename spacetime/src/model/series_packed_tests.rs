use super::*;

/// The same updates on a packed series and a plain one give the same points.
fn same(updates: &[(bool, Point)], cap: usize) -> PackedSeries {
    let mut packed = PackedSeries::default();
    let mut plain = Series::default();
    for &(insert, p) in updates {
        if insert {
            packed.insert(p, cap);
            plain.insert(p, cap);
        } else {
            packed.push(p, cap);
            plain.push(p, cap);
        }
        assert_eq!(packed.points().as_ref(), plain.points(), "after {p:?}");
        assert_eq!(packed.len(), plain.len());
        assert_eq!(packed.last(), plain.last());
    }
    packed
}

fn pt(ts_ns: u64, bytes: u64) -> Point {
    Point::new(ts_ns, bytes)
}

#[test]
fn a_short_series_stays_packed_and_reads_back_exactly() {
    let s = same(
        &[
            (true, pt(5_000_000_000_000, 94_208)),
            (true, pt(5_000_000_046_289, 516_096)),
            (false, pt(5_000_000_060_000, 0)),
        ],
        16,
    );
    assert!(matches!(s.0, Repr::Packed { len, .. } if len < 20), "{s:?}");
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
    );
}

#[test]
fn a_long_series_leaves_its_packing_and_is_compacted_like_a_plain_one() {
    let updates: Vec<(bool, Point)> = (0..200u64)
        .map(|i| (i % 3 == 0, pt(1_000 + i * 977, (i % 17 + 1) * 4096 * 1000)))
        .collect();
    let s = same(&updates, 16);
    assert!(matches!(s.0, Repr::Full(_)), "{s:?}");
    let mut packed = PackedSeries::default();
    let mut plain = Series::default();
    for i in 0..6 {
        packed.push(pt(i, i * 4096), 16);
        plain.push(pt(i, i * 4096), 16);
    }
    packed.compact();
    plain.compact();
    assert_eq!(packed.points().as_ref(), plain.points());
}

#[test]
fn an_exec_sized_series_stays_packed_on_the_heap() {
    // A `/bin/true` exec's nine points, as a storm records them: past the room in place.
    let updates: Vec<(bool, Point)> = [
        (24_034_921, 339_968),
        (28_101_029, 540_672),
        (28_272_672, 16_384),
        (29_078_514, 233_472),
        (29_166_166, 319_488),
        (29_197_222, 446_464),
        (29_287_164, 970_752),
        (29_311_971, 1_146_880),
        (29_333_144, 0),
    ]
    .iter()
    .map(|&(t, b)| (true, pt(5_000_000_000_000 + t, b)))
    .collect();
    let s = same(&updates, 4096);
    assert!(matches!(&s.0, Repr::Heap(b) if b.len() <= 48), "{s:?}");
    // Past HEAP_POINTS: a plain series, the same points.
    let many: Vec<(bool, Point)> = (0..HEAP_POINTS as u64 + 1)
        .map(|i| (false, pt(1_000 + i * 1_000_000, (i + 1) * 4096)))
        .collect();
    assert!(matches!(same(&many, 4096).0, Repr::Full(_)));
}
