//! `cargo xtask startup-order` (root): which of spacetime's functions a trace through the
//! agent runs, in the order it first runs them, written to spacetime/startup.order. The
//! release link lays those functions out first (spacetime/build.rs), so that a client's
//! start-up touches a few 64 KiB windows of code (the kernel maps one around each fault)
//! rather than most of the 4 MiB: a traced /bin/true's client took 46 code faults, 15 after.
//!
//! How: an unstripped link of the release build (same code, same symbol names), a uprobe on
//! the entry of each of its functions, the traces run through an agent started from the
//! shipped binary (another file, whose functions are not probed), and the first hit of each
//! probe read back from a trace buffer of its own, in order; any function that ran but is
//! missing from that buffer follows, from the probes' hit counts (a guard: in the recordings
//! so far it added none).

use std::{
    fs,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context, Result};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

/// The uprobes' group and trace instance: spacetime's alone, removed at the end.
const GROUP: &str = "spacetime_order";

/// What users run through the agent and feel the start-up of: `time`'s replacement, the
/// quiet default a script runs, and the default report; last, a command that outlasts the
/// client's start. Under the probes the client runs so slowly that /bin/true is gone before
/// its event loop first waits: the waiting (signals, timers, the socket made readable),
/// which every command at full speed goes through, would be left out, 6 code faults a trace
/// in windows of their own.
const SCENARIOS: [&[&str]; 4] = [
    &["trace", "--agent", "-f", "%e %M", "--", "/bin/true"],
    &["trace", "--agent", "-q", "--no-chart", "--", "/bin/true"],
    &["trace", "--agent", "--", "/bin/true"],
    &["trace", "--agent", "-f", "%e %M", "--", "sleep", "60"],
];

/// A function of the probed binary: its symbol and where its entry is in the file.
struct Function {
    name: String,
    file_offset: u64,
}

