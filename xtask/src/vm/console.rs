//! The guest's console, streamed as it comes, and the verdict read from it.
//!
//! When the guest runs past its limit it is asked, through qemu's monitor, what it was doing
//! before it is stopped: the kernel's own backtraces of every CPU and of every blocked task
//! (magic SysRq on the emulated keyboard, the console's log level raised first so they are
//! printed), and each vCPU's instruction pointer, twice (the same one twice: spinning in
//! place). A hang in CI then says where it was.

use std::{
    fs,
    io::{Read, Write},
    os::unix::net::UnixStream,
    path::Path,
    process::{Command, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::MARKER;
use crate::arch::Arch;

/// What the guest said.
pub(super) struct Verdict {
    /// The marker line, if the guest got that far.
    marker: Option<String>,
    /// The test harnesses' summary lines (`test result: …`).
    summaries: Vec<String>,
    /// Their counts, with each binary's time (by the `spacetime-vm: running NAME` before it).
    tally: crate::tally::Tally,
    /// The binary running now.
    running: String,
    /// Tests not run (see [`super::SLOW_UNDER_TCG`]).
    pub(super) skipped: Vec<&'static str>,
    timed_out: bool,
    /// (binary::test, host seconds) of each test: the time from the line before its result
    /// to its result (one test at a time in the guest, so that is the test's own run).
    tests: Vec<(String, f64)>,
    /// When the last whole line arrived.
    last_line: Instant,
}

impl Verdict {
    pub(super) fn summarize(&self) -> Result<()> {
        eprintln!("xtask: vm-test summary:");
        for s in &self.summaries {
            eprintln!("xtask:   {s}");
        }
        for name in &self.skipped {
            eprintln!("xtask:   skipped (too slow under TCG; --all runs it): {name}");
        }
        eprintln!("xtask: the slowest test binaries in the guest (guest seconds):");
        for (name, s) in self.tally.slowest(8) {
            eprintln!("xtask:   {s:7.1}  {name}");
        }
        eprintln!("xtask: the slowest tests in the guest (host seconds):");
        let mut tests = self.tests.clone();
        tests.sort_by(|a, b| b.1.total_cmp(&a.1));
        for (name, s) in tests.iter().take(12) {
            eprintln!("xtask:   {s:7.1}  {name}");
        }
        println!("vm-test: {}", self.tally.line());
        match &self.marker {
            Some(m) if m.trim_end() == format!("{MARKER} PASS") => {
                eprintln!("xtask: vm-test PASSED");
                Ok(())
            }
            Some(m) => bail!("vm-test FAILED: {}", m.trim()),
            None if self.timed_out => bail!("vm-test FAILED: the guest did not finish in time"),
            None => bail!("vm-test FAILED: the guest stopped without a verdict"),
        }
    }

    fn line(&mut self, line: &str) {
        if let Some(at) = line.find(MARKER) {
            self.marker = Some(line[at..].to_owned());
        }
        if let Some(name) = line.split("spacetime-vm: running ").nth(1) {
            self.running = name.trim().to_owned();
        }
        let now = Instant::now();
        if let Some((test, _)) = line
            .strip_prefix("test ")
            .and_then(|l| l.split_once(" ... "))
        {
            let took = now.duration_since(self.last_line).as_secs_f64();
            self.tests.push((format!("{}::{test}", self.running), took));
        }
        self.last_line = now;
        let running = self.running.clone();
        if self.tally.result_line(line, &running) {
            let at = line.find("test result:").unwrap_or(0);
            self.summaries.push(format!("{running}: {}", &line[at..]));
        }
    }
}

/// The console as it arrives: whole lines are printed and read; the last, unfinished one
/// (a test's name before its result) is kept to be shown if the guest stops there.
struct Console {
    rx: mpsc::Receiver<Vec<u8>>,
    partial: Vec<u8>,
}

impl Console {
    /// Prints and hands to `f` every line that arrives before `until`; false once qemu's
    /// output has ended.
    fn pump(&mut self, until: Instant, mut f: impl FnMut(&str)) -> bool {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(chunk) => {
                    self.partial.extend_from_slice(&chunk);
                    while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
                        let raw: Vec<u8> = self.partial.drain(..=end).collect();
                        let line = String::from_utf8_lossy(&raw);
                        let line = line.trim_end_matches(['\r', '\n']);
                        println!("{line}");
                        f(line);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return true,
                Err(mpsc::RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// The unfinished last line, printed as it is.
    fn flush_partial(&mut self) {
        if !self.partial.is_empty() {
            println!("{}", String::from_utf8_lossy(&self.partial).trim_end());
            self.partial.clear();
        }
    }
}

/// Boots the guest, streams its console, and returns what it said.
pub(super) fn boot(
    arch: Arch,
    kernel: &Path,
    initrd: &Path,
    timeout: Duration,
    cpus: u32,
) -> Result<Verdict> {
    let monitor = initrd.with_extension("monitor");
    let _ = fs::remove_file(&monitor);
    let crate::arch::Qemu {
        program,
        machine,
        console,
        ..
    } = arch.qemu();
    let mut qemu = Command::new(program);
    qemu.args(machine);
    // One host thread runs every vCPU in turn. With a thread per vCPU (qemu 7.2's default)
    // the guest locks up when spacetime detaches its sched_switch program: the kernel patches
    // the tracepoint's call in __schedule while another vCPU runs it with interrupts off, and
    // that vCPU never takes the IPI the patching waits for (soft lockup in
    // smp_call_function_many_cond from text_poke_bp; seen after 7 traces of `true` under a
    // context-switch load, not once in 63 with one thread).
    qemu.args([
        "-accel",
        "tcg,thread=single",
        "-cpu",
        "max",
        "-m",
        "2048",
        "-smp",
    ])
    .arg(cpus.max(1).to_string())
    .args(["-nographic", "-no-reboot", "-kernel"])
    .arg(kernel)
    .arg("-initrd")
    .arg(initrd)
    .arg("-append")
    .arg(format!(
        "console={console} quiet panic=-1 sysrq_always_enabled"
    ))
    .arg("-monitor")
    .arg(format!("unix:{},server=on,wait=off", monitor.display()))
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    let mut child = qemu
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let mut stdout = child.stdout.take().context("qemu stdout")?;
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });

    let mut verdict = Verdict {
        marker: None,
        summaries: Vec::new(),
        tally: crate::tally::Tally::default(),
        running: String::new(),
        skipped: Vec::new(),
        timed_out: false,
        tests: Vec::new(),
        last_line: Instant::now(),
    };
    let mut console = Console {
        rx,
        partial: Vec::new(),
    };
    let deadline = Instant::now() + timeout;
    if console.pump(deadline, |l| verdict.line(l)) {
        verdict.timed_out = true;
        console.flush_partial();
        println!(
            "xtask: the guest ran past {} s; what it was doing:",
            timeout.as_secs()
        );
        post_mortem(&monitor, &mut console);
        println!("xtask: stopping qemu");
        let _ = child.kill();
    }
    console.flush_partial();
    let status = child.wait().context("waiting for qemu")?;
    let _ = fs::remove_file(&monitor);
    if !status.success() && verdict.marker.is_none() && !verdict.timed_out {
        bail!("qemu failed with {status}");
    }
    Ok(verdict)
}

/// Asks the stuck guest what it is doing; prints what it says. Best effort: each step that
/// fails is said and skipped.
fn post_mortem(monitor: &Path, console: &mut Console) {
    let mut mon = match Monitor::connect(monitor) {
        Ok(m) => m,
        Err(e) => {
            println!("xtask: qemu's monitor did not answer: {e:#}");
            return;
        }
    };
    // Every CPU's backtrace, then the tasks blocked in the kernel: the guest's own words, if
    // its CPUs still take interrupts.
    for key in ["alt-sysrq-9", "alt-sysrq-l", "alt-sysrq-w"] {
        if let Err(e) = mon.command(&format!("sendkey {key}")) {
            println!("xtask: sendkey {key}: {e:#}");
        }
        console.pump(Instant::now() + Duration::from_secs(5), |_| {});
    }
    console.flush_partial();
    // The instruction pointers, twice: the same ones both times mean a CPU spinning in place.
    for round in 1..=2 {
        match mon.command("info registers -a") {
            Ok(text) => {
                for line in vcpu_positions(&text) {
                    println!("xtask: vCPU {line} (look {round})");
                }
            }
            Err(e) => println!("xtask: info registers: {e:#}"),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// qemu's human monitor on a Unix socket.
struct Monitor(UnixStream);

impl Monitor {
    fn connect(path: &Path) -> Result<Monitor> {
        let s = UnixStream::connect(path).with_context(|| format!("{}", path.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut m = Monitor(s);
        m.until_prompt().context("the monitor's greeting")?;
        Ok(m)
    }

    fn command(&mut self, cmd: &str) -> Result<String> {
        self.0.write_all(format!("{cmd}\n").as_bytes())?;
        self.until_prompt()
    }

    /// What the monitor says up to its next `(qemu) ` prompt.
    fn until_prompt(&mut self) -> Result<String> {
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        while !out.ends_with(b"(qemu) ") {
            let n = self.0.read(&mut buf).context("reading the monitor")?;
            if n == 0 {
                bail!("the monitor closed");
            }
            out.extend_from_slice(&buf[..n]);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// `N: RIP <address> (kernel|user), interrupts on|off` for each vCPU in `info registers -a`.
fn vcpu_positions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cpu = String::from("?");
    for line in text.lines() {
        if let Some(rest) = line.trim().strip_prefix("CPU#") {
            cpu = rest.trim().to_owned();
        }
        let Some(at) = line.find("RIP=") else {
            continue;
        };
        let hex: String = line[at + 4..]
            .chars()
            .take_while(char::is_ascii_hexdigit)
            .collect();
        let Ok(rip) = u64::from_str_radix(&hex, 16) else {
            continue;
        };
        let place = match rip >= 0xffff_8000_0000_0000 {
            true => "kernel",
            false => "user",
        };
        // RFLAGS' IF bit: a CPU spinning with interrupts off takes no IPI and no tick.
        let irqs = line
            .find("RFL=")
            .and_then(|at| u64::from_str_radix(line.get(at + 4..at + 12)?, 16).ok())
            .map_or("?", |f| if f & 0x200 != 0 { "on" } else { "off" });
        out.push(format!(
            "{cpu}: RIP {rip:016x} ({place}), interrupts {irqs}"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_are_read_per_vcpu() {
        let text = "CPU#0\nRAX=0 RBX=0\nRIP=ffffffff81001010 RFL=00000246 [---Z-P-] CPL=0 II=0\n\
                    CPU#1\nRIP=00007f0012345678 RFL=00000086 CPL=3\n(qemu) ";
        assert_eq!(
            vcpu_positions(text),
            [
                "0: RIP ffffffff81001010 (kernel), interrupts on",
                "1: RIP 00007f0012345678 (user), interrupts off"
            ]
        );
    }
}
