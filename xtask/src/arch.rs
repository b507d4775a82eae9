//! The architectures spacetime is built and tested for: x86-64 (the host's) and arm64
//! (cross-compiled, static, and run in an emulated guest).
//!
//! The eBPF object is the same for both: bytecode for `bpfel-unknown-none` whose kernel reads
//! use offsets the loader resolves from the running kernel's BTF, built once by
//! spacetime/build.rs whatever the userspace target.

use std::process::Command;

use anyhow::{bail, Result};

use crate::toolchain;

/// How a static build is optimized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// As shipped: every crate optimized.
    Shipped,
    /// The spacetime crate at opt-level 0, its dependencies (aya's BTF parsing among them) and
    /// the eBPF object as shipped: it checks that a target compiles, links statically and runs
    /// (the arm64 guest's doctor) for a quarter of the crate's compile (aarch64: 37 CPU
    /// seconds against 155). Its own BTF reading runs unoptimized (about 180 ms more CPU a
    /// run here, seconds in the emulated guest), so it is never timed, and never shipped.
    Check,
}

/// An architecture, by Debian's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Arch {
    /// x86-64 (Debian's amd64).
    Amd64,
    /// 64-bit Arm (Debian's arm64, Rust's aarch64).
    Arm64,
}

/// The aarch64 static build's linker off an arm64 host: Debian's package and its command.
const CROSS_LINKER: (&str, &str) = ("gcc-aarch64-linux-gnu", "aarch64-linux-gnu-gcc");

impl Arch {
    /// Debian's name (package architectures, kernel flavours).
    pub fn debian(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The static (musl) target triple.
    pub fn musl(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-unknown-linux-musl",
            Arch::Arm64 => "aarch64-unknown-linux-musl",
        }
    }

    /// The architecture of a musl target triple `cargo xtask dist --target` accepts.
    pub fn from_musl(triple: &str) -> Result<Arch> {
        match [Arch::Amd64, Arch::Arm64].into_iter().find(|a| a.musl() == triple) {
            Some(a) => Ok(a),
            None => bail!(
                "no static build for {triple}: x86_64-unknown-linux-musl or aarch64-unknown-linux-musl"
            ),
        }
    }

    /// The tarball's architecture in its name (`spacetime-VERSION-aarch64-linux-musl`).
    pub fn dist_name(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-linux-musl",
            Arch::Arm64 => "aarch64-linux-musl",
        }
    }

    /// ELF `e_machine` of its binaries.
    pub fn elf_machine(self) -> u16 {
        match self {
            Arch::Amd64 => 62,
            Arch::Arm64 => 183,
        }
    }

    /// The architecture xtask runs on.
    pub fn host() -> Arch {
        match cfg!(target_arch = "aarch64") {
            true => Arch::Arm64,
            false => Arch::Amd64,
        }
    }

    /// Whether binaries built for it run here.
    pub fn is_host(self) -> bool {
        match self {
            Arch::Amd64 => cfg!(target_arch = "x86_64"),
            Arch::Arm64 => cfg!(target_arch = "aarch64"),
        }
    }

    /// Cargo for `self`'s musl target: the std added once, and off an arm64 host, Debian's
    /// cross gcc as the linker (it links the self-contained musl objects rustc passes it).
    pub fn cargo(self, build: Build) -> Result<Command> {
        Arch::cargo_for(&[self], build)
    }

    /// Cargo for the musl targets of `archs` at once, each set up as [`Arch::cargo`] does.
    pub fn cargo_for(archs: &[Arch], build: Build) -> Result<Command> {
        let mut c = crate::cargo();
        if build == Build::Check {
            // The release profile still: the dependencies' artifacts are the shipped build's.
            c.args(["--config", "profile.release.package.spacetime.opt-level=0"]);
        }
        for &arch in archs {
            arch.ensure_tools()?;
            if arch == Arch::Arm64 && !arch.is_host() {
                c.env(
                    "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_MUSL_LINKER",
                    CROSS_LINKER.1,
                );
            }
        }
        Ok(c)
    }

    /// Installs what a static build for this architecture needs and is missing: its Rust
    /// target, and off an arm64 host Debian's cross linker.
    pub fn ensure_tools(self) -> Result<()> {
        toolchain::ensure_rust_target(self.musl())?;
        toolchain::apt_install_all(&self.cross_debs())
    }

    /// The Debian packages a static build for this architecture needs: off an arm64 host,
    /// the cross linker.
    pub fn cross_debs(self) -> Vec<toolchain::Debs> {
        (self == Arch::Arm64 && !self.is_host())
            .then(|| toolchain::Debs {
                packages: vec![CROSS_LINKER.0],
                why: "the linker of the aarch64 static build",
            })
            .into_iter()
            .collect()
    }

    /// The ELF machine of `elf`'s header, if it is an ELF file.
    pub fn machine_of(elf: &[u8]) -> Option<u16> {
        (elf.get(..4) == Some(b"\x7fELF")).then_some(())?;
        elf.get(18..20).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }

    /// How qemu emulates a machine of this architecture.
    pub fn qemu(self) -> Qemu {
        match self {
            Arch::Amd64 => Qemu {
                program: "qemu-system-x86_64",
                package: "qemu-system-x86",
                machine: &[],
                console: "ttyS0",
            },
            Arch::Arm64 => Qemu {
                program: "qemu-system-aarch64",
                package: "qemu-system-arm",
                machine: &["-machine", "virt"],
                console: "ttyAMA0",
            },
        }
    }
}

/// qemu's system emulator for an architecture.
pub struct Qemu {
    pub program: &'static str,
    /// The Debian package that has it.
    pub package: &'static str,
    /// Its machine options.
    pub machine: &'static [&'static str],
    /// The kernel's console device on that machine.
    pub console: &'static str,
}

#[cfg(test)]
mod tests {
    use super::Arch;

    #[test]
    fn triples_and_machines() {
        assert_eq!(
            Arch::from_musl("aarch64-unknown-linux-musl").unwrap(),
            Arch::Arm64
        );
        assert_eq!(
            Arch::from_musl("x86_64-unknown-linux-musl").unwrap(),
            Arch::Amd64
        );
        assert!(Arch::from_musl("aarch64-unknown-linux-gnu").is_err());
        let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
        elf.resize(20, 0);
        elf[18] = 183;
        assert_eq!(Arch::machine_of(&elf), Some(Arch::Arm64.elf_machine()));
        assert_eq!(Arch::machine_of(b"#!/bin/sh\n"), None);
    }
}
