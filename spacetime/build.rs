//! Builds the eBPF object (the `spacetime-ebpf` crate: nightly, `bpfel-unknown-none`,
//! `-Z build-std=core`, linked by bpf-linker) and hands its path to the crate, which embeds it.
//! This is the one place the object is built: `cargo xtask build`, `cargo build` and
//! `cargo install --path spacetime` all come through here. `SPACETIME_EBPF_OBJ=FILE` embeds a
//! prebuilt object instead.
use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

/// What to run when the eBPF toolchain is missing, in one sentence.
const SETUP: &str = "spacetime's eBPF programs need the nightly toolchain with rust-src and \
                     bpf-linker on LLVM 22: run `cargo xtask setup` once (it installs what is \
                     missing), then build again";

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}

/// The cargo target directory this build writes to: the outermost ancestor of OUT_DIR that
/// cargo tagged with CACHEDIR.TAG (`target/`, or the temporary one of `cargo install`). A
/// build for a named target (`--target x86_64-unknown-linux-musl`) tags `target/<triple>/`
/// too: the nearest tag would put the object where `cargo xtask build` does not look, and
/// build it a second time beside the host build's (clippy's).
fn target_dir(out_dir: &Path) -> PathBuf {
    out_dir
        .ancestors()
        .filter(|d| d.join("CACHEDIR.TAG").is_file())
        .last()
        .unwrap_or(out_dir)
        .to_path_buf()
}

fn main() {
    startup_order(Path::new(env!("CARGO_MANIFEST_DIR")));
    println!("cargo::rustc-check-cfg=cfg(spacetime_ebpf)");
    println!("cargo:rerun-if-env-changed=SPACETIME_EBPF_OBJ");
    if let Some(obj) = std::env::var_os("SPACETIME_EBPF_OBJ").map(PathBuf::from) {
        if !obj.is_file() {
            fail(&format!(
                "SPACETIME_EBPF_OBJ={} does not exist",
                obj.display()
            ));
        }
        // A file from outside: a new one at the same path rebuilds the crate.
        println!("cargo:rerun-if-changed={}", obj.display());
        embed(&obj);
        return;
    }
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let ebpf = manifest.join("../spacetime-ebpf");
    let common = manifest.join("../spacetime-common");
    for p in [
        ebpf.join("src"),
        ebpf.join("Cargo.toml"),
        ebpf.join("Cargo.lock"),
        ebpf.join(".cargo/config.toml"),
        common.join("src"),
        common.join("Cargo.toml"),
    ] {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    if !ebpf.join("Cargo.toml").is_file() {
        fail("the spacetime-ebpf crate is not next to this one: build from the repository");
    }
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    // A directory of its own: the outer cargo holds the locks of the target directory's
    // profile directories while this script runs.
    let bpf_target = target_dir(&out_dir).join("bpf");
    let linker = Command::new("bpf-linker")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !linker.is_ok_and(|s| s.success()) {
        fail(SETUP);
    }
    let status = Command::new("cargo")
        .current_dir(&ebpf)
        // What the outer cargo, clippy or rustup set for the host build must not leak into
        // the nightly bpfel build (the crate's own .cargo/config.toml sets its flags).
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("RUSTC")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .args([
            "+nightly",
            "build",
            "--release",
            "--target",
            "bpfel-unknown-none",
            "-Z",
            "build-std=core",
        ])
        .arg("--target-dir")
        .arg(&bpf_target)
        // Cargo reads this script's stdout for directives: nothing else may go there.
        .stdout(std::io::stderr())
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => fail(&format!(
            "building the eBPF programs failed ({s}; its output is above); if the toolchain \
             is the cause, {SETUP}"
        )),
        Err(e) => fail(&format!("running cargo +nightly: {e}; {SETUP}")),
    }
    let obj = bpf_target.join("bpfel-unknown-none/release/spacetime");
    embed(&without_dwarf(&obj, &out_dir));
}

/// The release binary's functions that a trace runs first, laid out first in the order
/// startup.order gives (`cargo xtask startup-order` writes it): a client's start-up then
/// touches a few 64 KiB windows of code, the kernel mapping one around each fault, instead of
/// most of the 4 MiB: a traced /bin/true 0.06-0.08 ms shorter (BENCHMARKS.md). Linked by the
/// lld that rustc ships beside itself (GNU ld before 2.43 takes no order), on x86-64 musl,
/// where the order was recorded; any other build links as before.
fn startup_order(manifest: &Path) {
    let order = manifest.join("startup.order");
    println!("cargo:rerun-if-changed={}", order.display());
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    if var("TARGET") != "x86_64-unknown-linux-musl" || var("PROFILE") != "release" {
        return;
    }
    let sysroot = Command::new(var("RUSTC"))
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let gcc_ld = sysroot.map(|s| {
        PathBuf::from(s)
            .join("lib/rustlib")
            .join(var("HOST"))
            .join("bin/gcc-ld")
    });
    let Some(gcc_ld) = gcc_ld.filter(|d| d.join("ld.lld").is_file() && order.is_file()) else {
        println!("cargo:warning=no rust-lld or no startup.order: the functions keep their order");
        return;
    };
    for arg in [
        "-fuse-ld=lld".to_owned(),
        format!("-B{}", gcc_ld.display()),
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        // Names that no longer exist (code changed since the order was recorded) are skipped.
        "-Wl,--no-warn-symbol-ordering".to_owned(),
    ] {
        println!("cargo:rustc-link-arg-bin=spacetime={arg}");
    }
}

/// The object without its DWARF: bpf-linker derives the BTF (which the kernel reads) from
/// the debug info and keeps the debug info too, 1.6 of the object's 1.9 MB. Nothing reads it
/// at run time, yet aya walked its relocations at every start-up and the binary carried it.
/// llvm-objcopy comes with LLVM 22, which bpf-linker needs; without it the object is embedded
/// whole.
fn without_dwarf(obj: &Path, out_dir: &Path) -> PathBuf {
    let stripped = out_dir.join("spacetime-ebpf.o");
    for tool in ["llvm-objcopy-22", "llvm-objcopy"] {
        let done = Command::new(tool)
            .arg("--strip-debug")
            .arg(obj)
            .arg(&stripped)
            .stderr(Stdio::null())
            .status();
        if done.is_ok_and(|s| s.success()) {
            return stripped;
        }
    }
    println!("cargo:warning=llvm-objcopy not found: the eBPF object is embedded with its DWARF");
    obj.to_path_buf()
}

/// Hands the object to the crate. No `rerun-if-changed` on it here: the object this script
/// built itself is written during the script's own run, so cargo would see it newer than the
/// run and run the script (and rebuild the crate, ~70 s) on every later build of the same tree.
/// The eBPF sources it was built from are watched instead (above).
fn embed(obj: &Path) {
    println!("cargo:rustc-cfg=spacetime_ebpf");
    println!("cargo:rustc-env=SPACETIME_EBPF_OBJ={}", obj.display());
}