pub fn run() -> Result<()> {
    if !crate::is_root() {
        bail!("uprobes and the agent need root: run `sudo -E cargo xtask startup-order`");
    }
    crate::build()?;
    let dir = crate::target_dir().join("startup-order");
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // The agent refuses a socket directory others could write.
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
    let probed = unstripped(&dir)?;
    let bytes = fs::read(&probed).with_context(|| format!("reading {}", probed.display()))?;
    let functions = functions(&bytes)?;
    eprintln!("xtask: {} functions to probe", functions.len());
    let agent = crate::bench::AgentProcess::start(&crate::spacetime_bin(), &dir)?;
    let started = Instant::now();
    let hits = {
        let probes = Probes::add(&probed, &functions)?;
        eprintln!("xtask: probes placed in {:.1?}", started.elapsed());
        for args in SCENARIOS {
            let out = Command::new(&probed)
                .args(args)
                .env("SPACETIME_SOCKET", &agent.socket)
                .stdin(Stdio::null())
                .output()
                .with_context(|| format!("running spacetime {args:?}"))?;
            if !out.status.success() {
                bail!(
                    "spacetime {args:?} failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        probes.first_hits(&probed)?
    };
    drop(agent);
    eprintln!(
        "xtask: {} functions ran, {:.1?} in all",
        hits.len(),
        started.elapsed()
    );
    let names: Vec<&str> = hits.iter().map(|&i| functions[i].name.as_str()).collect();
    write_order(&crate::root().join("spacetime/startup.order"), &names)
}

/// The release build linked again without stripping its symbols, copied to `dir`: only the
/// final link changes (`-C strip` is no part of a symbol's name). The next build links the
/// shipped binary again.
fn unstripped(dir: &Path) -> Result<PathBuf> {
    let target = crate::release_target();
    crate::run(crate::cargo().args([
        "rustc",
        "--release",
        "--target",
        target,
        "-p",
        "spacetime",
        "--bin",
        "spacetime",
        "--",
        "-C",
        "strip=none",
    ]))?;
    let built = crate::target_dir().join(target).join("release/spacetime");
    let probed = dir.join("spacetime-probed");
    fs::copy(&built, &probed).with_context(|| format!("copying {}", built.display()))?;
    Ok(probed)
}

/// Every defined function, once per address, with its entry's file offset (what
/// a uprobe names).
fn functions(elf: &[u8]) -> Result<Vec<Function>> {
    let file = object::File::parse(elf).context("parsing the unstripped binary")?;
    let segments: Vec<(u64, u64, u64)> = file
        .segments()
        .map(|s| (s.address(), s.size(), s.file_range().0))
        .collect();
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for sym in file.symbols() {
        // musl's functions written in assembly (memcpy, memset, __clone) have no size:
        // kept, memcpy's first call faulted in a window of its own at every trace.
        if sym.kind() != SymbolKind::Text || !sym.is_definition() {
            continue;
        }
        let addr = sym.address();
        let Some(&(base, _, off)) = segments
            .iter()
            .find(|&&(base, size, _)| addr >= base && addr < base + size)
        else {
            continue;
        };
        if !seen.insert(addr) {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        out.push(Function {
            name: name.to_owned(),
            file_offset: addr - base + off,
        });
    }
    if out.is_empty() {
        bail!("the unstripped binary has no function symbols");
    }
    Ok(out)
}

/// spacetime's uprobes and the trace instance they write to, both removed on drop.
struct Probes {
    tracefs: PathBuf,
    instance: PathBuf,
}

impl Probes {
    /// A uprobe `GROUP/f<i>` on the entry of each function, enabled in a trace instance of
    /// its own that keeps the oldest events when full (the first hits are what is wanted).
    fn add(binary: &Path, functions: &[Function]) -> Result<Probes> {
        let tracefs = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.join("uprobe_events").exists())
            .context("no tracefs with uprobe_events (mount tracefs on /sys/kernel/tracing)")?;
        let instance = tracefs.join("instances").join(GROUP);
        // Left by a run that was killed.
        let _ = fs::remove_dir(&instance);
        let _ = append(&tracefs.join("uprobe_events"), &format!("-:{GROUP}/\n"));
        let probes = Probes { tracefs, instance };
        let events = probes.tracefs.join("uprobe_events");
        let mut batch = String::new();
        for (i, f) in functions.iter().enumerate() {
            batch += &format!("p:{GROUP}/f{i} {}:{:#x}\n", binary.display(), f.file_offset);
            if batch.len() > 3000 {
                append(&events, &batch)?;
                batch.clear();
            }
        }
        append(&events, &batch)?;
        fs::create_dir(&probes.instance)
            .with_context(|| format!("creating {}", probes.instance.display()))?;
        write(&probes.instance.join("options/overwrite"), "0")?;
        write(&probes.instance.join("buffer_size_kb"), "65536")?;
        write(&probes.instance.join(format!("events/{GROUP}/enable")), "1")?;
        Ok(probes)
    }

    /// The functions that ran, by index, in the order of their first hit.
    fn first_hits(&self, binary: &Path) -> Result<Vec<usize>> {
        write(&self.instance.join(format!("events/{GROUP}/enable")), "0")?;
        let trace = self.instance.join("trace");
        let text =
            fs::read_to_string(&trace).with_context(|| format!("reading {}", trace.display()))?;
        let mut seen = std::collections::HashSet::new();
        let mut order = Vec::new();
        // `<comm>-<pid> [cpu] ... <timestamp>: f<i>: (<address>)`
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some(i) = line
                .split(": f")
                .nth(1)
                .and_then(|rest| rest.split(':').next())
                .and_then(|i| i.parse::<usize>().ok())
            else {
                continue;
            };
            if seen.insert(i) {
                order.push(i);
            }
        }
        if order.is_empty() {
            bail!("no probe fired: {} has no events", trace.display());
        }
        // A guard: the buffer keeps the oldest events, so a CPU's part that filled (the
        // allocator and memcpy fire at every call) would miss what first runs later. The
        // probes' hit counts name every function that ran: any the buffer missed follows,
        // the most called first. (The event loop's functions were once missing for another
        // reason: under the probes the command ended before the loop first waited, which
        // the scenario whose command outlasts the start-up fixed; this guard added none.)
        let mut later: Vec<(usize, u64)> = self
            .hits(binary)?
            .into_iter()
            .filter(|&(i, n)| n > 0 && !seen.contains(&i))
            .collect();
        later.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        eprintln!(
            "xtask: {} functions first hit in the buffer, {} more only in the hit counts",
            order.len(),
            later.len()
        );
        order.extend(later.into_iter().map(|(i, _)| i));
        Ok(order)
    }

    /// Each probe's hits on `binary` (`uprobe_profile`: file, event, hits), by function index.
    fn hits(&self, binary: &Path) -> Result<Vec<(usize, u64)>> {
        let path = self.tracefs.join("uprobe_profile");
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let file = binary.to_string_lossy();
        Ok(text
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (f, event, hits) = (w.next()?, w.next()?, w.next()?);
                let i = event.strip_prefix('f')?.parse().ok()?;
                (f == file).then_some((i, hits.parse().ok()?))
            })
            .collect())
    }
}

impl Drop for Probes {
    fn drop(&mut self) {
        let _ = write(&self.instance.join(format!("events/{GROUP}/enable")), "0");
        let _ = fs::remove_dir(&self.instance);
        let _ = append(
            &self.tracefs.join("uprobe_events"),
            &format!("-:{GROUP}/\n"),
        );
    }
}

fn write(path: &Path, s: &str) -> Result<()> {
    fs::write(path, s).with_context(|| format!("writing {s:?} to {}", path.display()))
}

/// Appends to a tracefs command file (writing without O_APPEND clears it).
fn append(path: &Path, s: &str) -> Result<()> {
    use std::io::Write;
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .and_then(|mut f| f.write_all(s.as_bytes()))
        .with_context(|| format!("writing to {}", path.display()))
}

/// The order file, whole or not at all: a header (lld reads `#` as a comment) and one
/// symbol a line.
fn write_order(path: &Path, names: &[&str]) -> Result<()> {
    let mut text = String::from(
        "# The functions a trace through the agent runs, in the order it first runs them:\n\
         # the release link lays them out first (spacetime/build.rs). Made by\n\
         # `cargo xtask startup-order`; a name that no longer exists is skipped.\n",
    );
    for n in names {
        text += n;
        text.push('\n');
    }
    let part = path.with_extension("order.part");
    fs::write(&part, text).with_context(|| format!("writing {}", part.display()))?;
    fs::rename(&part, path).with_context(|| format!("renaming to {}", path.display()))?;
    eprintln!(
        "xtask: wrote {} ({} functions)",
        path.display(),
        names.len()
    );
    Ok(())
}
