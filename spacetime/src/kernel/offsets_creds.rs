//! The offsets of the credentials an exec of a traced process is checked with (see
//! `SessionLimit::owner_uid` and spacetime-ebpf/src/creds.rs).

use spacetime_common::KernelOffsets;

use super::{field, OffsetsError};
use crate::kernel::btf::Btf;

/// The credentials an exec of a traced process is checked against its session's owner with
/// (see `SessionLimit::owner_uid`), when the kernel describes them all.
pub(super) fn resolve(
    btf: &Btf,
    off: &mut KernelOffsets,
    notes: &mut Vec<String>,
) -> Result<(), OffsetsError> {
    const CRED: [&str; 7] = [
        "uid",
        "euid",
        "suid",
        "gid",
        "egid",
        "sgid",
        "cap_permitted",
    ];
    let all = btf.has_member("task_struct", "real_cred")
        && btf.has_member("mm_struct", "flags")
        && CRED.iter().all(|m| btf.has_member("cred", m));
    if !all {
        notes.push("struct cred or mm_struct.flags not described: execs are not checked against a session's owner".into());
        return Ok(());
    }
    let cred = |p| field(btf, "cred", p);
    off.task_real_cred = field(btf, "task_struct", "real_cred")?;
    off.cred_uid = cred("uid")?;
    off.cred_euid = cred("euid")?;
    off.cred_suid = cred("suid")?;
    off.cred_gid = cred("gid")?;
    off.cred_egid = cred("egid")?;
    off.cred_sgid = cred("sgid")?;
    off.cred_cap_permitted = cred("cap_permitted")?;
    off.mm_flags = field(btf, "mm_struct", "flags")?;
    Ok(())
}
