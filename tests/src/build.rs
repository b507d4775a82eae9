//! Builds to trace: a C project of N files compiled by `make -j2` (one of them broken, if
//! asked), a Makefile whose dependency chain is known, and the helpers that read a summary.

use std::path::{Path, PathBuf};

/// A C project in `dir/name`: `f1.c … f{n-1}.c` and `main.c`, and a Makefile compiling each
/// with `cc -O2 -c` and linking them. With `broken`, that file does not compile.
pub fn c_project(dir: &Path, name: &str, n: usize, broken: Option<&str>) -> PathBuf {
    let root = dir.join(name);
    std::fs::create_dir_all(&root).expect("mkdir project");
    for i in 1..n {
        let body = format!("int f{i}(int x) {{ return x * {i} + {i}; }}\n");
        std::fs::write(root.join(format!("f{i}.c")), body).expect("write source");
    }
    std::fs::write(root.join("main.c"), "int main(void) { return 0; }\n").expect("main.c");
    if let Some(b) = broken {
        std::fs::write(root.join(b), "int broken( { return }\n").expect("broken source");
    }
    let makefile = "SRCS := $(sort $(wildcard *.c))\nOBJS := $(SRCS:.c=.o)\napp: $(OBJS)\n\tcc -o app $(OBJS)\n%.o: %.c\n\tcc -O2 -c $< -o $@\n";
    std::fs::write(root.join("Makefile"), makefile).expect("Makefile");
    root
}

/// A crate with no dependencies, `tiny`, that `cargo build --offline` builds.
pub fn tiny_crate(dir: &Path) -> PathBuf {
    let root = dir.join("tiny");
    std::fs::create_dir_all(root.join("src")).expect("mkdir crate");
    std::fs::write(
        root.join("Cargo.toml"),
        "[package]\nname = \"tiny\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    )
    .expect("Cargo.toml");
    std::fs::write(
        root.join("src/main.rs"),
        "fn main() {\n    let v: Vec<u64> = (1..100).collect();\n    println!(\"{}\", v.iter().sum::<u64>());\n}\n",
    )
    .expect("main.rs");
    root
}

/// The lines of a summary between a line starting with `from` and the next blank line.
pub fn section<'a>(summary: &'a str, from: &str) -> Vec<&'a str> {
    summary
        .lines()
        .skip_while(|l| !l.starts_with(from))
        .take_while(|l| !l.trim().is_empty())
        .collect()
}

/// Panics when a line of `text` is wider than `cols` (every character one column).
pub fn assert_fits(text: &str, cols: usize) {
    for l in text.lines() {
        let w = l.chars().count();
        assert!(w <= cols, "{w} columns over {cols}: {l:?}\n{text}");
    }
}

/// The recap: the summary's last line, checked for its parts.
pub fn recap(summary: &str) -> &str {
    let last = summary.lines().last().expect("a summary");
    assert!(
        last.starts_with("exit ") && last.contains(" · wall ") && last.contains(" failed"),
        "the last line is not the recap: {last:?}\n{summary}"
    );
    last
}
