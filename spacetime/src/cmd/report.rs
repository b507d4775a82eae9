//! `spacetime report FILE.json`: a saved report drawn again — a trace's terminal summary (the
//! same as when it ran, at this terminal's width), or with `--html FILE` its page, with
//! `--svg FILE` its picture and with `--perfetto FILE` its Perfetto trace; a bench report's
//! summary, page or picture likewise. Nothing is measured: the figures are the file's.

use std::{
    io::{self, IsTerminal},
    os::fd::AsFd,
    path::PathBuf,
};

use clap::Args;

use crate::{
    report::{self, chart::Style, saved::Saved},
    run::outputs::{Outputs, Requested},
    util::exit_code::EXIT_OWN_FAILURE,
};

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A report written by `trace --json` or `bench --json`
    #[arg(value_name = "FILE.json")]
    pub file: PathBuf,
    /// Write the report as a self-contained HTML page to FILE instead of the summary (`-`:
    /// standard output)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the report as one static SVG picture to FILE instead of the summary (`-`:
    /// standard output); with --html, both
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Write a trace report as a Perfetto trace to FILE (open it in ui.perfetto.dev) instead
    /// of the summary; with --html or --svg, all of them
    #[arg(long, value_name = "FILE")]
    pub perfetto: Option<PathBuf>,
    /// Write the summary to FILE instead of standard output
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Do not cut the summary's lines to the terminal's width (full command lines)
    #[arg(short = 'w', long)]
    pub wide: bool,
    /// List at most N processes in the summary tree before grouping it (0: all)
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub top: usize,
    /// Skip the memory and CPU charts in the summary
    #[arg(long)]
    pub no_chart: bool,
    /// Read at most SIZE of FILE (K, M, G suffixes): a larger file is refused
    #[arg(long, value_name = "SIZE", default_value_t = crate::report::saved::MAX_INPUT_BYTES, value_parser = crate::util::parse::bytes)]
    pub max_input: u64,
}

/// Entry point: 0, or 125 when the file cannot be read or an output written.
pub fn main(args: ReportArgs, verbose: u8) -> i32 {
    // Outputs first: a path that cannot be written is said before anything is read.
    let mut outputs = match Outputs::open(&Requested {
        json: None,
        perfetto: None,
        html: None,
        svg: None,
        summary: args.output.as_deref().or(Some("-".as_ref())),
        append: false,
    }) {
        Ok(o) => o,
        Err(e) => {
            crate::errln!("spacetime: {e}");
            return EXIT_OWN_FAILURE;
        }
    };
    let pictures = match Outputs::open(&Requested {
        json: None,
        perfetto: args.perfetto.as_deref(),
        html: args.html.as_deref(),
        svg: args.svg.as_deref(),
        summary: None,
        append: false,
    }) {
        Ok(o) => o,
        Err(e) => {
            crate::errln!("spacetime: {e}");
            return EXIT_OWN_FAILURE;
        }
    };
    let saved = match report::saved::read(&args.file, args.max_input) {
        Ok(s) => s,
        Err(e) => {
            crate::errln!("spacetime: {}: {e}", args.file.display());
            return EXIT_OWN_FAILURE;
        }
    };
    let drawn = pictures.html.is_some() || pictures.svg.is_some() || pictures.perfetto.is_some();
    let (text, page, picture, trace) = match &saved {
        Saved::Trace(doc) => {
            let r = report::Report::from_saved(doc);
            (
                (!drawn).then(|| summary(&r, &args, verbose)),
                pictures.html.is_some().then(|| report::html::trace(&r)),
                pictures.svg.is_some().then(|| report::svg::trace(&r)),
                pictures
                    .perfetto
                    .is_some()
                    .then(|| report::export::perfetto::whole(&r)),
            )
        }
        Saved::Bench(_) if pictures.perfetto.is_some() => {
            crate::errln!(
                "spacetime: {}: a bench report has no timeline to write as a Perfetto trace",
                args.file.display()
            );
            return EXIT_OWN_FAILURE;
        }
        Saved::Bench(v) => (
            (!drawn).then(|| report::bench_text::render(v, width(&args).unwrap_or(usize::MAX / 4))),
            pictures.html.is_some().then(|| report::html::bench(v)),
            pictures.svg.is_some().then(|| report::svg::bench(v)),
            None,
        ),
    };
    let mut ok = true;
    for (dest, doc, what) in [
        (
            pictures.html,
            page.map(String::into_bytes),
            "the HTML report",
        ),
        (
            pictures.svg,
            picture.map(String::into_bytes),
            "the SVG picture",
        ),
        (pictures.perfetto, trace, "the Perfetto trace"),
    ] {
        if let (Some(mut d), Some(doc)) = (dest, doc) {
            if let Err(e) = d.write_with(|w| w.write_all(&doc)) {
                crate::errln!("spacetime: writing {what} to {}: {e}", d.name());
                ok = false;
            }
        }
    }
    if let (Some(d), Some(text)) = (outputs.summary.as_mut(), text) {
        if let Err(e) = d.write_with(|w| w.write_all(text.as_bytes())) {
            if e.kind() != io::ErrorKind::BrokenPipe {
                crate::errln!("spacetime: writing the summary to {}: {e}", d.name());
                ok = false;
            }
        }
    }
    if ok {
        0
    } else {
        EXIT_OWN_FAILURE
    }
}

/// The summary's width: stdout's terminal's when it is the destination, else `COLUMNS`, else
/// 120; none with `-w`.
fn width(args: &ReportArgs) -> Option<usize> {
    let stdout = io::stdout();
    let fd = (args.output.is_none() && stdout.is_terminal()).then(|| stdout.as_fd());
    crate::util::term::columns(fd, args.wide)
}

fn summary(r: &report::Report, args: &ReportArgs, verbose: u8) -> String {
    let stdout = io::stdout();
    let terminal = args.output.is_none() && stdout.is_terminal();
    let fd = terminal.then(|| stdout.as_fd());
    report::text::render(
        r,
        &report::text::Options {
            width: width(args),
            top: args.top,
            verbose: verbose > 0,
            charts: !args.no_chart,
            chart_width: crate::util::term::columns(fd, false),
            style: Style::detect(terminal),
        },
    )
}
