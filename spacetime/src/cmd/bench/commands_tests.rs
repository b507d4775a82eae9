use super::*;
use clap::Parser;

#[derive(clap::Parser)]
struct Cmd {
    #[command(flatten)]
    bench: BenchArgs,
}

fn plan_of(args: &[&str]) -> Result<Vec<BenchCommand>, PlanError> {
    let mut v = vec!["bench"];
    v.extend(args);
    let a = Cmd::try_parse_from(v).expect("parse").bench;
    plan(&a, &Shell::of(&a)?)
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

#[test]
fn shell_and_no_shell() {
    let c = &plan_of(&["echo 'a b' | wc -c"]).expect("sh")[0];
    assert_eq!(c.argv, os(&["sh", "-c", "echo 'a b' | wc -c"]));
    let c = &plan_of(&["-N", r#"printf '%s\n' "a b" c\ d"#]).expect("split")[0];
    assert_eq!(c.argv, os(&["printf", "%s\\n", "a b", "c d"]));
    let c = &plan_of(&["-S", "bash --norc", "true"]).expect("bash")[0];
    assert_eq!(c.argv, os(&["bash", "--norc", "-c", "true"]));
    assert!(matches!(
        plan_of(&["-N", "echo 'open"]),
        Err(PlanError::Unsplittable(_))
    ));
    assert!(matches!(plan_of(&["  "]), Err(PlanError::Empty(_))));
    assert_eq!(
        Shell::of(
            &Cmd::try_parse_from(["b", "-S", "none", "x"])
                .expect("p")
                .bench
        ),
        Ok(Shell::None)
    );
}

#[test]
fn command_bytes_stay_exact() {
    use std::os::unix::ffi::OsStrExt;
    let a = Cmd::try_parse_from([
        OsString::from("b"),
        OsString::from("-N"),
        OsString::from_vec(b"true \xff\x1b[2J".to_vec()),
    ])
    .expect("parse")
    .bench;
    let c = &plan(&a, &Shell::None).expect("plan")[0];
    assert_eq!(c.argv[1].as_bytes(), b"\xff\x1b[2J");
    assert!(!c.shown().contains('\x1b'), "{}", c.shown());
}

#[test]
fn scan_expands_commands_fastest_with_names_and_hooks() {
    let p = plan_of(&[
        "-P",
        "j",
        "1",
        "2",
        "-n",
        "build -j{j}",
        "-n",
        "b2",
        "-n",
        "b3",
        "-n",
        "b4",
        "-p",
        "prep {j}",
        "-s",
        "setup {j}",
        "make -j{j}",
        "ninja -j{j}",
    ])
    .expect("plan");
    let texts: Vec<String> = p.iter().map(BenchCommand::lossy).collect();
    assert_eq!(texts, ["make -j1", "ninja -j1", "make -j2", "ninja -j2"]);
    assert_eq!(p[0].name.as_deref(), Some("build -j1"));
    assert_eq!(p[3].label(), "b4");
    assert_eq!(p[2].parameters, vec![("j".to_string(), "2".to_string())]);
    assert_eq!(p[2].hooks.prepare, Some(os(&["sh", "-c", "prep 2"])));
    assert_eq!(p[2].hooks.setup, Some(os(&["sh", "-c", "setup 2"])));
    // One name for all; a wrong count is refused.
    let p = plan_of(&["-P", "j", "1", "3", "-n", "x{j}", "c {j}"]).expect("plan");
    assert_eq!(p[2].label(), "x3");
    assert_eq!(
        plan_of(&["-P", "j", "1", "3", "-n", "a", "-n", "b", "c {j}"]),
        Err(PlanError::NameCount {
            given: 2,
            benchmarks: 3
        })
    );
}

#[test]
fn lists_unused_parameters_and_the_reference() {
    let p = plan_of(&[
        "-L",
        "cc",
        "gcc,clang",
        "-L",
        "opt",
        "1,2",
        "--reference",
        "ref",
        "--reference-name",
        "baseline",
        "{cc} -O{opt}",
        "{cc} -c",
    ])
    .expect("plan");
    assert_eq!(p.len(), 1 + 2 * 4);
    assert_eq!(p[0].label(), "baseline");
    assert!(p[0].parameters.is_empty());
    let texts: Vec<String> = p[1..].iter().map(BenchCommand::lossy).collect();
    assert_eq!(&texts[..4], ["gcc -O1", "gcc -c", "clang -O1", "clang -c"]);
    // The second command does not mention opt: shown beside it, as hyperfine.
    assert_eq!(p[2].shown(), "gcc -c (opt = 1)");
    // --prepare once per benchmark, the reference included.
    let mut args = vec!["--reference", "r"];
    args.extend(["-p", "a", "-p", "b", "x"]);
    assert!(plan_of(&args).is_ok());
    args.extend(["-p", "c"]);
    assert!(matches!(
        plan_of(&args),
        Err(PlanError::Count {
            option: "--prepare",
            ..
        })
    ));
    assert!(matches!(
        plan_of(&["-n", "a", "-n", "b", "x"]),
        Err(PlanError::TooManyNames {
            given: 2,
            commands: 1
        })
    ));
}
