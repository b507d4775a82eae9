//! Whether the kernel's BPF has the atomic instructions that return a value (fetch-and-add,
//! exchange, compare-and-exchange: Linux 5.12+). Before them the verifier refuses any such
//! instruction in a program, reachable or not ("BPF_STX uses reserved fields"), so the
//! programs that use them come in a second build without them (`NAME_nofetch`, see the
//! kernel side's `atomics`), and this probe picks which build loads: by what the kernel
//! accepts, never by its version.

use std::os::fd::{FromRawFd, OwnedFd};

/// How the sentence that says the kernel lacks fetch atomics begins (`-v`, the report's
/// `kernel.mechanisms`, `doctor`): what a report reads to label the figures it costs.
pub const NO_FETCH_ATOMICS: &str =
    "this kernel's BPF lacks atomic fetch instructions (Linux 5.12+)";

/// What the kernel's BPF can do with atomics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Atomics {
    /// Fetch-and-add, exchange and compare-and-exchange (5.12+).
    Fetch,
    /// Only the plain atomic add, which returns nothing (before 5.12).
    AddOnly,
}

impl Atomics {
    /// The kernel's answer: two tiny programs, one plain atomic add and one fetching add on
    /// a stack slot. Only a kernel that takes the first and refuses the second lacks the
    /// fetch; any other outcome (BPF refused altogether) leaves the usual programs to be
    /// loaded, and their own error to be said.
    pub fn probe() -> Atomics {
        match (load(false), load(true)) {
            (Ok(_), Err(why)) => {
                log::debug!("kernel BPF: a fetching atomic add is refused: {why}");
                Atomics::AddOnly
            }
            _ => Atomics::Fetch,
        }
    }

    /// The name of `program`'s build for this kernel.
    pub fn program(self, program: &'static str) -> &'static str {
        if self == Atomics::Fetch {
            return program;
        }
        match program {
            "sched_process_fork" => "sched_process_fork_nofetch",
            "sched_process_exec" => "sched_process_exec_nofetch",
            "sched_prepare_exec" => "sched_prepare_exec_nofetch",
            "rss_exec" => "rss_exec_nofetch",
            "rss_stat" => "rss_stat_nofetch",
            "rss_exit" => "rss_exit_nofetch",
            "sched_process_exit" => "sched_process_exit_nofetch",
            "exit_mm_release" => "exit_mm_release_nofetch",
            "exec_mm_release" => "exec_mm_release_nofetch",
            "adopt_mms" => "adopt_mms_nofetch",
            other => other,
        }
    }

    /// What the builds without fetch atomics cannot keep exact, for `-v` and `doctor`; None
    /// where nothing is lost.
    pub fn limits(self) -> Option<&'static str> {
        match self {
            Atomics::Fetch => None,
            Atomics::AddOnly => Some(concat!(
                "this kernel's BPF lacks atomic fetch instructions (Linux 5.12+)",
                "; using the programs built without them: the tree-wide RSS peak (tree_peak_rss) is \
                 approximate (two processes raising it at once can leave the lower value), the \
                 tree-wide RSS over time can be off while two threads of one process change \
                 their memory at the same moment (until that process's next change); a \
                 session's process limit still holds, but forks racing for its last slots may \
                 all be refused",
            )),
        }
    }
}

/// The program a build is of: `NAME` for `NAME` and `NAME_nofetch`. Figures and the
/// verification order name programs, whichever build loaded.
pub fn program_of(build: &str) -> &str {
    build.strip_suffix("_nofetch").unwrap_or(build)
}

/// `struct bpf_attr` for BPF_PROG_LOAD, up to the verifier log (the kernel reads the rest
/// as zero).
#[repr(C)]
struct ProgLoad {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
}

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_TYPE_SOCKET_FILTER: u32 = 1;

/// One instruction: opcode, registers (dst low nibble, src high), offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    code as u64
        | ((dst | src << 4) as u64) << 8
        | (off as u16 as u64) << 16
        | (imm as u32 as u64) << 32
}

