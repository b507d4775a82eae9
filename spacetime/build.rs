//! Locates the eBPF object that `cargo xtask build` produced and hands its path to the crate.
//! Without it the binary still builds (for unit tests and clippy) but refuses to trace, saying
//! how to build it properly.
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=SPACETIME_EBPF_OBJ");
    println!("cargo::rustc-check-cfg=cfg(spacetime_ebpf)");
    let explicit = std::env::var_os("SPACETIME_EBPF_OBJ").map(PathBuf::from);
    let default = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/bpfel-unknown-none/release/spacetime");
    let obj = explicit.clone().unwrap_or(default);
    println!("cargo:rerun-if-changed={}", obj.display());
    if obj.is_file() {
        println!("cargo:rustc-cfg=spacetime_ebpf");
        println!("cargo:rustc-env=SPACETIME_EBPF_OBJ={}", obj.display());
    } else if explicit.is_some() {
        panic!("SPACETIME_EBPF_OBJ={} does not exist", obj.display());
    }
}
