//! What the pictures of a report draw — the HTML page ([`super::html`]) and the SVG
//! ([`super::svg`]): one projection of the report model each for a trace ([`trace`]) and a
//! bench ([`bench`]), with the colours every picture gives programs and commands. Renderers
//! read these and compute no figure of their own.

pub(crate) mod bench;
pub(crate) mod trace;

/// The colour the pictures reserve for failures (outlines, markers, the failed count).
pub const FAILURE: &str = "#c62828";

/// The colour of what has no program of its own (a process that never exec'd).
pub const NO_PROGRAM: &str = "#adb3b8";

/// Hues a program or a command may take: red (the failures' colour, hue 0) and the pinks and
/// oranges nearest it are left out, so no program is ever read as a failure.
const HUE_FROM: f64 = 40.0;
const HUE_SPAN: f64 = 280.0;

/// The colour of the `i`-th program (or command): hues spread by the golden ratio over the
/// allowed range, so neighbours differ, as `#rrggbb` (every renderer reads that).
pub fn colour(i: usize) -> String {
    let golden = 0.618_033_988_749_895_f64;
    let h = HUE_FROM + (i as f64 * golden).fract() * HUE_SPAN;
    hsl_hex(h, 0.55, 0.58)
}

/// HSL (hue in degrees, saturation and lightness in [0, 1]) as `#rrggbb`.
fn hsl_hex(h: f64, s: f64, l: f64) -> String {
    let c = (1.0 - (2.0 * l - 1.0).abs()) * s;
    let hp = (h.rem_euclid(360.0)) / 60.0;
    let x = c * (1.0 - (hp % 2.0 - 1.0).abs());
    let (r, g, b) = match hp as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = l - c / 2.0;
    let to = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    format!("#{:02x}{:02x}{:02x}", to(r), to(g), to(b))
}

/// The hue of a `#rrggbb` colour in degrees (None: grey or not that form).
#[cfg(test)]
fn hue_of(hex: &str) -> Option<f64> {
    let v = u32::from_str_radix(hex.strip_prefix('#')?, 16).ok()?;
    let [r, g, b] = [(v >> 16) & 255, (v >> 8) & 255, v & 255].map(|c| c as f64 / 255.0);
    let (max, min) = (r.max(g).max(b), r.min(g).min(b));
    let d = max - min;
    if d < 1e-9 {
        return None;
    }
    let h = if max == r {
        60.0 * (((g - b) / d).rem_euclid(6.0))
    } else if max == g {
        60.0 * ((b - r) / d + 2.0)
    } else {
        60.0 * ((r - g) / d + 4.0)
    };
    Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_program_gets_the_failures_red() {
        let red = hue_of(FAILURE).expect("a hue");
        for i in 0..10_000 {
            let c = colour(i);
            let h = hue_of(&c).expect("a hue");
            let apart = (h - red).abs().min(360.0 - (h - red).abs());
            assert!(
                apart >= HUE_FROM - 1.0,
                "program {i}: {c} is {apart:.1}° from red"
            );
        }
        assert_ne!(colour(0), colour(1));
        assert_eq!(hsl_hex(0.0, 1.0, 0.5), "#ff0000");
        assert_eq!(hsl_hex(120.0, 1.0, 0.5), "#00ff00");
        assert_eq!(hsl_hex(240.0, 1.0, 0.25), "#000080");
    }
}
