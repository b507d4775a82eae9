//! The manual pages, generated from the definitions the parser uses: spacetime(1) holds
//! everything (each subcommand in a section of its own, then the environment, the files and
//! the exit status), and each subcommand has a page of its own, spacetime-trace(1) and so on,
//! as git has. `spacetime man --dir DIR` writes them all (what the installer runs).

use std::{
    io::{self, Write},
    path::{Path, PathBuf},
};

use roff::{bold, italic, roman, Roff};

use super::cli::Cli;

/// The subcommands that have a page of their own (every one but `help`). A unit test checks
/// this list against the parser's.
pub const PAGES: [&str; 9] = [
    "trace",
    "bench",
    "watch",
    "agent",
    "report",
    "diff",
    "doctor",
    "completions",
    "man",
];

/// The macro clap_mangen's every section opens with (it quotes apostrophes); once per page.
const PREAMBLE: &str = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";

/// The environment variables spacetime reads: name, what it does.
const ENVIRONMENT: [(&str, &str); 11] = [
    (
        "SPACETIME_SOCKET",
        "The agent's socket: where trace, bench, watch and doctor look for a spacetime agent, \
         and where `spacetime agent` listens when given no --socket (default \
         /run/spacetime/agent.sock).",
    ),
    (
        "NO_COLOR",
        "When set and not empty, no colour in the charts of trace and report, nor in bench's \
         summary unless --style full or color asks for it (as hyperfine).",
    ),
    (
        "TERM",
        "dumb turns off the live status line and colour; unset, the status line.",
    ),
    (
        "COLUMNS",
        "The width to fit summaries, charts and tables to when the output is not a terminal \
         (default 120); -w/--wide does not cut at all.",
    ),
    (
        "LC_ALL, LC_CTYPE, LANG",
        "The first set decides whether the locale is UTF-8; if it is not, human output is \
         plain ASCII (no block or box-drawing characters).",
    ),
    (
        "SUDO_UID, SUDO_GID, SUDO_USER",
        "Under sudo, CMD runs as this user with their groups (not as root; see --keep-root), \
         and the agent's limits count against them.",
    ),
    (
        "PATH",
        "Where CMD is looked up (default /usr/local/bin:/usr/bin:/bin).",
    ),
    (
        "SPACETIME_STATUS_AFTER_MS",
        "How long a run goes before the live status line appears, in milliseconds.",
    ),
    (
        "RUST_LOG",
        "Log filter (env_logger syntax), overriding -v and -vv; e.g. RUST_LOG=spacetime=debug.",
    ),
    (
        "NOTIFY_SOCKET",
        "Set by systemd for a Type=notify service: agent and watch send READY=1 there once \
         they serve.",
    ),
    (
        "LISTEN_PID, LISTEN_FDS",
        "Set by systemd's socket activation: the agent takes the listening socket it was \
         passed (descriptor 3) instead of making one.",
    ),
];

/// The files spacetime uses or installs: path, what it is.
const FILES: [(&str, &str); 4] = [
    (
        "/run/spacetime/agent.sock",
        "The agent's socket (SPACETIME_SOCKET names another). Any user who can connect to it \
         traces their own commands without root.",
    ),
    (
        "/usr/lib/systemd/system/spacetime-agent.socket",
        "Socket activation for the agent: systemd listens and starts the agent at the first \
         connection (enabled by the Debian package).",
    ),
    (
        "/usr/lib/systemd/system/spacetime-agent.service",
        "The agent as a service, with only the capabilities it needs.",
    ),
    (
        "/usr/lib/systemd/system/spacetime-watch.service",
        "spacetime watch --metrics as a service: OpenMetrics on 127.0.0.1:9464 (installed, \
         not enabled).",
    ),
];

fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// The subcommand `name`'s definition.
fn subcommand(name: &str) -> io::Result<clap::Command> {
    command()
        .find_subcommand(name)
        .filter(|_| PAGES.contains(&name))
        .cloned()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no page for {name}")))
}

/// A page's text once every section was rendered: clap_mangen's preamble kept only at the top.
fn assembled(sections: Vec<u8>) -> String {
    let text = String::from_utf8_lossy(&sections);
    format!("{PREAMBLE}{}", text.replace(PREAMBLE, ""))
}

/// `.SH TITLE` and one `.TP` paragraph per (term, text).
fn tagged(title: &str, entries: &[(&str, &str)]) -> String {
    let mut roff = Roff::new();
    roff.control("SH", [title]);
    for (term, text) in entries {
        roff.control("TP", []);
        roff.text([bold(*term)]);
        roff.text([roman(*text)]);
    }
    roff.to_roff()
}

/// SEE ALSO: the other spacetime pages (each is installed with this one), never hyphenated.
fn see_also(this: Option<&str>) -> String {
    let mut refs: Vec<String> = Vec::new();
    if this.is_some() {
        refs.push("spacetime".into());
    }
    refs.extend(
        PAGES
            .iter()
            .filter(|p| Some(**p) != this)
            .map(|p| format!("spacetime-{p}")),
    );
    let mut text = String::from(".SH \"SEE ALSO\"\n");
    for (i, name) in refs.iter().enumerate() {
        let comma = if i + 1 < refs.len() { "," } else { "" };
        text.push_str(&format!(".BR \\%{} (1){comma}\n", name.replace('-', "\\-")));
    }
    text
}

