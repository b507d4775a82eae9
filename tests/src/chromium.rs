//! Headless Chromium (Debian's `chromium`, installed by `cargo xtask test`) loading a page
//! spacetime wrote: the DOM after its scripts ran, what the console said, and a screenshot.
//! Offline: no network, no component updates, a fresh profile in the test's directory.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

/// What Chromium made of a page.
pub struct Rendered {
    /// The DOM after the scripts ran (`--dump-dom`).
    pub dom: String,
    /// Chromium's own log (`--enable-logging=stderr`): console messages appear as `CONSOLE`
    /// lines, uncaught exceptions as `Uncaught …`.
    pub log: String,
    pub screenshot: PathBuf,
    /// Wall time of the `--dump-dom` run (start-up included).
    pub load: Duration,
}

fn chromium(dir: &Path, profile: &str) -> Command {
    let mut c = Command::new("chromium");
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-extensions",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=10000",
    ])
    .arg(format!("--user-data-dir={}", dir.join(profile).display()));
    c
}

/// Loads `page` (a file) twice: once for the DOM, once for a `width`×`height` screenshot.
pub fn render(page: &Path, dir: &Path, width: u32, height: u32) -> Rendered {
    let url = format!("file://{}", page.display());
    let started = Instant::now();
    let out = chromium(dir, "profile-dom")
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium (cargo xtask test installs it)");
    let load = started.elapsed();
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium --dump-dom {url}: {}\n{log}",
        out.status
    );
    let screenshot = dir.join(format!(
        "{}.png",
        page.file_stem()
            .map_or("page".into(), |s| s.to_string_lossy())
    ));
    let out = chromium(dir, "profile-shot")
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(&url)
        .output()
        .expect("run chromium");
    log.push_str(&String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && screenshot.is_file(),
        "chromium --screenshot {url}: {}\n{log}",
        out.status
    );
    Rendered {
        dom,
        log,
        screenshot,
        load,
    }
}

/// Loads a copy of `page` with `script` run after the page's own (appended before `</body>`;
/// the page's policy allows inline scripts), at `width`×`height`; returns the DOM after both
/// ran. The script acts as a person would (synthetic mouse events) and writes what it found
/// into `document.body.dataset.probe`.
pub fn probe(page: &Path, dir: &Path, width: u32, height: u32, script: &str) -> String {
    let html = std::fs::read_to_string(page).expect("read the page");
    let at = html.rfind("</body>").expect("a </body>");
    let copy = dir.join(format!(
        "probe-{}.html",
        page.file_stem()
            .map_or("page".into(), |s| s.to_string_lossy())
    ));
    let mut text = html[..at].to_string();
    text.push_str("<script>");
    text.push_str(script);
    text.push_str("</script>");
    text.push_str(&html[at..]);
    std::fs::write(&copy, text).expect("write the probe page");
    let url = format!("file://{}", copy.display());
    let out = chromium(dir, "profile-probe")
        .arg(format!("--window-size={width},{height}"))
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium --dump-dom {url}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// What a probe wrote: the JSON in `data-probe` of the dumped DOM (the DOM escapes `"` as
/// `&quot;` in attributes).
pub fn probed(dom: &str) -> serde_json::Value {
    let key = "data-probe=\"";
    let at = dom.find(key).expect("the probe wrote nothing") + key.len();
    let end = at + dom[at..].find('"').expect("the attribute's end");
    let raw = dom[at..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&raw).unwrap_or_else(|e| panic!("the probe's JSON: {e}: {raw}"))
}

/// Chromium's picture of a file it opens as a document of its own (an SVG), `width`×`height`.
pub fn screenshot(file: &Path, dir: &Path, width: u32, height: u32) -> PathBuf {
    let shot = dir.join(format!(
        "{}-chromium.png",
        file.file_stem()
            .map_or("file".into(), |s| s.to_string_lossy())
    ));
    let out = chromium(dir, "profile-shot")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("file://{}", file.display()))
        .output()
        .expect("run chromium");
    assert!(
        out.status.success() && shot.is_file(),
        "chromium --screenshot {}: {}",
        file.display(),
        out.status
    );
    shot
}