/// Loads `*(u64 *)(r10 - 8) = 0; r1 = 1; lock *(u64 *)(r10 - 8) += r1 (fetching or not);
/// return 0`. Returns the program (closed on drop) or the verifier's words.
fn load(fetch: bool) -> Result<OwnedFd, String> {
    const MOV64_IMM: u8 = 0xb7;
    const STX_MEM_DW: u8 = 0x7b;
    const STX_ATOMIC_DW: u8 = 0xdb;
    const EXIT: u8 = 0x95;
    // BPF_ADD, with BPF_FETCH (1) for the form that returns the old value.
    let op = fetch as i32;
    let insns = [
        insn(MOV64_IMM, 1, 0, 0, 0),
        insn(STX_MEM_DW, 10, 1, -8, 0),
        insn(MOV64_IMM, 1, 0, 0, 1),
        insn(STX_ATOMIC_DW, 10, 1, -8, op),
        insn(MOV64_IMM, 0, 0, 0, 0),
        insn(EXIT, 0, 0, 0, 0),
    ];
    let mut log = vec![0u8; 4096];
    let attr = ProgLoad {
        prog_type: BPF_PROG_TYPE_SOCKET_FILTER,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: c"GPL".as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
    };
    // SAFETY: `attr` and what it points to outlive the call; the size is the struct's.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_PROG_LOAD,
            &attr as *const ProgLoad,
            std::mem::size_of::<ProgLoad>(),
        )
    };
    if fd < 0 {
        let err = std::io::Error::last_os_error();
        let said = String::from_utf8_lossy(log.split(|&b| b == 0).next().unwrap_or(&[]));
        return Err(format!("{err}: {}", said.trim()));
    }
    // SAFETY: a descriptor the kernel just returned, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instructions_are_encoded_as_the_kernel_reads_them() {
        // lock *(u64 *)(r10 - 8) += r1, fetching: llvm-objdump shows `db 1a f8 ff 01 00 00 00`.
        assert_eq!(
            insn(0xdb, 10, 1, -8, 1).to_le_bytes(),
            [0xdb, 0x1a, 0xf8, 0xff, 0x01, 0, 0, 0]
        );
    }

    #[test]
    fn only_the_programs_with_fetch_atomics_have_a_second_build() {
        assert_eq!(Atomics::AddOnly.program("rss_stat"), "rss_stat_nofetch");
        assert_eq!(
            Atomics::AddOnly.program("sched_process_exit"),
            "sched_process_exit_nofetch"
        );
        assert_eq!(Atomics::AddOnly.program("dead_switch"), "dead_switch");
        assert_eq!(Atomics::Fetch.program("rss_stat"), "rss_stat");
        assert!(Atomics::Fetch.limits().is_none());
        let said = Atomics::AddOnly.limits().unwrap_or_default();
        assert!(said.starts_with(NO_FETCH_ATOMICS), "{said}");
        for name in ["rss_stat", "adopt_mms", "sched_process_exit"] {
            assert_eq!(program_of(Atomics::AddOnly.program(name)), name);
        }
    }

    /// Every build without fetch atomics is in the embedded object, and none holds an atomic
    /// with a non-zero operation field (what 5.10's verifier refuses); the usual builds do hold
    /// them (the scan finds what it looks for).
    #[cfg(spacetime_ebpf)]
    #[test]
    fn the_builds_without_fetch_atomics_hold_none() {
        use object::{Object, ObjectSection, ObjectSymbol};
        let bytes = super::super::OBJECT.expect("the embedded eBPF object");
        let file = object::File::parse(bytes).expect("an ELF object");
        // BPF_STX | BPF_ATOMIC, 64 and 32 bits; the immediate is the operation (0: plain add).
        let fetching = |build: &str| -> usize {
            let sym = file
                .symbol_by_name(build)
                .unwrap_or_else(|| panic!("{build} is not in the object"));
            let index = sym.section_index().expect("a section");
            let data = file
                .section_by_index(index)
                .and_then(|s| s.data())
                .expect("its data");
            let (at, len) = (sym.address() as usize, sym.size() as usize);
            assert!(len > 0 && at + len <= data.len(), "{build}: {at}+{len}");
            data[at..at + len]
                .chunks_exact(8)
                .filter(|i| matches!(i[0], 0xdb | 0xc3) && i[4..8] != [0, 0, 0, 0])
                .count()
        };
        for program in [
            "sched_process_fork",
            "sched_process_exec",
            "sched_prepare_exec",
            "rss_exec",
            "rss_stat",
            "rss_exit",
            "sched_process_exit",
            "exit_mm_release",
            "exec_mm_release",
            "adopt_mms",
        ] {
            let build = Atomics::AddOnly.program(program);
            assert_ne!(
                build, program,
                "{program} has a build without fetch atomics"
            );
            assert_eq!(fetching(build), 0, "{build} holds fetch atomics");
            assert!(
                fetching(program) > 0,
                "{program}: the scan found no fetch atomic"
            );
        }
        for shared in ["exec_args", "dead_switch", "sched_process_free"] {
            assert_eq!(fetching(shared), 0, "{shared} is loaded on every kernel");
        }
    }
}