/// EXAMPLES from an after-help written as `Examples:`, then each example's command indented
/// two spaces and what it does six: one tagged paragraph each, the command in bold.
fn examples(after_help: &str) -> Option<String> {
    let body = after_help.strip_prefix("Examples:\n")?;
    let mut roff = Roff::new();
    roff.control("SH", ["EXAMPLES"]);
    let mut said = String::new();
    let flush = |roff: &mut Roff, said: &mut String| {
        if !said.is_empty() {
            roff.text([roman(std::mem::take(said))]);
        }
    };
    for line in body.lines() {
        if let Some(what) = line.strip_prefix("      ") {
            if !said.is_empty() {
                said.push(' ');
            }
            said.push_str(what.trim());
        } else if let Some(command) = line.strip_prefix("  ") {
            flush(&mut roff, &mut said);
            roff.control("TP", []);
            roff.text([bold(command.trim())]);
        }
    }
    flush(&mut roff, &mut said);
    Some(roff.to_roff())
}

/// SUBCOMMANDS: each with its page (clap_mangen's would list `help`, which has none).
fn subcommands(cmd: &clap::Command) -> String {
    let mut roff = Roff::new();
    roff.control("SH", ["SUBCOMMANDS"]);
    for sub in cmd
        .get_subcommands()
        .filter(|s| PAGES.contains(&s.get_name()))
    {
        roff.control("TP", []);
        roff.text([
            bold(format!("spacetime {}", sub.get_name())),
            roman(" (see "),
            italic(format!("spacetime-{}", sub.get_name())),
            roman("(1) or its section below)"),
        ]);
        if let Some(about) = sub.get_about() {
            roff.text([roman(about.to_string())]);
        }
    }
    roff.to_roff()
}

/// spacetime(1): the top command's page followed by one section per subcommand (their
/// options and examples), so `man spacetime` holds everything.
pub fn write_main(out: &mut dyn Write) -> io::Result<()> {
    let cmd = command();
    let man = clap_mangen::Man::new(cmd.clone());
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    man.render_options_section(&mut page)?;
    page.extend(subcommands(&cmd).as_bytes());
    for name in PAGES {
        let sub = subcommand(name)?;
        writeln!(page, ".SH \"SPACETIME {}\"", name.to_uppercase())?;
        // Each section of the subcommand's own page, one level down (.SS).
        let body = String::from_utf8_lossy(&sub_body(&sub)?)
            .replace("\n.SH ", "\n.SS ")
            .to_string();
        let body = body
            .strip_prefix(".SH ")
            .map_or(body.clone(), |b| format!(".SS {b}"));
        page.extend(body.as_bytes());
    }
    page.extend(tagged("ENVIRONMENT", &ENVIRONMENT).as_bytes());
    page.extend(tagged("FILES", &FILES).as_bytes());
    // The top command's after-help is the exit status paragraph.
    let mut extra = Vec::new();
    man.render_extra_section(&mut extra)?;
    let extra = String::from_utf8_lossy(&extra).replace(".SH EXTRA", ".SH \"EXIT STATUS\"");
    page.extend(extra.replace("Exit status: ", "").as_bytes());
    page.extend(see_also(None).as_bytes());
    man.render_version_section(&mut page)?;
    out.write_all(assembled(page).as_bytes())
}

/// A subcommand's synopsis, description, options and examples (its after-help).
fn sub_body(sub: &clap::Command) -> io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(sub.clone());
    let mut body = Vec::new();
    man.render_synopsis_section(&mut body)?;
    man.render_description_section(&mut body)?;
    man.render_options_section(&mut body)?;
    if let Some(after) = sub.get_after_help() {
        let after = after.to_string();
        let section = examples(&after).ok_or_else(|| {
            io::Error::other(format!("{}'s after-help is not examples", sub.get_name()))
        })?;
        body.extend(section.as_bytes());
    }
    Ok(body)
}

/// spacetime-NAME(1): one subcommand's page.
pub fn write_sub(name: &str, out: &mut dyn Write) -> io::Result<()> {
    let sub = subcommand(name)?
        .bin_name(format!("spacetime {name}"))
        .display_name(format!("spacetime-{name}"))
        .version(env!("CARGO_PKG_VERSION"));
    let man = clap_mangen::Man::new(sub.clone())
        .source(format!("spacetime {}", env!("CARGO_PKG_VERSION")));
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    page.extend(sub_body(&sub)?);
    page.extend(see_also(Some(name)).as_bytes());
    out.write_all(assembled(page).as_bytes())
}

/// Writes spacetime.1 and every spacetime-NAME.1 into `dir`; returns their paths.
pub fn write_dir(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut write = |file: String, page: &dyn Fn(&mut dyn Write) -> io::Result<()>| {
        let mut bytes = Vec::new();
        page(&mut bytes)?;
        let path = dir.join(file);
        std::fs::write(&path, bytes)?;
        written.push(path);
        Ok::<(), io::Error>(())
    };
    write("spacetime.1".into(), &write_main)?;
    for name in PAGES {
        write(format!("spacetime-{name}.1"), &|out| write_sub(name, out))?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subcommand_but_help_has_a_page() {
        let names: Vec<String> = command()
            .get_subcommands()
            .map(|s| s.get_name().to_string())
            .filter(|n| n != "help")
            .collect();
        assert_eq!(names, PAGES);
    }

    #[test]
    fn every_page_names_its_subcommand_and_the_others() {
        for name in PAGES {
            let mut page = Vec::new();
            write_sub(name, &mut page).expect("render");
            let page = String::from_utf8(page).expect("UTF-8");
            assert!(page.contains(&format!(".TH spacetime-{name} 1")), "{page}");
            assert_eq!(page.matches(".ds Aq").count(), 2, "one preamble");
            assert!(page.contains(".SH \"SEE ALSO\""), "{page}");
        }
        assert!(write_sub("help", &mut Vec::new()).is_err());
    }
}
