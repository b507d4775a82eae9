//! Tests of the BTF reader against blobs built here, plus the live kernel's BTF.

use super::*;

/// A tiny BTF encoder: types get ids 1, 2, ... in the order they are added. Also used by the
/// offsets tests.
pub(crate) struct Enc {
    types: Vec<u8>,
    strs: Vec<u8>,
    next_id: u32,
}

impl Enc {
    pub(crate) fn new() -> Self {
        Enc {
            types: Vec::new(),
            strs: vec![0],
            next_id: 1,
        }
    }

    pub(crate) fn s(&mut self, name: &str) -> u32 {
        if name.is_empty() {
            return 0;
        }
        let off = self.strs.len() as u32;
        self.strs.extend_from_slice(name.as_bytes());
        self.strs.push(0);
        off
    }

    pub(crate) fn words(&mut self, w: &[u32]) {
        for x in w {
            self.types.extend_from_slice(&x.to_ne_bytes());
        }
    }

    pub(crate) fn ty(
        &mut self,
        name: &str,
        kind: Kind,
        kflag: bool,
        vlen: u32,
        size_or_type: u32,
    ) -> u32 {
        let name_off = self.s(name);
        let info = (u32::from(kflag) << 31) | ((kind as u32) << 24) | vlen;
        self.words(&[name_off, info, size_or_type]);
        self.next_id += 1;
        self.next_id - 1
    }

    pub(crate) fn int(&mut self, name: &str, size: u32, bits: u32) -> u32 {
        let id = self.ty(name, Kind::Int, false, 0, size);
        self.words(&[bits]);
        id
    }

    pub(crate) fn modifier(&mut self, kind: Kind, name: &str, target: u32) -> u32 {
        self.ty(name, kind, false, 0, target)
    }

    /// Members are (name, type, bit offset); with `kflag`, (bitfield size << 24 | bit offset).
    pub(crate) fn composite(
        &mut self,
        kind: Kind,
        name: &str,
        kflag: bool,
        size: u32,
        members: &[(&str, u32, u32)],
    ) -> u32 {
        let id = self.ty(name, kind, kflag, members.len() as u32, size);
        for &(n, t, off) in members {
            let n = self.s(n);
            self.words(&[n, t, off]);
        }
        id
    }

    pub(crate) fn array(&mut self, elem: u32, index: u32, nelems: u32) -> u32 {
        let id = self.ty("", Kind::Array, false, 0, 0);
        self.words(&[elem, index, nelems]);
        id
    }

    pub(crate) fn enum32(&mut self, name: &str, signed: bool, vals: &[(&str, i32)]) -> u32 {
        let id = self.ty(name, Kind::Enum, signed, vals.len() as u32, 4);
        for &(n, v) in vals {
            let n = self.s(n);
            self.words(&[n, v as u32]);
        }
        id
    }

    pub(crate) fn enum64(&mut self, name: &str, vals: &[(&str, u64)]) -> u32 {
        let id = self.ty(name, Kind::Enum64, false, vals.len() as u32, 8);
        for &(n, v) in vals {
            let n = self.s(n);
            self.words(&[n, v as u32, (v >> 32) as u32]);
        }
        id
    }

    pub(crate) fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&0xeb9fu16.to_ne_bytes());
        out.extend_from_slice(&[1, 0]);
        let tl = self.types.len() as u32;
        for w in [24, 0, tl, tl, self.strs.len() as u32] {
            out.extend_from_slice(&w.to_ne_bytes());
        }
        out.extend_from_slice(&self.types);
        out.extend_from_slice(&self.strs);
        out
    }

    /// A plain struct; members are (name, type, byte offset).
    pub(crate) fn strukt(&mut self, name: &str, size: u32, members: &[(&str, u32, u32)]) -> u32 {
        let bits: Vec<_> = members.iter().map(|&(n, t, o)| (n, t, o * 8)).collect();
        self.composite(Kind::Struct, name, false, size, &bits)
    }
}