/// A PNG's pixels as RGB: (width, height, bytes).
pub fn rgb(png_file: &Path) -> (u32, u32, Vec<u8>) {
    let file = std::fs::File::open(png_file).expect("open the PNG");
    let mut decoder = png::Decoder::new(std::io::BufReader::new(file));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("decode the PNG");
    let px = info.color_type.samples();
    let mut out = Vec::with_capacity((info.width * info.height * 3) as usize);
    for p in buf[..info.buffer_size()].chunks(px) {
        match px {
            1 | 2 => out.extend([p[0], p[0], p[0]]),
            _ => out.extend(&p[..3]),
        }
    }
    (info.width, info.height, out)
}

impl Rendered {
    /// The value of `attr` on the first element whose opening tag contains `marker` (such as
    /// `id="timeline"`).
    pub fn attr(&self, marker: &str, attr: &str) -> Option<String> {
        let at = self.dom.find(marker)?;
        let open = self.dom[..at].rfind('<')?;
        let close = at + self.dom[at..].find('>')?;
        let tag = &self.dom[open..close];
        let key = format!("{attr}=\"");
        let v = tag.find(&key)? + key.len();
        let end = tag[v..].find('"')?;
        Some(tag[v..v + end].to_string())
    }

    /// The text right after the opening tag that contains `marker`, up to the next tag.
    pub fn text(&self, marker: &str) -> Option<String> {
        let at = self.dom.find(marker)?;
        let close = at + self.dom[at..].find('>')? + 1;
        let end = close + self.dom[close..].find('<')?;
        Some(self.dom[close..end].to_string())
    }

    /// Console errors and uncaught exceptions Chromium logged for the page.
    pub fn console_errors(&self) -> Vec<&str> {
        self.log
            .lines()
            .filter(|l| l.contains("Uncaught") || (l.contains("CONSOLE") && l.contains("ERROR")))
            .collect()
    }

    /// Checks the page ran its script to the end without an error: `data-rendered="1"`,
    /// `data-errors="0"` (the page counts `window.onerror`), nothing in the console.
    pub fn assert_ran(&self) {
        assert_eq!(
            self.attr("<body", "data-rendered").as_deref(),
            Some("1"),
            "the page's script did not finish\n{}",
            self.log
        );
        assert_eq!(
            self.attr("<body", "data-errors").as_deref(),
            Some("0"),
            "the page counted script errors\n{}",
            self.log
        );
        let errors = self.console_errors();
        assert!(errors.is_empty(), "console errors: {errors:#?}");
    }

    /// Decodes the screenshot and checks it shows something: not blank, not one colour,
    /// with many distinct colours (charts, text). Returns the number of distinct colours.
    pub fn assert_screenshot_drawn(&self) -> usize {
        let file = std::fs::File::open(&self.screenshot).expect("open the screenshot");
        let decoder = png::Decoder::new(std::io::BufReader::new(file));
        let mut reader = decoder.read_info().expect("a PNG");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("decode the PNG");
        let bytes = &buf[..info.buffer_size()];
        let px = info.color_type.samples();
        assert!(px >= 3, "colour type {:?}", info.color_type);
        let mut colours = std::collections::HashSet::new();
        let mut dark = 0usize;
        for p in bytes.chunks(px) {
            colours.insert((p[0], p[1], p[2]));
            if (p[0] as u32 + p[1] as u32 + p[2] as u32) < 200 {
                dark += 1;
            }
        }
        let pixels = bytes.len() / px;
        assert!(
            colours.len() > 50,
            "the screenshot has {} colours: blank or uniform ({})",
            colours.len(),
            self.screenshot.display()
        );
        assert!(
            dark > pixels / 1000,
            "hardly any dark pixel (text): {dark} of {pixels} ({})",
            self.screenshot.display()
        );
        colours.len()
    }
}
