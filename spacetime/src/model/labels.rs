//! Labels that tell processes apart: a program's name and the arguments that differ between
//! its runs. A build runs `cc1` thirty times with the same twenty flags; what tells one run
//! from another is the file it compiled (`cc1 … main.c`), and for `rustc` the crate
//! (`rustc --crate-name tiny …`).
//!
//! The runs of one program (the same exe) form a group. An argument is *common* when more
//! than half of the group's runs pass it; a run's label keeps the arguments that are not
//! (each value once), with the flag before a kept value when that flag is common
//! (`--crate-name tiny`), and marks what it skipped. A program run once keeps all its
//! arguments. The label says which arguments to show; the bytes stay the process's own, so
//! each renderer escapes them its way.

use rustc_hash::{FxHashMap, FxHashSet};

use crate::util::arg_area::argv_of;

/// One run to label: the program (exe path) and its argument area (argv[0] first, as
/// [`crate::model::process::Names::args`] holds it).
#[derive(Clone, Copy, Debug)]
pub struct Run<'a> {
    pub program: &'a [u8],
    pub args: &'a [u8],
}

impl<'a> Run<'a> {
    pub fn argv(&self) -> impl Iterator<Item = &'a [u8]> + Clone {
        argv_of(self.args)
    }
}

/// What a label shows of its argv after the program's name: argument indexes, with gaps
/// where arguments were skipped.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Label(Box<[u16]>);

/// Marks skipped arguments in a [`Label`].
const GAP: u16 = u16::MAX;

/// One part of a label, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The argument at this index of argv.
    Arg(usize),
    /// Arguments skipped here.
    Gap,
}

impl Label {
    pub fn parts(&self) -> impl Iterator<Item = Part> + '_ {
        self.0.iter().map(|&i| match i {
            GAP => Part::Gap,
            i => Part::Arg(i as usize),
        })
    }

    /// Every argument from the first on, no gap: the label of a program run once.
    fn whole(argc: usize) -> Label {
        Label((1..argc.min(GAP as usize)).map(|i| i as u16).collect())
    }
}

/// The last path component of a program: its name.
pub fn basename(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) if i + 1 < path.len() => &path[i + 1..],
        _ => path,
    }
}

/// The path that names a program: its exe, or argv[0] when the exe may have been cut (the
/// kernel sends at most `FILENAME_LEN` bytes of it) and argv[0] is there.
pub fn program_path<'a>(exe: &'a [u8], argv0: Option<&'a [u8]>) -> &'a [u8] {
    let cut = exe.len() + 1 >= spacetime_common::FILENAME_LEN;
    match argv0.filter(|a| !a.is_empty()) {
        Some(a) if cut || exe.is_empty() => a,
        _ => exe,
    }
}

fn is_flag(arg: &[u8]) -> bool {
    arg.len() > 1 && arg[0] == b'-'
}

/// A flag that may take the next argument as its value: one letter (`-o`, `-I`) or a long
/// option without `=` (`--crate-name`); `-O2`, `-Wall`, `--edition=2021` carry their own.
fn may_take_value(arg: &[u8]) -> bool {
    match arg {
        [b'-', c] => *c != b'-',
        [b'-', b'-', rest @ ..] => !rest.is_empty() && !rest.contains(&b'='),
        _ => false,
    }
}

/// A program's runs, and in how many of them each argument appears.
type Group<'a> = (u32, FxHashMap<&'a [u8], u32>);

/// The label of each run, in order. The runs are gone through twice (they are asked for
/// again rather than held: a 100k-process trace would hold 100k argv lists).
pub fn label_all<'a>(runs: impl Iterator<Item = Run<'a>> + Clone) -> Vec<Label> {
    // Per program: how many runs, and in how many runs each argument appears.
    let mut groups: FxHashMap<&[u8], Group> = FxHashMap::default();
    let mut seen: FxHashSet<&[u8]> = FxHashSet::default();
    for r in runs.clone() {
        let g = groups.entry(r.program).or_default();
        g.0 += 1;
        seen.clear();
        for a in r.argv().skip(1) {
            if seen.insert(a) {
                *g.1.entry(a).or_default() += 1;
            }
        }
    }
    let mut argv: Vec<&[u8]> = Vec::new();
    let mut out = Vec::with_capacity(runs.size_hint().0);
    for r in runs {
        argv.clear();
        argv.extend(r.argv());
        let (n, counts) = &groups[r.program];
        out.push(if *n < 2 {
            Label::whole(argv.len())
        } else {
            let common = |a: &[u8]| counts.get(a).is_some_and(|&c| c * 2 > *n);
            label_one(&argv, common)
        });
    }
    out
}

