use super::*;

#[test]
fn parsing() {
    let f = parse("%e s\\t%M%%\\n").expect("valid");
    assert_eq!(
        f.pieces,
        [
            Piece::Field('e'),
            Piece::Text(" s\t".into()),
            Piece::Field('M'),
            Piece::Text("%\n".into())
        ]
    );
    assert!(parse("%q").is_err());
    assert!(parse("50%").is_err());
    // An unknown escape is printed as GNU time prints it.
    assert_eq!(
        parse("a\\qb").expect("valid").pieces,
        [Piece::Text("a?\\qb".into())]
    );
}

#[test]
fn every_gnu_time_letter_is_known() {
    // GNU time 1.9's man page, section FORMATTING THE OUTPUT.
    for l in "EeSUPMtKDpXZFRWIOrskCxcw".chars() {
        assert!(parse(&format!("%{l}")).is_ok(), "%{l}");
    }
}

#[test]
fn seconds_are_truncated_like_gnu_time() {
    // One 6.0086 s run: GNU time prints 6.00 and 0:06.00.
    assert_eq!(secs(6_008_600_000), "6.00");
    assert_eq!(elapsed(6_008_600_000), "0:06.00");
    assert_eq!(secs(999_999_999), "0.99");
    assert_eq!(secs(0), "0.00");
    assert_eq!(secs(123_450_000_000), "123.45");
}

#[test]
fn elapsed_like_gnu_time() {
    assert_eq!(elapsed(1_234_000_000), "0:01.23");
    assert_eq!(elapsed(61_500_000_000), "1:01.50");
    assert_eq!(elapsed(3_723_000_000_000), "1:02:03");
}

#[test]
fn verbose_is_time_v_layout() {
    let f = parse("verbose").expect("verbose");
    // 23 lines, each a tab, a label, ": " and one figure.
    let fields: Vec<char> = f
        .pieces
        .iter()
        .filter_map(|p| match p {
            Piece::Field(l) => Some(*l),
            Piece::Text(_) => None,
        })
        .collect();
    assert_eq!(fields.iter().collect::<String>(), "CUSPEXDpKMtFRwcWIOsrkZx");
    assert_eq!(VERBOSE.lines().count(), 23);
    assert!(VERBOSE
        .lines()
        .all(|l| l.starts_with('\t') && l.contains(": ")));
    let posix = parse("posix").expect("posix");
    let same = parse("real %e\\nuser %U\\nsys %S").expect("same");
    assert_eq!(posix.pieces, same.pieces);
    // `time -p` says nothing of how CMD ended; the same letters given as a format do.
    assert_eq!((posix.ending, same.ending), (Ending::Unsaid, Ending::Said));
    let default = parse("default").expect("default");
    assert_eq!(default.ending, Ending::Said);
    assert_eq!(
        default
            .pieces
            .iter()
            .filter(|p| matches!(p, Piece::Field(_)))
            .count(),
        12
    );
}

#[test]
fn the_help_names_every_letter_and_each_parses() {
    let help = help();
    for l in letters() {
        assert!(
            help.contains(&format!("%{l}")),
            "%{l} missing from the help"
        );
        assert!(parse(&format!("%{l}")).is_ok(), "%{l}");
    }
    // The figures table's own: its title and unit after the letter.
    assert!(help.contains("%A mean RSS on CPU KiB"), "{help}");
    let err = parse("%Q").unwrap_err();
    assert!(err.contains(" %L %A;"), "{err}");
}