/// A blob exercising every kind and the lookup corner cases.
fn sample() -> Vec<u8> {
    let mut e = Enc::new();
    let int = e.int("int", 4, 32);
    let long = e.int("long", 8, 64);
    // typedef -> volatile -> typedef -> int
    let s64 = e.modifier(Kind::Typedef, "s64", long);
    let vol = e.modifier(Kind::Volatile, "", s64);
    let vs64 = e.modifier(Kind::Typedef, "vs64_t", vol);
    let inner = e.composite(
        Kind::Struct,
        "inner",
        false,
        16,
        &[("a", int, 0), ("b", s64, 64)],
    );
    let inner_t = e.modifier(Kind::Typedef, "inner_t", inner);
    let c_inner = e.modifier(Kind::Const, "", inner_t);
    let anon_s = e.composite(
        Kind::Struct,
        "",
        false,
        16,
        &[("hw", long, 0), ("deep_x", int, 64)],
    );
    let anon_u = e.composite(
        Kind::Union,
        "",
        false,
        16,
        &[("u1", long, 0), ("", anon_s, 0)],
    );
    let tt = e.modifier(Kind::TypeTag, "percpu", anon_u);
    let arr = e.array(inner, int, 4);
    e.enum32(
        "cnt",
        true,
        &[("A_FILE", 0), ("A_ANON", 1), ("A_SHM", 3), ("NEG", -5)],
    );
    e.enum32("uns", false, &[("BIGU", -1)]);
    e.enum64("big", &[("BIG", 1 << 40)]);
    let ptr = e.modifier(Kind::Ptr, "", inner);
    let rptr = e.modifier(Kind::Restrict, "", ptr);
    let int_arr = e.array(int, int, 3);
    e.composite(
        Kind::Struct,
        "outer",
        false,
        160,
        &[
            ("x", int, 0),
            ("in", c_inner, 64),
            ("", tt, 192),
            ("arr", arr, 320),
            ("v", vs64, 832),
            ("p", rptr, 896),
            ("ints", int_arr, 960),
        ],
    );
    e.composite(
        Kind::Struct,
        "bits",
        true,
        12,
        &[
            ("f1", int, 3 << 24),
            ("f2", int, 32),
            ("f3", int, (5 << 24) | 64),
        ],
    );
    let u3 = e.int("u3", 4, 3);
    e.composite(
        Kind::Struct,
        "oldbits",
        false,
        8,
        &[("o1", u3, 0), ("odd", int, 36)],
    );
    // The remaining kinds, so that parsing walks over each one's extra data.
    let proto = e.ty("", Kind::FuncProto, false, 2, int);
    let (n1, n2) = (e.s("a"), e.s("b"));
    e.words(&[n1, int, n2, long]);
    let func = e.modifier(Kind::Func, "do_it", proto);
    let pproto = e.modifier(Kind::Ptr, "", proto);
    e.modifier(Kind::Typedef, "btf_trace_foo", pproto);
    let var = e.ty("some_var", Kind::Var, false, 0, int);
    e.words(&[1]);
    e.ty(".data", Kind::Datasec, false, 1, 4);
    e.words(&[var, 0, 4]);
    e.ty("tag", Kind::DeclTag, false, 0, func);
    e.words(&[u32::MAX]);
    e.ty("double", Kind::Float, false, 0, 8);
    e.ty("fwd_only", Kind::Fwd, false, 0, 0);
    e.build()
}

fn sample_btf() -> Btf {
    Btf::parse(sample()).expect("sample parses")
}

#[test]
fn btf_kind_numbers_match_the_spec() {
    for k in 1..=19 {
        assert_eq!(Kind::from_raw(k).map(|k| k as u32), Some(k));
    }
    assert_eq!(Kind::from_raw(0), None);
    assert_eq!(Kind::from_raw(20), None);
    assert_eq!(Kind::from_raw(u32::MAX), None);
}

#[test]
fn btf_offsets_through_anonymous_members_and_modifiers() {
    let b = sample_btf();
    let off = |p| b.member_offset("outer", p).unwrap();
    assert_eq!(off("x"), 0);
    assert_eq!(off("in"), 8);
    assert_eq!(off("in.a"), 8);
    assert_eq!(off("in.b"), 16); // through const -> typedef
    assert_eq!(off("u1"), 24); // inside an anonymous union behind a type tag
    assert_eq!(off("hw"), 24); // anonymous struct inside that union
    assert_eq!(off("deep_x"), 32);
    assert_eq!(off("arr"), 40);
    assert_eq!(off("v"), 104);
    assert_eq!(off("p"), 112);
    assert_eq!(b.member_offset("inner", "b").unwrap(), 8);
    assert!(b.has_member("outer", "deep_x"));
    assert!(!b.has_member("outer", "nope"));
    assert!(!b.has_member("nosuch", "x"));
}

