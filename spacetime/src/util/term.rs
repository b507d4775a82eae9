//! Text for a terminal made from bytes that traced processes chose (argv, comm, exe, cgroup
//! paths): any local user controls them, so none reaches a terminal raw.
//!
//! The convention, C's and strace's: `\\` for a backslash; `\e \a \b \t \n \v \f \r \0` for those
//! controls; `\xHH` for the other C0 controls, DEL and every byte that is not valid UTF-8;
//! `\u{HHHH}` for the C1 controls (U+0080–U+009F) and the invisible characters that reorder or
//! hide text (bidirectional overrides and isolates, zero-width joiners, line and paragraph
//! separators). Everything else is kept. Escaped text contains no control character, and every
//! backslash in it starts an escape, so it is cut by display width without splitting one
//! ([`fit`]).
//!
//! When the locale is not UTF-8 (`LC_ALL`, else `LC_CTYPE`, else `LANG` names no UTF-8
//! codeset), the terminal cannot decode anything but ASCII: untrusted text then shows every
//! non-ASCII character as `\u{HHHH}` too, and spacetime's own symbols are replaced by ASCII
//! ([`localize`]: `us` for `µs`, `...` for `…`, `|` for `·`, box drawing as `|`, `-`, `` ` ``).

use std::{
    borrow::Cow,
    fmt::Write as _,
    sync::atomic::{AtomicBool, Ordering},
};

use unicode_width::UnicodeWidthChar;

/// The mark left where text was cut (in a UTF-8 locale; `...` otherwise).
pub const ELLIPSIS: char = '…';

/// Set once at start when the locale is not UTF-8; tests and library users keep UTF-8.
static ASCII: AtomicBool = AtomicBool::new(false);

/// Whether the locale's codeset, as `LC_ALL`, else `LC_CTYPE`, else `LANG` names it, is
/// UTF-8 (the first of them set and non-empty decides, as setlocale(3) does).
pub fn locale_is_utf8(var: impl Fn(&str) -> Option<String>) -> bool {
    let name = ["LC_ALL", "LC_CTYPE", "LANG"]
        .iter()
        .find_map(|v| var(v).filter(|s| !s.is_empty()))
        .unwrap_or_default()
        .to_ascii_lowercase();
    name.contains("utf-8") || name.contains("utf8")
}

/// Reads the locale from the environment once, at start: every human line after it follows.
pub fn init_locale() {
    let utf8 = locale_is_utf8(|v| std::env::var(v).ok());
    ASCII.store(!utf8, Ordering::Relaxed);
}

/// Whether human output must be plain ASCII.
pub fn ascii() -> bool {
    ASCII.load(Ordering::Relaxed)
}

/// The ASCII stand-in for one of spacetime's own symbols (None: drop it).
fn ascii_for(c: char) -> Option<&'static str> {
    Some(match c {
        '…' => "...",
        'µ' | 'μ' => "u",
        '·' | '│' | '┃' | '├' | '┤' | '║' => "|",
        '—' | '–' | '─' | '━' | '‐' => "-",
        '└' | '┌' | '┐' | '┘' | '┼' | '┬' | '┴' => "+",
        '†' => "+",
        '↑' => "^",
        '←' => "<",
        '→' => ">",
        '×' => "x",
        '≤' => "<=",
        '≥' => ">=",
        '±' => "+-",
        'σ' => "sd",
        '█' => "#",
        '░' => ".",
        '▕' | '▏' => "|",
        '⏱' => return None,
        _ => "?",
    })
}

/// `s` (own text, or escaped text) made fit for the locale: unchanged in a UTF-8 locale,
/// else every non-ASCII character replaced by ASCII.
pub fn localize(s: &str) -> Cow<'_, str> {
    if s.is_ascii() || !ascii() {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii() {
            out.push(c);
        } else if let Some(r) = ascii_for(c) {
            out.push_str(r);
        }
    }
    // A dropped stopwatch leaves a leading space.
    Cow::Owned(match out.strip_prefix(' ') {
        Some(rest) if s.starts_with('⏱') => rest.to_string(),
        _ => out,
    })
}

/// The ellipsis of the locale.
fn ellipsis() -> &'static str {
    if ascii() {
        "..."
    } else {
        "…"
    }
}

/// Columns to render human text for: the terminal's when `fd` is one (TIOCGWINSZ), else
/// `COLUMNS`, else 120. None when the wide form is asked for.
pub fn columns(fd: Option<impl std::os::fd::AsFd>, wide: bool) -> Option<usize> {
    if wide {
        return None;
    }
    if let Some(fd) = fd {
        if let Ok(ws) = rustix::termios::tcgetwinsize(fd) {
            if ws.ws_col > 0 {
                return Some(ws.ws_col as usize);
            }
        }
    }
    Some(
        std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.trim().parse().ok())
            .filter(|&c: &usize| c > 0)
            .unwrap_or(120),
    )
}