fn label_one(argv: &[&[u8]], common: impl Fn(&[u8]) -> bool) -> Label {
    let limit = argv.len().min(GAP as usize);
    let mut keep = vec![false; limit];
    let mut shown: FxHashSet<&[u8]> = FxHashSet::default();
    for i in 1..limit {
        let a = argv[i];
        if common(a) || !shown.insert(a) {
            continue;
        }
        keep[i] = true;
        // The flag that names this value, when the group shares it.
        if i > 1
            && !keep[i - 1]
            && may_take_value(argv[i - 1])
            && !is_flag(a)
            && common(argv[i - 1])
        {
            keep[i - 1] = true;
        }
    }
    let mut out = Vec::new();
    let mut skipped = false;
    for (i, &k) in keep.iter().enumerate().skip(1) {
        if k {
            if skipped {
                out.push(GAP);
            }
            out.push(i as u16);
            skipped = false;
        } else {
            skipped = true;
        }
    }
    if out.is_empty() {
        // Nothing tells this run from the others: what they all ran says the most.
        return Label::whole(argv.len());
    }
    if skipped || argv.len() > limit {
        out.push(GAP);
    }
    Label(out.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of `program` with the arguments in `line` (space-separated), its argument area
    /// leaked: tests only.
    fn run(program: &'static str, line: &str) -> Run<'static> {
        Run {
            program: program.as_bytes(),
            args: Box::leak(line.replace(' ', "\0").into_bytes().into_boxed_slice()),
        }
    }

    fn label_all(runs: &[Run]) -> Vec<Label> {
        super::label_all(runs.iter().copied())
    }

    /// A label as text: the shown arguments, `…` for gaps.
    fn text(r: &Run, l: &Label) -> String {
        let mut parts = vec![String::from_utf8_lossy(basename(r.program)).into_owned()];
        for p in l.parts() {
            parts.push(match p {
                Part::Arg(i) => String::from_utf8_lossy(r.argv().nth(i).unwrap()).into_owned(),
                Part::Gap => "…".into(),
            });
        }
        parts.join(" ")
    }

    const CC1: &str = "/usr/lib/gcc/x86_64-linux-gnu/12/cc1";

    fn cc1(file: &str, tmp: &str) -> String {
        format!("{CC1} -quiet -imultiarch x86_64-linux-gnu {file} -quiet -dumpbase {file} -dumpbase-ext .c -mtune=generic -march=x86-64 -O2 -o {tmp}")
    }

    #[test]
    fn each_compiler_run_shows_its_file() {
        let lines: Vec<String> = (0..31)
            .map(|i| cc1(&format!("f{i}.c"), &format!("/tmp/cc{i:04}.s")))
            .collect();
        let runs: Vec<Run> = lines.iter().map(|l| run(CC1, l)).collect();
        let labels = label_all(&runs);
        assert_eq!(text(&runs[7], &labels[7]), "cc1 … f7.c … -o /tmp/cc0007.s");
        assert_eq!(text(&runs[0], &labels[0]), "cc1 … f0.c … -o /tmp/cc0000.s");
    }

    #[test]
    fn rustc_shows_its_crate_and_a_single_run_everything() {
        let a = "rustc --crate-name tiny --edition=2021 src/main.rs --crate-type bin";
        let b = "rustc - --crate-name ___ --print=file-names";
        let c = "rustc -vV";
        let runs = [run("/r/rustc", a), run("/r/rustc", b), run("/r/rustc", c)];
        let labels = label_all(&runs);
        assert_eq!(
            text(&runs[0], &labels[0]),
            "rustc --crate-name tiny --edition=2021 src/main.rs --crate-type bin"
        );
        assert_eq!(
            text(&runs[1], &labels[1]),
            "rustc - --crate-name ___ --print=file-names"
        );
        let once = [run("/usr/bin/make", "make -s -j2 -C /tmp/p")];
        assert_eq!(
            text(&once[0], &label_all(&once)[0]),
            "make -s -j2 -C /tmp/p"
        );
    }

    #[test]
    fn identical_runs_show_the_name_only_and_the_odd_one_out_its_arguments() {
        let mut runs: Vec<Run> = (0..5).map(|_| run("/bin/true", "true x")).collect();
        runs.push(run("/bin/true", "true y"));
        let labels = label_all(&runs);
        assert_eq!(text(&runs[0], &labels[0]), "true x");
        assert_eq!(text(&runs[5], &labels[5]), "true y");
        // The compile commands of a build against its link step.
        let mut cc: Vec<String> = (0..4)
            .map(|i| format!("cc -O2 -c f{i}.c -o f{i}.o"))
            .collect();
        cc.push("cc -o app f0.o f1.o f2.o f3.o".into());
        let runs: Vec<Run> = cc.iter().map(|l| run("/usr/bin/cc", l)).collect();
        let labels = label_all(&runs);
        // A flag before a kept value is shown, whether it takes one or not (`-c`).
        assert_eq!(text(&runs[2], &labels[2]), "cc … -c f2.c -o f2.o");
        assert_eq!(text(&runs[4], &labels[4]), "cc -o app f0.o f1.o f2.o f3.o");
    }

    #[test]
    fn a_path_the_kernel_cut_is_named_by_argv0() {
        let long = vec![b'd'; spacetime_common::FILENAME_LEN - 1];
        assert_eq!(program_path(&long, Some(b"/x/prog")), b"/x/prog");
        assert_eq!(program_path(b"/usr/bin/cc", Some(b"cc")), b"/usr/bin/cc");
        assert_eq!(program_path(b"", Some(b"sh")), b"sh");
        assert_eq!(program_path(&long, None), &long[..]);
    }

    #[test]
    fn flags_that_may_take_a_value() {
        for f in ["-o", "-I", "-c", "--crate-name"] {
            assert!(may_take_value(f.as_bytes()), "{f}");
        }
        for f in ["-O2", "-Wall", "--edition=2021", "--", "-", "x"] {
            assert!(!may_take_value(f.as_bytes()), "{f}");
        }
    }

    #[test]
    fn names_of_paths() {
        assert_eq!(basename(b"/usr/bin/cc"), b"cc");
        assert_eq!(basename(b"cc"), b"cc");
        assert_eq!(basename(b"/weird/"), b"/weird/");
        assert_eq!(basename(b""), b"");
    }
}