#[test]
fn btf_lookup_errors_name_the_problem() {
    let b = sample_btf();
    let err = b.member_offset("outer", "in.nope").unwrap_err();
    assert!(
        matches!(&err, BtfError::NoSuchMember { ty, member } if ty == "outer.in" && member == "nope")
    );
    assert_eq!(err.to_string(), "outer.in has no member nope");
    assert_eq!(
        b.member_offset("outer", "x.y").unwrap_err().to_string(),
        "outer.x is not a struct or union, so it has no member y"
    );
    // Pointers are not followed: the member path stays within one object.
    assert!(matches!(
        b.member_offset("outer", "p.a"),
        Err(BtfError::NotComposite { .. })
    ));
    assert!(matches!(
        b.member_offset("nosuch", "x"),
        Err(BtfError::NoSuchType(_))
    ));
    // Anonymous members are reachable only by their members' names.
    assert!(b.member_offset("outer", "").is_err());
    assert!(b.member_offset("outer", "x.").is_err());
    // A typedef is not a struct.
    assert!(b.struct_id("inner_t").is_err());
    assert!(b.struct_id("inner").is_ok());
}

#[test]
fn btf_member_types_and_sizes() {
    let b = sample_btf();
    let arr = b.member_type("outer", "arr").unwrap();
    assert_eq!(
        arr,
        MemberType {
            offset: 40,
            kind: Kind::Array,
            name: "inner",
            elem_kind: Kind::Struct,
            array_len: 4,
            elem_size: 16,
        }
    );
    let ints = b.member_type("outer", "ints").unwrap();
    assert_eq!(
        (ints.elem_kind, ints.name, ints.array_len),
        (Kind::Int, "int", 3)
    );
    assert_eq!(
        b.member_type_name("outer", "in").unwrap(),
        (Kind::Struct, "inner".to_string())
    );
    let v = b.member_type("outer", "v").unwrap();
    assert_eq!((v.kind, v.name, v.elem_size), (Kind::Int, "long", 8));
    assert_eq!(b.member_type("outer", "p").unwrap().kind, Kind::Ptr);
    assert_eq!(b.size_of("outer").unwrap(), 160);
    assert_eq!(b.size_of("inner_t").unwrap(), 16);
    assert_eq!(b.size_of("vs64_t").unwrap(), 8);
    assert_eq!(b.size_of("cnt").unwrap(), 4);
    assert!(matches!(b.size_of("nosuch"), Err(BtfError::NoSuchType(_))));
    let arr_id = b.struct_id("outer").unwrap();
    assert_eq!(b.type_name(arr_id).unwrap(), "outer");
    assert_eq!(b.kind(arr_id).unwrap(), Kind::Struct);
}

#[test]
fn btf_enums_and_typedef_probe() {
    let b = sample_btf();
    assert_eq!(b.enum_value("A_FILE").unwrap(), 0);
    assert_eq!(b.enum_value("A_ANON").unwrap(), 1);
    assert_eq!(b.enum_value("A_SHM").unwrap(), 3);
    assert_eq!(b.enum_value("NEG").unwrap(), -5);
    assert_eq!(b.enum_value("BIGU").unwrap(), 0xffff_ffff); // unsigned ENUM
    assert_eq!(b.enum_value("BIG").unwrap(), 1 << 40);
    assert!(matches!(
        b.enum_value("A_"),
        Err(BtfError::NoSuchEnumerator(_))
    ));
    assert!(b.has_typedef("btf_trace_foo"));
    assert!(!b.has_typedef("btf_trace_bar"));
    assert!(!b.has_typedef("outer")); // a struct, not a typedef
}

#[test]
fn btf_bitfields_are_rejected() {
    let b = sample_btf();
    assert!(matches!(
        b.member_offset("bits", "f1"),
        Err(BtfError::Bitfield { .. })
    ));
    assert_eq!(b.member_offset("bits", "f2").unwrap(), 4);
    assert!(matches!(
        b.member_offset("bits", "f3"),
        Err(BtfError::Bitfield { .. })
    ));
    assert!(b.has_member("bits", "f1"));
    assert!(matches!(
        b.member_offset("oldbits", "o1"),
        Err(BtfError::Bitfield { .. })
    ));
    assert!(matches!(
        b.member_offset("oldbits", "odd"),
        Err(BtfError::Bitfield { .. })
    ));
}

#[test]
fn btf_header_problems_are_errors() {
    let good = sample();
    let mut swapped = good.clone();
    swapped.swap(0, 1);
    assert!(matches!(Btf::parse(swapped), Err(BtfError::WrongEndian)));
    let mut bad = good.clone();
    bad[0] ^= 0x55;
    assert!(matches!(Btf::parse(bad), Err(BtfError::BadMagic(_))));
    let mut v2 = good.clone();
    v2[2] = 2;
    assert!(matches!(Btf::parse(v2), Err(BtfError::BadVersion(2))));
    let mut kind = good.clone();
    kind[24 + 7] = 25; // first type's kind byte (native little-endian machines)
    if cfg!(target_endian = "little") {
        assert!(matches!(
            Btf::parse(kind),
            Err(BtfError::UnknownKind { id: 1, kind: 25 })
        ));
    }
    assert!(Btf::parse(Vec::new()).is_err());
}

