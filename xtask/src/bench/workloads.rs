//! The workloads the bench builds itself: small C drivers compiled with the system's gcc, so
//! the driver's own cost is the same under every runner and nothing depends on a shell loop.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};

use crate::run;

/// One workload: what to run, how many processes it makes, and what to do before each run.
pub struct Workload {
    /// Short name, used on the command line and in the JSON.
    pub name: &'static str,
    /// What it is, for the table.
    pub title: String,
    pub argv: Vec<String>,
    /// Runs in this directory.
    pub dir: PathBuf,
    /// Processes it makes, the driver included (checked against what trace saw), if known.
    pub processes: Option<u64>,
    /// Untimed preparation before every run (e.g. `make clean`).
    pub prepare: Option<Vec<String>>,
}

/// Sizes of the workloads (scaled down with `--quick`).
pub struct Sizes {
    pub fork_exec: u64,
    pub c_files: u64,
    pub touch_mib: u64,
    pub storm: u64,
    /// The process count of the spacetime-RSS run; 0 skips it.
    pub rss_processes: u64,
}

impl Sizes {
    pub fn full() -> Sizes {
        Sizes {
            fork_exec: 1000,
            c_files: 200,
            touch_mib: 1024,
            storm: 20000,
            rss_processes: 100_000,
        }
    }

    pub fn quick() -> Sizes {
        Sizes {
            fork_exec: 200,
            c_files: 20,
            touch_mib: 128,
            storm: 2000,
            rss_processes: 0,
        }
    }
}

/// fork+exec of PATH, N times in sequence, each waited for.
const FORK_EXEC_C: &str = r#"
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 3) return 2;
    long n = atol(argv[1]);
    char *child[] = { argv[2], NULL };
    for (long i = 0; i < n; i++) {
        pid_t p = fork();
        if (p < 0) return 1;
        if (p == 0) { execv(argv[2], child); _exit(127); }
        int st;
        if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
    }
    return 0;
}
"#;

/// A static program that does nothing: no libc, no dynamic loader, one syscall.
const NOOP_C: &str = r#"
void _start(void) {
#if defined(__x86_64__)
    __asm__ volatile("mov $60, %eax\n xor %edi, %edi\n syscall");
#elif defined(__aarch64__)
    __asm__ volatile("mov x8, #93\n mov x0, #0\n svc #0");
#else
#error "add the exit syscall for this architecture"
#endif
    for (;;) {}
}
"#;

/// Maps SIZE MiB and touches it page by page: one process whose RSS rises by 4 KiB per fault.
const TOUCH_C: &str = r#"
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    size_t len = (size_t)atol(argv[1]) << 20;
    long page = sysconf(_SC_PAGESIZE);
    volatile char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    for (size_t i = 0; i < len; i += page) p[i] = 1;
    return 0;
}
"#;

/// Two workers, one per core, each forking N/2 children that exit at once.
const STORM_C: &str = r#"
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static int worker(long n) {
    for (long i = 0; i < n; i++) {
        pid_t p = fork();
        if (p < 0) return 1;
        if (p == 0) _exit(0);
        if (waitpid(p, NULL, 0) != p) return 1;
    }
    return 0;
}
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    long n = atol(argv[1]);
    pid_t w[2];
    for (int k = 0; k < 2; k++) {
        w[k] = fork();
        if (w[k] < 0) return 1;
        if (w[k] == 0) _exit(worker(n / 2 + (k == 0 ? n % 2 : 0)));
    }
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        int st;
        if (waitpid(w[k], &st, 0) != w[k] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) bad = 1;
    }
    return bad;
}
"#;

fn gcc(out: &Path, src: &Path, extra: &[&str]) -> Result<()> {
    run(Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(out)
        .arg(src)
        .args(extra))
    .with_context(|| format!("compiling {}", src.display()))
}

