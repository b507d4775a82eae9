//! What a run attached to running processes (`trace -p`) starts from and ends with: the tree
//! of what /proc said of them, the root's argv as the command, and the peaks so far of those
//! still running at the end.

use crate::{
    kernel::attach::{vmhwm_pages, Attached, Target},
    model::tree::{Adopted, Names, Tree},
    report::lossless::Args,
};

/// The tree of the run: rooted at the first pid asked for, with what /proc said of every
/// process attached to, kept until their first record.
pub(super) fn tree(a: &Attached) -> Tree {
    let root = &a.targets[0];
    let mut tree = Tree::new(root.pid, root.ppid);
    for t in &a.targets {
        tree.adopt(adopted(t, a.attach_ns));
    }
    tree
}

/// What the tree keeps of `t` until its first record.
fn adopted(t: &Target, attach_ns: u64) -> Adopted {
    Adopted {
        tgid: t.pid,
        ppid: t.ppid,
        start_ns: t.start_ns,
        threads: t.threads,
        names: Names {
            exe: t.exe.clone(),
            args: t.args.clone(),
            comm: t.comm,
            argv_complete: true,
        },
        attach_ns,
    }
}

/// The root's argv, as the report's command.
pub(super) fn command(a: &Attached) -> Args {
    Args(a.targets[0].argv().map(<[u8]>::to_vec).collect())
}

/// Processes still running at the end that predate the attach and never exec'd since: the
/// kernel followed their mm from the attach only, so their peak so far is their VmHWM now
/// (the kernel's own figure, whole life), read through their pidfd.
pub(super) fn peaks_so_far(a: &Attached, tree: &mut Tree, page_size: u64) {
    for t in &a.targets {
        let key = tree
            .processes()
            .iter()
            .filter(|p| p.end_ns.is_none())
            .filter(|p| p.images.last().is_some_and(|i| i.read_at_attach))
            .find_map(|p| p.key.get().filter(|k| k.tgid == t.pid));
        if let (Some(key), Some(pages)) = (key, vmhwm_pages(t, page_size)) {
            if !tree.set_peak_so_far(key, pages) {
                tree.stats.figures_out_of_range += 1;
            }
        }
    }
}