#[test]
fn btf_reference_loops_do_not_hang() {
    let mut e = Enc::new();
    let int = e.int("int", 4, 32);
    // Type 2 is a typedef of itself; type 3 is a struct whose anonymous member is itself.
    e.modifier(Kind::Typedef, "loop_t", 2);
    e.composite(
        Kind::Struct,
        "selfish",
        false,
        8,
        &[("", 3, 0), ("y", int, 0)],
    );
    e.composite(Kind::Struct, "user", false, 8, &[("l", 2, 0)]);
    e.array(5, int, 2); // array of itself
    let b = Btf::parse(e.build()).unwrap();
    assert!(matches!(b.size_of("loop_t"), Err(BtfError::TooDeep)));
    assert!(b.member_type("user", "l").is_err());
    assert!(b.member_offset("selfish", "y").is_err());
    assert!(b.size_of_id(5).is_err());
}

/// Every lookup the public API offers, results ignored: only panics matter.
fn exercise(b: &Btf) {
    for (s, p) in [
        ("outer", "in.b"),
        ("outer", "deep_x"),
        ("outer", "arr"),
        ("outer", "v"),
        ("bits", "f2"),
        ("oldbits", "o1"),
        ("inner", "a"),
        ("selfish", "y"),
    ] {
        let _ = b.member_offset(s, p);
        let _ = b.member_type(s, p);
        let _ = b.has_member(s, p);
        let _ = b.size_of(s);
    }
    for n in ["A_ANON", "NEG", "BIG", "nope"] {
        let _ = b.enum_value(n);
    }
    let _ = b.has_typedef("btf_trace_foo");
    for id in 0..b.type_count() + 2 {
        let _ = b.size_of_id(id);
        let _ = b.type_name(id);
    }
}

#[test]
fn btf_every_truncation_is_an_error() {
    let blob = sample();
    for len in 0..blob.len() {
        assert!(Btf::parse(blob[..len].to_vec()).is_err(), "len {len}");
    }
    exercise(&Btf::parse(blob).unwrap());
}

#[test]
fn btf_random_mutations_never_panic() {
    let blob = sample();
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let (mut parsed, mut iterations) = (0, 0);
    for _ in 0..20_000 {
        let mut m = blob.clone();
        let flips = 1 + next() % 4;
        for _ in 0..flips {
            let i = (next() % m.len() as u64) as usize;
            // Favour small values and 0xff, which make plausible ids, lengths and offsets.
            m[i] = match next() % 3 {
                0 => next() as u8,
                1 => (next() % 8) as u8,
                _ => 0xff,
            };
        }
        iterations += 1;
        if let Ok(b) = Btf::parse(m) {
            parsed += 1;
            exercise(&b);
        }
    }
    println!("btf: {parsed} of {iterations} mutated blobs parsed; lookups ran on each");
    // Most single-byte changes keep the blob parseable, so lookups really ran on damaged data.
    assert!(
        parsed > iterations / 4,
        "only {parsed} of {iterations} parsed"
    );
}

#[test]
fn btf_live_vmlinux() {
    let t = std::time::Instant::now();
    let data = std::fs::read(VMLINUX_BTF).expect("this test needs /sys/kernel/btf/vmlinux");
    let read = t.elapsed();
    let b = Btf::parse(data).unwrap();
    let parse = t.elapsed() - read;
    assert!(b.type_count() > 10_000);
    let ts = b.size_of("task_struct").unwrap();
    let pid = b.member_offset("task_struct", "pid").unwrap();
    assert!(pid < ts);
    assert_eq!(b.member_offset("task_struct", "tgid").unwrap(), pid + 4);
    assert!(b.has_typedef("btf_trace_sched_process_exit"));
    assert!(!b.has_typedef("btf_trace_no_such_tracepoint"));
    let mm = b.member_type("task_struct", "mm").unwrap();
    assert_eq!(mm.kind, Kind::Ptr);
    // hiwater_rss sits in an anonymous struct of mm_struct on recent kernels.
    let hw = b.member_offset("mm_struct", "hiwater_rss").unwrap();
    assert!(hw < b.size_of("mm_struct").unwrap());
    assert!(
        b.member_offset("task_struct", "se.sum_exec_runtime")
            .unwrap()
            < ts
    );
    println!(
        "btf: read vmlinux BTF in {read:?}, parsed its {} types in {parse:?}",
        b.type_count() - 1
    );
}