fn write(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The generated C project: `n` small translation units and a main, built by a Makefile whose
/// recipes go through the shell (make → sh → gcc → cc1 → as, then collect2 → ld).
fn c_project(dir: &Path, n: u64) -> Result<()> {
    fs::create_dir_all(dir)?;
    for i in 0..n {
        write(
            &dir.join(format!("unit{i}.c")),
            &format!(
                "#include <stdio.h>\n#include <string.h>\n\n\
                 struct rec{i} {{ int id; char name[32]; double w; }};\n\n\
                 static int cmp{i}(const struct rec{i} *a, const struct rec{i} *b) {{\n\
                 \x20   return a->w < b->w ? -1 : a->w > b->w;\n}}\n\n\
                 int unit{i}(int x) {{\n\
                 \x20   struct rec{i} r[4];\n\
                 \x20   for (int k = 0; k < 4; k++) {{\n\
                 \x20       r[k].id = x + k;\n\
                 \x20       snprintf(r[k].name, sizeof r[k].name, \"u{i}-%d\", k);\n\
                 \x20       r[k].w = (double)(x * {i} % 7) / (k + 1);\n\
                 \x20   }}\n\
                 \x20   int s = 0;\n\
                 \x20   for (int k = 1; k < 4; k++) s += cmp{i}(&r[k - 1], &r[k]) + (int)strlen(r[k].name);\n\
                 \x20   return s;\n}}\n"
            ),
        )?;
    }
    let decls: String = (0..n).map(|i| format!("int unit{i}(int);\n")).collect();
    let calls: String = (0..n).map(|i| format!("    s += unit{i}(s);\n")).collect();
    write(
        &dir.join("main.c"),
        &format!("{decls}\nint main(void) {{\n    int s = 1;\n{calls}    return s == 0;\n}}\n"),
    )?;
    write(
        &dir.join("Makefile"),
        "SRCS := $(wildcard *.c)\n\
         OBJS := $(SRCS:.c=.o)\n\
         prog: $(OBJS)\n\
         \tcd . && gcc -o $@ $(OBJS)\n\
         %.o: %.c\n\
         \tcd . && gcc -O1 -c $< -o $@\n\
         clean:\n\
         \trm -f *.o prog\n",
    )
}

/// Builds every workload under `dir` and describes them.
pub fn build(dir: &Path, sizes: &Sizes) -> Result<Vec<Workload>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let src = dir.join("src");
    fs::create_dir_all(&src)?;
    let bin = |name: &str| dir.join(name);
    for (name, text) in [
        ("fork-exec", FORK_EXEC_C),
        ("touch", TOUCH_C),
        ("storm", STORM_C),
    ] {
        let c = src.join(format!("{name}.c"));
        write(&c, text)?;
        gcc(&bin(name), &c, &[])?;
    }
    let noop = src.join("noop.c");
    write(&noop, NOOP_C)?;
    gcc(&bin("noop-static"), &noop, &["-static", "-nostdlib"])?;
    let project = dir.join("c-project");
    let _ = fs::remove_dir_all(&project);
    c_project(&project, sizes.c_files)?;

    let s = |p: PathBuf| p.to_string_lossy().into_owned();
    let fe = s(bin("fork-exec"));
    let n = sizes.fork_exec;
    Ok(vec![
        Workload {
            name: "true",
            title: "/bin/true once (start-up cost)".into(),
            argv: vec!["/bin/true".into()],
            dir: dir.to_path_buf(),
            processes: Some(1),
            prepare: None,
        },
        Workload {
            name: "fork-exec",
            title: format!("{n} × fork+exec /bin/true"),
            argv: vec![fe.clone(), n.to_string(), "/bin/true".into()],
            dir: dir.to_path_buf(),
            processes: Some(n + 1),
            prepare: None,
        },
        Workload {
            name: "fork-exec-static",
            title: format!("{n} × fork+exec static no-op"),
            argv: vec![fe, n.to_string(), s(bin("noop-static"))],
            dir: dir.to_path_buf(),
            processes: Some(n + 1),
            prepare: None,
        },
        Workload {
            name: "make",
            title: format!("make -j2, {} C files", sizes.c_files + 1),
            argv: vec!["make".into(), "-s".into(), "-j2".into()],
            dir: project,
            processes: None,
            prepare: Some(vec!["make".into(), "-s".into(), "clean".into()]),
        },
        Workload {
            name: "touch",
            title: format!("touch {} MiB page by page", sizes.touch_mib),
            argv: vec![s(bin("touch")), sizes.touch_mib.to_string()],
            dir: dir.to_path_buf(),
            processes: Some(1),
            prepare: None,
        },
        Workload {
            name: "storm",
            title: format!("fork-only storm, {} forks on 2 cores", sizes.storm),
            argv: vec![s(bin("storm")), sizes.storm.to_string()],
            dir: dir.to_path_buf(),
            processes: Some(sizes.storm + 3),
            prepare: None,
        },
    ])
}

/// `n` fork+exec of /bin/true one after another, for the spacetime-RSS run: a build's shape
/// (every process has an argv and an image), not a fork-only storm's.
pub fn exec_storm_argv(dir: &Path, n: u64) -> Vec<String> {
    vec![
        dir.join("fork-exec").to_string_lossy().into_owned(),
        n.to_string(),
        "/bin/true".into(),
    ]
}
