use super::*;

/// Random bytes weighted towards what breaks terminals and cutting: controls, C1 in both
/// encodings, invalid UTF-8, wide and combining characters, backslashes.
pub(crate) fn nasty_bytes(seed: &mut u64, len: usize) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b"\x1b]0;pwned\x07",
        b"\x1b[2J",
        b"\r\n",
        b"\x9b",
        "\u{9b}".as_bytes(),
        "\u{202e}".as_bytes(),
        b"\\",
        b"\\x",
        "漢字".as_bytes(),
        "e\u{301}".as_bytes(),
        b"\xff\xfe",
        b"\xe6\xbc",
        b"\x7f",
        b"/usr/lib/",
        b"a",
    ];
    let mut next = || {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        *seed
    };
    let mut out = Vec::new();
    while out.len() < len {
        let r = next();
        if r % 3 == 0 {
            out.push((r >> 8) as u8);
        } else {
            out.extend_from_slice(PIECES[(r >> 8) as usize % PIECES.len()]);
        }
    }
    out
}

/// Panics if `s` holds a control character (other than newlines when `newlines`) or a C1.
pub(crate) fn assert_terminal_safe(s: &str, newlines: bool) {
    for c in s.chars() {
        let ok = !(c.is_control() || hidden(c)) || (newlines && c == '\n');
        assert!(ok, "control {c:?} in {s:?}");
    }
}

#[test]
fn escapes_controls_c1_and_invalid_bytes() {
    assert_eq!(escape(b"a\x1b[2Jb"), "a\\e[2Jb");
    assert_eq!(
        escape(b"\x07\x08\t\n\x0b\x0c\r\0\x01\x7f"),
        "\\a\\b\\t\\n\\v\\f\\r\\0\\x01\\x7f"
    );
    assert_eq!(escape("\u{9b}x".as_bytes()), "\\u{9b}x");
    assert_eq!(escape(b"\x9b\xff"), "\\x9b\\xff");
    assert_eq!(escape(b"back\\slash"), "back\\\\slash");
    assert_eq!(escape("é 漢 \u{202e}".as_bytes()), "é 漢 \\u{202e}");
    assert_eq!(join([b"ls".as_slice(), b"-l\n"]), "ls -l\\n");
}

#[test]
fn sanitize_is_escape_without_backslashes_and_leaves_escaped_text_alone() {
    let e = escape(b"a\x1b\xffb\\");
    assert_eq!(sanitize(&e), e);
    assert_eq!(sanitize("x\x07y\\z"), "x\\ay\\z");
    let mut seed = 7;
    for n in 0..300 {
        let raw = String::from_utf8_lossy(&nasty_bytes(&mut seed, n)).into_owned();
        assert_terminal_safe(&sanitize(&raw), false);
    }
}

#[test]
fn cuts_by_display_width_never_inside_an_escape() {
    assert_eq!(fit("abcdef", 4), "abc…");
    assert_eq!(fit("abc", 3), "abc");
    // Two columns per ideograph.
    assert_eq!(fit("漢字漢字", 5), "漢字…");
    assert_eq!(width("漢字"), 4);
    let e = escape(b"ab\x1bcd");
    assert_eq!(e, "ab\\ecd");
    assert_eq!(fit(&e, 4), "ab…", "the escape is whole or absent");
    assert_eq!(fit(&escape(b"a\xff"), 4), "a…");
    assert_eq!(fit(&escape(b"a\xff"), 5), "a\\xff");
}

#[test]
fn paths_keep_their_name() {
    let p = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1";
    let f = fit_path(p, 20);
    assert!(f.ends_with("/cc1"), "{f}");
    assert!(width(&f) <= 20, "{f}");
    let c = fit_command(
        &format!("{p} -quiet -imultiarch x86_64-linux-gnu main.c"),
        40,
    );
    assert!(c.contains("/cc1 -quiet"), "{c}");
    assert!(width(&c) <= 40, "{c}");
    // A long non-ASCII path: no panic, whole characters.
    let long = "/ü".repeat(100) + "/prog";
    for w in 0..60 {
        let f = fit_path(&long, w);
        assert!(width(&f) <= w.max(1), "{w}: {f}");
    }
}

#[test]
fn random_bytes_come_out_safe_and_within_width() {
    let mut seed = 0x2545_f491_4f6c_dd1d;
    for n in 0..2000 {
        let bytes = nasty_bytes(&mut seed, n % 97);
        let e = escape(&bytes);
        assert_terminal_safe(&e, false);
        let cols = n % 50;
        for cut in [fit(&e, cols), fit_path(&e, cols), fit_command(&e, cols)] {
            assert_terminal_safe(&cut, false);
            assert!(width(&cut) <= cols.max(1), "{cols}: {cut:?}");
        }
    }
}

#[test]
fn wraps_between_words_within_the_width() {
    let s = "  loss:          none (ring buffer full: 0, undecodable: 0, kernel read failures: 0)";
    for cols in [80, 40, 20, 10] {
        let lines = wrap(s, cols, 17);
        for l in &lines {
            assert!(width(l) <= cols, "{l:?} over {cols}: {lines:?}");
        }
        assert!(lines[0].starts_with("  loss:"), "{lines:?}");
    }
    assert_eq!(wrap("a b", 80, 2), ["a b"]);
    assert_eq!(wrap("aaa bbb", 5, 2), ["aaa", "  bbb"]);
    assert!(locale_is_utf8(
        |v| (v == "LANG").then(|| "en_US.UTF-8".into())
    ));
    let c = |v: &str| match v {
        "LC_ALL" => Some("C".to_string()),
        _ => Some("en_US.utf8".to_string()),
    };
    assert!(!locale_is_utf8(c), "LC_ALL decides");
    assert!(!locale_is_utf8(|_| None), "no locale is C");
}

#[test]
fn a_short_path_is_never_cut_before_its_name() {
    for cols in 4..30 {
        let s = fit_command(
            "/usr/bin/ld -plugin /usr/lib/gcc/x86_64-linux-gnu/12/liblto_plugin.so",
            cols,
        );
        assert!(width(&s) <= cols, "{s:?} over {cols}");
        if cols >= 4 {
            assert!(s.contains("ld"), "{cols}: {s:?}");
        }
    }
}