/// `text`'s lines cut to `cols` columns each (a last guard: no line wraps on the terminal).
/// Lines carrying colour escapes are left alone: the chart sizes itself.
pub fn fit_lines(text: &str, cols: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for l in text.split_inclusive('\n') {
        let (body, nl) = match l.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (l, ""),
        };
        if body.contains('\x1b') {
            out.push_str(body);
        } else {
            out.push_str(&fit(body, cols));
        }
        out.push_str(nl);
    }
    out
}

/// `s` (own prose, or escaped text) wrapped between words into lines of at most `cols`
/// columns, continuation lines indented by `indent` spaces; a word longer than a line is cut.
pub fn wrap(s: &str, cols: usize, indent: usize) -> Vec<String> {
    // The line's own indent is kept on its first line.
    let body = s.trim_start_matches(' ');
    let lead = (s.len() - body.len()).min(cols / 2);
    let mut lines = vec![" ".repeat(lead)];
    for word in body.split(' ') {
        let last = lines.last_mut().expect("one line");
        let fresh = last.trim_start().is_empty();
        let need = width(word) + usize::from(!fresh);
        if !fresh && width(last) + need > cols {
            lines.push(" ".repeat(indent.min(cols / 2)));
        }
        let last = lines.last_mut().expect("one line");
        if !last.trim_start().is_empty() {
            last.push(' ');
        }
        let room = cols.saturating_sub(width(last));
        last.push_str(&fit(word, room));
    }
    lines
}

/// Whether `c` is shown as `\u{…}`: C1 controls and invisible characters that move or hide
/// the text around them.
fn hidden(c: char) -> bool {
    matches!(c,
        '\u{80}'..='\u{9f}'
        | '\u{200b}'..='\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}')
}

fn push_byte_escape(out: &mut String, b: u8) {
    let named = match b {
        b'\\' => "\\\\",
        0x1b => "\\e",
        0x07 => "\\a",
        0x08 => "\\b",
        b'\t' => "\\t",
        b'\n' => "\\n",
        0x0b => "\\v",
        0x0c => "\\f",
        b'\r' => "\\r",
        0 => "\\0",
        _ => {
            let _ = write!(out, "\\x{b:02x}");
            return;
        }
    };
    out.push_str(named);
}

/// Appends `bytes` escaped for a terminal.
pub fn push_escaped(out: &mut String, bytes: &[u8]) {
    push(out, bytes, true)
}

fn push(out: &mut String, bytes: &[u8], backslash: bool) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_ascii_control() || (backslash && c == '\\') {
                push_byte_escape(out, c as u8);
            } else if hidden(c) || (backslash && !c.is_ascii() && ascii()) {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            } else {
                out.push(c);
            }
        }
        for &b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
}

/// `bytes` escaped for a terminal.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len());
    push_escaped(&mut s, bytes);
    s
}

/// Arguments escaped and joined by spaces, as a shell line reads.
pub fn join<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> String {
    let mut s = String::new();
    for (i, a) in args.into_iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        push_escaped(&mut s, a);
    }
    s
}

/// The length in bytes of the unit starting at `s`: a whole escape, or one character.
fn unit_len(s: &str) -> usize {
    let b = s.as_bytes();
    let first = s.chars().next().map_or(0, char::len_utf8);
    if b.first() != Some(&b'\\') || b.len() < 2 {
        return first;
    }
    match b[1] {
        b'x' if b.len() >= 4 => 4,
        b'u' => s.find('}').map_or(first, |i| i + 1),
        _ => 2,
    }
}

/// Splits escaped text into units that are never cut: escapes and single characters, each
/// with its display width.
fn units(s: &str) -> impl DoubleEndedIterator<Item = (&str, usize)> {
    let mut bounds = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let n = unit_len(&s[i..]).max(1);
        bounds.push((i, i + n));
        i += n;
    }
    bounds.into_iter().map(move |(a, b)| {
        let u = &s[a..b];
        let w = if u.len() > 1 && u.starts_with('\\') {
            u.len()
        } else {
            u.chars()
                .next()
                .and_then(UnicodeWidthChar::width)
                .unwrap_or(0)
        };
        (u, w)
    })
}

/// Whether the environment asks for no colour: `NO_COLOR` set and not empty, or `TERM=dumb`.
pub fn no_color() -> bool {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    env("NO_COLOR").is_some() || env("TERM").is_some_and(|t| t == "dumb")
}

/// The columns `s` takes on a terminal, its colour sequences (`ESC [ … m`) taking none.
pub fn visible_width(s: &str) -> usize {
    if !s.contains('\x1b') {
        return width(s);
    }
    let mut plain = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find("\x1b[") {
        plain.push_str(&rest[..at]);
        rest = &rest[at..];
        match rest.find('m') {
            Some(end) => rest = &rest[end + 1..],
            None => break,
        }
    }
    plain.push_str(rest);
    width(&plain)
}

/// Display width (terminal columns) of escaped or own text.
pub fn width(s: &str) -> usize {
    if s.is_ascii() {
        return s.len();
    }
    units(s).map(|(_, w)| w).sum()
}

/// `s` (escaped or own text) cut to at most `cols` columns, ending with `…` (`...` in an
/// ASCII locale) when cut.
pub fn fit(s: &str, cols: usize) -> String {
    if width(s) <= cols {
        return s.to_string();
    }
    let mark = match ellipsis() {
        m if width(m) <= cols => m,
        // Too narrow for the whole mark: as many dots as fit.
        _ => &"..."[..cols.min(3)],
    };
    let mark_w = width(mark);
    let mut out = String::new();
    let mut used = 0;
    for (u, w) in units(s) {
        if used + w + mark_w > cols {
            break;
        }
        used += w;
        out.push_str(u);
    }
    out.push_str(mark);
    out
}

/// A path cut in the middle to at most `cols` columns, keeping its last component: the
/// program's name stays visible (`/usr/lib/gcc/…/12/cc1`).
pub fn fit_path(s: &str, cols: usize) -> String {
    if width(s) <= cols {
        return s.to_string();
    }
    let base = s.rfind('/').map_or(s, |i| &s[i..]);
    let base_w = width(base);
    if base_w + 2 > cols {
        return fit(s.rsplit('/').next().unwrap_or(s), cols);
    }
    let mut head = fit(s, cols - base_w);
    if !head.ends_with(ellipsis()) {
        head.push_str(ellipsis());
    }
    head.push_str(base);
    head
}

/// A command line (escaped) cut to `cols` columns, keeping the program's name: when the
/// first word is a path too long to leave room for arguments, it is cut in the middle.
pub fn fit_command(s: &str, cols: usize) -> String {
    if width(s) <= cols {
        return s.to_string();
    }
    let (prog, rest) = s.split_once(' ').unwrap_or((s, ""));
    let prog_w = width(prog);
    // Keep some arguments visible too: the program may take at most two thirds.
    let room = (cols * 2 / 3).max(cols.min(16));
    // Cut at the end only when the whole path stays visible before the ellipsis.
    let whole = prog_w + width(ellipsis()) <= cols;
    if (prog_w <= room && whole) || !prog.contains('/') {
        return fit(s, cols);
    }
    let mut out = fit_path(prog, room);
    if !rest.is_empty() && width(&out) + 2 < cols {
        out.push(' ');
        let left = cols - width(&out);
        out.push_str(&fit(rest, left));
    }
    out
}

/// `s` with its controls escaped and its backslashes kept: text that is already escaped
/// (a name in an error message) comes out unchanged, anything raw in it is escaped.
pub fn sanitize(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push(&mut out, s.as_bytes(), false);
    out
}

/// Writes one line to stderr, ignoring errors: a full or closed stderr must neither stop
/// spacetime nor change CMD's status. Its controls are escaped ([`sanitize`]), so a command
/// named in an error cannot drive the terminal.
pub fn err_line(args: std::fmt::Arguments) {
    use std::io::Write;
    let text = match args.as_str() {
        Some(s) => sanitize(s),
        None => sanitize(&args.to_string()),
    };
    let text = localize(&text);
    let text = wrap_for_stderr(&text);
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.write_all(b"\n");
}

/// `text` wrapped between words to stderr's width when stderr is a terminal: a long notice
/// or error is never wrapped by the terminal mid-word. Elsewhere it is kept on one line.
fn wrap_for_stderr(text: &str) -> Cow<'_, str> {
    use std::io::IsTerminal;
    let err = std::io::stderr();
    if !err.is_terminal() {
        return Cow::Borrowed(text);
    }
    let cols = columns(Some(std::io::stderr()), false).unwrap_or(80);
    if text.lines().all(|l| width(l) <= cols) {
        return Cow::Borrowed(text);
    }
    let lines: Vec<String> = text.lines().flat_map(|l| wrap(l, cols, 2)).collect();
    Cow::Owned(lines.join("\n"))
}

/// Writes already-safe text to stderr as is (a summary with its own newlines and colours),
/// ignoring errors.
pub fn err_raw(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr()
        .lock()
        .write_all(localize(text).as_bytes());
}

/// `eprintln!` that never panics and escapes what it prints.
#[macro_export]
macro_rules! errln {
    ($($t:tt)*) => { $crate::util::term::err_line(format_args!($($t)*)) };
}

#[cfg(test)]
#[path = "term_tests.rs"]
pub(crate) mod tests;
